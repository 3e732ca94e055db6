// Device services for modules, optimizers and data loading: whether a device is
// usable and how many there are, graph capture, synchronisation, whether its
// tensors hold values, and how batches reach it (pinned staging). They answer
// through the device's table (core/kernel_table.h) without their callers including
// it, and without testing the device type or naming CUDA.
#pragma once

#include <cstddef>

#include "core/base/device.h"

namespace ember {

// Throws ember::Error naming `device` when it does not exist.
void check_device(Device device);

// Throws when `device`'s work is being captured into a CUDA graph (cuda/graph.h):
// "<what>: cannot <action> while a CUDA graph is being captured ...".
void check_not_capturing(Device device, const char* what,
                         const char* action = "synchronise with the host");

// Whether `device`'s work is being captured into a CUDA graph.
bool is_capturing(Device device);

class Generator;

// The counters of a random draw of `n` numbers from `gen` for work on `device`:
// number i of the draw uses counter offset + i, plus *base when base is not null.
// Eagerly: offset = gen.advance(n), no base. While a CUDA graph captures the device's
// work (cuda/graph.h): offset within the captured step, and base the graph's word for
// `gen`, which each replay sets to the generator's offset and then advances it, so
// every replay draws fresh numbers, the ones an eager step at that offset would.
// Throws, naming `what`, on a device that captures but cannot draw in a capture.
struct RandomCounters {
  uint64_t seed = 0;
  uint64_t offset = 0;
  const uint64_t* base = nullptr;
};
RandomCounters draw_counters(Device device, Generator& gen, uint64_t n, const char* what);

// Waits until `device` has finished the work queued so far.
void synchronize(Device device);

// Whether `device`'s tensors hold values (false for the meta device: shapes only).
bool holds_data(Device device);

// Throws when `device`'s tensors hold no values (the meta device), naming `what`
// and saying that memory prediction needs shape-only code.
void check_holds_data(Device device, const char* what);

// How many devices of `type` this process can use (1 for the host and the meta
// device; 0 CUDA devices on a machine without a GPU or driver).
int device_count(DeviceType type);

// Whether batches for `device` are assembled in pinned host memory and copied
// asynchronously (nn::DataLoader), rather than in ordinary host tensors.
bool pinned_staging(Device device);

// Page-locked host memory staging host data for asynchronous copies to a device
// whose pinned_staging() is true (nn::DataLoader's batches, safetensors loads onto
// CUDA). acquire() waits for the buffer's last copy out before handing it back, so
// one buffer is reused safely, and the buffer waits for it again before it is freed.
// The device type is fixed by the first acquire().
class PinnedStaging {
 public:
  PinnedStaging() = default;
  ~PinnedStaging();
  PinnedStaging(PinnedStaging&& other) noexcept;
  PinnedStaging& operator=(PinnedStaging&& other) noexcept;
  PinnedStaging(const PinnedStaging&) = delete;
  PinnedStaging& operator=(const PinnedStaging&) = delete;

  // Waits for the last copy out of the buffer, then returns >= bytes of it.
  void* acquire(size_t bytes, Device device);
  // Queues a copy of the first `bytes` of the buffer to `dst` on `device` (this
  // thread's current stream there) and records it for the next acquire().
  void copy_to_device(void* dst, size_t bytes, Device device);

 private:
  void release() noexcept;
  void* buffer_ = nullptr;  // the device's own buffer, made and freed by its hooks
  DeviceType type_ = DeviceType::CPU;
};

namespace detail {
[[noreturn]] void throw_no_data(Device device, const char* what);
}

}  // namespace ember
