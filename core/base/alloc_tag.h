// Allocation sites: this thread's current tag (the op allocating, "linear") and
// scope (the code region, "model.fc1.forward"), read by the caching allocators
// when they hand out a block so snapshots, traces and leak reports can name it.
// Guards nest, innermost wins. Only the pointer is kept, so the text must outlive
// every use: pass a string literal or interned text (core/alloc_site.h).
#pragma once

#include <cstdint>

namespace ember {

namespace detail {
inline thread_local const char* t_allocation_tag = nullptr;
inline thread_local const char* t_allocation_scope = nullptr;
inline thread_local uint64_t t_requested_bytes = 0;
}  // namespace detail

// Bytes this thread has asked the caching allocators for since it started (every
// device, the host too). The profiler (core/profiler.h) attributes an op's bytes
// as the difference over its span.
inline uint64_t requested_bytes_on_thread() noexcept {
  return detail::t_requested_bytes;
}

class AllocationTag {
 public:
  explicit AllocationTag(const char* tag) noexcept : previous_(detail::t_allocation_tag) {
    detail::t_allocation_tag = tag;
  }
  ~AllocationTag() { detail::t_allocation_tag = previous_; }
  AllocationTag(const AllocationTag&) = delete;
  AllocationTag& operator=(const AllocationTag&) = delete;
  static const char* current() noexcept { return detail::t_allocation_tag; }

 private:
  const char* previous_;
};

class AllocationScope {
 public:
  explicit AllocationScope(const char* scope) noexcept : previous_(detail::t_allocation_scope) {
    detail::t_allocation_scope = scope;
  }
  ~AllocationScope() { detail::t_allocation_scope = previous_; }
  AllocationScope(const AllocationScope&) = delete;
  AllocationScope& operator=(const AllocationScope&) = delete;
  static const char* current() noexcept { return detail::t_allocation_scope; }

 private:
  const char* previous_;
};

}  // namespace ember
