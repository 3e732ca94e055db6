// Device services for modules, optimizers and data loading: whether a device is
// usable, graph capture, synchronisation, whether its tensors hold values, and
// how batches reach it. They answer through the device's table (core/kernel_table.h)
// without their callers including it, and without testing the device type.
#pragma once

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

// Waits until `device` has finished the work queued so far.
void synchronize(Device device);

// Whether `device`'s tensors hold values (false for the meta device: shapes only).
bool holds_data(Device device);

// Throws when `device`'s tensors hold no values (the meta device), naming `what`
// and saying that memory prediction needs shape-only code.
void check_holds_data(Device device, const char* what);

// Whether batches for `device` are assembled in pinned host memory and copied
// asynchronously (nn::DataLoader), rather than in ordinary host tensors.
bool pinned_staging(Device device);

namespace detail {
[[noreturn]] void throw_no_data(Device device, const char* what);
}

}  // namespace ember
