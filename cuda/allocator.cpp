// The process-wide allocators behind host_allocator() and device_allocator():
// caching allocators over HostBackend and one CudaBackend per device.
#include "cuda/allocator.h"

#include <cstdio>
#include <exception>
#include <vector>

#include "cuda/caching_allocator.h"
#include "cuda/runtime.h"

namespace ember::cuda {

namespace {
// The host allocator keeps PyTorch's defaults but honours EMBER_CUDA_ALLOC_CONF's
// sanitizer settings, so CPU tensors can be checked too. A malformed variable is
// reported by the device allocators (which refuse it); here it is only noted.
AllocatorOptions host_options() {
  AllocatorOptions options;
  try {
    const AllocatorOptions env = AllocatorOptions::from_env();
    options.sanitize = env.sanitize;
    options.quarantine_blocks = env.quarantine_blocks;
    options.quarantine_bytes = env.quarantine_bytes;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ember: host allocator ignores %s: %s\n", kAllocConfEnvVar, e.what());
  }
  return options;
}
}  // namespace

CachingAllocator& host_caching_allocator() {
  // Never destroyed: static tensors may free their memory after main returns.
  static auto* allocator = new CachingAllocator(std::make_unique<HostBackend>(), host_options());
  return *allocator;
}

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

namespace {
thread_local Allocator* t_host_override = nullptr;
}  // namespace

HostAllocatorOverride::HostAllocatorOverride(Allocator& allocator) noexcept
    : previous_(t_host_override) {
  t_host_override = &allocator;
}
HostAllocatorOverride::~HostAllocatorOverride() { t_host_override = previous_; }

Allocator& host_allocator() {
  return t_host_override != nullptr ? *t_host_override : host_caching_allocator();
}

Allocator& device_allocator(int device) { return device_caching_allocator(device); }

}  // namespace ember::cuda
