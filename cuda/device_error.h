// Errors CUDA kernels find in their input (an index or a class target out of
// range), raised without a host synchronisation per call. A kernel cannot throw,
// and checking the indices on the host would cost a sync on every call. Instead
// the kernel that meets a bad value uses a safe one (it writes zeros, or counts
// the row as ignored) and records it in its device's error record: a few bytes of
// mapped pinned host memory that the kernel writes directly. ember reads the
// record whenever it synchronises with the device anyway (a copy to the host:
// item(), to_vector(), to(kCPU), printing; cuda::synchronize()) and then throws
// ember::Error naming the op, the value and the range, clearing the record. No
// extra call, copy or sync happens when nothing is wrong.
#pragma once

#include <cstdint>

namespace ember::cuda {

// What a kernel found. The first writer wins in practice; two kernels failing at
// once may mix their fields, which still names a real bad value.
struct DeviceErrorRecord {
  int set;         // 0: nothing recorded
  int kind;        // DeviceErrorKind
  const char* op;  // a string literal of the host (never read on the device)
  int64_t value;   // the bad index or target
  int64_t bound;   // valid values are [0, bound)
};

enum DeviceErrorKind : int { kBadIndex = 0, kBadTarget = 1 };

// Device `device`'s record (a device-accessible pointer), made on first use.
DeviceErrorRecord* device_error_record(int device);

// Throws ember::Error when a kernel on `device` recorded an error, clearing the
// record first. Call only after synchronising with the device.
void check_device_errors(int device);

}  // namespace ember::cuda
