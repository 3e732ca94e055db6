#include "core/storage.h"

#include <utility>

#include "core/kernel_table.h"
#include "core/memory/allocator.h"

namespace ember {

Storage::Storage(size_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
  const kernels::DeviceHooks& hooks = kernels::kernels_for(device).hooks;
  allocator_ = &hooks.tensor_allocator(device.index);
  data_ =
      allocator_->allocate(nbytes, static_cast<cudaStream_t>(hooks.current_stream(device.index)));
}

Storage::Storage(void* data, size_t nbytes, Device device, std::shared_ptr<const void> owner)
    : data_(data), nbytes_(nbytes), device_(device), owner_(std::move(owner)) {}

Storage::~Storage() {
  if (allocator_) allocator_->deallocate(data_);
}

}  // namespace ember
