// The seam through which every tensor byte is allocated: core/Storage asks the
// allocator of its device (the host's here, a CUDA device's in
// cuda/device_allocator.h) for memory and gives it back. The allocator knows
// nothing of Tensor: raw bytes, a stream, a pointer.
#pragma once

#include <cstddef>

#include "core/base/cuda_handles.h"

namespace ember::memory {

class Allocator {
 public:
  virtual ~Allocator() = default;
  // Returns memory for `bytes` (nullptr for 0) usable on `stream`. Throws
  // ember::OutOfMemoryError when it cannot, leaving itself consistent.
  virtual void* allocate(size_t bytes, cudaStream_t stream) = 0;
  // Returns memory from allocate(); nullptr is ignored. Never throws.
  virtual void deallocate(void* ptr) noexcept = 0;
  // Marks `ptr` as used on `stream` too, so it is not reused before the work
  // queued there finishes.
  virtual void record_stream(void* /*ptr*/, cudaStream_t /*stream*/) {}
};

// The allocator for host (CPU) tensors: the process-wide one, or this thread's
// HostAllocatorOverride while one is alive.
Allocator& host_allocator();

// Makes CPU tensors created on this thread take their memory from `allocator`
// while the guard lives (guards nest; the innermost wins). Each Storage keeps the
// allocator it came from, so tensors may outlive the guard but not `allocator`.
// For tests and tools that want a private, observable allocator (fault injection
// on a SimulatedBackend, leak checks) without touching the process-wide one.
class HostAllocatorOverride {
 public:
  explicit HostAllocatorOverride(Allocator& allocator) noexcept;
  ~HostAllocatorOverride();
  HostAllocatorOverride(const HostAllocatorOverride&) = delete;
  HostAllocatorOverride& operator=(const HostAllocatorOverride&) = delete;

 private:
  Allocator* previous_;
};
}  // namespace ember::memory
