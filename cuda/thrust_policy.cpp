#include "cuda/thrust_policy.h"

#include "core/base/alloc_tag.h"
#include "core/base/error.h"
#include "cuda/device_allocator.h"

namespace ember::cuda {

void* allocate_scratch(int device, cudaStream_t stream, size_t bytes, const char* tag) {
  // The tag of the op that runs the algorithm wins; else "thrust" / "cub".
  AllocationTag name(AllocationTag::current() != nullptr ? AllocationTag::current() : tag);
  return device_caching_allocator(device).allocate(bytes, stream);
}

void free_scratch(int device, void* ptr) noexcept {
  if (ptr == nullptr) return;
  try {
    device_caching_allocator(device).deallocate(ptr);
  } catch (...) {  // the device existed when ptr was allocated; cannot happen
  }
}

TempBuffer::TempBuffer(size_t bytes, int device, cudaStream_t stream)
    : device_(device < 0 ? current_device() : device) {
  check_device(device_);
  if (stream == nullptr) stream = current_stream(device_);
  data_ = allocate_scratch(device_, stream, bytes, "cub");
  size_ = bytes;
}

TempBuffer::~TempBuffer() {
  free_scratch(device_, data_);
}

}  // namespace ember::cuda
