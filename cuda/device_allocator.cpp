// The caching allocator of each CUDA device: one per device, over a CudaBackend,
// configured from EMBER_CUDA_ALLOC_CONF on first use.
#include "cuda/device_allocator.h"

#include <vector>

#include "cuda/cuda_backend.h"
#include "cuda/runtime.h"

namespace ember::cuda {

using memory::AllocatorOptions;
using memory::CachingAllocator;

CachingAllocator& device_caching_allocator(int device) {
  check_device(device);
  // Never destroyed: the CUDA runtime may already be torn down when static
  // destructors run, and cudaFree would then fail. If EMBER_CUDA_ALLOC_CONF is
  // malformed the throw leaves this uninitialised and the next call throws again.
  static const std::vector<CachingAllocator*> allocators = [] {
    const AllocatorOptions options = AllocatorOptions::from_env();
    std::vector<CachingAllocator*> all;
    for (int d = 0; d < device_count(); ++d)
      all.push_back(new CachingAllocator(std::make_unique<CudaBackend>(d), options));
    return all;
  }();
  return *allocators[static_cast<size_t>(device)];
}

}  // namespace ember::cuda
