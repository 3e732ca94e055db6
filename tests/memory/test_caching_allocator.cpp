// Behaviour of the caching allocator, each test written once against a Harness and
// run twice: on the simulated backend (every machine) and on CudaBackend with a
// capacity limit (suite "cuda", skipped without a GPU). Values are exact bytes.
#include <doctest/doctest.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "core/base/error.h"
#include "core/memory/caching_allocator.h"
#include "memory/allocator_harness.h"

using namespace ember;
using namespace ember::memory;
using namespace ember::testing;

using State = BlockState;

TEST_CASE("allocator/round: the policy's size arithmetic") {
  const AllocatorOptions o;
  CHECK(CachingAllocator::round_size(1, o) == 512);
  CHECK(CachingAllocator::round_size(512, o) == 512);
  CHECK(CachingAllocator::round_size(513, o) == 1024);
  CHECK(CachingAllocator::round_size(kMiB, o) == kMiB);
  CHECK(CachingAllocator::round_size(kMiB + 1, o) == kMiB + 512);
  CHECK(CachingAllocator::segment_size(512) == 2 * kMiB);
  CHECK(CachingAllocator::segment_size(kMiB) == 2 * kMiB);
  CHECK(CachingAllocator::segment_size(kMiB + 512) == 20 * kMiB);
  CHECK(CachingAllocator::segment_size(10 * kMiB - 512) == 20 * kMiB);
  CHECK(CachingAllocator::segment_size(10 * kMiB) == 10 * kMiB);
  CHECK(CachingAllocator::segment_size(11 * kMiB + 512) == 12 * kMiB);

  AllocatorOptions four = AllocatorOptions::parse("roundup_power2_divisions:4");
  CHECK(CachingAllocator::round_size(1200000, four) == kMiB + 256 * kKiB);  // steps of 1/4 MiB
  CHECK(CachingAllocator::round_size(kMiB, four) == kMiB);                  // a power of two stays
  CHECK(CachingAllocator::round_size(2000, four) == 2048);  // at most 512*4: plain rounding
  CHECK(CachingAllocator::round_size(5000, four) == 5120);  // 4096 + 1024 (a quarter of 4096)
}

ALLOCATOR_TEST("allocator/round: requests round to 512 bytes and pick their pool", round_and_pool) {
  CachingAllocator& a = h.make(256 * kMiB);
  CHECK(a.allocate(0, h.stream(0)) == nullptr);
  CHECK(stat(a, "allocation.all.allocated") == 0);

  void* tiny = a.allocate(1, h.stream(0));
  CHECK(stat(a, "allocated_bytes.small_pool.current") == 512);
  CHECK(stat(a, "requested_bytes.small_pool.current") == 1);
  CHECK(stat(a, "reserved_bytes.small_pool.current") == i64(2 * kMiB));
  CHECK(stat(a, "segment.small_pool.current") == 1);

  void* edge = a.allocate(kMiB, h.stream(0));  // exactly 1 MiB is still small
  CHECK(stat(a, "allocated_bytes.small_pool.current") == i64(512 + kMiB));
  CHECK(stat(a, "segment.small_pool.current") == 1);  // shares the first 2 MiB segment

  // Its own segment, rounded up to 2 MiB; the 1 MiB - 512 left over is too little to
  // split off, so the block (and allocated_bytes) is the whole 12 MiB.
  void* huge = a.allocate(11 * kMiB + 1, h.stream(0));
  CHECK(stat(a, "reserved_bytes.large_pool.current") == i64(12 * kMiB));
  CHECK(stat(a, "allocated_bytes.large_pool.current") == i64(12 * kMiB));
  CHECK(stat(a, "requested_bytes.large_pool.current") == i64(11 * kMiB + 1));

  void* large = a.allocate(kMiB + 1, h.stream(0));  // nothing cached fits: a 20 MiB segment
  CHECK(stat(a, "allocated_bytes.large_pool.current") == i64(12 * kMiB + kMiB + 512));
  CHECK(stat(a, "requested_bytes.large_pool.current") == i64(11 * kMiB + 1 + kMiB + 1));
  CHECK(stat(a, "reserved_bytes.large_pool.current") == i64(32 * kMiB));
  CHECK(stat(a, "segment.all.current") == 3);
  CHECK(stat(a, "num_device_alloc") == 3);

  for (void* p : {tiny, edge, large, huge}) a.deallocate(p);
  CHECK(stat(a, "allocated_bytes.all.current") == 0);
  CHECK(stat(a, "requested_bytes.all.current") == 0);
  CHECK(stat(a, "reserved_bytes.all.current") == i64(34 * kMiB));  // cached, not returned
}

ALLOCATOR_TEST("allocator/split: a freed remainder merges back", split_merge) {
  CachingAllocator& a = h.make(256 * kMiB);
  void* p = a.allocate(1000, h.stream(0));
  void* q = a.allocate(1000, h.stream(0));
  CHECK(addr(q) == addr(p) + 1024);  // carved from the same segment, in order
  CHECK(stat(a, "inactive_split.small_pool.current") == 1);
  CHECK(stat(a, "inactive_split_bytes.small_pool.current") == i64(2 * kMiB - 2048));
  CHECK(blocks_of(a, p) ==
        std::vector<std::pair<size_t, State>>{{1024, State::allocated},
                                              {1024, State::allocated},
                                              {2 * kMiB - 2048, State::inactive}});

  a.deallocate(p);  // its neighbour q is in use: p stays a separate free block
  CHECK(stat(a, "inactive_split.small_pool.current") == 2);
  CHECK(stat(a, "inactive_split_bytes.small_pool.current") == i64(2 * kMiB - 1024));

  a.deallocate(q);  // merges with both neighbours: the segment is whole again
  CHECK(stat(a, "inactive_split.small_pool.current") == 0);
  CHECK(stat(a, "inactive_split_bytes.small_pool.current") == 0);
  CHECK(blocks_of(a, p) == std::vector<std::pair<size_t, State>>{{2 * kMiB, State::inactive}});

  // The large pool splits only when more than 1 MiB would remain.
  void* big = a.allocate(5 * kMiB, h.stream(0));
  CHECK(blocks_of(a, big) == std::vector<std::pair<size_t, State>>{{5 * kMiB, State::allocated},
                                                                   {15 * kMiB, State::inactive}});
  void* rest = a.allocate(14 * kMiB, h.stream(0));  // 1 MiB would remain: takes all 15 MiB
  CHECK(addr(rest) == addr(big) + 5 * kMiB);
  CHECK(stat(a, "allocated_bytes.large_pool.current") == i64(20 * kMiB));
  CHECK(stat(a, "requested_bytes.large_pool.current") == i64(19 * kMiB));
  a.deallocate(big);
  a.deallocate(rest);
  CHECK(blocks_of(a, big) == std::vector<std::pair<size_t, State>>{{20 * kMiB, State::inactive}});
  CHECK(stat(a, "num_device_alloc") == 2);
}

ALLOCATOR_TEST("allocator/reuse: freed blocks are reused, best fit first", reuse_best_fit) {
  CachingAllocator& a = h.make(256 * kMiB);
  void* p = a.allocate(4 * kMiB, h.stream(0));
  a.deallocate(p);
  void* again = a.allocate(4 * kMiB, h.stream(0));
  CHECK(again == p);
  CHECK(stat(a, "num_device_alloc") == 1);
  CHECK(stat(a, "segment.all.allocated") == 1);
  a.deallocate(again);

  // In one 20 MiB segment: [6 | 2 | 3 | 2 | 7 free]. Free the 6 and the 3.
  void* six = a.allocate(6 * kMiB, h.stream(0));
  void* two_a = a.allocate(2 * kMiB, h.stream(0));
  void* three = a.allocate(3 * kMiB, h.stream(0));
  void* two_b = a.allocate(2 * kMiB, h.stream(0));
  CHECK(addr(three) == addr(six) + 8 * kMiB);
  a.deallocate(six);
  a.deallocate(three);
  CHECK(a.allocate(3 * kMiB, h.stream(0)) == three);  // exact fit beats the larger blocks
  // 5 MiB: the 6 MiB block fits best (the 7 MiB one is larger); 1 MiB left is not split off.
  void* five = a.allocate(5 * kMiB, h.stream(0));
  CHECK(five == six);
  CHECK(stat(a, "allocated_bytes.large_pool.current") == i64(6 + 2 + 3 + 2) * i64(kMiB));
  CHECK(stat(a, "num_device_alloc") == 1);
  for (void* q : {five, two_a, three, two_b}) a.deallocate(q);
  CHECK(stat(a, "allocated_bytes.all.current") == 0);
}

ALLOCATOR_TEST("allocator/streams: a block serves only the stream it was allocated on",
               stream_separation) {
  CachingAllocator& a = h.make(256 * kMiB);
  cudaStream_t s1 = h.stream(1), s2 = h.stream(2);
  void* p = a.allocate(kMiB, s1);
  a.deallocate(p);
  void* q = a.allocate(kMiB, s2);  // p's segment belongs to s1: a new segment
  CHECK(q != p);
  CHECK(stat(a, "segment.small_pool.current") == 2);
  void* r = a.allocate(kMiB, s1);
  CHECK(r == p);
  CHECK(stat(a, "num_device_alloc") == 2);
  auto snap = a.memory_snapshot();
  REQUIRE(snap.segments.size() == 2);
  for (const SegmentSnapshot& s : snap.segments)
    CHECK(s.stream == (s.address <= addr(p) && addr(p) < s.address + s.total_size ? s1 : s2));
  a.deallocate(q);
  a.deallocate(r);
}

ALLOCATOR_TEST("allocator/record_stream: a block used on another stream waits for its event",
               record_stream_waits) {
  CachingAllocator& a = h.make(256 * kMiB);
  cudaStream_t s0 = h.stream(0), s1 = h.stream(1);
  void* p = a.allocate(kMiB, s0);  // front half of a 2 MiB small segment
  a.record_stream(p, s0);          // its own stream: nothing to wait for
  a.record_stream(p, s1);
  h.hold(s1);
  a.deallocate(p);  // the event recorded on s1 cannot complete yet
  CHECK(stat(a, "allocated_bytes.all.current") == 0);
  CHECK(stat(a, "active_bytes.all.current") == i64(kMiB));
  CHECK(stat(a, "active.all.current") == 1);
  CHECK(blocks_of(a, p) == std::vector<std::pair<size_t, State>>{{kMiB, State::active_pending_free},
                                                                 {kMiB, State::inactive}});

  void* q = a.allocate(kMiB, s0);  // must not be p
  CHECK(addr(q) == addr(p) + kMiB);
  CHECK(stat(a, "active_bytes.all.current") == i64(2 * kMiB));

  h.release(s1);
  void* r = a.allocate(kMiB, s0);  // the event completed: p is free again
  CHECK(r == p);
  CHECK(stat(a, "num_device_alloc") == 1);
  CHECK(stat(a, "num_sync_all_streams") == 0);  // no device-wide wait was needed
  a.deallocate(q);
  a.deallocate(r);
  CHECK(stat(a, "active_bytes.all.current") == 0);
  CHECK_THROWS_AS(a.record_stream(p, s1), ember::Error);  // no longer allocated
}

ALLOCATOR_TEST("allocator/stats: peaks and resets", peaks_and_resets) {
  CachingAllocator& a = h.make(256 * kMiB);
  void* p = a.allocate(3 * kMiB, h.stream(0));
  void* q = a.allocate(3 * kMiB, h.stream(0));
  a.deallocate(p);
  CHECK(a.memory_allocated() == i64(3 * kMiB));
  CHECK(a.max_memory_allocated() == i64(6 * kMiB));
  CHECK(a.memory_reserved() == i64(20 * kMiB));
  CHECK(a.max_memory_reserved() == i64(20 * kMiB));
  CHECK(stat(a, "allocation.all.peak") == 2);
  CHECK(stat(a, "allocated_bytes.all.allocated") == i64(6 * kMiB));
  CHECK(stat(a, "allocated_bytes.all.freed") == i64(3 * kMiB));

  a.reset_peak_memory_stats();
  CHECK(a.max_memory_allocated() == i64(3 * kMiB));
  CHECK(stat(a, "allocation.all.peak") == 1);
  CHECK(stat(a, "allocated_bytes.all.allocated") == i64(6 * kMiB));  // totals untouched

  a.reset_accumulated_memory_stats();
  CHECK(stat(a, "allocated_bytes.all.allocated") == 0);
  CHECK(stat(a, "allocated_bytes.all.freed") == 0);
  CHECK(stat(a, "num_device_alloc") == 0);
  CHECK(a.memory_allocated() == i64(3 * kMiB));  // current untouched
  CHECK(a.max_memory_allocated() == i64(3 * kMiB));

  void* r = a.allocate(kMiB, h.stream(0));
  CHECK(a.max_memory_allocated() == i64(4 * kMiB));
  a.deallocate(q);
  a.deallocate(r);
  CHECK(stat(a, "allocated_bytes.all.allocated") == i64(kMiB));
  CHECK(stat(a, "allocated_bytes.all.freed") == i64(4 * kMiB));
}

ALLOCATOR_TEST("allocator/empty_cache: whole free segments go back, split ones stay",
               empty_cache_returns_segments) {
  CachingAllocator& a = h.make(256 * kMiB);
  void* big = a.allocate(4 * kMiB, h.stream(0));
  void* x = a.allocate(kKiB, h.stream(0));
  void* y = a.allocate(kKiB, h.stream(0));
  a.deallocate(big);
  a.deallocate(x);  // y keeps the small segment split and in use
  a.empty_cache();
  CHECK(a.memory_reserved() == i64(2 * kMiB));
  CHECK(stat(a, "num_device_free") == 1);
  CHECK(stat(a, "segment.large_pool.current") == 0);
  CHECK(stat(a, "segment.large_pool.freed") == 1);
  CHECK(stat(a, "reserved_bytes.large_pool.freed") == i64(20 * kMiB));
  CHECK(stat(a, "num_sync_all_streams") == 1);

  a.deallocate(y);
  a.empty_cache();
  CHECK(a.memory_reserved() == 0);
  CHECK(stat(a, "num_device_free") == 2);
  CHECK(stat(a, "segment.all.current") == 0);
  CHECK(a.memory_snapshot().segments.empty());
  CHECK(a.max_memory_reserved() == i64(22 * kMiB));
}

ALLOCATOR_TEST("allocator/fragmentation: max_split_size_mb keeps large blocks whole",
               fragmentation) {
  // A 100 MiB block is freed, a 5 MiB request splits it, then 100 MiB is asked
  // for again: without a split limit the 95 MiB left over cannot serve it.
  auto pattern = [&](CachingAllocator& a) {
    void* first = a.allocate(100 * kMiB, h.stream(0));
    a.deallocate(first);
    void* small = a.allocate(5 * kMiB, h.stream(0));
    void* second = nullptr;
    try {
      second = a.allocate(100 * kMiB, h.stream(0));
    } catch (const ember::OutOfMemoryError&) {
    }
    return std::tuple{small, second};
  };

  CachingAllocator& plain = h.make(160 * kMiB);
  auto [small1, second1] = pattern(plain);
  CHECK(second1 == nullptr);  // 100 MiB reserved + 100 MiB more exceeds 160 MiB
  CHECK(plain.memory_reserved() == i64(100 * kMiB));
  CHECK(plain.memory_allocated() == i64(5 * kMiB));
  CHECK(stat(plain, "inactive_split_bytes.all.current") == i64(95 * kMiB));
  CHECK(stat(plain, "num_ooms") == 1);
  plain.deallocate(small1);

  CachingAllocator& limited = h.make(160 * kMiB, AllocatorOptions::parse("max_split_size_mb:50"));
  auto [small2, second2] = pattern(limited);
  REQUIRE(second2 != nullptr);
  CHECK(limited.memory_reserved() == i64(120 * kMiB));  // the 100 MiB block + one 20 MiB segment
  CHECK(limited.memory_allocated() == i64(105 * kMiB));
  CHECK(stat(limited, "inactive_split_bytes.all.current") == i64(15 * kMiB));
  CHECK(stat(limited, "num_ooms") == 0);
  CHECK(stat(limited, "max_split_size") == i64(50 * kMiB));
  CHECK(stat(limited, "oversize_segments.current") == 1);
  CHECK(stat(limited, "oversize_allocations.current") == 1);
  CHECK(stat(limited, "oversize_allocations.allocated") == 2);
  limited.deallocate(small2);
  limited.deallocate(second2);
  CHECK(stat(limited, "oversize_allocations.current") == 0);
}

ALLOCATOR_TEST("allocator/oom: a retry after freeing the cache succeeds", oom_retry_succeeds) {
  CachingAllocator& a = h.make(40 * kMiB);
  void* p = a.allocate(20 * kMiB, h.stream(0));
  a.deallocate(p);                               // 20 MiB cached
  void* q = a.allocate(30 * kMiB, h.stream(0));  // 20 + 30 > 40: free the cache, retry
  CHECK(q != nullptr);
  CHECK(stat(a, "num_alloc_retries") == 1);
  CHECK(stat(a, "num_ooms") == 0);
  CHECK(stat(a, "num_device_free") == 1);
  CHECK(stat(a, "num_sync_all_streams") == 1);
  CHECK(a.memory_reserved() == i64(30 * kMiB));
  CHECK(a.memory_allocated() == i64(30 * kMiB));
  a.deallocate(q);
}

ALLOCATOR_TEST("allocator/oom: a failed allocation throws and leaves the stats consistent",
               oom_throws_consistent) {
  CachingAllocator& a = h.make(40 * kMiB);
  a.record_memory_history(true, 100);
  void* p = a.allocate(24 * kMiB, h.stream(0));
  std::string message;
  try {
    a.allocate(30 * kMiB, h.stream(0));
  } catch (const ember::OutOfMemoryError& e) {
    message = e.what();
  }
  // PyTorch's sentence (its current advice: expandable segments), then ember's lines.
  CHECK(message ==
        "CUDA out of memory. Tried to allocate 30.00 MiB. GPU 0 has a total capacity of "
        "40.00 MiB of which 16.00 MiB is free. Of the allocated memory 24.00 MiB is allocated "
        "by ember, and 0 bytes is reserved by ember but unallocated. If reserved but "
        "unallocated memory is large try setting "
        "EMBER_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.\n"
        "Largest free block: 0 bytes (0 bytes cached in 0 free blocks).\n"
        "Live memory by allocation site (the largest 1 of 1):\n"
        "  24.00 MiB in 1 block: (untagged)");
  CHECK(stat(a, "num_ooms") == 1);
  CHECK(stat(a, "num_alloc_retries") == 1);
  CHECK(a.memory_allocated() == i64(24 * kMiB));
  CHECK(a.memory_reserved() == i64(24 * kMiB));
  CHECK(stat(a, "allocation.all.current") == 1);
  CHECK(stat(a, "active.all.current") == 1);
  CHECK(stat(a, "requested_bytes.all.current") == i64(24 * kMiB));

  void* q = a.allocate(10 * kMiB, h.stream(0));  // a smaller batch fits
  CHECK(a.memory_allocated() == i64(34 * kMiB));
  a.deallocate(q);
  a.deallocate(p);
  CHECK(a.memory_allocated() == 0);

  int ooms = 0;
  for (const TraceEntry& e : a.memory_snapshot().trace) ooms += e.action == TraceAction::oom;
  CHECK(ooms == 1);
}

ALLOCATOR_TEST("allocator/gc: PyTorch's rule frees whole large segments older than the average",
               garbage_collection) {
  // Allowed memory 100 MiB, threshold 0.7. Ages count large-pool lookups since a
  // block was cached (PyTorch's get_free_blocks_call_count).
  CachingAllocator& a =
      h.make(100 * kMiB, AllocatorOptions::parse("garbage_collection_threshold:0.7"));
  void* small = a.allocate(kMiB, h.stream(0));     // small pool: not counted, never collected
  void* a30 = a.allocate(30 * kMiB, h.stream(0));  // lookups 1-4 miss: four segments
  void* b12 = a.allocate(12 * kMiB, h.stream(0));
  void* c14 = a.allocate(14 * kMiB, h.stream(0));
  void* d16 = a.allocate(16 * kMiB, h.stream(0));
  a.deallocate(a30);  // cached at 4
  a.deallocate(b12);  // cached at 4
  a.deallocate(c14);
  for (int i = 0; i < 2; ++i) a.deallocate(a.allocate(14 * kMiB, h.stream(0)));  // c14: cached at 6
  CHECK(a.memory_reserved() == i64(2 + 30 + 12 + 14 + 16) * i64(kMiB));          // 74 MiB > 70 MiB
  CHECK(stat(a, "num_device_free") == 0);

  // Lookup 7 misses (40 MiB fits nothing). Ages: a30 3, b12 3, c14 1 (average 7/3).
  // The pass frees every candidate at least that old, b12 then a30, although b12
  // alone covers the 4 MiB excess: PyTorch does not stop at the target within a pass.
  void* p = a.allocate(40 * kMiB, h.stream(0));
  CHECK(stat(a, "num_device_free") == 2);
  CHECK(stat(a, "num_alloc_retries") == 0);
  CHECK(a.memory_reserved() == i64(2 + 14 + 16 + 40) * i64(kMiB));
  CHECK(a.allocate(14 * kMiB, h.stream(0)) == c14);  // the young one stayed cached
  a.deallocate(small);
  CHECK(stat(a, "segment.small_pool.current") == 1);
  for (void* q : {c14, d16, p}) a.deallocate(q);

  // Under the threshold nothing is collected, however old.
  CachingAllocator& b =
      h.make(100 * kMiB, AllocatorOptions::parse("garbage_collection_threshold:0.9"));
  b.deallocate(b.allocate(30 * kMiB, h.stream(0)));
  void* q = b.allocate(40 * kMiB, h.stream(0));  // 70 MiB <= 90 MiB: no collection
  CHECK(stat(b, "num_device_free") == 0);
  CHECK(b.memory_reserved() == i64(70 * kMiB));
  b.deallocate(q);
}

ALLOCATOR_TEST("allocator/threads: many threads at once leave the stats exactly at zero",
               many_threads) {
  CachingAllocator& a = h.make(size_t{4} << 30);
  constexpr int kThreads = 8;
  constexpr int kIterations = 2000;
  static constexpr size_t kSizes[] = {1, 512, 4000, 70000, kMiB, 3 * kMiB, 12 * kMiB + 7};
  const cudaStream_t streams[2] = {h.stream(0), h.stream(1)};  // created before the threads
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&a, &streams, t] {
      uint64_t state = 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(t + 1);
      auto next = [&state] {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        return static_cast<size_t>(state >> 33);
      };
      cudaStream_t s = streams[t % 2];
      std::vector<void*> live;
      for (int i = 0; i < kIterations; ++i) {
        if (live.size() < 8 && next() % 3 != 0) {
          live.push_back(a.allocate(kSizes[next() % std::size(kSizes)], s));
        } else if (!live.empty()) {
          size_t k = next() % live.size();
          a.deallocate(live[k]);
          live[k] = live.back();
          live.pop_back();
        }
      }
      for (void* p : live) a.deallocate(p);
    });
  }
  for (auto& t : threads) t.join();
  auto stats = a.memory_stats();
  for (const char* key :
       {"allocated_bytes.all.current", "active_bytes.all.current", "requested_bytes.all.current",
        "allocation.all.current", "active.all.current", "inactive_split.all.current",
        "inactive_split_bytes.all.current"})
    CHECK_MESSAGE(stats.at(key) == 0, key);
  CHECK(stats.at("allocation.all.allocated") == stats.at("allocation.all.freed"));
  CHECK(stats.at("allocation.all.allocated") > kThreads * 100);
  for (const SegmentSnapshot& s : a.memory_snapshot().segments) {
    REQUIRE(s.blocks.size() == 1);  // every segment merged back whole
    CHECK(s.blocks[0].state == BlockState::inactive);
  }
  a.empty_cache();
  CHECK(a.memory_reserved() == 0);
}

ALLOCATOR_TEST("allocator/snapshot: segments list their blocks with sizes, states and tags",
               snapshot_contents) {
  CachingAllocator& a = h.make(256 * kMiB);
  void* p = nullptr;
  void* q = nullptr;
  {
    AllocationTag tag("model.linear.forward");
    p = a.allocate(1000, h.stream(1));
    {
      AllocationTag inner("model.linear.bias");
      q = a.allocate(3000, h.stream(1));
    }
  }
  void* big = a.allocate(12 * kMiB, h.stream(0));
  CHECK(AllocationTag::current() == nullptr);
  a.deallocate(p);

  MemorySnapshot snap = a.memory_snapshot();
  REQUIRE(snap.segments.size() == 2);
  const SegmentSnapshot& small =
      snap.segments[0].address <= addr(q) &&
              addr(q) < snap.segments[0].address + snap.segments[0].total_size
          ? snap.segments[0]
          : snap.segments[1];
  const SegmentSnapshot& large = &small == &snap.segments[0] ? snap.segments[1] : snap.segments[0];

  CHECK(small.total_size == 2 * kMiB);
  CHECK(!small.is_large);
  CHECK(small.stream == h.stream(1));
  CHECK(small.allocated_size == 3072);
  CHECK(small.active_size == 3072);
  CHECK(small.requested_size == 3000);
  REQUIRE(small.blocks.size() == 3);
  CHECK(small.blocks[0].address == small.address);
  CHECK(small.blocks[0].size == 1024);
  CHECK(small.blocks[0].state == BlockState::inactive);
  CHECK(small.blocks[0].tag == nullptr);
  CHECK(small.blocks[1].address == addr(q));
  CHECK(small.blocks[1].size == 3072);
  CHECK(small.blocks[1].requested_size == 3000);
  CHECK(small.blocks[1].state == BlockState::allocated);
  CHECK(std::string(small.blocks[1].tag) == "model.linear.bias");
  CHECK(small.blocks[2].size == 2 * kMiB - 4096);

  CHECK(large.total_size == 12 * kMiB);
  CHECK(large.is_large);
  REQUIRE(large.blocks.size() == 1);
  CHECK(large.blocks[0].state == BlockState::allocated);
  CHECK(large.blocks[0].requested_size == 12 * kMiB);
  CHECK(snap.trace.empty());  // history was never switched on

  a.deallocate(q);
  a.deallocate(big);
}

ALLOCATOR_TEST("allocator/history: the ring keeps the latest entries in order", history_ring) {
  CachingAllocator& a = h.make(256 * kMiB);
  a.record_memory_history(true, 4);
  {
    AllocationTag tag("step");
    void* p = a.allocate(kMiB, h.stream(0));  // segment_alloc, alloc
    a.deallocate(p);                          // free_requested, free_completed
  }
  void* q = a.allocate(2 * kMiB, h.stream(0));  // segment_alloc, alloc
  a.empty_cache();  // small segment_free: 7 entries so far, the ring keeps 4
  std::vector<TraceEntry> trace = a.memory_snapshot().trace;
  REQUIRE(trace.size() == 4);
  CHECK(trace[0].action == TraceAction::free_completed);
  CHECK(std::string(trace[0].tag) == "step");
  CHECK(trace[0].requested_size == kMiB);
  CHECK(trace[0].allocated_bytes == 0);
  CHECK(trace[1].action == TraceAction::segment_alloc);
  CHECK(trace[1].size == 20 * kMiB);
  CHECK(trace[1].reserved_bytes == i64(22 * kMiB));
  CHECK(trace[2].action == TraceAction::alloc);
  CHECK(trace[2].address == addr(q));
  CHECK(trace[2].allocated_bytes == i64(2 * kMiB));
  CHECK(trace[3].action == TraceAction::segment_free);
  CHECK(trace[3].size == 2 * kMiB);
  CHECK(trace[3].reserved_bytes == i64(20 * kMiB));
  for (size_t i = 1; i < trace.size(); ++i) CHECK(trace[i].time_ns >= trace[i - 1].time_ns);

  a.record_memory_history(false);
  a.deallocate(q);
  CHECK(a.memory_snapshot().trace.size() == 4);  // kept, no longer growing
}
