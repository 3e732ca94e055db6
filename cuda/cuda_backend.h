// The caching allocator's backend on a CUDA device: segments from cudaMalloc,
// events from cudaEventRecord, and for expandable segments the driver's virtual
// memory management (cuMemAddressReserve, cuMemCreate, cuMemMap, ...), reached
// through cudaGetDriverEntryPointByVersion so that no binary links libcuda and
// every one still loads on a machine without a GPU driver.
#pragma once

#include <cstddef>
#include <string>
#include <unordered_map>

#include "core/memory/backends.h"

namespace ember::cuda {

// cudaMalloc/cudaFree on one device. `limit_bytes` > 0 caps what this backend will
// hold at once, as if the device had only that much memory (PyTorch's per-process
// memory fraction); it lets the out-of-memory tests run on a real GPU. Mapped pages
// count against it as segments do.
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

  // Virtual memory: false (and why) where the driver lacks it or the entry
  // points cannot be found. Pages are the device's minimum granularity (2 MiB on
  // Hopper); each page is its own physical allocation, so any page can be
  // unmapped alone, and unmapping waits for the device first (cuMemUnmap, unlike
  // cudaFree, does not).
  bool supports_virtual_memory(std::string* why = nullptr) override;
  size_t granularity() override;
  void* reserve_address_space(size_t bytes) override;
  bool map_pages(void* ptr, size_t bytes) override;
  void unmap_pages(void* ptr, size_t bytes) noexcept override;
  void release_address_space(void* base, size_t bytes) noexcept override;

 private:
  void unmap_some(uintptr_t base, size_t pages) noexcept;

  int device_;
  size_t limit_;
  int vmm_ = -1;  // virtual memory: -1 not yet asked, 0 no, 1 yes
  std::string vmm_why_;
  size_t granularity_ = 0;
  // Sizes of live segments, so that raw_free can keep held_ right for limit_.
  size_t held_ = 0;
  std::unordered_map<void*, size_t> sizes_;
};

}  // namespace ember::cuda
