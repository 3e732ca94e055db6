// The allocator's counters under PyTorch's names (allocated_bytes.all.current, ...)
// plus a few gauges of ember's own (fragmentation, address space), and the reports
// built from them: the memory_summary() table, laid out exactly as
// torch.cuda.memory_summary() lays it out, one line of ember's below it, and
// human-readable byte sizes.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>

namespace ember::memory {

// One counter: its value now, its high-water mark, and the totals ever added and
// removed (current == allocated - freed until reset_accumulated()).
struct Stat {
  int64_t current = 0;
  int64_t peak = 0;
  int64_t allocated = 0;
  int64_t freed = 0;

  void increase(int64_t n) {
    current += n;
    allocated += n;
    if (current > peak) peak = current;
  }
  void decrease(int64_t n) {
    current -= n;
    freed += n;
  }
  void reset_accumulated() { allocated = freed = 0; }
  void reset_peak() { peak = current; }
};

// Index into a StatArray, PyTorch's order.
enum StatType : size_t { kAggregate = 0, kSmallPool = 1, kLargePool = 2, kNumStatTypes = 3 };
using StatArray = std::array<Stat, kNumStatTypes>;

struct MemoryStats {
  StatArray allocation;      // blocks handed to callers
  StatArray segment;         // segments held from the backend
  StatArray active;          // allocated, or freed but waiting on other streams
  StatArray inactive_split;  // free blocks that are part of a split segment
  StatArray allocated_bytes;
  StatArray reserved_bytes;
  StatArray active_bytes;
  StatArray inactive_split_bytes;    // "non-releasable" memory
  StatArray requested_bytes;         // what callers asked for, before rounding
  int64_t num_alloc_retries = 0;     // backend failures answered by freeing the cache
  int64_t num_ooms = 0;              // OutOfMemoryErrors thrown
  int64_t num_sync_all_streams = 0;  // waits on every outstanding event
  int64_t num_device_alloc = 0;      // raw_alloc calls that succeeded
  int64_t num_device_free = 0;       // raw_free calls
  Stat oversize_allocations;         // blocks >= max_split_size handed out
  Stat oversize_segments;            // segments >= max_split_size held
  int64_t max_split_size = -1;       // bytes; -1 when unlimited (PyTorch's SIZE_MAX cast)

  // ember's gauges, not PyTorch's: values at the moment the stats were taken
  // (CachingAllocator::stats() fills them; no peaks or totals), by StatType.
  // The largest free block cached (private pools included): the largest request
  // the cache can serve without new memory.
  std::array<int64_t, kNumStatTypes> largest_free_block{};
  // Address space held: reserved_bytes plus the unmapped rest of expandable
  // segments' ranges (equal to reserved_bytes without expandable segments).
  std::array<int64_t, kNumStatTypes> address_space{};

  void reset_accumulated();
  void reset_peak();
  // Flattened to PyTorch's keys ("active.all.current", "num_ooms", ...), and
  // ember's, each for all/small_pool/large_pool (no .current/.peak suffix):
  //   largest_free_block_bytes.*    largest_free_block
  //   reserved_unallocated_bytes.*  reserved_bytes - allocated_bytes, current
  //   address_space_bytes.*         address_space
  // A sorted map, so printing it is stable.
  std::map<std::string, int64_t> to_map() const;
};

// torch.cuda.memory_summary()'s table for these stats. `title` is centred in the
// title row; `host` names the memory CPU instead of GPU in the row labels.
std::string format_memory_summary(const MemoryStats& stats, const std::string& title, bool host,
                                  bool abbreviated);

// The line memory_summary() prints below the table (no newline), e.g.
// "Fragmentation: largest free block 18.00 MiB (large pool 18.00 MiB, small pool
// 1.50 MiB); reserved but unallocated 19.50 MiB." and, with expandable segments,
// " Expandable segments: 64.00 MiB mapped of 159.75 GiB of address space."
std::string format_fragmentation_line(const MemoryStats& stats);

// "512 bytes", "1.50 KiB", "20.00 MiB", "1.25 GiB": the form of PyTorch's
// out-of-memory message (bytes up to 1024, then two decimals).
std::string format_bytes(uint64_t bytes);

}  // namespace ember::memory
