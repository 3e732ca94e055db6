// The caching allocator: one per device (and one for host memory), carving the
// segments a Backend provides into blocks and keeping freed blocks for reuse, with
// PyTorch-compatible statistics, summary table, snapshots and out-of-memory path.
//
// Policy (the same as PyTorch's native CUDA caching allocator):
//  * Requests are rounded up to a multiple of 512 bytes (0 bytes gives nullptr).
//    With roundup_power2_divisions:N, a request of more than 512*N bytes is
//    instead rounded up to the next of N equal steps between two powers of two.
//  * Rounded requests of at most 1 MiB come from the small pool, whose segments
//    are 2 MiB. Larger ones come from the large pool, whose segments are 20 MiB
//    for requests under 10 MiB and the request rounded up to 2 MiB otherwise.
//  * A request takes the best-fitting cached block: the smallest free block of its
//    pool, allocated on the same stream, that is large enough; on a tie, the one in
//    the oldest segment, then the lowest address (PyTorch takes the lowest address,
//    which depends on where the device put each segment; segment age does not, so
//    the allocator's every choice follows from the request sequence alone and a
//    meta-device prediction, core/meta.h, makes the same ones). Only on a miss is
//    a new segment asked of the backend.
//  * A block larger than the request is split and the remainder stays cached: in
//    the small pool when at least 512 bytes remain, in the large pool when more
//    than 1 MiB remains and the request is below max_split_size. A block of at
//    least max_split_size is never split, serves no request below max_split_size,
//    and serves a larger one only if it wastes less than max_non_split_rounding.
//  * A freed block merges with its free neighbours in the segment at once.
//  * Blocks belong to the stream they were allocated on. record_stream(ptr, s)
//    marks a block as used on s too: when freed, an event is recorded on every
//    such stream and the block is reused only once all those events completed
//    (checked at the start of each allocate; no device-wide synchronisation).
//  * When the backend fails, every cached block that forms a whole segment is
//    returned (after waiting for outstanding events) and the request is retried
//    once (num_alloc_retries). If it fails again, OutOfMemoryError is thrown
//    (num_ooms) and the allocator is left as it was, less the cache it freed.
//  * garbage_collection_threshold:t: on a miss, if reserved memory exceeds t times
//    the backend's capacity, whole free segments are returned, least recently
//    freed first, until it no longer does.
//  * empty_cache() waits for outstanding events and returns every whole free
//    segment. Memory still in use, or sharing a segment with it, stays reserved.
//  * Private pools (for CUDA graphs, cuda/graph.h; PyTorch's graph pools): while a
//    pool captures a stream, allocations on that stream are served from the pool's
//    own segments only, and a freed block of the pool returns to the pool (during
//    the capture and after it), since a replay writes to the addresses the capture
//    was given. While any capture is underway nothing is returned to the backend
//    (empty_cache throws; an allocation that does not fit throws OutOfMemoryError
//    at once, without freeing the cache to retry; no garbage collection) and no
//    event is queried or recorded. A block of the general cache freed during a
//    capture is held back (shown as pending free) until the pool is released, as
//    the graph may use it. Releasing a pool hands its free blocks to the general
//    cache, and its blocks still in use join it when freed.
//
// Thread-safe: one mutex per allocator. In steady state (a hit in the cache) an
// allocate/deallocate pair does no heap allocation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/base/alloc_tag.h"
#include "core/memory/alloc_config.h"
#include "core/memory/allocator.h"
#include "core/memory/backends.h"
#include "core/memory/memory_snapshot.h"
#include "core/memory/memory_stats.h"

namespace ember::memory {

inline constexpr size_t kMinBlockSize = 512;               // rounding unit
inline constexpr size_t kSmallSize = size_t{1} << 20;      // largest small-pool request
inline constexpr size_t kSmallBuffer = size_t{2} << 20;    // small-pool segment
inline constexpr size_t kLargeBuffer = size_t{20} << 20;   // large-pool segment under...
inline constexpr size_t kMinLargeAlloc = size_t{10} << 20;  // ...this request size
inline constexpr size_t kRoundLarge = size_t{2} << 20;     // rounding of larger segments
inline constexpr size_t kDefaultHistoryEntries = 100000;
// Requests above this (4 EiB) are refused as out of memory: no device has it,
// and rounding them up would overflow size_t.
inline constexpr size_t kMaxRequest = size_t{1} << 62;

// Sanitizer mode (AllocatorOptions::sanitize): the bytes written around and over
// blocks. The front guard is 512 bytes so the caller's pointer keeps the normal
// 512-byte alignment; the back guard runs from the end of the request to the end
// of the block, at least kGuardBackMin bytes.
inline constexpr unsigned char kGuardByte = 0xAB;
inline constexpr unsigned char kPoisonByte = 0xDE;
inline constexpr size_t kGuardFront = 512;
inline constexpr size_t kGuardBackMin = 64;

// A bug the sanitizer mode caught: a write outside a block or into freed memory.
struct SanitizerReport {
  enum class Kind { underrun, overrun, write_after_free };
  Kind kind = Kind::overrun;
  uintptr_t address = 0;     // the pointer allocate() returned
  size_t requested_size = 0;
  int64_t offset = 0;        // of the first bad byte from `address` (< 0: before it)
  size_t bad_bytes = 0;      // how many bytes of the guard or poison were changed
  const char* tag = nullptr;    // allocation site, as AllocationTag / AllocationScope
  const char* scope = nullptr;
  std::string message;       // all of the above in words
};

class CachingAllocator final : public Allocator {
 public:
  explicit CachingAllocator(std::unique_ptr<Backend> backend, AllocatorOptions options = {});
  ~CachingAllocator() override;  // returns every segment, even ones still in use
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  void* allocate(size_t bytes, cudaStream_t stream) override;
  void deallocate(void* ptr) noexcept override;
  // Throws ember::Error when `ptr` is not a live allocation of this allocator.
  void record_stream(void* ptr, cudaStream_t stream) override;

  void empty_cache();

  MemoryStats stats() const;
  std::map<std::string, int64_t> memory_stats() const;  // PyTorch's keys
  int64_t memory_allocated() const;                     // allocated_bytes.all.current
  int64_t max_memory_allocated() const;                 // allocated_bytes.all.peak
  int64_t memory_reserved() const;                      // reserved_bytes.all.current
  int64_t max_memory_reserved() const;                  // reserved_bytes.all.peak
  void reset_peak_memory_stats();         // every peak := current
  void reset_accumulated_memory_stats();  // every allocated/freed total and event count := 0
  std::string memory_summary(bool abbreviated = false) const;

  MemorySnapshot memory_snapshot() const;
  // Turning recording on starts an empty ring of `max_entries` (> 0); turning it
  // off stops recording and keeps what was recorded for memory_snapshot().
  void record_memory_history(bool enabled, size_t max_entries = kDefaultHistoryEntries);
  // Records a step boundary named `label` into the history (when recording), so
  // timelines can mark steps. `label` must outlive the allocator, as tags do.
  void mark_step(const char* label);

  const AllocatorOptions& options() const;
  Backend& backend();

  // Sanitizer mode: what was caught so far (empty when the mode is off). Freed
  // blocks still in quarantine are checked when they leave it, on empty_cache()
  // and when memory runs out. check_sanitizer_reports() throws ember::Error
  // listing them, if any.
  std::vector<SanitizerReport> sanitizer_reports() const;
  void check_sanitizer_reports() const;

  // --- Private pools (policy above), driven by cuda::Graph.
  using PoolId = uint64_t;
  PoolId create_pool();
  // Until end_allocate_to_pool, allocations on `stream` come from `pool`. Throws
  // ember::Error for an unknown or already capturing pool, a stream another pool
  // captures, or sanitizer mode (its checks read device memory synchronously).
  void begin_allocate_to_pool(PoolId pool, cudaStream_t stream);
  void end_allocate_to_pool(PoolId pool);  // does nothing for a pool not capturing
  // The pool's graph is gone and no replay of it is still running: its free blocks
  // become general cache on `stream`, its blocks in use (tensors that outlived the
  // graph) become blocks of `stream` too, cached there when freed, and the blocks
  // held back during its capture are freed. The pool id is then unknown.
  void release_pool(PoolId pool, cudaStream_t stream);
  bool capture_underway() const;  // some pool is between begin_ and end_allocate_to_pool

  // The policy's arithmetic, exposed for tests and tools.
  static size_t round_size(size_t bytes, const AllocatorOptions& options);
  static size_t segment_size(size_t rounded_bytes);

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

// The allocator behind host_allocator() (when no HostAllocatorOverride is
// active): PyTorch's defaults plus EMBER_CUDA_ALLOC_CONF's sanitizer settings.
// Never destroyed, so no tensor outlives it at exit.
CachingAllocator& host_caching_allocator();

}  // namespace ember::memory
