// The profiler's hook on the op path (core/profiler.h is the profiler itself):
// OpSite, the autograd engine and profiler::record_function open a span here.
// While no profile runs, a span costs one relaxed atomic load and a compare.
#pragma once

#include <atomic>
#include <cstdint>

namespace ember::profiler::detail {

// True while a Profile is running (any thread may read it; start/stop write it).
inline std::atomic<bool> g_active{false};

// Opens a span named `name` (text that outlives the profile: a literal, a node's
// name, interned text) on this thread; returns its handle, or -1 when none was
// opened (the profile stopped meanwhile, or host memory ran out).
int64_t begin_span(const char* name, bool user) noexcept;
// Closes the span `handle` opened on this thread; a stale handle is ignored.
void end_span(int64_t handle) noexcept;

class SpanGuard {
 public:
  explicit SpanGuard(const char* name, bool user = false) noexcept
      : handle_(g_active.load(std::memory_order_relaxed) ? begin_span(name, user) : -1) {}
  ~SpanGuard() {
    if (handle_ >= 0) [[unlikely]]
      end_span(handle_);
  }
  SpanGuard(const SpanGuard&) = delete;
  SpanGuard& operator=(const SpanGuard&) = delete;

 private:
  int64_t handle_;
};

}  // namespace ember::profiler::detail
