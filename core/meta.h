// The meta device (kMeta): tensors with shapes, dtypes and strides but no data.
// Every op runs on it through its kernels (core/kernels/meta_device.cpp), which
// compute nothing but make the decisions of the device they mirror (CUDA unless
// told otherwise, or the CPU): the same fused-op predicates, the same workspace
// sizes. So a step on the meta device makes the allocation requests, in the same
// order and sizes, that it would make there, workspaces included, in host time
// only. Its bytes come from a caching allocator over a simulated device without
// memory (memory::SimulatedMemory::none) configured like the target: capacity and
// EMBER_CUDA_ALLOC_CONF's options. predict_memory (core/predict.h) is built on it.
//
// Nothing reads a meta tensor's values: item(), to_vector(), printing and copies
// to a real device throw, naming the op. Meta and real tensors do not mix in one
// op (check_same_device names both devices); to(kMeta) from a real device is
// allowed (it copies nothing).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/base/device.h"
#include "core/base/kernel_families.h"
#include "core/memory/alloc_config.h"
#include "core/memory/caching_allocator.h"

namespace ember {

inline constexpr size_t kNoCapacityLimit = size_t{1} << 62;

// Told of every kernel the meta device would run, with the arguments the mirrored
// device's kernel would get (one virtual per kernel family of
// core/base/kernel_families.h, named after it; each does nothing unless
// overridden): the compute families, and the decision families
// (linear_weight_grad_fused, linear_input_grad) when the mirrored device would take
// them. Queries and predicates are not reported. examples/kernel_census.cpp counts a
// step's bytes and FLOPs with one.
struct MetaKernelObserver {
  virtual ~MetaKernelObserver() = default;
#define EMBER_META_OBSERVE(name, R, Args, kind) \
  virtual void name(const kernels::Args&) {}
  EMBER_KERNEL_FAMILIES(EMBER_META_OBSERVE)
#undef EMBER_META_OBSERVE
};

// What the meta device imitates.
struct MetaDeviceOptions {
  // Whose kernel choices and workspaces it makes: DeviceType::CUDA (fused Linear
  // and MSE, reduction workspaces, autocast, cuBLAS(Lt) workspaces) or
  // DeviceType::CPU (composed Linear and MSE, no workspaces).
  DeviceType mirror = DeviceType::CUDA;
  // Bytes the simulated device holds: reserved memory plus the workspaces that the
  // mirrored libraries take outside the allocator. kNoCapacityLimit: no limit.
  size_t capacity = kNoCapacityLimit;
  // The allocator's options (PyTorch's PYTORCH_CUDA_ALLOC_CONF keys; default
  // PyTorch's defaults, while MetaDeviceScope() reads EMBER_CUDA_ALLOC_CONF as the
  // CUDA devices do). sanitize is ignored: its guard bytes need memory to write
  // (and would change the sizes).
  memory::AllocatorOptions allocator;
  // Told of each kernel this thread's meta device runs while the scope lives (not
  // owned; it must outlive the scope). Null: nobody.
  MetaKernelObserver* observer = nullptr;

  MetaDeviceOptions& mirror_device(DeviceType t) {
    mirror = t;
    return *this;
  }
  MetaDeviceOptions& capacity_bytes(size_t bytes) {
    capacity = bytes;
    return *this;
  }
  MetaDeviceOptions& allocator_options(const memory::AllocatorOptions& o) {
    allocator = o;
    return *this;
  }
  MetaDeviceOptions& observe(MetaKernelObserver* o) {
    observer = o;
    return *this;
  }
};

// While alive, this thread's meta device behaves as a CUDA device inside
// cuda::Graph::capture: is_capturing() answers true, what a capture refuses (a copy
// from the host, item(), to_vector(), synchronising, creating optimizer state,
// anomaly mode) throws the error CUDA's would, and random draws take graph counters
// (core/device_services.h's draw_counters). So whether a step can be captured is
// known without a GPU (ember-predict --capture). What only the CUDA runtime refuses
// inside a kernel's launcher (a library call that synchronises) is not seen. Scopes
// nest; each restores what it found.
class MetaCaptureScope {
 public:
  MetaCaptureScope();
  ~MetaCaptureScope();
  MetaCaptureScope(const MetaCaptureScope&) = delete;
  MetaCaptureScope& operator=(const MetaCaptureScope&) = delete;

 private:
  bool previous_;
};

// Libraries whose device workspaces the mirrored CUDA device cudaMallocs outside
// its caching allocator, once per device (cuda/blas.cpp): the meta device takes
// them out of its capacity when the first kernel that needs them runs, so that a
// run that would not fit beside them fails as it would on the GPU.
enum class MetaLibrary : uint8_t { cublas, cublaslt };

namespace detail {
struct MetaContext;
}

// While alive, this thread's meta tensors come from a fresh meta device set up by
// `options` (scopes nest; the innermost wins). Tensors made in the scope should
// die in it; any that outlive it keep its allocator alive (it is then never
// freed) so freeing them stays safe.
class MetaDeviceScope {
 public:
  explicit MetaDeviceScope(const MetaDeviceOptions& options);
  MetaDeviceScope();  // CUDA mirror, no capacity limit, EMBER_CUDA_ALLOC_CONF's options
  ~MetaDeviceScope();
  MetaDeviceScope(const MetaDeviceScope&) = delete;
  MetaDeviceScope& operator=(const MetaDeviceScope&) = delete;

  memory::CachingAllocator& allocator() const;
  DeviceType mirror() const;
  size_t capacity() const;
  // Bytes the mirrored libraries took outside the allocator so far (cuBLAS and
  // cuBLASLt workspaces, 32 MiB each on CUDA), and which of them.
  size_t library_bytes() const;
  bool uses(MetaLibrary library) const;

 private:
  detail::MetaContext* context_;
  detail::MetaContext* previous_;
};

// The meta device this thread sees: the innermost MetaDeviceScope's, or a
// process-wide default (CUDA mirror, no capacity limit, EMBER_CUDA_ALLOC_CONF).
memory::CachingAllocator& meta_allocator();
DeviceType meta_mirror();

namespace detail {
// Called by the meta kernels when the mirrored device would create `library`'s
// workspace: the first call per meta device takes its bytes from the capacity,
// and throws OutOfMemoryError when they do not fit.
void meta_uses_library(MetaLibrary library);
// The observer of this thread's meta device (MetaDeviceOptions::observer), or null.
MetaKernelObserver* meta_observer();
// Whether a MetaCaptureScope is alive on this thread's meta device.
bool meta_capturing();
}  // namespace detail

}  // namespace ember
