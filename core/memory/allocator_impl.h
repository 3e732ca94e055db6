// Internal to core/memory: CachingAllocator::Impl, the allocator's state and the
// declarations of its parts, each part defined in the file of its concept:
//   caching_allocator.cpp     construction, allocate and deallocate, statistics,
//                             snapshots and history, stream events, memory from the
//                             backend and giving it back (garbage collection)
//   allocator_pools.cpp       the free-block cache: best fit, split and merge; the
//                             private pools of CUDA graphs
//   allocator_expandable.cpp  expandable segments (pages mapped on demand)
//   allocator_sanitizer.cpp   the sanitizer (sanitize:True): guard bytes, poison,
//                             the quarantine
//   allocator_oom.cpp         the out-of-memory report
//   replay_advisor.cpp        the default out-of-memory advisor, from the replay side
// The block containers are in core/memory/allocator_blocks.h.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/base/error.h"
#include "core/memory/allocator_blocks.h"
#include "core/memory/caching_allocator.h"

namespace ember::memory {

using internal::AllocatorMutex;
using internal::Block;
using internal::BlockLess;
using internal::BlockSet;
using internal::Counter;
using internal::Counters;
using internal::NodeAllocator;
using internal::NodePool;
using internal::PointerMap;
using internal::PrivatePool;
using internal::round_up;
using internal::SearchKey;
using internal::Segment;
using internal::stream_key;

// The advisor of an allocator that has none of its own: the one
// set_default_out_of_memory_advisor set, else replay_out_of_memory_advisor. Defined
// on the replay side (replay_advisor.cpp), so the allocator does not include replay.h.
OutOfMemoryAdvisor default_out_of_memory_advisor();

class CachingAllocator::Impl {
 public:
  Impl(std::unique_ptr<Backend> backend, AllocatorOptions options);

  ~Impl();

  // -------------------------------------------------------------------------------
  // allocate / deallocate

  void* allocate(size_t bytes, cudaStream_t stream);

  void deallocate(void* ptr) noexcept;

  // The rest of a free: wait for the streams the block was used on, then cache it.
  void free_block(Block* block) noexcept;

  void record_stream(void* ptr, cudaStream_t stream);

  // -------------------------------------------------------------------------------
  // cache control and reports

  void empty_cache();

  // -------------------------------------------------------------------------------
  // private pools (CUDA graphs)

  PoolId create_pool();

  void begin_allocate_to_pool(PoolId id, cudaStream_t stream);

  void end_allocate_to_pool(PoolId id);

  void release_pool(PoolId id, cudaStream_t stream);

  bool capture_underway() const {
    std::lock_guard lock(mutex_);
    return !capturing_.empty();
  }

  MemoryStats stats(bool with_gauges) const;

  int64_t current(Counter Counters::*member) const {
    std::lock_guard lock(mutex_);
    return (c_.*member).current();
  }
  int64_t peak(Counter Counters::*member) const {
    std::lock_guard lock(mutex_);
    return (c_.*member).peak;
  }

  void reset_peak();

  void reset_accumulated();

  std::string summary(bool abbreviated) const;

  MemorySnapshot snapshot() const;

  void mark_step(const char* label);

  void record_history(bool enabled, size_t max_entries);

  void set_advisor(OutOfMemoryAdvisor advisor);

  const AllocatorOptions& options() const { return options_; }
  bool expandable() const { return expandable_; }
  Backend& backend() { return *backend_; }

  std::vector<SanitizerReport> sanitizer_reports() const;

 private:
  // -------------------------------------------------------------------------------
  // sanitizer mode (options_.sanitize): guards, poison, quarantine

  // The block for `bytes` plus both guards, handed out as usual, then filed under
  // the pointer the caller gets (past the front guard) with its guards written.
  void* sanitized_allocate(size_t bytes, cudaStream_t stream);

  // Compares `n` bytes at `offset` (from the block's start) with `expected`;
  // returns the first changed byte's offset and how many changed, or {-1, 0}.
  std::pair<int64_t, size_t> scan(const Block* b, size_t offset, size_t n, unsigned char expected);

  void report(SanitizerReport::Kind kind, const Block* b, int64_t first, size_t changed);

  void check_guards(const Block* b);

  // A freed block: guards checked, poisoned, kept out of the pool for a while.
  void quarantine(Block* block);

  // The oldest quarantined block: its poison checked, then cached for reuse.
  void leave_quarantine();

  void flush_quarantine();

 private:
  static size_t pool_type(bool small) { return small ? kSmallPool : kLargePool; }

  // Changes the pool's counter, and the aggregate's peak (always inlined: a round
  // trip makes about twenty of these).
  [[gnu::always_inline]] static void increase(Counter& a, size_t type, size_t n) {
    Counter::Pool& p = a.pools[type == kLargePool];
    p.current += static_cast<int64_t>(n);
    p.allocated += static_cast<int64_t>(n);
    p.peak = std::max(p.peak, p.current);
    a.peak = std::max(a.peak, a.current());
  }
  [[gnu::always_inline]] static void decrease(Counter& a, size_t type, size_t n) {
    a.pools[type == kLargePool].current -= static_cast<int64_t>(n);
  }
  static void update(Counter& a, size_t type, int64_t delta) {
    if (delta > 0)
      increase(a, type, static_cast<size_t>(delta));
    else if (delta < 0)
      decrease(a, type, static_cast<size_t>(-delta));
  }

  BlockSet& pool(bool small) { return small ? small_pool_ : large_pool_; }

  // The free-block set a block of this segment is cached in.
  BlockSet& pool_of(const Block* b) {
    if (PrivatePool* p = b->segment->pool) [[unlikely]]
      return b->small ? p->small : p->large;
    return pool(b->small);
  }

  PrivatePool* find_pool(PoolId id, const char* op);

  // The pool capturing `stream`, or null.
  PrivatePool* capturing_pool(cudaStream_t stream) const {
    for (PrivatePool* p : capturing_)
      if (p->stream == stream) return p;
    return nullptr;
  }

  // A general block freed during a capture: any graph capturing now may read or
  // write it on replay, so it stays pending (event_count) until every one of those
  // pools is released. Pools that begin capturing later cannot have used it.
  void hold(Block* block) noexcept;

  // A block used on other streams, freed while a capture is underway: its events
  // are recorded once no capture is (process_events, release_cached_blocks).
  void defer(Block* block) noexcept;

  void process_deferred();

  // A block that is not allocated, cached or pending, with no request, site or
  // stream uses; the caller sets where it is (ptr, size, stream, small, segment,
  // prev, next).
  Block* new_block() {
    if (spare_blocks_.empty()) return new Block;
    Block* b = spare_blocks_.back();
    spare_blocks_.pop_back();
    return b;
  }

  // Back to the spares. Every block that is recycled is already free, uncached
  // and not pending (event_count 0), with no stream uses; what a new owner would
  // otherwise read stale is reset here.
  void recycle(Block* b) {
    b->requested_size = 0;
    b->tag = b->scope = nullptr;
    spare_blocks_.push_back(b);
  }

  // --- the free-block sets. A cached block's node is at b->where. Its key (size,
  // address) may change in place when the change keeps the set ordered: a block
  // that shrank can only be out of order with its predecessor, one that grew only
  // with its successor, so one neighbour is compared and the node moved if needed.

  void cache_insert(Block* b) {
    b->gc_base = large_lookups_;
    b->where = pool_of(b).insert(b).first;
    b->cached = true;
  }

  void cache_erase(Block* b) {
    pool_of(b).erase(b->where);
    b->cached = false;
  }

  void reposition(BlockSet& set, Block* b) {
    auto node = set.extract(b->where);
    b->where = set.insert(std::move(node)).position;
  }

  void reposition_shrunk(Block* b) {
    BlockSet& set = pool_of(b);
    if (b->where != set.begin() && BlockLess{}(b, *std::prev(b->where))) reposition(set, b);
    b->gc_base = large_lookups_;
  }

  void reposition_grown(Block* b) {
    BlockSet& set = pool_of(b);
    auto next = std::next(b->where);
    if (next != set.end() && BlockLess{}(*next, b)) reposition(set, b);
    b->gc_base = large_lookups_;
  }

  // An expandable segment's last block when it is free: growing the segment
  // extends it, so as a best fit it counts as larger than it is.
  static bool growable_tail(const Block* b) {
    return b->next == nullptr && b->segment->expandable && b->segment->mapped < b->segment->size;
  }

  // The best-fitting cached block, still in its pool (`target`, or the general
  // cache when null), or nullptr.
  Block* take_cached_block(bool small, cudaStream_t stream, size_t size, PrivatePool* target);

  bool should_split(const Block* b, size_t size) const {
    const size_t remaining = b->size - size;
    if (b->small || b->segment->expandable) return remaining >= kMinBlockSize;
    return size < options_.max_split_size && remaining > kSmallSize;
  }

  // Takes `block` out of the cache (if cached), splits off what the request does
  // not need (the remainder stays cached, in place), marks it allocated and counts it.
  void* hand_out(Block* block, size_t size, size_t requested);

  // Unlinks `b` from its segment's list (its neighbours now meet) and recycles it.
  [[gnu::always_inline]] void unlink(Block* b) {
    if (b->prev != nullptr)
      b->prev->next = b->next;
    else
      b->segment->head = b->next;
    if (b->next != nullptr) b->next->prev = b->prev;
    recycle(b);
  }

  // A block nobody uses any more: merged with its cached neighbours and cached.
  // When a neighbour is cached, the merged block takes that neighbour's node.
  void release_to_pool(Block* block);

  Backend::EventHandle take_event();

  // On free of a block used on other streams: it waits for an event per stream.
  void record_events(Block* block);

  void retire_event(Backend::EventHandle e, Block* block);

  // Records the events deferred during captures, then caches every block whose
  // events have all completed.
  void process_events();

  void synchronize_and_free_events();

  // -------------------------------------------------------------------------------
  // memory from the backend

  // A block of at least `size` bytes from new memory, not cached. The steps, as
  // PyTorch's malloc: garbage collection (if set), then the backend; if that fails,
  // return cached oversize blocks just large enough and try again; if that fails,
  // return everything cached and try once more (num_alloc_retries). Then
  // OutOfMemoryError. While a graph captures, nothing is returned: the capture
  // forbids frees and waits, and a replay may use what any graph was given.
  Block* allocate_memory(bool small, cudaStream_t stream, size_t size, size_t requested,
                         PrivatePool* target);

  Block* try_allocate_memory(bool small, cudaStream_t stream, size_t size, PrivatePool* target);

  // A fresh ordinary segment as one block, or nullptr when the backend has no memory.
  Block* new_segment(bool small, cudaStream_t stream, size_t size, PrivatePool* target);

  // The expandable segment of (stream, pool kind, graph pool) that can still grow,
  // reserving one when there is none; null (with `no_address_space`) when address
  // space cannot be had.
  Segment* expandable_segment(bool small, cudaStream_t stream, PrivatePool* target, size_t need,
                              bool& no_address_space);

  static Block* last_block(const Segment* seg) {
    Block* b = seg->head;
    while (b != nullptr && b->next != nullptr) b = b->next;
    return b;
  }

  // Maps the pages a request needs at the end of its expandable segment: what the
  // free tail block lacks, rounded up to whole pages. The new memory extends the
  // free tail (or becomes a new last block); returns that block, uncached, or
  // nullptr when the backend has no memory.
  Block* grow_expandable(bool small, cudaStream_t stream, size_t size, PrivatePool* target,
                         bool& no_address_space);

  // Gives back the whole free pages at the end of an expandable segment (all the
  // pages after the last block in use), and the segment once nothing is mapped.
  void unmap_free_tail(Segment* seg);

  // Returns the address space of an expandable segment with nothing mapped.
  void release_expandable(Segment* seg);

  // Returns an ordinary segment that is one cached block (the block leaves its set).
  void release_segment(Block* block);

  static bool whole_segment(const Block* b) { return !b->is_split() && !b->segment->expandable; }

  // PyTorch's first answer to a failed allocation (release_available_cached_blocks):
  // with max_split_size set, return the smallest cached oversize block on this
  // stream that is at least as large as the request (or max_split_size); failing
  // that, oversize blocks from the largest down until as many bytes are returned.
  // True when enough was returned.
  bool release_available_cached_blocks(bool small, cudaStream_t stream, size_t size);

  // Returns every cached ordinary segment that is one free block and every whole
  // free page at the end of an expandable segment, after waiting for all events.
  void release_cached_blocks();

  // PyTorch's garbage_collect_cached_blocks. Only whole ordinary segments cached in
  // the general large pool are candidates; a block's age is the number of
  // large-pool lookups since it was cached.
  void garbage_collect();

  // -------------------------------------------------------------------------------
  // reports

  // The largest cached free block and the address space held, per pool type.
  void fill_gauges(MemoryStats& s) const;

  void warn_no_expandable(const std::string& why);

  std::vector<TraceEntry> history_in_order() const;

  // The out-of-memory message: PyTorch's sentence, then the largest free block,
  // the allocation sites holding the most memory and, when an advisor is set, its
  // suggestion. At most 4 + kOomSites lines.
  std::string out_of_memory_message(const OutOfMemoryRequest& r, bool capturing) const;

  [[noreturn]] void throw_out_of_memory(size_t requested, size_t rounded, size_t allocation,
                                        cudaStream_t stream);

  void record(TraceAction action, uintptr_t address, size_t size, cudaStream_t stream,
              const char* tag, const char* scope = nullptr, size_t requested = 0);

  static constexpr size_t kOomSites = 5;  // allocation sites the OOM message names

  mutable AllocatorMutex mutex_;
  std::unique_ptr<Backend> backend_;
  const AllocatorOptions options_;
  const std::chrono::steady_clock::time_point start_;
  MemoryStats stats_;  // all but its StatArrays, which live in c_
  Counters c_;

  // Declared before the pools so it outlives them: their nodes come from here.
  NodePool node_pool_;
  BlockSet small_pool_{NodeAllocator<Block*>(&node_pool_)};
  BlockSet large_pool_{NodeAllocator<Block*>(&node_pool_)};
  PointerMap allocated_;
  std::map<uintptr_t, Segment*> segments_;  // by base address
  std::vector<Block*> spare_blocks_;
  std::vector<std::pair<Backend::EventHandle, Block*>> pending_events_;
  std::vector<Backend::EventHandle> spare_events_;
  std::vector<Block*> deferred_;  // used on other streams, freed during a capture
  uint64_t large_lookups_ = 0;    // general large-pool lookups: garbage collection's clock
  uint64_t segment_count_ = 0;    // segments ever created (Segment::order)
  size_t capacity_ = 0;           // backend capacity, read once for garbage collection

  // Expandable segments (options_.expandable_segments, where the backend can).
  const bool plain_rounding_ =
      std::all_of(options_.roundup_power2_divisions.begin(),
                  options_.roundup_power2_divisions.end(), [](uint32_t d) { return d <= 1; });
  bool expandable_ = false;
  bool warned_expandable_ = false;
  size_t page_ = 0;         // the backend's granularity
  size_t reservation_ = 0;  // address space per segment, chosen on first use
  std::vector<Segment*> expandables_;

  // Private pools; declared after node_pool_, whose nodes their sets use.
  std::map<PoolId, std::unique_ptr<PrivatePool>> private_pools_;
  std::vector<PrivatePool*> capturing_;  // pools between begin_ and end_allocate_to_pool
  PoolId next_pool_id_ = 1;

  // Sanitizer mode only.
  std::deque<Block*> quarantine_;
  size_t quarantine_bytes_ = 0;
  std::vector<SanitizerReport> reports_;
  std::vector<unsigned char> scratch_;

  OutOfMemoryAdvisor advisor_;
  bool history_on_ = false;
  std::vector<TraceEntry> history_;
  size_t history_capacity_ = 0;
  size_t history_next_ = 0;  // next slot to overwrite once the ring is full
};

}  // namespace ember::memory
