// Allocation sites: every block the caching allocators hand out is labelled with
// the op that asked for it ("linear", "MulBackward") and the module forward it ran
// in ("model.fc1.forward"), so leak reports (core/leak_check.h) can name them.
// Both labels are plain pointers to text that lives until the process ends.
#pragma once

#include <string_view>

#include "core/memory/caching_allocator.h"
#include "core/profiler_span.h"

namespace ember {

// Returns a pointer to text equal to `name` that stays valid until exit, the same
// pointer for equal text. Takes a lock and hashes: call it once per module or
// label, never per op.
const char* intern_site_name(std::string_view name);

// Names the allocations of an op. The outermost op wins: mse_loss built from sub,
// pow and mean is reported as mse_loss, the op the user called. Costs two
// thread-local writes (benchmarks/alloc_site.cpp measures it). It is also the
// profiler's span (core/profiler.h): every OpSite, inner ones too, is one span
// under its own name while a profile runs; otherwise one relaxed load more.
class OpSite {
 public:
  explicit OpSite(const char* op) noexcept : tag_(outer_or(op)), span_(op) {}
  OpSite(const OpSite&) = delete;
  OpSite& operator=(const OpSite&) = delete;

 private:
  static const char* outer_or(const char* op) noexcept {
    const char* outer = AllocationTag::current();
    return outer != nullptr ? outer : op;
  }
  AllocationTag tag_;
  profiler::detail::SpanGuard span_;  // destroyed first: the span ends under the tag
};

// "<scope> / <tag>", or whichever of the two is set; "(untagged)" when neither is.
std::string site_name(const char* scope, const char* tag);

}  // namespace ember
