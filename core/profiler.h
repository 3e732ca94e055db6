// The profiler, as torch.profiler.profile: while a Profile runs, every op (each
// OpSite, inner ops too), every backward node and every RecordFunction is a span
// with its host start and end, its nesting, its thread, the bytes it asked the
// caching allocators for and its allocation-site tag, and, with a CUDA device,
// its device time from CUDA events recorded around it on the current stream
// (read once, when the profile stops; never a synchronisation per op). It ends
// as a table (key_averages, table) and a Chrome trace that can carry the memory
// history on the same time axis. While no Profile runs, an op pays one relaxed
// atomic load. docs/profiling.md has the example and the costs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <string>
#include <string_view>
#include <vector>

#include "core/memory/memory_snapshot.h"
#include "core/profiler_span.h"

namespace ember::profiler {

struct ProfileOptions {
  // CUDA events around each span on this thread's current CUDA device and its
  // current stream (nothing without a CUDA device, or while a graph captures).
  bool record_device_time = true;
  // The bytes each span asks the caching allocators for (host and devices).
  bool record_memory = true;
  // An NVTX range per span (nvtxRangePushA/Pop), for nsys.
  bool nvtx = false;

  ProfileOptions& device_time(bool on) {
    record_device_time = on;
    return *this;
  }
  ProfileOptions& memory(bool on) {
    record_memory = on;
    return *this;
  }
  ProfileOptions& with_nvtx(bool on) {
    nvtx = on;
    return *this;
  }
};

// One span. Times are from the profile's start.
struct ProfileEvent {
  const char* name = nullptr;  // the op ("add"), node ("MulBackward") or user range
  bool user = false;           // a RecordFunction
  int thread = 0;              // small per-process thread number, in order of first span
  int depth = 0;               // 0: top level on its thread
  int64_t parent = -1;         // index into Profile::events(); -1: top level
  int64_t start_ns = 0;        // host
  int64_t end_ns = 0;
  // Device time between the CUDA events recorded at the span's start and end,
  // and the start's offset from the event recorded when the profile started
  // (microseconds); -1 when not measured.
  double device_us = -1;
  double device_start_us = -1;
  int64_t bytes = 0;            // requested during the span, its children's included
  const char* tag = nullptr;    // allocation-site tag in force (the outermost op's)
  const char* scope = nullptr;  // allocation scope in force (a module's forward)

  double host_us() const { return static_cast<double>(end_ns - start_ns) / 1000.0; }
};

// key_averages(): one row per name. "self" leaves out the children's part.
struct KeyAverage {
  std::string op;
  int64_t calls = 0;
  double host_total_us = 0;
  double host_self_us = 0;
  double device_total_us = 0;  // 0 when device time was not measured
  double device_self_us = 0;
  int64_t bytes = 0;  // requested, children's included
  int64_t self_bytes = 0;
  // Of the step: device_total_us over the top-level spans' device time when it
  // was measured, otherwise host_total_us over the profile's wall time. Nested
  // rows overlap their parents, so the shares of all rows can exceed 1.
  double share = 0;
};

// Runs from construction until stop() (or destruction). One at a time per
// process: constructing a second while one runs throws ember::Error.
class Profile {
 public:
  explicit Profile(ProfileOptions options = {});
  ~Profile();
  Profile(const Profile&) = delete;
  Profile& operator=(const Profile&) = delete;

  void stop();  // ends the profile and reads the device times; idempotent
  bool running() const { return running_; }

  // The results; each throws ember::Error while the profile runs.
  // Spans by thread, each thread's in the order they began.
  const std::vector<ProfileEvent>& events() const;
  int64_t wall_ns() const;  // from construction to stop()
  // How device time was measured: "CUDA events", or why not ("off: ...").
  const std::string& device_timing() const;
  bool device_time_measured() const;
  // Sorted by device total, then host total (host total alone without device time).
  std::vector<KeyAverage> key_averages() const;
  // key_averages as text, sorted by "device", "host", "self_host", "calls" or
  // "bytes"; row_limit 0 prints every row.
  std::string table(std::string_view sort_by = "device", size_t row_limit = 0) const;
  // Chrome trace-event JSON (Perfetto, chrome://tracing): "X" events for the
  // host spans (pid 0, a tid per thread) and their device spans (pid 1), and,
  // given an allocator's snapshot with history (record_memory_history), its
  // "allocated" and "reserved" counters over the profile's window (pid 2), on
  // the same steady-clock axis. Throws ember::Error if the file cannot be written.
  void export_chrome_trace(std::ostream& out,
                           const memory::MemorySnapshot* history = nullptr) const;
  void export_chrome_trace(const std::string& path,
                           const memory::MemorySnapshot* history = nullptr) const;

 private:
  void check_stopped(const char* what) const;

  ProfileOptions options_;
  bool running_ = false;
  int64_t origin_ns_ = 0;  // steady_clock ns since its epoch at construction
  int64_t wall_ns_ = 0;
  int64_t start_mark_ = -1;  // the device event recorded at construction
  std::string device_timing_;
  std::vector<ProfileEvent> events_;
};

// A span of the user's own, as torch.profiler.record_function: "step", "data".
// Costs one relaxed load when no profile runs; when one does, the name is
// interned (a lock and a hash, core/alloc_site.h), so name ranges, not elements.
class RecordFunction {
 public:
  explicit RecordFunction(std::string_view name);
  ~RecordFunction();
  RecordFunction(const RecordFunction&) = delete;
  RecordFunction& operator=(const RecordFunction&) = delete;

 private:
  int64_t handle_ = -1;
};

}  // namespace ember::profiler
