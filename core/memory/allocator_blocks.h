// Internal to core/memory: the caching allocator's block containers (blocks and
// segments, the ordered free-block sets and the pool of their nodes, the map of
// live pointers), its statistics counters and its lock. Used by CachingAllocator's
// implementation (core/memory/allocator_impl.h and the files it lists).
#pragma once

#include <array>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <new>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "core/base/cuda_handles.h"
#include "core/memory/memory_stats.h"

namespace ember::memory::internal {

// n rounded up to a multiple of unit.
inline size_t round_up(size_t n, size_t unit) {
  return (n + unit - 1) / unit * unit;
}

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

inline bool BlockLess::operator()(const Block* a, const Block* b) const {
  if (a->stream != b->stream) return stream_key(a->stream) < stream_key(b->stream);
  if (a->size != b->size) return a->size < b->size;
  if (a->segment->order != b->segment->order) return a->segment->order < b->segment->order;
  return a->ptr < b->ptr;
}
inline bool BlockLess::operator()(const Block* a, const SearchKey& k) const {
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

}  // namespace ember::memory::internal
