#include "cuda/pinned_buffer.h"

#include <utility>

#include "cuda/check.h"
#include "cuda/runtime.h"

namespace ember::cuda {

PinnedBuffer::~PinnedBuffer() {
  release();
}

PinnedBuffer::PinnedBuffer(PinnedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      capacity_(std::exchange(other.capacity_, 0)),
      copied_(std::exchange(other.copied_, nullptr)) {}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    capacity_ = std::exchange(other.capacity_, 0);
    copied_ = std::exchange(other.copied_, nullptr);
  }
  return *this;
}

void PinnedBuffer::release() noexcept {
  if (copied_) {
    EMBER_CUDA_CHECK_NOTHROW(cudaEventSynchronize(copied_));
    EMBER_CUDA_CHECK_NOTHROW(cudaEventDestroy(copied_));
    copied_ = nullptr;
  }
  if (data_) EMBER_CUDA_CHECK_NOTHROW(cudaFreeHost(data_));
  data_ = nullptr;
  capacity_ = 0;
}

void* PinnedBuffer::acquire(size_t bytes) {
  if (copied_) EMBER_CUDA_CHECK(cudaEventSynchronize(copied_));
  if (bytes > capacity_) {
    if (data_) EMBER_CUDA_CHECK(cudaFreeHost(data_));
    data_ = nullptr;
    capacity_ = 0;
    EMBER_CUDA_CHECK(cudaHostAlloc(&data_, bytes, cudaHostAllocDefault));
    capacity_ = bytes;
  }
  return data_;
}

void PinnedBuffer::copy_to_device_async(void* dst, size_t bytes, int device, cudaStream_t stream) {
  if (bytes == 0) return;
  check_not_capturing(device, "DataLoader batch copy (PinnedBuffer::copy_to_device_async)",
                      "copy from host memory (a replay would read it again)");
  DeviceGuard guard(device);
  if (!copied_) EMBER_CUDA_CHECK(cudaEventCreateWithFlags(&copied_, cudaEventDisableTiming));
  EMBER_CUDA_CHECK(cudaMemcpyAsync(dst, data_, bytes, cudaMemcpyHostToDevice, stream));
  EMBER_CUDA_CHECK(cudaEventRecord(copied_, stream));
}

}  // namespace ember::cuda
