#include "core/memory/caching_allocator.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdio>
#include <deque>
#include <new>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

#include "core/base/error.h"

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
  if (bytes > kMaxRequest) [[unlikely]] return kMaxRequest;  // fails as out of memory
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

struct Segment;
struct PrivatePool;

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
  int event_count = 0;  // events still to complete before it may be reused
  const char* tag = nullptr;
  const char* scope = nullptr;
  uint64_t freed_tick = 0;  // when it entered the cache, for garbage collection
  // Its segment's creation number: equally good fits go to the oldest segment,
  // then the lowest address in it, so the choice does not depend on where the
  // backend put the segments (meta predictions, core/meta.h, rely on it).
  uint64_t segment_order = 0;
  std::vector<cudaStream_t> stream_uses;  // other streams it was recorded on

  bool is_split() const { return prev != nullptr || next != nullptr; }
};

struct Segment {
  uintptr_t base = 0;
  size_t size = 0;
  cudaStream_t stream = nullptr;
  bool small = false;
  Block* head = nullptr;  // the lowest-addressed block
  PrivatePool* pool = nullptr;  // the graph pool it belongs to; null: the general cache
};

struct SearchKey {
  cudaStream_t stream;
  size_t size;
};

inline uintptr_t stream_key(cudaStream_t s) { return reinterpret_cast<uintptr_t>(s); }

// Orders cached blocks by (stream, size, segment age, address), so lower_bound on
// (stream, size) finds the best fit on that stream.
struct BlockLess {
  using is_transparent = void;
  bool operator()(const Block* a, const Block* b) const {
    if (a->stream != b->stream) return stream_key(a->stream) < stream_key(b->stream);
    if (a->size != b->size) return a->size < b->size;
    if (a->segment_order != b->segment_order) return a->segment_order < b->segment_order;
    return a->ptr < b->ptr;
  }
  bool operator()(const Block* a, const SearchKey& k) const {
    if (a->stream != k.stream) return stream_key(a->stream) < stream_key(k.stream);
    return a->size < k.size;
  }
  bool operator()(const SearchKey& k, const Block* b) const {
    if (k.stream != b->stream) return stream_key(k.stream) < stream_key(b->stream);
    return k.size <= b->size;
  }
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
    if (n == 1) pool->put(p, sizeof(T));
    else ::operator delete(p);
  }
  template <typename U>
  bool operator==(const NodeAllocator<U>& other) const noexcept {
    return pool == other.pool;
  }
};

using BlockSet = std::set<Block*, BlockLess, NodeAllocator<Block*>>;

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

}  // namespace

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
  }

  ~Impl() {
    for (auto& [event, block] : pending_events_) backend_->destroy_event(event);
    for (Backend::EventHandle e : spare_events_) backend_->destroy_event(e);
    for (auto& [base, seg] : segments_) {
      backend_->raw_free(reinterpret_cast<void*>(seg->base));
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
    else if (!pending_events_.empty())
      process_events();
    if (options_.sanitize) [[unlikely]] return sanitized_allocate(bytes, stream);
    const size_t size = round_size(bytes, options_);
    const bool small = size <= kSmallSize;
    Block* block = take_cached_block(small, stream, size, target);
    if (block == nullptr) block = new_segment(small, stream, size, target);
    return hand_out(block, size, bytes);
  }

  void deallocate(void* ptr) noexcept {
    if (ptr == nullptr) return;
    std::lock_guard lock(mutex_);
    Block* block = allocated_.erase(reinterpret_cast<uintptr_t>(ptr));
    if (block == nullptr) {
      std::fprintf(stderr, "ember: deallocate(%p): not a live allocation of this allocator; "
                   "ignored\n", ptr);
      return;
    }
    block->allocated = false;
    const size_t type = pool_type(block->small);
    update(stats_.allocation, type, -1);
    update(stats_.allocated_bytes, type, -static_cast<int64_t>(block->size));
    if (block->size >= options_.max_split_size) stats_.oversize_allocations.decrease(1);
    if (history_on_)
      record(TraceAction::free, block->ptr, block->size, block->stream, block->tag, block->scope);
    if (block->segment->pool != nullptr) [[unlikely]] {
      // A graph's block: the graph orders its uses; it waits for no other stream.
      block->stream_uses.clear();
      release_to_pool(block);
      return;
    }
    if (!capturing_.empty()) [[unlikely]] {
      hold(block);
      return;
    }
    free_block(block);
  }

  // The rest of a free: wait for the streams the block was used on, then cache it.
  void free_block(Block* block) noexcept {
    if (!block->stream_uses.empty()) {
      try {
        record_events(block);
      } catch (const std::exception& e) {
        // Without its events the block cannot wait for every stream; reusing it
        // sooner is the lesser harm in a function that must not throw.
        std::fprintf(stderr, "ember: deallocate: recording stream events failed (%s)\n",
                     e.what());
        block->stream_uses.clear();
      }
      // Events that were recorded release the block when they complete.
      if (block->event_count > 0) return;
    }
    if (options_.sanitize) [[unlikely]] quarantine(block);
    else release_to_pool(block);
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
    EMBER_CHECK(capturing_.empty(), "empty_cache: cannot return cached memory while a CUDA graph "
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
    EMBER_CHECK(!options_.sanitize, "CUDA graph capture: not available in the allocator's "
                "sanitizer mode (", kAllocConfEnvVar, "=sanitize:True), whose checks read "
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
    for (auto& [base, seg] : segments_) {
      if (seg->pool != p) continue;
      seg->pool = nullptr;
      seg->stream = stream;
      for (Block* b = seg->head; b != nullptr; b = b->next) b->stream = stream;
    }
    for (Block* b : cached) pool_of(b).insert(b);
    private_pools_.erase(id);
    for (Block* b : held) {
      --b->event_count;
      if (!capturing_.empty()) hold(b);  // another graph is capturing
      else free_block(b);
    }
  }

  bool capture_underway() const {
    std::lock_guard lock(mutex_);
    return !capturing_.empty();
  }

  MemoryStats stats() const {
    std::lock_guard lock(mutex_);
    return stats_;
  }

  void reset_peak() {
    std::lock_guard lock(mutex_);
    stats_.reset_peak();
  }

  void reset_accumulated() {
    std::lock_guard lock(mutex_);
    stats_.reset_accumulated();
  }

  std::string summary(bool abbreviated) const {
    std::string title = backend_->is_host()
                            ? std::string("ember CPU memory summary")
                            : "ember CUDA memory summary, device ID " +
                                  std::to_string(backend_->device());
    return format_memory_summary(stats(), title, backend_->is_host(), abbreviated);
  }

  MemorySnapshot snapshot() const {
    std::lock_guard lock(mutex_);
    MemorySnapshot snap;
    snap.device = backend_->device();
    snap.host = backend_->is_host();
    snap.segments.reserve(segments_.size());
    for (const auto& [base, seg] : segments_) {
      SegmentSnapshot s;
      s.address = seg->base;
      s.total_size = seg->size;
      s.stream = seg->stream;
      s.is_large = !seg->small;
      for (const Block* b = seg->head; b != nullptr; b = b->next) {
        BlockSnapshot bs;
        bs.address = b->ptr;
        bs.size = b->size;
        bs.requested_size = b->requested_size;
        bs.tag = b->tag;
        bs.scope = b->scope;
        bs.state = b->allocated          ? BlockState::allocated
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
    if (!history_.empty()) {
      // The ring's oldest entry sits at history_next_ once it has wrapped.
      snap.trace.reserve(history_.size());
      size_t start = history_.size() < history_capacity_ ? 0 : history_next_;
      for (size_t i = 0; i < history_.size(); ++i)
        snap.trace.push_back(history_[(start + i) % history_.size()]);
    }
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

  const AllocatorOptions& options() const { return options_; }
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
    if (bytes > kMaxRequest) throw_out_of_memory(bytes, stream);
    const size_t size = round_size(bytes + kGuardFront + kGuardBackMin, options_);
    const bool small = size <= kSmallSize;
    Block* block = take_cached_block(small, stream, size);
    if (block == nullptr) block = new_segment(small, stream, size);
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
      const size_t type = pool_type(block->small);
      update(stats_.allocation, type, -1);
      update(stats_.allocated_bytes, type, -static_cast<int64_t>(block->size));
      if (block->size >= options_.max_split_size) stats_.oversize_allocations.decrease(1);
      release_to_pool(block);
      throw;
    }
    return reinterpret_cast<void*>(base + kGuardFront);
  }

  // Compares `n` bytes at `offset` (from the block's start) with `expected`;
  // returns the first changed byte's offset and how many changed, or {-1, 0}.
  std::pair<int64_t, size_t> scan(const Block* b, size_t offset, size_t n,
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
    r.message = detail::str_cat(
        "ember allocator sanitizer: ", what, ": ", changed, " byte", changed == 1 ? "" : "s",
        " changed, the first at byte ", r.offset, " of a ", r.requested_size, "-byte block at 0x",
        std::hex, r.address, std::dec, " allocated at ", site);
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
      std::fprintf(stderr, "ember allocator sanitizer: cannot quarantine a block (%s)\n",
                   e.what());
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

  // Applies a change to the aggregate and the pool's counter.
  static void update(StatArray& a, size_t type, int64_t delta) {
    if (delta >= 0) {
      a[kAggregate].increase(delta);
      a[type].increase(delta);
    } else {
      a[kAggregate].decrease(-delta);
      a[type].decrease(-delta);
    }
  }

  BlockSet& pool(bool small) { return small ? small_pool_ : large_pool_; }

  // The free-block set a block of this segment is cached in.
  BlockSet& pool_of(const Block* b) {
    if (PrivatePool* p = b->segment->pool) [[unlikely]] return b->small ? p->small : p->large;
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

  // A general block freed during a capture: the graph may read or write it on
  // replay, so it stays pending until the capturing pool is released.
  void hold(Block* block) noexcept {
    try {
      capturing_.front()->held.push_back(block);
      ++block->event_count;
    } catch (const std::exception&) {
      free_block(block);  // out of host memory: the lesser harm is to cache it now
    }
  }

  Block* new_block() {
    if (spare_blocks_.empty()) return new Block;
    Block* b = spare_blocks_.back();
    spare_blocks_.pop_back();
    return b;
  }

  void recycle(Block* b) {
    b->stream_uses.clear();  // keeps its capacity for the next user
    std::vector<cudaStream_t> uses = std::move(b->stream_uses);
    *b = Block{};
    b->stream_uses = std::move(uses);
    spare_blocks_.push_back(b);
  }

  // The best-fitting cached block, taken out of its pool (`target`, or the
  // general cache when null), or nullptr.
  Block* take_cached_block(bool small, cudaStream_t stream, size_t size,
                           PrivatePool* target = nullptr) {
    BlockSet& blocks = target == nullptr ? pool(small) : small ? target->small : target->large;
    auto it = blocks.lower_bound(SearchKey{stream, size});
    if (it == blocks.end() || (*it)->stream != stream) return nullptr;
    const size_t found = (*it)->size;
    const size_t max_split = options_.max_split_size;
    // An unsplittable block would waste its excess on a normal request...
    if (size < max_split && found >= max_split) return nullptr;
    // ...and an oversize request may round up only so far.
    if (size >= max_split && found - size >= options_.max_non_split_rounding) return nullptr;
    Block* b = *it;
    blocks.erase(it);
    return b;
  }

  // A fresh segment as one block; frees the cache and retries once when the
  // backend fails, and throws OutOfMemoryError when that fails too.
  // While a graph captures, nothing is freed: the capture forbids cudaFree and
  // event waits, and a replay may use what a graph was given.
  Block* new_segment(bool small, cudaStream_t stream, size_t size,
                     PrivatePool* target = nullptr) {
    const size_t bytes = segment_size(size);
    const bool may_free = capturing_.empty();
    if (may_free && options_.garbage_collection_threshold > 0.0) collect_garbage();
    void* ptr = backend_->raw_alloc(bytes);
    if (ptr == nullptr && may_free) {
      release_cached_blocks();
      ++stats_.num_alloc_retries;
      ptr = backend_->raw_alloc(bytes);
    }
    if (ptr == nullptr) throw_out_of_memory(bytes, stream);

    auto* seg =
        new Segment{reinterpret_cast<uintptr_t>(ptr), bytes, stream, small, nullptr, target};
    Block* b = new_block();
    b->ptr = seg->base;
    b->size = bytes;
    b->stream = stream;
    b->small = small;
    b->segment = seg;
    b->segment_order = ++segment_count_;
    seg->head = b;
    segments_.emplace(seg->base, seg);

    const size_t type = pool_type(small);
    update(stats_.segment, type, 1);
    update(stats_.reserved_bytes, type, static_cast<int64_t>(bytes));
    if (bytes >= options_.max_split_size) stats_.oversize_segments.increase(1);
    ++stats_.num_device_alloc;
    if (history_on_) record(TraceAction::segment_alloc, seg->base, bytes, stream, AllocationTag::current());
    return b;
  }

  [[noreturn]] void throw_out_of_memory(size_t bytes, cudaStream_t stream) {
    ++stats_.num_ooms;
    if (history_on_) record(TraceAction::oom, 0, bytes, stream, AllocationTag::current());
    Backend::MemoryInfo info;
    const bool capturing = !capturing_.empty();
    try {
      if (!capturing) info = backend_->memory_info();  // a device query a capture may forbid
    } catch (const std::exception&) {
      // Leave capacity unknown (0) rather than replace the OOM with another error.
    }
    const int64_t allocated = stats_.allocated_bytes[kAggregate].current;
    const int64_t unallocated = stats_.reserved_bytes[kAggregate].current - allocated;
    const bool host = backend_->is_host();
    std::string where = host ? "The host" : "GPU " + std::to_string(backend_->device());
    throw OutOfMemoryError(detail::str_cat(
        host ? "CPU" : "CUDA", " out of memory. Tried to allocate ", format_bytes(bytes), ". ",
        where, " has a total capacity of ", format_bytes(info.total), " of which ",
        format_bytes(info.free), " is free. Of the allocated memory ",
        format_bytes(static_cast<uint64_t>(allocated)), " is allocated by ember, and ",
        format_bytes(static_cast<uint64_t>(unallocated)),
        " is reserved by ember but unallocated. If reserved but unallocated memory is large "
        "try setting ",
        kAllocConfEnvVar, "=max_split_size_mb:<MiB, more than 20> to avoid fragmentation.",
        capturing ? " A CUDA graph was being captured, so the cache was not freed to retry (and "
                    "the capacity was not queried): capture with more memory free."
                  : ""));
  }

  bool should_split(const Block* b, size_t size) const {
    const size_t remaining = b->size - size;
    if (b->small) return remaining >= kMinBlockSize;
    return size < options_.max_split_size && remaining > kSmallSize;
  }

  // Splits off what the request does not need, marks the block allocated and
  // counts it.
  void* hand_out(Block* block, size_t size, size_t requested) {
    const size_t type = pool_type(block->small);
    const bool was_split = block->is_split();
    if (should_split(block, size)) {
      // The allocation takes the front; the original block becomes the remainder.
      Block* rest = block;
      block = new_block();
      block->ptr = rest->ptr;
      block->size = size;
      block->stream = rest->stream;
      block->small = rest->small;
      block->segment = rest->segment;
      block->segment_order = rest->segment_order;
      block->prev = rest->prev;
      if (block->prev != nullptr) block->prev->next = block;
      else block->segment->head = block;
      block->next = rest;
      rest->prev = block;
      rest->ptr += size;
      rest->size -= size;
      pool_of(rest).insert(rest);
      if (was_split) {
        // An inactive split block shrank by `size`.
        update(stats_.inactive_split_bytes, type, -static_cast<int64_t>(size));
      } else {
        // An unsplit block became a split, leaving an inactive remainder.
        update(stats_.inactive_split_bytes, type, static_cast<int64_t>(rest->size));
        update(stats_.inactive_split, type, 1);
      }
    } else if (was_split) {
      // A whole inactive split block becomes active.
      update(stats_.inactive_split_bytes, type, -static_cast<int64_t>(block->size));
      update(stats_.inactive_split, type, -1);
    }
    block->allocated = true;
    block->requested_size = requested;
    block->tag = AllocationTag::current();
    block->scope = AllocationScope::current();
    allocated_.insert(block->ptr, block);

    const auto block_bytes = static_cast<int64_t>(block->size);
    update(stats_.allocation, type, 1);
    update(stats_.allocated_bytes, type, block_bytes);
    update(stats_.active, type, 1);
    update(stats_.active_bytes, type, block_bytes);
    update(stats_.requested_bytes, type, static_cast<int64_t>(requested));
    if (block->size >= options_.max_split_size) stats_.oversize_allocations.increase(1);
    if (history_on_)
      record(TraceAction::alloc, block->ptr, block->size, block->stream, block->tag, block->scope);
    return reinterpret_cast<void*>(block->ptr);
  }

  // Absorbs `src` into `dst` when it is cached; returns the bytes absorbed.
  size_t try_merge(Block* dst, Block* src) {
    if (src == nullptr || src->allocated || src->event_count > 0 || !src->stream_uses.empty())
      return 0;
    pool_of(src).erase(src);
    if (dst->prev == src) {
      dst->ptr = src->ptr;
      dst->prev = src->prev;
      if (dst->prev != nullptr) dst->prev->next = dst;
      else dst->segment->head = dst;
    } else {
      dst->next = src->next;
      if (dst->next != nullptr) dst->next->prev = dst;
    }
    const size_t absorbed = src->size;
    dst->size += absorbed;
    recycle(src);
    return absorbed;
  }

  // A block nobody uses any more: merged with its free neighbours and cached.
  void release_to_pool(Block* block) {
    const size_t type = pool_type(block->small);
    const auto original_size = static_cast<int64_t>(block->size);
    const auto requested = static_cast<int64_t>(block->requested_size);
    int64_t split_blocks = 0;
    int64_t split_bytes = 0;
    for (Block* neighbour : {block->prev, block->next}) {
      size_t absorbed = try_merge(block, neighbour);
      if (absorbed > 0) {
        split_blocks -= 1;
        split_bytes -= static_cast<int64_t>(absorbed);
      }
    }
    if (block->is_split()) {
      split_blocks += 1;
      split_bytes += static_cast<int64_t>(block->size);
    }
    block->requested_size = 0;
    block->tag = nullptr;
    block->scope = nullptr;
    block->freed_tick = ++tick_;
    pool_of(block).insert(block);

    update(stats_.inactive_split, type, split_blocks);
    update(stats_.inactive_split_bytes, type, split_bytes);
    update(stats_.active, type, -1);
    update(stats_.active_bytes, type, -original_size);
    update(stats_.requested_bytes, type, -requested);
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
      if (options_.sanitize) quarantine(block);
      else release_to_pool(block);
    }
  }

  // Caches every block whose events have all completed.
  void process_events() {
    size_t kept = 0;
    for (size_t i = 0; i < pending_events_.size(); ++i) {
      auto [event, block] = pending_events_[i];
      if (backend_->query_event(event)) retire_event(event, block);
      else pending_events_[kept++] = pending_events_[i];
    }
    pending_events_.resize(kept);
  }

  void synchronize_and_free_events() {
    ++stats_.num_sync_all_streams;
    while (!pending_events_.empty()) {
      auto [event, block] = pending_events_.back();
      backend_->synchronize_event(event);
      pending_events_.pop_back();
      retire_event(event, block);
    }
  }

  void release_segment(Block* block) {
    Segment* seg = block->segment;
    const size_t type = pool_type(seg->small);
    backend_->raw_free(reinterpret_cast<void*>(seg->base));
    update(stats_.segment, type, -1);
    update(stats_.reserved_bytes, type, -static_cast<int64_t>(seg->size));
    if (seg->size >= options_.max_split_size) stats_.oversize_segments.decrease(1);
    ++stats_.num_device_free;
    segments_.erase(seg->base);
    if (history_on_) record(TraceAction::segment_free, seg->base, seg->size, seg->stream, nullptr);
    delete seg;
    recycle(block);
  }

  // Returns every cached block that is a whole segment.
  void release_cached_blocks() {
    synchronize_and_free_events();
    if (options_.sanitize) flush_quarantine();
    for (auto* blocks : {&large_pool_, &small_pool_}) {
      for (auto it = blocks->begin(); it != blocks->end();) {
        Block* b = *it;
        if (b->is_split()) {
          ++it;
          continue;
        }
        it = blocks->erase(it);
        release_segment(b);
      }
    }
  }

  void collect_garbage() {
    if (capacity_ == 0) capacity_ = backend_->memory_info().total;
    const auto limit =
        static_cast<int64_t>(options_.garbage_collection_threshold * static_cast<double>(capacity_));
    if (stats_.reserved_bytes[kAggregate].current <= limit) return;
    std::vector<Block*> whole;
    for (auto* blocks : {&large_pool_, &small_pool_})
      for (Block* b : *blocks)
        if (!b->is_split()) whole.push_back(b);
    std::sort(whole.begin(), whole.end(),
              [](const Block* a, const Block* b) { return a->freed_tick < b->freed_tick; });
    for (Block* b : whole) {
      if (stats_.reserved_bytes[kAggregate].current <= limit) break;
      pool(b->small).erase(b);
      release_segment(b);
    }
  }

  void record(TraceAction action, uintptr_t address, size_t size, cudaStream_t stream,
              const char* tag, const char* scope = nullptr) {
    TraceEntry e;
    e.action = action;
    e.address = address;
    e.size = size;
    e.stream = stream;
    e.time_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                    std::chrono::steady_clock::now() - start_)
                    .count();
    e.tag = tag;
    e.scope = scope;
    e.allocated_bytes = stats_.allocated_bytes[kAggregate].current;
    e.reserved_bytes = stats_.reserved_bytes[kAggregate].current;
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

  mutable std::mutex mutex_;
  std::unique_ptr<Backend> backend_;
  const AllocatorOptions options_;
  const std::chrono::steady_clock::time_point start_;
  MemoryStats stats_;

  // Declared before the pools so it outlives them: their nodes come from here.
  NodePool node_pool_;
  BlockSet small_pool_{NodeAllocator<Block*>(&node_pool_)};
  BlockSet large_pool_{NodeAllocator<Block*>(&node_pool_)};
  PointerMap allocated_;
  std::map<uintptr_t, Segment*> segments_;  // by base address
  std::vector<Block*> spare_blocks_;
  std::vector<std::pair<Backend::EventHandle, Block*>> pending_events_;
  std::vector<Backend::EventHandle> spare_events_;
  uint64_t tick_ = 0;
  uint64_t segment_count_ = 0;  // segments ever created (Block::segment_order)
  size_t capacity_ = 0;  // backend capacity, read once for garbage collection

  // Private pools; declared after node_pool_, whose nodes their sets use.
  std::map<PoolId, std::unique_ptr<PrivatePool>> private_pools_;
  std::vector<PrivatePool*> capturing_;  // pools between begin_ and end_allocate_to_pool
  PoolId next_pool_id_ = 1;

  // Sanitizer mode only.
  std::deque<Block*> quarantine_;
  size_t quarantine_bytes_ = 0;
  std::vector<SanitizerReport> reports_;
  std::vector<unsigned char> scratch_;

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
void CachingAllocator::deallocate(void* ptr) noexcept { impl_->deallocate(ptr); }
void CachingAllocator::record_stream(void* ptr, cudaStream_t stream) {
  impl_->record_stream(ptr, stream);
}
void CachingAllocator::empty_cache() { impl_->empty_cache(); }
CachingAllocator::PoolId CachingAllocator::create_pool() { return impl_->create_pool(); }
void CachingAllocator::begin_allocate_to_pool(PoolId pool, cudaStream_t stream) {
  impl_->begin_allocate_to_pool(pool, stream);
}
void CachingAllocator::end_allocate_to_pool(PoolId pool) { impl_->end_allocate_to_pool(pool); }
void CachingAllocator::release_pool(PoolId pool, cudaStream_t stream) {
  impl_->release_pool(pool, stream);
}
bool CachingAllocator::capture_underway() const { return impl_->capture_underway(); }
MemoryStats CachingAllocator::stats() const { return impl_->stats(); }
std::map<std::string, int64_t> CachingAllocator::memory_stats() const {
  return impl_->stats().to_map();
}
int64_t CachingAllocator::memory_allocated() const {
  return impl_->stats().allocated_bytes[kAggregate].current;
}
int64_t CachingAllocator::max_memory_allocated() const {
  return impl_->stats().allocated_bytes[kAggregate].peak;
}
int64_t CachingAllocator::memory_reserved() const {
  return impl_->stats().reserved_bytes[kAggregate].current;
}
int64_t CachingAllocator::max_memory_reserved() const {
  return impl_->stats().reserved_bytes[kAggregate].peak;
}
void CachingAllocator::reset_peak_memory_stats() { impl_->reset_peak(); }
void CachingAllocator::reset_accumulated_memory_stats() { impl_->reset_accumulated(); }
std::string CachingAllocator::memory_summary(bool abbreviated) const {
  return impl_->summary(abbreviated);
}
MemorySnapshot CachingAllocator::memory_snapshot() const { return impl_->snapshot(); }
void CachingAllocator::record_memory_history(bool enabled, size_t max_entries) {
  impl_->record_history(enabled, max_entries);
}
void CachingAllocator::mark_step(const char* label) { impl_->mark_step(label); }
const AllocatorOptions& CachingAllocator::options() const { return impl_->options(); }
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
Backend& CachingAllocator::backend() { return impl_->backend(); }

}  // namespace ember::memory
