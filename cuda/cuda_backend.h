// The caching allocator's backend on a CUDA device: segments from cudaMalloc,
// events from cudaEventRecord.
#pragma once

#include <cstddef>
#include <unordered_map>

#include "core/memory/backends.h"

namespace ember::cuda {

// cudaMalloc/cudaFree on one device. `limit_bytes` > 0 caps what this backend will
// hold at once, as if the device had only that much memory (PyTorch's per-process
// memory fraction); it lets the out-of-memory tests run on a real GPU.
class CudaBackend final : public memory::Backend {
 public:
  explicit CudaBackend(int device, size_t limit_bytes = 0);

  void* raw_alloc(size_t bytes) override;
  void raw_free(void* ptr) noexcept override;
  MemoryInfo memory_info() override;
  EventHandle create_event() override;
  void record_event(EventHandle event, cudaStream_t stream) override;
  bool query_event(EventHandle event) override;
  void synchronize_event(EventHandle event) override;
  void destroy_event(EventHandle event) noexcept override;
  void fill(void* ptr, unsigned char value, size_t bytes, cudaStream_t stream) override;
  void read(void* host_dst, const void* ptr, size_t bytes, cudaStream_t stream) override;
  int device() const override { return device_; }

 private:
  int device_;
  size_t limit_;
  // Sizes of live segments, so that raw_free can keep held_ right for limit_.
  size_t held_ = 0;
  std::unordered_map<void*, size_t> sizes_;
};

}  // namespace ember::cuda
