#include "core/storage.h"

#include "cuda/allocator.h"
#include "cuda/runtime.h"

namespace ember {

Storage::Storage(size_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
  if (device.is_cpu()) {
    allocator_ = &cuda::host_allocator();
    data_ = allocator_->allocate(nbytes, nullptr);
  } else {
    allocator_ = &cuda::device_allocator(device.index);
    data_ = allocator_->allocate(nbytes, cuda::current_stream(device.index));
  }
}

Storage::~Storage() { allocator_->deallocate(data_); }

}  // namespace ember
