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
#include "core/memory/replay.h"

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

size_t round_up(size_t n, size_t unit) {
  return (n + unit - 1) / unit * unit;
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
// Internals

namespace {

struct Block;
struct Segment;
struct PrivatePool;

struct SearchKey {
  cudaStream_t stream;
  size_t size;
};

inline uintptr_t stream_key(cudaStream_t s) {
  return reinterpret_cast<uintptr_t>(s);
}

// Orders cached blocks by (stream, size, segment age, address), so lower_bound on
// (stream, size) finds the best fit on that stream: the first block not less than
// the key. Strict (`<` throughout, never `<=`), so it is a strict weak ordering
// and a key sorts as a block of its size at address 0 would.
struct BlockLess {
  using is_transparent = void;
  bool operator()(const Block* a, const Block* b) const;
  bool operator()(const Block* a, const SearchKey& k) const;
};

// Recycles the nodes of the free-block sets: a node erased from a set is kept on
// an intrusive list and handed to the next insert, so a cache hit never reaches
// the heap. Used only under the allocator's lock.
class NodePool {
 public:
  NodePool() = default;
  NodePool(const NodePool&) = delete;
  NodePool& operator=(const NodePool&) = delete;
  ~NodePool() {
    while (free_ != nullptr) ::operator delete(std::exchange(free_, free_->next));
  }
  void* get(size_t bytes) {
    if (bytes == node_bytes_ && free_ != nullptr) return std::exchange(free_, free_->next);
    return ::operator new(bytes);
  }
  void put(void* p, size_t bytes) noexcept {
    if (node_bytes_ == 0) node_bytes_ = bytes;  // the sets allocate one node size only
    if (bytes != node_bytes_ || bytes < sizeof(FreeNode)) {
      ::operator delete(p);
      return;
    }
    free_ = new (p) FreeNode{free_};
  }

 private:
  struct FreeNode {
    FreeNode* next;
  };
  FreeNode* free_ = nullptr;
  size_t node_bytes_ = 0;
};

template <typename T>
struct NodeAllocator {
  using value_type = T;
  NodePool* pool;
  explicit NodeAllocator(NodePool* p) noexcept : pool(p) {}
  template <typename U>
  NodeAllocator(const NodeAllocator<U>& other) noexcept : pool(other.pool) {}
  T* allocate(size_t n) {
    return static_cast<T*>(n == 1 ? pool->get(sizeof(T)) : ::operator new(n * sizeof(T)));
  }
  void deallocate(T* p, size_t n) noexcept {
    if (n == 1)
      pool->put(p, sizeof(T));
    else
      ::operator delete(p);
  }
  template <typename U>
  bool operator==(const NodeAllocator<U>& other) const noexcept {
    return pool == other.pool;
  }
};

using BlockSet = std::set<Block*, BlockLess, NodeAllocator<Block*>>;

// A piece of a segment: handed out, pending free, or cached in its pool.
struct Block {
  uintptr_t ptr = 0;
  size_t size = 0;
  size_t requested_size = 0;
  cudaStream_t stream = nullptr;
  Block* prev = nullptr;  // neighbours within the segment, by address
  Block* next = nullptr;
  Segment* segment = nullptr;
  bool allocated = false;
  bool small = false;
  bool cached = false;  // in its pool's set, at `where`
  int event_count = 0;  // events (or pools, or the quarantine) still to release it
  const char* tag = nullptr;
  const char* scope = nullptr;
  uint64_t gc_base = 0;  // large-pool lookups when it was cached (garbage collection age)
  // Its node while cached: a cache hit and a free change a block's size in place
  // and move the node only when the order needs it (see reposition_*).
  BlockSet::iterator where{};
  std::vector<cudaStream_t> stream_uses;  // other streams it was recorded on

  bool is_split() const { return prev != nullptr || next != nullptr; }
};

// A range of memory blocks are carved from. An ordinary segment is one backend
// allocation, all of it memory (mapped == size). An expandable segment is a
// reservation of address space (size) of which only the first `mapped` bytes,
// whole pages, are backed by memory; its blocks tile exactly that prefix.
struct Segment {
  uintptr_t base = 0;
  size_t size = 0;
  size_t mapped = 0;
  cudaStream_t stream = nullptr;
  bool small = false;
  bool expandable = false;
  Block* head = nullptr;        // the lowest-addressed block
  PrivatePool* pool = nullptr;  // the graph pool it belongs to; null: the general cache
  // Its creation number: equally good fits go to the oldest segment, then the
  // lowest address in it, so the choice does not depend on where the backend put
  // the segments (meta predictions, core/meta.h, rely on it).
  uint64_t order = 0;
};

bool BlockLess::operator()(const Block* a, const Block* b) const {
  if (a->stream != b->stream) return stream_key(a->stream) < stream_key(b->stream);
  if (a->size != b->size) return a->size < b->size;
  if (a->segment->order != b->segment->order) return a->segment->order < b->segment->order;
  return a->ptr < b->ptr;
}
bool BlockLess::operator()(const Block* a, const SearchKey& k) const {
  if (a->stream != k.stream) return stream_key(a->stream) < stream_key(k.stream);
  return a->size < k.size;
}

// A CUDA graph's memory: the free blocks of its own segments, and the general
// blocks freed while it captured (held until it is released).
struct PrivatePool {
  explicit PrivatePool(NodePool* nodes)
      : small(NodeAllocator<Block*>(nodes)), large(NodeAllocator<Block*>(nodes)) {}
  BlockSet small;
  BlockSet large;
  bool capturing = false;
  cudaStream_t stream = nullptr;  // the stream it captures
  std::vector<Block*> held;
};

// A StatArray as the hot path keeps it: per pool only the current value, peak and
// total added, with `freed` implied (base + allocated - current, base being the
// current value at the last reset_accumulated) and the aggregate's current value
// and totals the pools' sums; only the aggregate's peak is its own. Stat's four
// numbers for three pool types are thus kept by two adds and a max on increase
// and one subtraction on decrease.
struct Counter {
  struct Pool {
    int64_t current = 0;
    int64_t peak = 0;
    int64_t allocated = 0;
    int64_t base = 0;
  };
  Pool pools[2];     // [0] small pool, [1] large pool
  int64_t peak = 0;  // of the aggregate

  int64_t current() const { return pools[0].current + pools[1].current; }
  void reset_peak() {
    for (Pool& p : pools) p.peak = p.current;
    peak = current();
  }
  void reset_accumulated() {
    for (Pool& p : pools) {
      p.allocated = 0;
      p.base = p.current;
    }
  }
  StatArray to_stat_array() const {
    StatArray a;
    for (size_t i = 0; i < 2; ++i) {
      const Pool& p = pools[i];
      Stat& s = a[i == 0 ? kSmallPool : kLargePool];
      s = Stat{p.current, p.peak, p.allocated, p.base + p.allocated - p.current};
      a[kAggregate].current += s.current;
      a[kAggregate].allocated += s.allocated;
      a[kAggregate].freed += s.freed;
    }
    a[kAggregate].peak = peak;
    return a;
  }
};

// MemoryStats' nine StatArrays, as Counters.
struct Counters {
  Counter allocation, segment, active, inactive_split, allocated_bytes, reserved_bytes,
      active_bytes, inactive_split_bytes, requested_bytes;

  std::array<Counter*, 9> all() {
    return {&allocation,      &segment,        &active,       &inactive_split,
            &allocated_bytes, &reserved_bytes, &active_bytes, &inactive_split_bytes,
            &requested_bytes};
  }
  void write_to(MemoryStats& s) const {
    s.allocation = allocation.to_stat_array();
    s.segment = segment.to_stat_array();
    s.active = active.to_stat_array();
    s.inactive_split = inactive_split.to_stat_array();
    s.allocated_bytes = allocated_bytes.to_stat_array();
    s.reserved_bytes = reserved_bytes.to_stat_array();
    s.active_bytes = active_bytes.to_stat_array();
    s.inactive_split_bytes = inactive_split_bytes.to_stat_array();
    s.requested_bytes = requested_bytes.to_stat_array();
  }
};

// Live allocations by address: open addressing with linear probing, so a lookup
// is a multiply and a short scan, and steady state never allocates.
class PointerMap {
 public:
  PointerMap() { rebuild(kInitialSlots); }

  void insert(uintptr_t key, Block* value) {
    if ((count_ + 1) * 2 > slots_.size()) rebuild(slots_.size() * 2);
    size_t i = home(key);
    while (slots_[i].key != 0) i = (i + 1) & mask_;
    slots_[i] = {key, value};
    ++count_;
  }

  Block* find(uintptr_t key) const {
    for (size_t i = home(key);; i = (i + 1) & mask_) {
      if (slots_[i].key == key) return slots_[i].value;
      if (slots_[i].key == 0) return nullptr;
    }
  }

  // Removes and returns the entry, or nullptr. Later entries of the probe run
  // shift back into the hole, so no tombstones accumulate.
  Block* erase(uintptr_t key) {
    size_t i = home(key);
    while (slots_[i].key != key) {
      if (slots_[i].key == 0) return nullptr;
      i = (i + 1) & mask_;
    }
    Block* value = slots_[i].value;
    for (size_t j = (i + 1) & mask_; slots_[j].key != 0; j = (j + 1) & mask_) {
      size_t h = home(slots_[j].key);
      bool stays = i <= j ? (i < h && h <= j) : (i < h || h <= j);
      if (stays) continue;
      slots_[i] = slots_[j];
      i = j;
    }
    slots_[i] = {};
    --count_;
    return value;
  }

 private:
  static constexpr size_t kInitialSlots = 1024;
  struct Slot {
    uintptr_t key = 0;  // 0: empty (no allocation lives at address 0)
    Block* value = nullptr;
  };

  size_t home(uintptr_t key) const {
    return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_);
  }

  void rebuild(size_t slots) {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(slots, Slot{});
    mask_ = slots - 1;
    shift_ = 64 - static_cast<int>(std::bit_width(slots) - 1);
    count_ = 0;
    for (const Slot& s : old)
      if (s.key != 0) insert(s.key, s.value);
  }

  std::vector<Slot> slots_;
  size_t mask_ = 0;
  int shift_ = 64;
  size_t count_ = 0;
};

// The allocator's lock, taken twice per allocate/free round trip, where a locked
// instruction is the largest single cost (about 12-25 ns each on the machines
// measured): so one per lock() and none per unlock(), a plain release store.
// The price is that a waiter cannot be woken: it spins briefly, then yields, then
// sleeps in short naps, which suits a lock held for a few hundred nanoseconds,
// rarely contended, and only now and then for long (a cudaMalloc, an event wait).
class AllocatorMutex {
 public:
  void lock() noexcept {
    if (!locked_.exchange(true, std::memory_order_acquire)) [[likely]]
      return;
    lock_contended();
  }
  void unlock() noexcept { locked_.store(false, std::memory_order_release); }

 private:
  void lock_contended() noexcept {
    for (unsigned tries = 0;; ++tries) {
      while (locked_.load(std::memory_order_relaxed)) {
        if (tries < 64) {
#if defined(__x86_64__) || defined(__i386__)
          __builtin_ia32_pause();
#endif
        } else if (tries < 1024) {
          std::this_thread::yield();
        } else {
          std::this_thread::sleep_for(std::chrono::microseconds(20));
        }
        ++tries;
      }
      if (!locked_.exchange(true, std::memory_order_acquire)) return;
    }
  }

  std::atomic<bool> locked_{false};
};

std::mutex g_default_advisor_mutex;
OutOfMemoryAdvisor g_default_advisor;  // under g_default_advisor_mutex

}  // namespace

void set_default_out_of_memory_advisor(OutOfMemoryAdvisor advisor) {
  std::lock_guard lock(g_default_advisor_mutex);
  g_default_advisor = std::move(advisor);
}

class CachingAllocator::Impl {
 public:
  Impl(std::unique_ptr<Backend> backend, AllocatorOptions options)
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

  ~Impl() {
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

  // -------------------------------------------------------------------------------
  // allocate / deallocate

  void* allocate(size_t bytes, cudaStream_t stream) {
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

  void deallocate(void* ptr) noexcept {
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

  // The rest of a free: wait for the streams the block was used on, then cache it.
  void free_block(Block* block) noexcept {
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

  void record_stream(void* ptr, cudaStream_t stream) {
    std::lock_guard lock(mutex_);
    Block* block = allocated_.find(reinterpret_cast<uintptr_t>(ptr));
    EMBER_CHECK(block != nullptr, "record_stream: ", ptr,
                " is not a live allocation of this allocator");
    if (stream == block->stream) return;
    auto& uses = block->stream_uses;
    if (std::find(uses.begin(), uses.end(), stream) == uses.end()) uses.push_back(stream);
  }

  // -------------------------------------------------------------------------------
  // cache control and reports

  void empty_cache() {
    std::lock_guard lock(mutex_);
    EMBER_CHECK(capturing_.empty(),
                "empty_cache: cannot return cached memory while a CUDA graph "
                "is being captured (cuda::Graph::capture); call it before or after the capture");
    release_cached_blocks();
  }

  // -------------------------------------------------------------------------------
  // private pools (CUDA graphs)

  PoolId create_pool() {
    std::lock_guard lock(mutex_);
    const PoolId id = next_pool_id_++;
    private_pools_.emplace(id, std::make_unique<PrivatePool>(&node_pool_));
    return id;
  }

  void begin_allocate_to_pool(PoolId id, cudaStream_t stream) {
    std::lock_guard lock(mutex_);
    PrivatePool* p = find_pool(id, "begin_allocate_to_pool");
    EMBER_CHECK(!options_.sanitize,
                "CUDA graph capture: not available in the allocator's "
                "sanitizer mode (",
                kAllocConfEnvVar,
                "=sanitize:True), whose checks read "
                "device memory synchronously");
    EMBER_CHECK(!p->capturing, "begin_allocate_to_pool: pool ", id, " is already capturing");
    EMBER_CHECK(capturing_pool(stream) == nullptr, "begin_allocate_to_pool: stream ",
                static_cast<void*>(stream), " already allocates to another pool");
    capturing_.reserve(capturing_.size() + 1);
    p->capturing = true;
    p->stream = stream;
    capturing_.push_back(p);
  }

  void end_allocate_to_pool(PoolId id) {
    std::lock_guard lock(mutex_);
    PrivatePool* p = find_pool(id, "end_allocate_to_pool");
    if (!p->capturing) return;
    p->capturing = false;
    capturing_.erase(std::find(capturing_.begin(), capturing_.end(), p));
  }

  void release_pool(PoolId id, cudaStream_t stream) {
    std::lock_guard lock(mutex_);
    PrivatePool* p = find_pool(id, "release_pool");
    EMBER_CHECK(!p->capturing, "release_pool: pool ", id, " is still capturing");
    std::vector<Block*> cached(p->small.begin(), p->small.end());
    cached.insert(cached.end(), p->large.begin(), p->large.end());
    std::vector<Block*> held = std::move(p->held);
    // Nothing below throws: the pool is gone in one piece.
    p->small.clear();
    p->large.clear();
    for (Block* b : cached) b->cached = false;
    for (auto& [base, seg] : segments_) {
      if (seg->pool != p) continue;
      seg->pool = nullptr;
      seg->stream = stream;
      for (Block* b = seg->head; b != nullptr; b = b->next) b->stream = stream;
    }
    for (Block* b : cached) cache_insert(b);
    private_pools_.erase(id);
    // A general block freed during this capture was held by every pool capturing
    // at that moment; it is free once the last of them is released.
    for (Block* b : held)
      if (--b->event_count == 0) free_block(b);
  }

  bool capture_underway() const {
    std::lock_guard lock(mutex_);
    return !capturing_.empty();
  }

  MemoryStats stats(bool with_gauges) const {
    std::lock_guard lock(mutex_);
    MemoryStats s = stats_;
    c_.write_to(s);
    if (with_gauges) fill_gauges(s);
    return s;
  }

  int64_t current(Counter Counters::*member) const {
    std::lock_guard lock(mutex_);
    return (c_.*member).current();
  }
  int64_t peak(Counter Counters::*member) const {
    std::lock_guard lock(mutex_);
    return (c_.*member).peak;
  }

  void reset_peak() {
    std::lock_guard lock(mutex_);
    stats_.reset_peak();
    for (Counter* c : c_.all()) c->reset_peak();
  }

  void reset_accumulated() {
    std::lock_guard lock(mutex_);
    stats_.reset_accumulated();
    for (Counter* c : c_.all()) c->reset_accumulated();
  }

  std::string summary(bool abbreviated) const {
    std::string title = backend_->is_host() ? std::string("ember CPU memory summary")
                                            : "ember CUDA memory summary, device ID " +
                                                  std::to_string(backend_->device());
    const MemoryStats s = stats(true);
    return format_memory_summary(s, title, backend_->is_host(), abbreviated) +
           format_fragmentation_line(s) + "\n";
  }

  MemorySnapshot snapshot() const {
    std::lock_guard lock(mutex_);
    MemorySnapshot snap;
    snap.device = backend_->device();
    snap.host = backend_->is_host();
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

  void mark_step(const char* label) {
    std::lock_guard lock(mutex_);
    if (history_on_) record(TraceAction::step, 0, 0, nullptr, label);
  }

  void record_history(bool enabled, size_t max_entries) {
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

  void set_advisor(OutOfMemoryAdvisor advisor) {
    std::lock_guard lock(mutex_);
    advisor_ = std::move(advisor);
  }

  const AllocatorOptions& options() const { return options_; }
  bool expandable() const { return expandable_; }
  Backend& backend() { return *backend_; }

  std::vector<SanitizerReport> sanitizer_reports() const {
    std::lock_guard lock(mutex_);
    return reports_;
  }

 private:
  // -------------------------------------------------------------------------------
  // sanitizer mode (options_.sanitize): guards, poison, quarantine

  // The block for `bytes` plus both guards, handed out as usual, then filed under
  // the pointer the caller gets (past the front guard) with its guards written.
  void* sanitized_allocate(size_t bytes, cudaStream_t stream) {
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

  // Compares `n` bytes at `offset` (from the block's start) with `expected`;
  // returns the first changed byte's offset and how many changed, or {-1, 0}.
  std::pair<int64_t, size_t> scan(const Block* b, size_t offset, size_t n, unsigned char expected) {
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

  void report(SanitizerReport::Kind kind, const Block* b, int64_t first, size_t changed) {
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
                                " of a ", r.requested_size, "-byte block at 0x", std::hex,
                                r.address, std::dec, " allocated at ", site);
    std::fprintf(stderr, "%s\n", r.message.c_str());
    try {
      reports_.push_back(std::move(r));
    } catch (const std::exception&) {
      // Out of host memory: the report was printed; keeping it is best effort.
    }
  }

  void check_guards(const Block* b) {
    auto [under, under_n] = scan(b, 0, kGuardFront, kGuardByte);
    if (under_n > 0) report(SanitizerReport::Kind::underrun, b, under, under_n);
    const size_t end = kGuardFront + b->requested_size;
    auto [over, over_n] = scan(b, end, b->size - end, kGuardByte);
    if (over_n > 0) report(SanitizerReport::Kind::overrun, b, over, over_n);
  }

  // A freed block: guards checked, poisoned, kept out of the pool for a while.
  void quarantine(Block* block) {
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

  // The oldest quarantined block: its poison checked, then cached for reuse.
  void leave_quarantine() {
    Block* b = quarantine_.front();
    quarantine_.pop_front();
    quarantine_bytes_ -= b->size;
    b->event_count = 0;
    try {
      auto [first, changed] = scan(b, kGuardFront, b->requested_size, kPoisonByte);
      if (changed > 0) report(SanitizerReport::Kind::write_after_free, b, first, changed);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "ember allocator sanitizer: cannot check a freed block (%s)\n",
                   e.what());
    }
    release_to_pool(b);
  }

  void flush_quarantine() {
    while (!quarantine_.empty()) leave_quarantine();
  }

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

  PrivatePool* find_pool(PoolId id, const char* op) {
    auto it = private_pools_.find(id);
    EMBER_CHECK(it != private_pools_.end(), op, ": no private pool ", id);
    return it->second.get();
  }

  // The pool capturing `stream`, or null.
  PrivatePool* capturing_pool(cudaStream_t stream) const {
    for (PrivatePool* p : capturing_)
      if (p->stream == stream) return p;
    return nullptr;
  }

  // A general block freed during a capture: any graph capturing now may read or
  // write it on replay, so it stays pending (event_count) until every one of those
  // pools is released. Pools that begin capturing later cannot have used it.
  void hold(Block* block) noexcept {
    for (PrivatePool* p : capturing_) {
      try {
        p->held.push_back(block);
        ++block->event_count;
      } catch (const std::exception&) {
        // Out of host memory: the pools that took it hold it; if none could, the
        // lesser harm is to cache it now.
      }
    }
    if (block->event_count == 0) release_to_pool(block);
  }

  // A block used on other streams, freed while a capture is underway: its events
  // are recorded once no capture is (process_events, release_cached_blocks).
  void defer(Block* block) noexcept {
    try {
      deferred_.push_back(block);
      block->event_count = 1;  // shown as pending free, never merged meanwhile
    } catch (const std::exception&) {
      block->stream_uses.clear();  // out of host memory: cache it without waiting
      release_to_pool(block);
    }
  }

  void process_deferred() {
    std::vector<Block*> blocks = std::move(deferred_);
    deferred_.clear();
    for (Block* b : blocks) {
      b->event_count = 0;
      free_block(b);
    }
  }

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
  Block* take_cached_block(bool small, cudaStream_t stream, size_t size, PrivatePool* target) {
    BlockSet& blocks = target == nullptr ? pool(small) : small ? target->small : target->large;
    if (!small && target == nullptr) ++large_lookups_;
    auto it = blocks.lower_bound(SearchKey{stream, size});
    if (it == blocks.end() || (*it)->stream != stream) return nullptr;
    Block* b = *it;
    if (b->segment->expandable) [[unlikely]] {
      // As PyTorch: prefer any other fitting block to a segment's growable tail,
      // which is as good as fresh memory.
      for (auto next = std::next(it);
           growable_tail(b) && next != blocks.end() && (*next)->stream == stream; ++next)
        if (!growable_tail(*next)) b = *next;
      return b;  // max_split_size does not apply inside expandable segments
    }
    const size_t max_split = options_.max_split_size;
    // An unsplittable block would waste its excess on a normal request...
    if (size < max_split && b->size >= max_split) return nullptr;
    // ...and an oversize request may round up only so far.
    if (size >= max_split && b->size - size >= options_.max_non_split_rounding) return nullptr;
    return b;
  }

  bool should_split(const Block* b, size_t size) const {
    const size_t remaining = b->size - size;
    if (b->small || b->segment->expandable) return remaining >= kMinBlockSize;
    return size < options_.max_split_size && remaining > kSmallSize;
  }

  // Takes `block` out of the cache (if cached), splits off what the request does
  // not need (the remainder stays cached, in place), marks it allocated and counts it.
  void* hand_out(Block* block, size_t size, size_t requested) {
    const size_t type = pool_type(block->small);
    const bool counts_split =
        !block->segment->expandable;  // as PyTorch: see format_fragmentation_line
    const bool was_split = block->is_split();
    if (should_split(block, size)) {
      // The allocation takes the front; the original block becomes the remainder
      // and keeps its place in the set when the order allows.
      Block* rest = block;
      block = new_block();
      block->ptr = rest->ptr;
      block->size = size;
      block->stream = rest->stream;
      block->small = rest->small;
      block->segment = rest->segment;
      block->prev = rest->prev;
      if (block->prev != nullptr)
        block->prev->next = block;
      else
        block->segment->head = block;
      block->next = rest;
      rest->prev = block;
      rest->ptr += size;
      rest->size -= size;
      if (rest->cached)
        reposition_shrunk(rest);
      else
        cache_insert(rest);
      if (counts_split) {
        if (was_split) {
          // An inactive split block shrank by `size`.
          decrease(c_.inactive_split_bytes, type, size);
        } else {
          // An unsplit block became a split, leaving an inactive remainder.
          increase(c_.inactive_split_bytes, type, rest->size);
          increase(c_.inactive_split, type, 1);
        }
      }
    } else {
      if (block->cached) cache_erase(block);
      if (was_split && counts_split) {
        // A whole inactive split block becomes active.
        decrease(c_.inactive_split_bytes, type, block->size);
        decrease(c_.inactive_split, type, 1);
      }
    }
    block->allocated = true;
    block->requested_size = requested;
    block->tag = AllocationTag::current();
    block->scope = AllocationScope::current();
    allocated_.insert(block->ptr, block);

    increase(c_.allocation, type, 1);
    increase(c_.allocated_bytes, type, block->size);
    increase(c_.active, type, 1);
    increase(c_.active_bytes, type, block->size);
    increase(c_.requested_bytes, type, requested);
    if (block->size >= options_.max_split_size) stats_.oversize_allocations.increase(1);
    if (history_on_)
      record(TraceAction::alloc, block->ptr, block->size, block->stream, block->tag, block->scope,
             requested);
    return reinterpret_cast<void*>(block->ptr);
  }

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
  void release_to_pool(Block* block) {
    if (history_on_)
      record(TraceAction::free_completed, block->ptr, block->size, block->stream, block->tag,
             block->scope, block->requested_size);
    const size_t type = pool_type(block->small);
    const size_t original_size = block->size;
    const size_t requested = block->requested_size;
    const bool counts_split = !block->segment->expandable;
    Block* prev = block->prev;
    Block* next = block->next;
    const bool merge_prev = prev != nullptr && prev->cached;
    const bool merge_next = next != nullptr && next->cached;
    int64_t split_blocks = 0;
    int64_t split_bytes = 0;
    Block* merged = block;
    if (merge_prev && merge_next) {
      split_blocks = -2;
      split_bytes = -static_cast<int64_t>(prev->size + next->size);
      prev->size += block->size + next->size;
      cache_erase(next);
      unlink(block);
      unlink(next);
      merged = prev;
      reposition_grown(prev);
    } else if (merge_prev) {
      split_blocks = -1;
      split_bytes = -static_cast<int64_t>(prev->size);
      prev->size += block->size;
      unlink(block);
      merged = prev;
      reposition_grown(prev);
    } else if (merge_next) {
      split_blocks = -1;
      split_bytes = -static_cast<int64_t>(next->size);
      next->ptr = block->ptr;
      next->size += block->size;
      unlink(block);
      merged = next;
      reposition_grown(next);
    } else {
      block->requested_size = 0;
      block->tag = nullptr;
      block->scope = nullptr;
      cache_insert(block);
    }
    if (merged->is_split()) {
      split_blocks += 1;
      split_bytes += static_cast<int64_t>(merged->size);
    }
    if (counts_split) {
      update(c_.inactive_split, type, split_blocks);
      update(c_.inactive_split_bytes, type, split_bytes);
    }
    decrease(c_.active, type, 1);
    decrease(c_.active_bytes, type, original_size);
    decrease(c_.requested_bytes, type, requested);
  }

  Backend::EventHandle take_event() {
    if (spare_events_.empty()) return backend_->create_event();
    Backend::EventHandle e = spare_events_.back();
    spare_events_.pop_back();
    return e;
  }

  // On free of a block used on other streams: it waits for an event per stream.
  void record_events(Block* block) {
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

  void retire_event(Backend::EventHandle e, Block* block) {
    spare_events_.push_back(e);
    if (--block->event_count == 0) {
      if (options_.sanitize)
        quarantine(block);
      else
        release_to_pool(block);
    }
  }

  // Records the events deferred during captures, then caches every block whose
  // events have all completed.
  void process_events() {
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

  void synchronize_and_free_events() {
    ++stats_.num_sync_all_streams;
    if (!deferred_.empty()) process_deferred();
    while (!pending_events_.empty()) {
      auto [event, block] = pending_events_.back();
      backend_->synchronize_event(event);
      pending_events_.pop_back();
      retire_event(event, block);
    }
  }

  // -------------------------------------------------------------------------------
  // memory from the backend

  // A block of at least `size` bytes from new memory, not cached. The steps, as
  // PyTorch's malloc: garbage collection (if set), then the backend; if that fails,
  // return cached oversize blocks just large enough and try again; if that fails,
  // return everything cached and try once more (num_alloc_retries). Then
  // OutOfMemoryError. While a graph captures, nothing is returned: the capture
  // forbids frees and waits, and a replay may use what any graph was given.
  Block* allocate_memory(bool small, cudaStream_t stream, size_t size, size_t requested,
                         PrivatePool* target) {
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

  Block* try_allocate_memory(bool small, cudaStream_t stream, size_t size, PrivatePool* target) {
    if (expandable_) {
      bool no_address_space = false;
      Block* b = grow_expandable(small, stream, size, target, no_address_space);
      if (!no_address_space) return b;
    }
    return new_segment(small, stream, size, target);
  }

  // A fresh ordinary segment as one block, or nullptr when the backend has no memory.
  Block* new_segment(bool small, cudaStream_t stream, size_t size, PrivatePool* target) {
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

  // The expandable segment of (stream, pool kind, graph pool) that can still grow,
  // reserving one when there is none; null (with `no_address_space`) when address
  // space cannot be had.
  Segment* expandable_segment(bool small, cudaStream_t stream, PrivatePool* target, size_t need,
                              bool& no_address_space) {
    for (Segment* seg : expandables_)
      if (seg->stream == stream && seg->small == small && seg->pool == target &&
          seg->size - seg->mapped >= need)
        return seg;
    if (reservation_ == 0) {
      // Room for the whole device and an eighth more, as PyTorch reserves: one
      // stream's segment can hold everything the device has.
      const size_t total = backend_->memory_info().total;
      reservation_ = round_up(std::max(total + total / 8, page_), page_);
    }
    if (need > reservation_) return nullptr;  // more than the device has: out of memory
    const size_t bytes = reservation_;
    void* base = backend_->reserve_address_space(bytes);
    if (base == nullptr) {
      warn_no_expandable("no address space is left to reserve");
      no_address_space = true;
      return nullptr;
    }
    auto* seg = new Segment;
    seg->base = reinterpret_cast<uintptr_t>(base);
    seg->size = bytes;
    seg->mapped = 0;
    seg->order = ++segment_count_;
    seg->stream = stream;
    seg->small = small;
    seg->expandable = true;
    seg->pool = target;
    segments_.emplace(seg->base, seg);
    expandables_.push_back(seg);
    return seg;
  }

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
                         bool& no_address_space) {
    // The tail of the segment this would grow, if its free tail can help.
    Segment* seg = nullptr;
    size_t have = 0;
    for (Segment* s : expandables_) {
      if (s->stream != stream || s->small != small || s->pool != target) continue;
      Block* tail = last_block(s);
      const size_t tail_free = tail != nullptr && tail->cached ? tail->size : 0;
      if (s->size - s->mapped >= round_up(size - std::min(size, tail_free), page_)) {
        seg = s;
        have = std::min(size, tail_free);
        break;
      }
    }
    const size_t need = round_up(size - have, page_);
    if (seg == nullptr) seg = expandable_segment(small, stream, target, need, no_address_space);
    if (seg == nullptr) return nullptr;
    if (need == 0) {  // the free tail grew enough meanwhile (events completed)
      Block* tail = last_block(seg);
      cache_erase(tail);
      return tail;
    }
    const uintptr_t at = seg->base + seg->mapped;
    if (!backend_->map_pages(reinterpret_cast<void*>(at), need)) {
      if (seg->mapped == 0) release_expandable(seg);  // a fresh reservation: nothing to keep
      return nullptr;
    }
    const size_t type = pool_type(small);
    if (seg->mapped == 0) increase(c_.segment, type, 1);  // counted while it holds memory
    seg->mapped += need;
    increase(c_.reserved_bytes, type, need);
    ++stats_.num_device_alloc;
    if (history_on_) record(TraceAction::segment_map, at, need, stream, AllocationTag::current());

    Block* tail = last_block(seg);
    if (tail != nullptr && tail->cached) {
      cache_erase(tail);
      tail->size += need;
      return tail;
    }
    Block* b = new_block();
    b->ptr = at;
    b->size = need;
    b->stream = stream;
    b->small = small;
    b->segment = seg;
    b->prev = tail;
    b->next = nullptr;
    if (tail != nullptr)
      tail->next = b;
    else
      seg->head = b;
    return b;
  }

  // Gives back the whole free pages at the end of an expandable segment (all the
  // pages after the last block in use), and the segment once nothing is mapped.
  void unmap_free_tail(Segment* seg) {
    Block* tail = last_block(seg);
    if (tail == nullptr || !tail->cached) return;
    const size_t offset = tail->ptr - seg->base;
    const size_t keep = round_up(offset, page_);
    if (keep >= seg->mapped) return;
    const size_t bytes = seg->mapped - keep;
    backend_->unmap_pages(reinterpret_cast<void*>(seg->base + keep), bytes);
    seg->mapped = keep;
    const size_t type = pool_type(seg->small);
    decrease(c_.reserved_bytes, type, bytes);
    ++stats_.num_device_free;
    if (history_on_)
      record(TraceAction::segment_unmap, seg->base + keep, bytes, seg->stream, nullptr);
    if (keep == offset) {
      cache_erase(tail);
      unlink(tail);
    } else {
      tail->size = keep - offset;
      reposition_shrunk(tail);
    }
    if (seg->mapped == 0) {
      decrease(c_.segment, type, 1);
      release_expandable(seg);
    }
  }

  // Returns the address space of an expandable segment with nothing mapped.
  void release_expandable(Segment* seg) {
    backend_->release_address_space(reinterpret_cast<void*>(seg->base), seg->size);
    expandables_.erase(std::find(expandables_.begin(), expandables_.end(), seg));
    segments_.erase(seg->base);
    delete seg;
  }

  // Returns an ordinary segment that is one cached block (the block leaves its set).
  void release_segment(Block* block) {
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

  static bool whole_segment(const Block* b) { return !b->is_split() && !b->segment->expandable; }

  // PyTorch's first answer to a failed allocation (release_available_cached_blocks):
  // with max_split_size set, return the smallest cached oversize block on this
  // stream that is at least as large as the request (or max_split_size); failing
  // that, oversize blocks from the largest down until as many bytes are returned.
  // True when enough was returned.
  bool release_available_cached_blocks(bool small, cudaStream_t stream, size_t size) {
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

  // Returns every cached ordinary segment that is one free block and every whole
  // free page at the end of an expandable segment, after waiting for all events.
  void release_cached_blocks() {
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

  // PyTorch's garbage_collect_cached_blocks. Only whole ordinary segments cached in
  // the general large pool are candidates; a block's age is the number of
  // large-pool lookups since it was cached.
  void garbage_collect() {
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

  // -------------------------------------------------------------------------------
  // reports

  // The largest cached free block and the address space held, per pool type.
  void fill_gauges(MemoryStats& s) const {
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

  void warn_no_expandable(const std::string& why) {
    if (warned_expandable_) return;
    warned_expandable_ = true;
    std::fprintf(stderr, "ember: %s=expandable_segments:True: %s; %s ordinary segments\n",
                 kAllocConfEnvVar, why.c_str(),
                 expandable_ ? "requests that do not fit fall back to" : "using");
  }

  std::vector<TraceEntry> history_in_order() const {
    std::vector<TraceEntry> out;
    if (history_.empty()) return out;
    // The ring's oldest entry sits at history_next_ once it has wrapped.
    out.reserve(history_.size());
    const size_t start = history_.size() < history_capacity_ ? 0 : history_next_;
    for (size_t i = 0; i < history_.size(); ++i)
      out.push_back(history_[(start + i) % history_.size()]);
    return out;
  }

  // The out-of-memory message: PyTorch's sentence, then the largest free block,
  // the allocation sites holding the most memory and, when an advisor is set, its
  // suggestion. At most 4 + kOomSites lines.
  std::string out_of_memory_message(const OutOfMemoryRequest& r, bool capturing) const {
    const int64_t allocated = c_.allocated_bytes.current();
    const int64_t unallocated = c_.reserved_bytes.current() - allocated;
    const std::string where = r.host ? "The host" : "GPU " + std::to_string(r.device);
    std::string msg = detail::str_cat(
        r.host ? "CPU" : "CUDA", " out of memory. Tried to allocate ",
        format_bytes(r.allocation_bytes), ". ", where, " has a total capacity of ",
        format_bytes(r.capacity), " of which ", format_bytes(r.free_bytes),
        " is free. Of the allocated memory ", format_bytes(static_cast<uint64_t>(allocated)),
        " is allocated by ember, and ", format_bytes(static_cast<uint64_t>(unallocated)),
        " is reserved by ember but unallocated.",
        expandable_ ? ""
                    : detail::str_cat(" If reserved but unallocated memory is large try setting ",
                                      kAllocConfEnvVar,
                                      "=expandable_segments:True to avoid fragmentation."),
        capturing ? " A CUDA graph was being captured, so the cache was not freed to retry (and "
                    "the capacity was not queried): capture with more memory free."
                  : "");

    MemoryStats gauges;
    fill_gauges(gauges);
    size_t cached_blocks = 0;
    size_t cached_bytes = 0;
    auto count = [&](const BlockSet& set) {
      for (const Block* b : set) {
        ++cached_blocks;
        cached_bytes += b->size;
      }
    };
    count(small_pool_);
    count(large_pool_);
    for (const auto& [id, p] : private_pools_) {
      count(p->small);
      count(p->large);
    }
    msg +=
        detail::str_cat("\nLargest free block: ",
                        format_bytes(static_cast<uint64_t>(gauges.largest_free_block[kAggregate])),
                        " (", format_bytes(cached_bytes), " cached in ", cached_blocks,
                        " free block", cached_blocks == 1 ? "" : "s", ").");

    // Live bytes by allocation site (scope / tag), the largest first.
    std::map<std::pair<std::string, std::string>, std::pair<size_t, size_t>> sites;
    for (const auto& [base, seg] : segments_)
      for (const Block* b = seg->head; b != nullptr; b = b->next) {
        if (!b->allocated) continue;
        auto& [bytes, blocks] = sites[{b->scope ? b->scope : "", b->tag ? b->tag : ""}];
        bytes += b->size;
        ++blocks;
      }
    std::vector<std::pair<std::pair<size_t, size_t>, std::pair<std::string, std::string>>> top;
    for (auto& [site, use] : sites) top.emplace_back(use, site);
    std::sort(top.begin(), top.end(), [](const auto& a, const auto& b) {
      return a.first.first != b.first.first ? a.first.first > b.first.first : a.second < b.second;
    });
    if (!top.empty()) {
      msg += detail::str_cat("\nLive memory by allocation site (the largest ",
                             std::min(top.size(), kOomSites), " of ", top.size(), "):");
      for (size_t i = 0; i < std::min(top.size(), kOomSites); ++i) {
        const auto& [use, site] = top[i];
        const auto& [scope, tag] = site;
        const std::string name = !scope.empty() && !tag.empty() ? scope + " / " + tag
                                 : !scope.empty()               ? scope
                                 : !tag.empty()                 ? tag
                                                                : std::string("(untagged)");
        msg += detail::str_cat("\n  ", format_bytes(use.first), " in ", use.second, " block",
                               use.second == 1 ? "" : "s", ": ", name);
      }
    }

    const OutOfMemoryAdvisor* advisor = &advisor_;
    OutOfMemoryAdvisor fallback;
    if (!*advisor) {
      std::lock_guard lock(g_default_advisor_mutex);
      fallback = g_default_advisor;
      advisor = &fallback;
    }
    if (!*advisor) {
      static const OutOfMemoryAdvisor kReplay = replay_out_of_memory_advisor;
      advisor = &kReplay;
    }
    if (*advisor) {
      try {
        std::optional<std::string> advice = (*advisor)(history_in_order(), r);
        if (advice && !advice->empty()) {
          std::string line = *advice;
          line.erase(std::find(line.begin(), line.end(), '\n'), line.end());  // one line
          msg += "\n" + line;
        }
      } catch (const std::exception&) {
        // An advisor that fails gives no advice; the error stays the OOM.
      }
    }
    return msg;
  }

  [[noreturn]] void throw_out_of_memory(size_t requested, size_t rounded, size_t allocation,
                                        cudaStream_t stream) {
    ++stats_.num_ooms;
    if (history_on_) record(TraceAction::oom, 0, allocation, stream, AllocationTag::current());
    OutOfMemoryRequest r;
    r.requested_bytes = requested;
    r.rounded_bytes = rounded;
    r.allocation_bytes = allocation;
    r.stream = stream;
    r.device = backend_->device();
    r.host = backend_->is_host();
    r.options = &options_;
    if (history_on_) {
      // For a replay of the history (the advisor): the blocks it may have begun after.
      try {
        for (const auto& [base, seg] : segments_)
          for (const Block* b = seg->head; b != nullptr; b = b->next)
            if (b->allocated || b->event_count > 0)
              r.live_blocks.push_back(
                  LiveBlock{b->ptr, b->requested_size, reinterpret_cast<uintptr_t>(b->stream)});
      } catch (const std::exception&) {
        r.live_blocks.clear();  // out of host memory: advise without them
      }
    }
    const bool capturing = !capturing_.empty();
    try {
      if (!capturing) {  // a device query a capture may forbid
        const Backend::MemoryInfo info = backend_->memory_info();
        r.capacity = info.total;
        r.free_bytes = info.free;
      }
    } catch (const std::exception&) {
      // Leave capacity unknown (0) rather than replace the OOM with another error.
    }
    std::string message;
    try {
      message = out_of_memory_message(r, capturing);
    } catch (const std::exception&) {
      message = detail::str_cat(r.host ? "CPU" : "CUDA", " out of memory. Tried to allocate ",
                                format_bytes(allocation), ".");
    }
    throw OutOfMemoryError(message);
  }

  void record(TraceAction action, uintptr_t address, size_t size, cudaStream_t stream,
              const char* tag, const char* scope = nullptr, size_t requested = 0) {
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

// =================================================================================
// CachingAllocator

CachingAllocator::CachingAllocator(std::unique_ptr<Backend> backend, AllocatorOptions options)
    : impl_(std::make_unique<Impl>(std::move(backend), std::move(options))) {}

CachingAllocator::~CachingAllocator() = default;

void* CachingAllocator::allocate(size_t bytes, cudaStream_t stream) {
  return impl_->allocate(bytes, stream);
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
