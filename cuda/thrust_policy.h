// Thrust and CUB in user code, with their scratch memory from ember's caching
// allocator on the current stream, so it is counted by memory_stats(), shown by
// memory_summary() and named "thrust" (or "cub") in snapshots and histories:
//
//   #include "cuda/thrust_policy.h"            // in a .cu file (nvcc)
//   float* p = x.data_ptr<float>();            // an ember CUDA tensor
//   thrust::sort(ember::cuda::thrust_policy(), p, p + x.numel());
//
//   size_t bytes = 0;                          // CUB: ask, then run
//   cub::DeviceReduce::Sum(nullptr, bytes, in, out, n, stream);
//   ember::cuda::TempBuffer scratch(bytes);    // from the allocator, freed at scope end
//   cub::DeviceReduce::Sum(scratch.data(), bytes, in, out, n, stream);
//
// The policy runs on the device's current stream (cuda::current_stream) and does
// not synchronise after each algorithm (thrust::cuda::par_nosync): its scratch is
// freed back to the cache on that stream, which orders any reuse after the work,
// as for every other tensor. Algorithms that return a value to the host (reduce,
// count) still wait for it, as they must. The allocation functions below are
// plain C++; only this header's policy needs nvcc. In a .cu file, write
// ember::cuda:: in full rather than `using namespace ember`: CCCL has a namespace
// ::cuda of its own, and the two would be ambiguous.
#pragma once

#include <cstddef>

#include <cuda_runtime_api.h>

#include "cuda/runtime.h"

namespace ember::cuda {

// Scratch bytes on `device` for `stream` from its caching allocator, tagged with
// the current allocation tag or else `tag`; freed with free_scratch.
void* allocate_scratch(int device, cudaStream_t stream, size_t bytes, const char* tag);
void free_scratch(int device, void* ptr) noexcept;

// A block of scratch memory for CUB's temp storage, on the current stream of the
// current device (or those given), returned to the allocator's cache when it dies.
class TempBuffer {
 public:
  explicit TempBuffer(size_t bytes, int device = -1, cudaStream_t stream = nullptr);
  ~TempBuffer();
  TempBuffer(const TempBuffer&) = delete;
  TempBuffer& operator=(const TempBuffer&) = delete;
  void* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  int device_;
  void* data_ = nullptr;
  size_t size_ = 0;
};

// Thrust's allocator concept over allocate_scratch (value_type char).
class ThrustAllocator {
 public:
  using value_type = char;
  ThrustAllocator(int device, cudaStream_t stream) : device_(device), stream_(stream) {}
  char* allocate(std::ptrdiff_t bytes) {
    return static_cast<char*>(
        allocate_scratch(device_, stream_, static_cast<size_t>(bytes), "thrust"));
  }
  void deallocate(char* p, size_t) noexcept { free_scratch(device_, p); }

 private:
  int device_;
  cudaStream_t stream_;
};

}  // namespace ember::cuda

#if defined(__CUDACC__)
#include <thrust/execution_policy.h>
#include <thrust/system/cuda/execution_policy.h>

namespace ember::cuda {

// The execution policy for thrust:: algorithms on `device` (default: the current
// one), on its current stream, with scratch from ember's allocator.
inline auto thrust_policy(int device = -1) {
  if (device < 0) device = current_device();
  cudaStream_t stream = current_stream(device);
  return thrust::cuda::par_nosync(ThrustAllocator(device, stream)).on(stream);
}

}  // namespace ember::cuda
#endif
