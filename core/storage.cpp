#include "core/storage.h"

#include "core/kernel_table.h"
#include "core/memory/allocator.h"

namespace ember {

Storage::Storage(size_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
  const kernels::DeviceHooks& hooks = kernels::kernels_for(device).hooks;
  allocator_ = &hooks.tensor_allocator(device.index);
  data_ =
      allocator_->allocate(nbytes, static_cast<cudaStream_t>(hooks.current_stream(device.index)));
}

Storage::~Storage() {
  allocator_->deallocate(data_);
}

}  // namespace ember
