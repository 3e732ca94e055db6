// Device timing for the profiler (core/profiler.h, through the CUDA device's
// hooks): CUDA events recorded on the current stream around each span, from a
// pool that keeps them for the next profile, read only when the profile ends
// (no synchronisation per op); and NVTX ranges (the toolkit's header-only NVTX 3)
// for nsys.
#pragma once

#include <cstdint>

namespace ember::cuda {

// Records a timing event on this thread's current device's current stream and
// returns its number, or -1 when none was recorded (no device; the device's work
// is being captured into a graph). Thread-safe.
int64_t record_timing_event() noexcept;
// Milliseconds from event `from` to event `to` (both recorded since the last
// reset), waiting for them; NaN when either is unknown, on another device, or
// the runtime fails.
double timing_elapsed_ms(int64_t from, int64_t to) noexcept;
// Forgets the recorded events; the pool keeps them for reuse.
void reset_timing_events() noexcept;

void nvtx_range_push(const char* name) noexcept;
void nvtx_range_pop() noexcept;

}  // namespace ember::cuda
