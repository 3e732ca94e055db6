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
//  * When the backend fails (PyTorch's sequence): with max_split_size set, the
//    smallest cached oversize block at least as large as the request is returned
//    (or, if none is, oversize blocks from the largest down until as many bytes
//    are), and the request tried again; if that fails, every cached block that
//    forms a whole segment is returned (after waiting for outstanding events) and
//    the request retried once more (num_alloc_retries). If it fails again,
//    OutOfMemoryError is thrown (num_ooms) and the allocator is left as it was,
//    less the cache it freed. The message gives PyTorch's facts, then the largest
//    free block, the allocation sites holding the most memory and an advisor's
//    one-line suggestion (set_out_of_memory_advisor; by default the replay one of
//    core/memory/replay.h, which speaks only while history is recorded).
//  * garbage_collection_threshold:t (PyTorch's rule): on a miss, if reserved memory
//    exceeds t times the allowed memory (the backend's capacity), whole free
//    segments of the general large pool whose age (large-pool lookups since they
//    were cached) is at least the average are returned, pass after pass, until the
//    excess is reclaimed or no candidate is left.
//  * empty_cache() waits for outstanding events and returns every whole free
//    segment. Memory still in use, or sharing a segment with it, stays reserved.
//  * Expandable segments (expandable_segments:True, on a backend with virtual memory
//    management; otherwise ordinary segments and a warning): instead of a segment
//    per miss, each (stream, pool, graph pool) has one range of address space
//    (the device's capacity and an eighth) whose memory is mapped at its end in
//    pages of the backend's granularity (2 MiB on current GPUs) as requests need
//    it. Its blocks split (any remainder of at least 512 bytes) and merge as in
//    ordinary segments; max_split_size does not apply inside it. A miss maps what
//    the free block at the end lacks, rounded up to pages, and a best fit prefers
//    any other block to that growable end. empty_cache() (and the out-of-memory
//    retry) unmaps the whole free pages after the last block in use, and returns
//    the range once nothing is mapped. A free block with a live block after it
//    stays mapped: live blocks pin the pages below them.
//    reserved_bytes counts mapped memory, not address space (address_space_bytes
//    in memory_stats() does); a segment counts once while any of it is mapped;
//    num_device_alloc/num_device_free count maps and unmaps; as PyTorch, blocks of
//    expandable segments are left out of inactive_split(_bytes).
//  * Private pools (for CUDA graphs, cuda/graph.h; PyTorch's graph pools): while a
//    pool captures a stream, allocations on that stream are served from the pool's
//    own segments only, and a freed block of the pool returns to the pool (during
//    the capture and after it), since a replay writes to the addresses the capture
//    was given. While any capture is underway nothing is returned to the backend
//    (empty_cache throws; an allocation that does not fit throws OutOfMemoryError
//    at once, without freeing the cache to retry; no garbage collection) and no
//    event is queried or recorded (a block used on other streams and freed then
//    waits for its events until no capture is). A block of the general cache freed
//    during a capture is held back (shown as pending free) until every pool that
//    was capturing at that moment has been released, as any of those graphs may
//    use it; a block of a pool goes back to that pool, whatever else captures.
//    Releasing a pool hands its free blocks to the general
//    cache, and its blocks still in use join it when freed.
//
// Thread-safe: one lock per allocator. In steady state (a hit in the cache) an
// allocate/deallocate pair does no heap allocation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/base/alloc_tag.h"
#include "core/memory/alloc_config.h"
#include "core/memory/allocator.h"
#include "core/memory/backends.h"
#include "core/memory/memory_snapshot.h"
#include "core/memory/memory_stats.h"

namespace ember::memory {

inline constexpr size_t kMinBlockSize = 512;                // rounding unit
inline constexpr size_t kSmallSize = size_t{1} << 20;       // largest small-pool request
inline constexpr size_t kSmallBuffer = size_t{2} << 20;     // small-pool segment
inline constexpr size_t kLargeBuffer = size_t{20} << 20;    // large-pool segment under...
inline constexpr size_t kMinLargeAlloc = size_t{10} << 20;  // ...this request size
inline constexpr size_t kRoundLarge = size_t{2} << 20;      // rounding of larger segments
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
  uintptr_t address = 0;  // the pointer allocate() returned
  size_t requested_size = 0;
  int64_t offset = 0;         // of the first bad byte from `address` (< 0: before it)
  size_t bad_bytes = 0;       // how many bytes of the guard or poison were changed
  const char* tag = nullptr;  // allocation site, as AllocationTag / AllocationScope
  const char* scope = nullptr;
  std::string message;  // all of the above in words
};

// A request the allocator could not serve, as an out-of-memory advisor sees it.
struct OutOfMemoryRequest {
  size_t requested_bytes = 0;   // what the caller asked for
  size_t rounded_bytes = 0;     // after round_size
  size_t allocation_bytes = 0;  // the segment the policy asked the backend for
  cudaStream_t stream = nullptr;
  int device = 0;
  bool host = false;
  size_t capacity = 0;  // the backend's total and free memory (0: unknown)
  size_t free_bytes = 0;
  const AllocatorOptions* options = nullptr;  // the failing allocator's
  // While history is recorded: the blocks allocated or waiting on other streams
  // (address, requested bytes, stream), so a replay of the history can start
  // with those it began after. Empty otherwise.
  std::vector<LiveBlock> live_blocks;
};

// Asked while an OutOfMemoryError is built, with the allocator's recent history
// (oldest first; empty unless record_memory_history is on) and the request that
// failed: returns one line the message ends with (say, which other option would
// have fit a replay of that history), or nothing. It runs under the allocator's
// lock, so it must not call that allocator; an exception from it is ignored.
using OutOfMemoryAdvisor = std::function<std::optional<std::string>(
    const std::vector<TraceEntry>& history, const OutOfMemoryRequest& request)>;

// The advisor of every allocator that has none of its own (process-wide; empty
// by default). With neither, replay_out_of_memory_advisor (core/memory/replay.h)
// advises: it speaks only when history is recorded and a replay of it shows that
// another option would have fit.
void set_default_out_of_memory_advisor(OutOfMemoryAdvisor advisor);

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

  MemoryStats stats() const;  // counters and gauges (memory_stats.h)
  // PyTorch's keys, and ember's fragmentation gauges (MemoryStats::to_map).
  std::map<std::string, int64_t> memory_stats() const;
  int64_t memory_allocated() const;       // allocated_bytes.all.current
  int64_t max_memory_allocated() const;   // allocated_bytes.all.peak
  int64_t memory_reserved() const;        // reserved_bytes.all.current
  int64_t max_memory_reserved() const;    // reserved_bytes.all.peak
  void reset_peak_memory_stats();         // every peak := current
  void reset_accumulated_memory_stats();  // every allocated/freed total and event count := 0
  // PyTorch's table, then one line of ember's (format_fragmentation_line).
  std::string memory_summary(bool abbreviated = false) const;

  MemorySnapshot memory_snapshot() const;
  // Turning recording on starts an empty ring of `max_entries` (> 0); turning it
  // off stops recording and keeps what was recorded for memory_snapshot().
  void record_memory_history(bool enabled, size_t max_entries = kDefaultHistoryEntries);
  // Records a step boundary named `label` into the history (when recording), so
  // timelines can mark steps. `label` must outlive the allocator, as tags do.
  void mark_step(const char* label);

  // This allocator's advisor (overrides the default one; empty: use the default).
  void set_out_of_memory_advisor(OutOfMemoryAdvisor advisor);

  const AllocatorOptions& options() const;
  // Whether expandable segments are in use (asked for, and the backend can).
  bool expandable_segments() const;
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
