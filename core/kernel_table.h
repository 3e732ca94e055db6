// Kernels chosen by device from one table. Each kernel family is declared once, in
// core/base/kernel_families.h (its argument struct, its kind, its line in
// EMBER_KERNEL_FAMILIES); each device registers its implementation of every family
// it has from the file that holds it (the CPU loops of core/kernels/cpu_*.cpp, the
// CUDA kernel files of cuda/kernels/ through cuda/kernels/registration.h), and ops
// call kernels_for(device).family(args) without ever testing the device.
//
// Fused ops say "compose instead" through their predicate, asked before the op
// allocates: an op runs its fused kernel where the predicate says yes, and its
// composition of simpler ops (the reference) elsewhere, as MLX's fast primitives
// do. A device is one registration (core/kernels/registry.cpp): CPU, CUDA, and the
// meta device (core/kernels/meta_device.cpp), whose kernels compute nothing but
// answer every query as the device it mirrors would.
#pragma once

#include <vector>

#include "core/base/device.h"
#include "core/base/kernel_families.h"
#include "core/device_services.h"
#include "core/memory/caching_allocator.h"

namespace ember::kernels {

// What a device is, beside its kernels: where its memory comes from and how it
// synchronises.
struct DeviceHooks {
  // Throws ember::Error naming the device when `index` is not a usable one.
  void (*check)(int index) = nullptr;
  // The caching allocator of device `index` (its statistics: core/memory.h), the
  // allocator tensors take their bytes from (the same, except that the host's
  // honours this thread's memory::HostAllocatorOverride), and the stream
  // allocations are made on (the current one of this thread; null for the host).
  memory::CachingAllocator& (*allocator)(int index) = nullptr;
  memory::Allocator& (*tensor_allocator)(int index) = nullptr;
  void* (*current_stream)(int index) = nullptr;
  // Throws when work on `index` is being captured into a CUDA graph, naming `what`
  // and the action a capture forbids; never for devices without graphs.
  void (*check_not_capturing)(int index, const char* what, const char* action) = nullptr;
  bool (*is_capturing)(int index) = nullptr;
  // A random draw of `n` counters from the generator `key` (whose offset is
  // *host_offset) while work on `index` is captured into a CUDA graph; null where
  // graphs do not exist. The graph keeps one device word per generator, written with
  // the generator's offset before each replay: the draw gets that word's address and
  // its counters' offset within the step (*offset_in_step), and *host_offset advances
  // as an eager draw's would (restored when the capture ends; each replay advances
  // it by all the step's draws).
  const uint64_t* (*capture_random)(int index, const void* key, uint64_t* host_offset, uint64_t n,
                                    uint64_t* offset_in_step) = nullptr;
  // Waits until the device has finished the work queued so far.
  void (*synchronize)(int index) = nullptr;
  // How many such devices there are (1 for the host).
  int (*count)() = nullptr;
  // Whether autocast (core/autocast.h), when on, applies to its tensors.
  bool (*autocasts)(int index) = nullptr;
  // Batches for it are assembled in pinned host memory and copied asynchronously
  // (nn::DataLoader); otherwise assembled in ordinary host tensors.
  bool pinned_staging = false;
  // Its pinned staging buffers (core/device_services.h's PinnedStaging), where
  // pinned_staging is true: make one; free one, after its last copy (never throws);
  // wait for its last copy, then make it hold >= bytes and return it; queue a copy of
  // its first bytes to device memory of `index` on this thread's current stream.
  void* (*staging_new)() = nullptr;
  void (*staging_free)(void* buffer) = nullptr;
  void* (*staging_acquire)(void* buffer, size_t bytes) = nullptr;
  void (*staging_copy)(void* buffer, void* dst, size_t bytes, int index) = nullptr;
  // false for the meta device: its tensors have shapes but no values, so nothing
  // may read them (item(), to_vector(), printing, copies to a real device).
  bool holds_data = true;
  // The profiler's device timing (core/profiler.h), null on devices without it:
  // record a timing event on this thread's current device and stream, returning
  // its number (-1: none, as while a graph is captured); the milliseconds from
  // one recorded event to another (waits for both; NaN when they cannot be
  // compared); forget every event recorded (they are kept for reuse). And the
  // NVTX ranges nsys shows (push a named range on this thread, pop it).
  int64_t (*timing_event)() = nullptr;
  double (*timing_elapsed_ms)(int64_t from, int64_t to) = nullptr;
  void (*timing_reset)() = nullptr;
  void (*range_push)(const char* name) = nullptr;
  void (*range_pop)() = nullptr;
};

// A device's table: its kernels (one function pointer per family) and its hooks.
struct KernelTable : KernelFamilies {
  DeviceHooks hooks;
};

inline constexpr int kDeviceTypes = 3;  // DeviceType's values: CPU, CUDA, Meta

// The table of `type`, built once (every device's registration runs on first use).
const KernelTable& table(DeviceType type);
inline const KernelTable& kernels_for(Device device) {
  return table(device.type);
}

// Registration: each device's file fills its table (core/kernels/registry.cpp
// calls them in order, once); families a device leaves out throw when called,
// naming the family and the device, except predicates, which answer false.
void register_cpu(KernelTable& t);
void register_cuda(KernelTable& t);
void register_meta(KernelTable& t);

// The families `type` did not register (calling one throws, naming it; predicates
// answer false and are not listed). The CPU leaves out the fused kernels it never
// runs; CUDA and meta have every family, and
// tests/core/test_meta.cpp holds them to it, so a family added without its meta
// kernel fails there by name.
std::vector<const char*> missing_families(DeviceType type);

}  // namespace ember::kernels

// Device services (check_device, check_not_capturing, ...): core/device_services.h,
// defined out of line over the hooks above.
