// PinnedBuffer: page-locked host memory (cudaHostAlloc) for staging host data
// that is copied to the GPU asynchronously. It remembers the last copy out of it
// (an event), and waits for that copy before it is written again or freed, so
// reusing one buffer across batches is safe.
#pragma once

#include <cstddef>

#include <cuda_runtime_api.h>

namespace ember::cuda {

class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer();
  PinnedBuffer(PinnedBuffer&& other) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  // Waits for the last copy out of the buffer, then makes it hold >= bytes.
  void* acquire(size_t bytes);
  // Queues a copy of `bytes` from this buffer to device memory `dst` on `stream`
  // and records its completion for the next acquire().
  void copy_to_device_async(void* dst, size_t bytes, int device, cudaStream_t stream);
  size_t capacity() const { return capacity_; }

 private:
  void release() noexcept;
  void* data_ = nullptr;
  size_t capacity_ = 0;
  cudaEvent_t copied_ = nullptr;  // recorded after the last copy out
};

}  // namespace ember::cuda
