// The process-wide allocator for host memory (CPU tensors), and the per-thread
// override tests use to watch a private one.
#include "core/memory/allocator.h"

#include <cstdio>
#include <exception>
#include <vector>

#include "core/memory/caching_allocator.h"

namespace ember::memory {

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

namespace {
thread_local Allocator* t_host_override = nullptr;
}  // namespace

HostAllocatorOverride::HostAllocatorOverride(Allocator& allocator) noexcept
    : previous_(t_host_override) {
  t_host_override = &allocator;
}
HostAllocatorOverride::~HostAllocatorOverride() {
  t_host_override = previous_;
}

Allocator& host_allocator() {
  return t_host_override != nullptr ? *t_host_override : host_caching_allocator();
}

}  // namespace ember::memory
