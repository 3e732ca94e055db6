#include "core/memory/caching_allocator.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstdio>
#include <deque>
#include <map>
#include <mutex>
#include <new>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "core/base/error.h"
#include "core/memory/allocator_impl.h"

namespace ember::memory {

namespace {

// The next of `divisions` equal steps between the powers of two around `size`.
size_t roundup_power2_next_division(size_t size, size_t divisions) {
  if (std::has_single_bit(size)) return size;
  size_t floor = std::bit_floor(size);
  size_t step = floor >> (std::bit_width(divisions) - 1);
  if (step == 0) return floor << 1;
  size_t down = size & ~(step - 1);
  return down == size ? size : down + step;
}

}  // namespace

size_t CachingAllocator::round_size(size_t bytes, const AllocatorOptions& options) {
  if (bytes < kMinBlockSize) return kMinBlockSize;
  if (bytes > kMaxRequest) [[unlikely]]
    return kMaxRequest;  // fails as out of memory
  size_t divisions = options.divisions_for(bytes);
  if (divisions > 1 && bytes > kMinBlockSize * divisions)
    return roundup_power2_next_division(bytes, divisions);
  return (bytes + kMinBlockSize - 1) / kMinBlockSize * kMinBlockSize;
}

size_t CachingAllocator::segment_size(size_t rounded_bytes) {
  if (rounded_bytes <= kSmallSize) return kSmallBuffer;
  if (rounded_bytes < kMinLargeAlloc) return kLargeBuffer;
  return (rounded_bytes + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
}

// =================================================================================
// CachingAllocator::Impl: the core (its other parts: core/memory/allocator_impl.h)

CachingAllocator::Impl::Impl(std::unique_ptr<Backend> backend, AllocatorOptions options)
    : backend_(std::move(backend)),
      options_(std::move(options)),
      start_(std::chrono::steady_clock::now()) {
  EMBER_CHECK(backend_ != nullptr, "CachingAllocator: the backend is null");
  stats_.max_split_size = options_.max_split_size == AllocatorOptions::kNoMaxSplit
                              ? -1
                              : static_cast<int64_t>(options_.max_split_size);
  if (options_.expandable_segments) {
    std::string why;
    if (backend_->supports_virtual_memory(&why) && backend_->granularity() > 0) {
      expandable_ = true;
      page_ = backend_->granularity();
    } else {
      warn_no_expandable(why);
    }
  }
}

CachingAllocator::Impl::~Impl() {
  for (auto& [event, block] : pending_events_) backend_->destroy_event(event);
  for (Backend::EventHandle e : spare_events_) backend_->destroy_event(e);
  for (auto& [base, seg] : segments_) {
    if (seg->expandable) {
      if (seg->mapped > 0) backend_->unmap_pages(reinterpret_cast<void*>(seg->base), seg->mapped);
      backend_->release_address_space(reinterpret_cast<void*>(seg->base), seg->size);
    } else {
      backend_->raw_free(reinterpret_cast<void*>(seg->base));
    }
    for (Block* b = seg->head; b != nullptr;) delete std::exchange(b, b->next);
    delete seg;
  }
  for (Block* b : spare_blocks_) delete b;
}

void* CachingAllocator::Impl::allocate(size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return nullptr;
  std::lock_guard lock(mutex_);
  PrivatePool* target = nullptr;
  if (!capturing_.empty()) [[unlikely]]
    target = capturing_pool(stream);  // and no event queries: a capture forbids them
  else if (!pending_events_.empty() || !deferred_.empty()) [[unlikely]]
    process_events();
  if (options_.sanitize) [[unlikely]]
    return sanitized_allocate(bytes, stream);
  // Without roundup_power2_divisions a request rounds to 512 bytes (round_size).
  const size_t size =
      plain_rounding_ && bytes <= kMaxRequest
          ? std::max(kMinBlockSize, (bytes + kMinBlockSize - 1) & ~(kMinBlockSize - 1))
          : round_size(bytes, options_);
  const bool small = size <= kSmallSize;
  Block* block = take_cached_block(small, stream, size, target);
  if (block == nullptr) [[unlikely]]
    block = allocate_memory(small, stream, size, bytes, target);
  return hand_out(block, size, bytes);
}

void CachingAllocator::Impl::deallocate(void* ptr) noexcept {
  if (ptr == nullptr) return;
  std::lock_guard lock(mutex_);
  Block* block = allocated_.erase(reinterpret_cast<uintptr_t>(ptr));
  if (block == nullptr) [[unlikely]] {
    std::fprintf(stderr,
                 "ember: deallocate(%p): not a live allocation of this allocator; "
                 "ignored\n",
                 ptr);
    return;
  }
  block->allocated = false;
  const size_t type = pool_type(block->small);
  decrease(c_.allocation, type, 1);
  decrease(c_.allocated_bytes, type, block->size);
  if (block->size >= options_.max_split_size) stats_.oversize_allocations.decrease(1);
  if (history_on_)
    record(TraceAction::free_requested, block->ptr, block->size, block->stream, block->tag,
           block->scope, block->requested_size);
  if (block->segment->pool != nullptr) [[unlikely]] {
    // A graph's block goes back to that graph's pool, whichever captures are
    // underway: the graph orders its uses; it waits for no other stream.
    block->stream_uses.clear();
    release_to_pool(block);
    return;
  }
  if (!capturing_.empty()) [[unlikely]] {
    hold(block);
    return;
  }
  if (block->stream_uses.empty() && !options_.sanitize) [[likely]]
    release_to_pool(block);
  else
    free_block(block);
}

void CachingAllocator::Impl::free_block(Block* block) noexcept {
  if (!block->stream_uses.empty()) [[unlikely]] {
    if (!capturing_.empty()) {
      // Recording an event on a stream being captured would put it in the
      // graph; wait until no capture is underway (as PyTorch does).
      defer(block);
      return;
    }
    try {
      record_events(block);
    } catch (const std::exception& e) {
      // Without its events the block cannot wait for every stream; reusing it
      // sooner is the lesser harm in a function that must not throw.
      std::fprintf(stderr, "ember: deallocate: recording stream events failed (%s)\n", e.what());
      block->stream_uses.clear();
    }
    // Events that were recorded release the block when they complete.
    if (block->event_count > 0) return;
  }
  if (options_.sanitize) [[unlikely]]
    quarantine(block);
  else
    release_to_pool(block);
}

void CachingAllocator::Impl::record_stream(void* ptr, cudaStream_t stream) {
  std::lock_guard lock(mutex_);
  Block* block = allocated_.find(reinterpret_cast<uintptr_t>(ptr));
  EMBER_CHECK(block != nullptr, "record_stream: ", ptr,
              " is not a live allocation of this allocator");
  if (stream == block->stream) return;
  auto& uses = block->stream_uses;
  if (std::find(uses.begin(), uses.end(), stream) == uses.end()) uses.push_back(stream);
}

void CachingAllocator::Impl::empty_cache() {
  std::lock_guard lock(mutex_);
  EMBER_CHECK(capturing_.empty(),
              "empty_cache: cannot return cached memory while a CUDA graph "
              "is being captured (cuda::Graph::capture); call it before or after the capture");
  release_cached_blocks();
}

MemoryStats CachingAllocator::Impl::stats(bool with_gauges) const {
  std::lock_guard lock(mutex_);
  MemoryStats s = stats_;
  c_.write_to(s);
  if (with_gauges) fill_gauges(s);
  return s;
}

void CachingAllocator::Impl::reset_peak() {
  std::lock_guard lock(mutex_);
  stats_.reset_peak();
  for (Counter* c : c_.all()) c->reset_peak();
}

void CachingAllocator::Impl::reset_accumulated() {
  std::lock_guard lock(mutex_);
  stats_.reset_accumulated();
  for (Counter* c : c_.all()) c->reset_accumulated();
}

std::string CachingAllocator::Impl::summary(bool abbreviated) const {
  std::string title = backend_->is_host() ? std::string("ember CPU memory summary")
                                          : "ember CUDA memory summary, device ID " +
                                                std::to_string(backend_->device());
  const MemoryStats s = stats(true);
  return format_memory_summary(s, title, backend_->is_host(), abbreviated) +
         format_fragmentation_line(s) + "\n";
}

MemorySnapshot CachingAllocator::Impl::snapshot() const {
  std::lock_guard lock(mutex_);
  MemorySnapshot snap;
  snap.device = backend_->device();
  snap.host = backend_->is_host();
  snap.clock_origin_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(start_.time_since_epoch()).count();
  snap.segments.reserve(segments_.size());
  for (const auto& [base, seg] : segments_) {
    if (seg->mapped == 0) continue;
    SegmentSnapshot s;
    s.address = seg->base;
    s.total_size = seg->mapped;
    s.address_space_size = seg->size;
    s.expandable = seg->expandable;
    s.stream = seg->stream;
    s.is_large = !seg->small;
    for (const Block* b = seg->head; b != nullptr; b = b->next) {
      BlockSnapshot bs;
      bs.address = b->ptr;
      bs.size = b->size;
      bs.requested_size = b->requested_size;
      bs.tag = b->tag;
      bs.scope = b->scope;
      bs.state = b->allocated         ? BlockState::allocated
                 : b->event_count > 0 ? BlockState::active_pending_free
                                      : BlockState::inactive;
      if (bs.state == BlockState::allocated) s.allocated_size += b->size;
      if (bs.state != BlockState::inactive) {
        s.active_size += b->size;
        s.requested_size += b->requested_size;
      }
      s.blocks.push_back(bs);
    }
    snap.segments.push_back(std::move(s));
  }
  snap.trace = history_in_order();
  return snap;
}

void CachingAllocator::Impl::mark_step(const char* label) {
  std::lock_guard lock(mutex_);
  if (history_on_) record(TraceAction::step, 0, 0, nullptr, label);
}

void CachingAllocator::Impl::record_history(bool enabled, size_t max_entries) {
  EMBER_CHECK(!enabled || max_entries > 0,
              "record_memory_history: max_entries must be > 0 when enabling");
  std::lock_guard lock(mutex_);
  history_on_ = enabled;
  if (!enabled) return;
  history_.clear();
  history_.shrink_to_fit();
  history_capacity_ = max_entries;
  try {
    history_.reserve(max_entries);  // so that recording never allocates
  } catch (const std::exception&) {
    // An absurd max_entries grows on demand; record() copes if that fails.
  }
  history_next_ = 0;
}

void CachingAllocator::Impl::set_advisor(OutOfMemoryAdvisor advisor) {
  std::lock_guard lock(mutex_);
  advisor_ = std::move(advisor);
}

Backend::EventHandle CachingAllocator::Impl::take_event() {
  if (spare_events_.empty()) return backend_->create_event();
  Backend::EventHandle e = spare_events_.back();
  spare_events_.pop_back();
  return e;
}

void CachingAllocator::Impl::record_events(Block* block) {
  for (cudaStream_t s : block->stream_uses) {
    Backend::EventHandle e = take_event();
    try {
      backend_->record_event(e, s);
      pending_events_.emplace_back(e, block);
    } catch (...) {
      spare_events_.push_back(e);
      throw;
    }
    ++block->event_count;
  }
  block->stream_uses.clear();
}

void CachingAllocator::Impl::retire_event(Backend::EventHandle e, Block* block) {
  spare_events_.push_back(e);
  if (--block->event_count == 0) {
    if (options_.sanitize)
      quarantine(block);
    else
      release_to_pool(block);
  }
}

void CachingAllocator::Impl::process_events() {
  if (!deferred_.empty()) process_deferred();
  size_t kept = 0;
  for (size_t i = 0; i < pending_events_.size(); ++i) {
    auto [event, block] = pending_events_[i];
    if (backend_->query_event(event))
      retire_event(event, block);
    else
      pending_events_[kept++] = pending_events_[i];
  }
  pending_events_.resize(kept);
}

void CachingAllocator::Impl::synchronize_and_free_events() {
  ++stats_.num_sync_all_streams;
  if (!deferred_.empty()) process_deferred();
  while (!pending_events_.empty()) {
    auto [event, block] = pending_events_.back();
    backend_->synchronize_event(event);
    pending_events_.pop_back();
    retire_event(event, block);
  }
}

Block* CachingAllocator::Impl::allocate_memory(bool small, cudaStream_t stream, size_t size,
                                               size_t requested, PrivatePool* target) {
  const bool may_free = capturing_.empty();
  if (may_free && options_.garbage_collection_threshold > 0.0) garbage_collect();
  Block* b = try_allocate_memory(small, stream, size, target);
  if (b == nullptr && may_free && release_available_cached_blocks(small, stream, size))
    b = try_allocate_memory(small, stream, size, target);
  if (b == nullptr && may_free) {
    release_cached_blocks();
    ++stats_.num_alloc_retries;
    b = try_allocate_memory(small, stream, size, target);
  }
  if (b == nullptr) throw_out_of_memory(requested, size, segment_size(size), stream);
  return b;
}

Block* CachingAllocator::Impl::try_allocate_memory(bool small, cudaStream_t stream, size_t size,
                                                   PrivatePool* target) {
  if (expandable_) {
    bool no_address_space = false;
    Block* b = grow_expandable(small, stream, size, target, no_address_space);
    if (!no_address_space) return b;
  }
  return new_segment(small, stream, size, target);
}

Block* CachingAllocator::Impl::new_segment(bool small, cudaStream_t stream, size_t size,
                                           PrivatePool* target) {
  const size_t bytes = segment_size(size);
  void* ptr = backend_->raw_alloc(bytes);
  if (ptr == nullptr) return nullptr;
  auto* seg = new Segment;
  seg->base = reinterpret_cast<uintptr_t>(ptr);
  seg->size = seg->mapped = bytes;
  seg->order = ++segment_count_;
  seg->stream = stream;
  seg->small = small;
  seg->pool = target;
  Block* b = new_block();
  b->ptr = seg->base;
  b->size = bytes;
  b->stream = stream;
  b->small = small;
  b->segment = seg;
  b->prev = b->next = nullptr;
  seg->head = b;
  segments_.emplace(seg->base, seg);

  const size_t type = pool_type(small);
  increase(c_.segment, type, 1);
  increase(c_.reserved_bytes, type, bytes);
  if (bytes >= options_.max_split_size) stats_.oversize_segments.increase(1);
  ++stats_.num_device_alloc;
  if (history_on_)
    record(TraceAction::segment_alloc, seg->base, bytes, stream, AllocationTag::current());
  return b;
}

void CachingAllocator::Impl::release_segment(Block* block) {
  Segment* seg = block->segment;
  const size_t type = pool_type(seg->small);
  if (block->cached) cache_erase(block);
  backend_->raw_free(reinterpret_cast<void*>(seg->base));
  decrease(c_.segment, type, 1);
  decrease(c_.reserved_bytes, type, seg->size);
  if (seg->size >= options_.max_split_size) stats_.oversize_segments.decrease(1);
  ++stats_.num_device_free;
  segments_.erase(seg->base);
  if (history_on_) record(TraceAction::segment_free, seg->base, seg->size, seg->stream, nullptr);
  delete seg;
  recycle(block);
}

bool CachingAllocator::Impl::release_available_cached_blocks(bool small, cudaStream_t stream,
                                                             size_t size) {
  const size_t max_split = options_.max_split_size;
  if (max_split == AllocatorOptions::kNoMaxSplit) return false;
  BlockSet& blocks = pool(small);
  const size_t want = std::max(size, max_split);
  auto it = blocks.lower_bound(SearchKey{stream, want});
  if (it != blocks.end() && (*it)->stream == stream && whole_segment(*it)) {
    release_segment(*it);
    return true;
  }
  size_t released = 0;
  while (released < want && it != blocks.begin()) {
    Block* b = *--it;
    if (b->stream != stream || b->size < max_split) break;
    if (!whole_segment(b)) continue;
    released += b->size;
    it = std::next(it);  // release_segment erases b; `it` then points past it
    release_segment(b);
  }
  return released >= want;
}

void CachingAllocator::Impl::release_cached_blocks() {
  synchronize_and_free_events();
  if (options_.sanitize) flush_quarantine();
  for (auto* blocks : {&large_pool_, &small_pool_}) {
    for (auto it = blocks->begin(); it != blocks->end();) {
      Block* b = *it++;
      if (whole_segment(b)) release_segment(b);
    }
  }
  const std::vector<Segment*> expandables = expandables_;
  for (Segment* seg : expandables)
    if (seg->pool == nullptr) unmap_free_tail(seg);
}

void CachingAllocator::Impl::garbage_collect() {
  if (capacity_ == 0) capacity_ = backend_->memory_info().total;
  const auto threshold =
      static_cast<size_t>(options_.garbage_collection_threshold * static_cast<double>(capacity_));
  const auto reserved = static_cast<size_t>(c_.reserved_bytes.current());
  if (reserved <= threshold) return;
  const size_t target = reserved - threshold;
  auto age = [this](const Block* b) { return large_lookups_ - b->gc_base; };
  uint64_t total_age = 0;
  size_t candidates = 0;
  for (const Block* b : large_pool_) {
    if (!whole_segment(b)) continue;
    total_age += age(b);
    ++candidates;
  }
  size_t reclaimed = 0;
  bool freed = true;
  while (reclaimed < target && freed && candidates > 0) {
    // Each pass frees every candidate at least as old as the average (not
    // stopping at the target, so that collection is not triggered again soon).
    const double threshold_age = static_cast<double>(total_age) / static_cast<double>(candidates);
    freed = false;
    for (auto it = large_pool_.begin(); it != large_pool_.end();) {
      Block* b = *it++;
      if (!whole_segment(b) || static_cast<double>(age(b)) < threshold_age) continue;
      freed = true;
      reclaimed += b->size;
      total_age -= age(b);
      --candidates;
      release_segment(b);
    }
  }
}

void CachingAllocator::Impl::fill_gauges(MemoryStats& s) const {
  s.largest_free_block = {};
  s.address_space = {};
  auto scan = [&s](const BlockSet& set) {
    for (const Block* b : set) {
      const auto size = static_cast<int64_t>(b->size);
      auto& pool = s.largest_free_block[pool_type(b->small)];
      pool = std::max(pool, size);
      s.largest_free_block[kAggregate] = std::max(s.largest_free_block[kAggregate], size);
    }
  };
  scan(small_pool_);
  scan(large_pool_);
  for (const auto& [id, p] : private_pools_) {
    scan(p->small);
    scan(p->large);
  }
  for (const auto& [base, seg] : segments_) {
    s.address_space[kAggregate] += static_cast<int64_t>(seg->size);
    s.address_space[pool_type(seg->small)] += static_cast<int64_t>(seg->size);
  }
}

std::vector<TraceEntry> CachingAllocator::Impl::history_in_order() const {
  std::vector<TraceEntry> out;
  if (history_.empty()) return out;
  // The ring's oldest entry sits at history_next_ once it has wrapped.
  out.reserve(history_.size());
  const size_t start = history_.size() < history_capacity_ ? 0 : history_next_;
  for (size_t i = 0; i < history_.size(); ++i)
    out.push_back(history_[(start + i) % history_.size()]);
  return out;
}

void CachingAllocator::Impl::record(TraceAction action, uintptr_t address, size_t size,
                                    cudaStream_t stream, const char* tag, const char* scope,
                                    size_t requested) {
  TraceEntry e;
  e.action = action;
  e.address = address;
  e.size = size;
  e.requested_size = requested;
  e.stream = stream;
  e.time_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                  std::chrono::steady_clock::now() - start_)
                  .count();
  e.tag = tag;
  e.scope = scope;
  e.allocated_bytes = c_.allocated_bytes.current();
  e.reserved_bytes = c_.reserved_bytes.current();
  if (history_.size() < history_capacity_) {
    try {
      history_.push_back(e);
      return;
    } catch (const std::exception&) {
      // Out of host memory: the ring stops growing and wraps at its current size
      // (deallocate must not throw).
      history_capacity_ = history_.size();
      if (history_capacity_ == 0) return;
    }
  }
  history_[history_next_] = e;
  history_next_ = (history_next_ + 1) % history_capacity_;
}

// =================================================================================
// CachingAllocator

CachingAllocator::CachingAllocator(std::unique_ptr<Backend> backend, AllocatorOptions options)
    : impl_(std::make_unique<Impl>(std::move(backend), std::move(options))) {}

CachingAllocator::~CachingAllocator() = default;

void* CachingAllocator::allocate(size_t bytes, cudaStream_t stream) {
  void* p = impl_->allocate(bytes, stream);
  ember::detail::t_requested_bytes += bytes;
  return p;
}
void CachingAllocator::deallocate(void* ptr) noexcept {
  impl_->deallocate(ptr);
}
void CachingAllocator::record_stream(void* ptr, cudaStream_t stream) {
  impl_->record_stream(ptr, stream);
}
void CachingAllocator::empty_cache() {
  impl_->empty_cache();
}
CachingAllocator::PoolId CachingAllocator::create_pool() {
  return impl_->create_pool();
}
void CachingAllocator::begin_allocate_to_pool(PoolId pool, cudaStream_t stream) {
  impl_->begin_allocate_to_pool(pool, stream);
}
void CachingAllocator::end_allocate_to_pool(PoolId pool) {
  impl_->end_allocate_to_pool(pool);
}
void CachingAllocator::release_pool(PoolId pool, cudaStream_t stream) {
  impl_->release_pool(pool, stream);
}
bool CachingAllocator::capture_underway() const {
  return impl_->capture_underway();
}
MemoryStats CachingAllocator::stats() const {
  return impl_->stats(true);
}
std::map<std::string, int64_t> CachingAllocator::memory_stats() const {
  return impl_->stats(true).to_map();
}
int64_t CachingAllocator::memory_allocated() const {
  return impl_->current(&Counters::allocated_bytes);
}
int64_t CachingAllocator::max_memory_allocated() const {
  return impl_->peak(&Counters::allocated_bytes);
}
int64_t CachingAllocator::memory_reserved() const {
  return impl_->current(&Counters::reserved_bytes);
}
int64_t CachingAllocator::max_memory_reserved() const {
  return impl_->peak(&Counters::reserved_bytes);
}
void CachingAllocator::reset_peak_memory_stats() {
  impl_->reset_peak();
}
void CachingAllocator::reset_accumulated_memory_stats() {
  impl_->reset_accumulated();
}
std::string CachingAllocator::memory_summary(bool abbreviated) const {
  return impl_->summary(abbreviated);
}
MemorySnapshot CachingAllocator::memory_snapshot() const {
  return impl_->snapshot();
}
void CachingAllocator::record_memory_history(bool enabled, size_t max_entries) {
  impl_->record_history(enabled, max_entries);
}
void CachingAllocator::mark_step(const char* label) {
  impl_->mark_step(label);
}
void CachingAllocator::set_out_of_memory_advisor(OutOfMemoryAdvisor advisor) {
  impl_->set_advisor(std::move(advisor));
}
const AllocatorOptions& CachingAllocator::options() const {
  return impl_->options();
}
bool CachingAllocator::expandable_segments() const {
  return impl_->expandable();
}
std::vector<SanitizerReport> CachingAllocator::sanitizer_reports() const {
  return impl_->sanitizer_reports();
}
void CachingAllocator::check_sanitizer_reports() const {
  const std::vector<SanitizerReport> reports = impl_->sanitizer_reports();
  if (reports.empty()) return;
  std::string all;
  for (const SanitizerReport& r : reports) all += "\n  " + r.message;
  EMBER_FAIL(reports.size(), " memory error", reports.size() == 1 ? "" : "s",
             " caught by the allocator sanitizer:", all);
}
Backend& CachingAllocator::backend() {
  return impl_->backend();
}

}  // namespace ember::memory
