// Replay policies on a real GPU (core/memory/replay.h has the simulated ones):
// ember's caching allocator over cudaMalloc, and CUDA's own stream-ordered pool
// (cudaMallocAsync). Each trace stream becomes a real stream. Both report
// themselves unavailable where no GPU is present. Their deferred frees (a
// free_completed after allocations) are replayed as a free at the completion row,
// since real events complete on their own: the allocated bytes drop there rather
// than at free_requested.
#pragma once

#include <memory>

#include "core/memory/replay.h"

namespace ember::cuda {

// ember's caching allocator (native options) on CudaBackend(device); a run's
// capacity below the unlimited default caps the backend (CudaBackend's limit).
std::unique_ptr<memory::ReplayPolicy> make_cuda_caching_policy(int device = 0);
// cudaMallocFromPoolAsync / cudaFreeAsync on a private pool of `device` that keeps
// what it was given (release threshold: all of it), its maxSize set to the run's
// capacity when one is set. Peak reserved and allocated are the pool's high-water
// marks (cudaMemPoolAttrReservedMemHigh, cudaMemPoolAttrUsedMemHigh).
std::unique_ptr<memory::ReplayPolicy> make_cuda_malloc_async_policy(int device = 0);

}  // namespace ember::cuda
