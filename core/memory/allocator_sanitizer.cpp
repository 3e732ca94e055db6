// CachingAllocator (core/memory/allocator_impl.h): the sanitizer (sanitize:True):
// guard bytes around each block, poisoned freed memory, and the quarantine that
// delays reuse, with the reports they produce.
#include "core/memory/allocator_impl.h"

namespace ember::memory {

std::vector<SanitizerReport> CachingAllocator::Impl::sanitizer_reports() const {
  std::lock_guard lock(mutex_);
  return reports_;
}

void* CachingAllocator::Impl::sanitized_allocate(size_t bytes, cudaStream_t stream) {
  if (bytes > kMaxRequest) throw_out_of_memory(bytes, kMaxRequest, kMaxRequest, stream);
  const size_t size = round_size(bytes + kGuardFront + kGuardBackMin, options_);
  const bool small = size <= kSmallSize;
  Block* block = take_cached_block(small, stream, size, nullptr);
  if (block == nullptr) block = allocate_memory(small, stream, size, bytes, nullptr);
  const auto base = reinterpret_cast<uintptr_t>(hand_out(block, size, bytes));
  block = allocated_.erase(base);
  allocated_.insert(base + kGuardFront, block);
  try {
    backend_->fill(reinterpret_cast<void*>(base), kGuardByte, kGuardFront, stream);
    backend_->fill(reinterpret_cast<void*>(base + kGuardFront + bytes), kGuardByte,
                   block->size - kGuardFront - bytes, stream);
  } catch (...) {
    // The caller never saw the pointer: take the block back as a free would.
    allocated_.erase(base + kGuardFront);
    block->allocated = false;
    if (history_on_)
      record(TraceAction::free_requested, block->ptr, block->size, block->stream, block->tag,
             block->scope, block->requested_size);
    const size_t type = pool_type(block->small);
    decrease(c_.allocation, type, 1);
    decrease(c_.allocated_bytes, type, block->size);
    if (block->size >= options_.max_split_size) stats_.oversize_allocations.decrease(1);
    release_to_pool(block);
    throw;
  }
  return reinterpret_cast<void*>(base + kGuardFront);
}

std::pair<int64_t, size_t> CachingAllocator::Impl::scan(const Block* b, size_t offset, size_t n,
                                                        unsigned char expected) {
  if (n == 0) return {-1, 0};
  scratch_.resize(n);
  backend_->read(scratch_.data(), reinterpret_cast<const void*>(b->ptr + offset), n, b->stream);
  int64_t first = -1;
  size_t changed = 0;
  for (size_t i = 0; i < n; ++i) {
    if (scratch_[i] == expected) continue;
    if (first < 0) first = static_cast<int64_t>(offset + i);
    ++changed;
  }
  return {first, changed};
}

void CachingAllocator::Impl::report(SanitizerReport::Kind kind, const Block* b, int64_t first,
                                    size_t changed) {
  SanitizerReport r;
  r.kind = kind;
  r.address = b->ptr + kGuardFront;
  r.requested_size = b->requested_size;
  r.offset = first - static_cast<int64_t>(kGuardFront);
  r.bad_bytes = changed;
  r.tag = b->tag;
  r.scope = b->scope;
  const char* what = kind == SanitizerReport::Kind::underrun  ? "write before the start"
                     : kind == SanitizerReport::Kind::overrun ? "write past the end"
                                                              : "write after free";
  std::string site = r.scope && r.tag ? std::string(r.scope) + " / " + r.tag
                     : r.scope        ? std::string(r.scope)
                     : r.tag          ? std::string(r.tag)
                                      : std::string("(untagged)");
  r.message = detail::str_cat("ember allocator sanitizer: ", what, ": ", changed, " byte",
                              changed == 1 ? "" : "s", " changed, the first at byte ", r.offset,
                              " of a ", r.requested_size, "-byte block at 0x", std::hex, r.address,
                              std::dec, " allocated at ", site);
  std::fprintf(stderr, "%s\n", r.message.c_str());
  try {
    reports_.push_back(std::move(r));
  } catch (const std::exception&) {
    // Out of host memory: the report was printed; keeping it is best effort.
  }
}

void CachingAllocator::Impl::check_guards(const Block* b) {
  auto [under, under_n] = scan(b, 0, kGuardFront, kGuardByte);
  if (under_n > 0) report(SanitizerReport::Kind::underrun, b, under, under_n);
  const size_t end = kGuardFront + b->requested_size;
  auto [over, over_n] = scan(b, end, b->size - end, kGuardByte);
  if (over_n > 0) report(SanitizerReport::Kind::overrun, b, over, over_n);
}

void CachingAllocator::Impl::quarantine(Block* block) {
  try {
    check_guards(block);
    backend_->fill(reinterpret_cast<void*>(block->ptr + kGuardFront), kPoisonByte,
                   block->requested_size, block->stream);
    quarantine_.push_back(block);
    quarantine_bytes_ += block->size;
    // Held like a block waiting for an event: not merged into a free
    // neighbour, shown as pending free in snapshots.
    block->event_count = 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ember allocator sanitizer: cannot quarantine a block (%s)\n", e.what());
    release_to_pool(block);
    return;
  }
  while (!quarantine_.empty() && (quarantine_.size() > options_.quarantine_blocks ||
                                  quarantine_bytes_ > options_.quarantine_bytes))
    leave_quarantine();
}

void CachingAllocator::Impl::leave_quarantine() {
  Block* b = quarantine_.front();
  quarantine_.pop_front();
  quarantine_bytes_ -= b->size;
  b->event_count = 0;
  try {
    auto [first, changed] = scan(b, kGuardFront, b->requested_size, kPoisonByte);
    if (changed > 0) report(SanitizerReport::Kind::write_after_free, b, first, changed);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ember allocator sanitizer: cannot check a freed block (%s)\n", e.what());
  }
  release_to_pool(b);
}

void CachingAllocator::Impl::flush_quarantine() {
  while (!quarantine_.empty()) leave_quarantine();
}

}  // namespace ember::memory
