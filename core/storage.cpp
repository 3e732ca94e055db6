#include "core/storage.h"

#include "core/memory/allocator.h"
#include "cuda/device_allocator.h"
#include "cuda/runtime.h"

namespace ember {

Storage::Storage(size_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
  if (device.is_cpu()) {
    allocator_ = &memory::host_allocator();
    data_ = allocator_->allocate(nbytes, nullptr);
  } else {
    allocator_ = &cuda::device_caching_allocator(device.index);
    data_ = allocator_->allocate(nbytes, cuda::current_stream(device.index));
  }
}

Storage::~Storage() { allocator_->deallocate(data_); }

}  // namespace ember
