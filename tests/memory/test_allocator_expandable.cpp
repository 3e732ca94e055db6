// Expandable segments (expandable_segments:True): one range of address space per
// stream and pool, mapped page by page at its end, unmapped from its end by
// empty_cache and the out-of-memory retry. Each test runs on the simulated backend
// (2 MiB pages, as a GPU's) and, in suite "cuda", on CudaBackend with a capacity
// limit, where the pages are the driver's (cuMemCreate/cuMemMap).
#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/base/error.h"
#include "core/memory/caching_allocator.h"
#include "error_text.h"
#include "memory/allocator_harness.h"

using namespace ember;
using namespace ember::memory;
using namespace ember::testing;

namespace {

using State = BlockState;

const AllocatorOptions kExpandable = AllocatorOptions::parse("expandable_segments:True");

// Requires the page size these tests' numbers are written for (H100/H200: 2 MiB).
size_t page_of(CachingAllocator& a) {
  REQUIRE(a.expandable_segments());
  const size_t page = a.backend().granularity();
  REQUIRE_MESSAGE(page == 2 * kMiB, "the backend's granularity is ", page, " bytes");
  return page;
}

// The one expandable segment holding `p`.
SegmentSnapshot segment_of(const CachingAllocator& a, const void* p) {
  for (const SegmentSnapshot& s : a.memory_snapshot().segments)
    if (s.address <= addr(p) && addr(p) < s.address + s.total_size) return s;
  FAIL("no segment holds the pointer");
  return {};
}

// Writes `bytes` at `p` and reads the last one back through the backend: the
// memory is mapped and usable on the device.
void touch(CachingAllocator& a, void* p, size_t bytes, unsigned char value) {
  a.backend().fill(p, value, bytes, nullptr);
  unsigned char last = 0;
  a.backend().read(&last, static_cast<const char*>(p) + bytes - 1, 1, nullptr);
  CHECK(last == value);
}

}  // namespace

ALLOCATOR_TEST("allocator/expandable: a stream's segment grows page by page at its end",
               expandable_growth) {
  CachingAllocator& a = h.make(256 * kMiB, kExpandable);
  page_of(a);
  const cudaStream_t s0 = h.stream(0), s1 = h.stream(1);

  void* p = a.allocate(3 * kMiB, s0);  // maps 2 pages; the rest of the second stays free
  CHECK(a.memory_reserved() == i64(4 * kMiB));
  CHECK(stat(a, "reserved_bytes.large_pool.current") == i64(4 * kMiB));
  CHECK(stat(a, "segment.large_pool.current") == 1);
  CHECK(stat(a, "num_device_alloc") == 1);
  CHECK(blocks_of(a, p) == std::vector<std::pair<size_t, State>>{{3 * kMiB, State::allocated},
                                                                 {kMiB, State::inactive}});
  // The address space is the device's capacity and an eighth: 288 MiB of 256.
  const SegmentSnapshot seg = segment_of(a, p);
  CHECK(seg.expandable);
  CHECK(seg.address == addr(p));
  CHECK(seg.total_size == 4 * kMiB);
  CHECK(seg.address_space_size == 288 * kMiB);
  CHECK(stat(a, "address_space_bytes.large_pool") == i64(288 * kMiB));

  // 5 MiB more: the free 1 MiB at the end and 2 new pages, contiguous with p.
  void* q = a.allocate(5 * kMiB, s0);
  CHECK(addr(q) == addr(p) + 3 * kMiB);
  CHECK(a.memory_reserved() == i64(8 * kMiB));
  CHECK(stat(a, "segment.large_pool.current") == 1);  // still one segment
  CHECK(stat(a, "num_device_alloc") == 2);
  CHECK(blocks_of(a, p) == std::vector<std::pair<size_t, State>>{{3 * kMiB, State::allocated},
                                                                 {5 * kMiB, State::allocated}});
  touch(a, p, 3 * kMiB, 0x11);
  touch(a, q, 5 * kMiB, 0x22);

  // The small pool and another stream each get a segment of their own.
  void* tiny = a.allocate(1000, s0);
  CHECK(stat(a, "segment.small_pool.current") == 1);
  CHECK(stat(a, "reserved_bytes.small_pool.current") == i64(2 * kMiB));
  void* other = a.allocate(3 * kMiB, s1);
  CHECK(segment_of(a, other).address != seg.address);
  CHECK(stat(a, "segment.large_pool.current") == 2);
  CHECK(a.memory_reserved() == i64(14 * kMiB));
  touch(a, other, 3 * kMiB, 0x33);

  // Expandable blocks are not counted as inactive splits (as PyTorch).
  CHECK(stat(a, "inactive_split.all.current") == 0);
  CHECK(stat(a, "inactive_split_bytes.all.current") == 0);

  for (void* r : {p, q, tiny, other}) a.deallocate(r);
  CHECK(a.memory_reserved() == i64(14 * kMiB));  // cached, still mapped
  a.empty_cache();
  CHECK(a.memory_reserved() == 0);
  CHECK(stat(a, "segment.all.current") == 0);
  CHECK(stat(a, "num_device_free") == 3);  // one unmap per segment
  CHECK(stat(a, "address_space_bytes.all") == 0);
  CHECK(a.memory_snapshot().segments.empty());
  CHECK(a.max_memory_reserved() == i64(14 * kMiB));
}

ALLOCATOR_TEST(
    "allocator/expandable: empty_cache unmaps whole free pages after the last live "
    "block, never below it",
    expandable_unmap) {
  CachingAllocator& a = h.make(256 * kMiB, kExpandable);
  page_of(a);
  const cudaStream_t s = h.stream(0);
  void* p1 = a.allocate(6 * kMiB, s);
  void* p2 = a.allocate(6 * kMiB, s);
  void* p3 = a.allocate(3 * kMiB, s);  // mapped: 16 MiB, the last 1 MiB free
  CHECK(a.memory_reserved() == i64(16 * kMiB));

  // A live block pins the free pages below it: p2's hole stays mapped.
  a.deallocate(p2);
  a.empty_cache();
  CHECK(a.memory_reserved() == i64(16 * kMiB));
  CHECK(stat(a, "num_device_free") == 0);
  CHECK(stat(a, "largest_free_block_bytes.large_pool") == i64(6 * kMiB));
  CHECK(blocks_of(a, p1) == std::vector<std::pair<size_t, State>>{{6 * kMiB, State::allocated},
                                                                  {6 * kMiB, State::inactive},
                                                                  {3 * kMiB, State::allocated},
                                                                  {kMiB, State::inactive}});

  // Once p3 goes, everything after p1 is one free block: its 5 pages go back.
  a.deallocate(p3);
  a.empty_cache();
  CHECK(a.memory_reserved() == i64(6 * kMiB));
  CHECK(stat(a, "num_device_free") == 1);
  CHECK(blocks_of(a, p1) == std::vector<std::pair<size_t, State>>{{6 * kMiB, State::allocated}});

  // Only whole pages: a free tail inside a page that holds live data stays mapped.
  void* p4 = a.allocate(5 * kMiB, s);  // maps 3 pages at 6 MiB, 1 MiB of them free
  CHECK(addr(p4) == addr(p1) + 6 * kMiB);
  CHECK(a.memory_reserved() == i64(12 * kMiB));
  a.empty_cache();
  CHECK(a.memory_reserved() == i64(12 * kMiB));
  a.deallocate(p4);
  a.empty_cache();
  CHECK(a.memory_reserved() == i64(6 * kMiB));
  CHECK(stat(a, "num_device_free") == 2);

  // The pages come back where they were: growth is always at the end.
  void* p5 = a.allocate(2 * kMiB, s);
  CHECK(addr(p5) == addr(p1) + 6 * kMiB);
  a.deallocate(p5);
  a.deallocate(p1);
  a.empty_cache();
  CHECK(a.memory_reserved() == 0);
  CHECK(stat(a, "segment.all.current") == 0);
}

ALLOCATOR_TEST(
    "allocator/expandable: growing batches tile one segment where ordinary segments "
    "pile up",
    expandable_varying_batch) {
  // Each step allocates an activation of (10 + k) MiB and one twice that, then
  // frees both, for k = 0..5: the classic growing-batch pattern.
  auto run = [&](CachingAllocator& a) {
    for (size_t k = 0; k <= 5; ++k) {
      void* x = a.allocate((10 + k) * kMiB, h.stream(0));
      void* y = a.allocate(2 * (10 + k) * kMiB, h.stream(0));
      a.deallocate(x);
      a.deallocate(y);
    }
  };
  CachingAllocator& native = h.make(512 * kMiB);
  run(native);
  CachingAllocator& expandable = h.make(512 * kMiB, kExpandable);
  page_of(expandable);
  run(expandable);
  CHECK(native.max_memory_allocated() == i64(45 * kMiB));
  CHECK(expandable.max_memory_allocated() == i64(45 * kMiB));
  // Native: each step's larger tensor finds no cached block that fits and gets a
  // new segment (20, 22, ..., 30 MiB) besides the first 10 MiB one.
  CHECK(native.max_memory_reserved() == i64((10 + 20 + 22 + 24 + 26 + 28 + 30) * kMiB));
  // Expandable: the one segment grows to 45 MiB rounded up to pages.
  CHECK(expandable.max_memory_reserved() == i64(46 * kMiB));
  CHECK(stat(expandable, "segment.all.peak") == 1);
}

ALLOCATOR_TEST("allocator/expandable: out of memory unmaps free tails, retries, then reports",
               expandable_oom) {
  CachingAllocator& a = h.make(40 * kMiB, kExpandable);
  page_of(a);
  const cudaStream_t s0 = h.stream(0), s1 = h.stream(1);
  a.deallocate(a.allocate(20 * kMiB, s1));  // s1's segment: 20 MiB mapped, all free
  void* q = a.allocate(30 * kMiB, s0);      // 20 + 30 > 40: s1's pages go back, then it fits
  CHECK(stat(a, "num_alloc_retries") == 1);
  CHECK(stat(a, "num_device_free") == 1);
  CHECK(a.memory_reserved() == i64(30 * kMiB));
  CHECK(stat(a, "segment.all.current") == 1);  // s1's segment was returned whole
  touch(a, q, 30 * kMiB, 0x44);

  std::string message;
  try {
    a.allocate(20 * kMiB, s0);  // 30 + 20 > 40 and nothing is cached
  } catch (const OutOfMemoryError& e) {
    message = e.what();
  }
  CHECK(contains(message,
                 "CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total "
                 "capacity of 40.00 MiB of which 10.00 MiB is free."));
  CHECK_FALSE(contains(message, "try setting"));  // expandable segments are already on
  CHECK(stat(a, "num_ooms") == 1);
  CHECK(stat(a, "num_alloc_retries") == 2);
  CHECK(a.memory_reserved() == i64(30 * kMiB));
  CHECK(a.memory_allocated() == i64(30 * kMiB));

  void* r = a.allocate(10 * kMiB, s0);  // what is left still serves
  CHECK(addr(r) == addr(q) + 30 * kMiB);
  a.deallocate(q);
  a.deallocate(r);
  a.empty_cache();
  CHECK(a.memory_reserved() == 0);
}

ALLOCATOR_TEST(
    "allocator/expandable: stats, summary and history tell mapped memory from address "
    "space",
    expandable_reports) {
  CachingAllocator& a = h.make(256 * kMiB, kExpandable);
  page_of(a);
  a.record_memory_history(true, 100);
  void* p = a.allocate(3 * kMiB, h.stream(0));
  const auto stats = a.memory_stats();
  CHECK(stats.at("reserved_bytes.all.current") == i64(4 * kMiB));
  CHECK(stats.at("address_space_bytes.all") == i64(288 * kMiB));
  CHECK(stats.at("reserved_unallocated_bytes.all") == i64(kMiB));
  CHECK(stats.at("largest_free_block_bytes.all") == i64(kMiB));
  CHECK(contains(a.memory_summary(),
                 "|===========================================================================|\n"
                 "Fragmentation: largest free block 1024.00 KiB (large pool 1024.00 KiB, small "
                 "pool 0 bytes); reserved but unallocated 1024.00 KiB. Expandable segments: "
                 "4.00 MiB mapped of 288.00 MiB of address space.\n"));
  a.deallocate(p);
  a.empty_cache();
  const std::vector<TraceEntry> trace = a.memory_snapshot().trace;
  REQUIRE(trace.size() == 5);
  CHECK(trace[0].action == TraceAction::segment_map);
  CHECK(trace[0].address == addr(p));
  CHECK(trace[0].size == 4 * kMiB);
  CHECK(trace[0].reserved_bytes == i64(4 * kMiB));
  CHECK(trace[1].action == TraceAction::alloc);
  CHECK(trace[2].action == TraceAction::free_requested);
  CHECK(trace[3].action == TraceAction::free_completed);
  CHECK(trace[4].action == TraceAction::segment_unmap);
  CHECK(trace[4].address == addr(p));
  CHECK(trace[4].size == 4 * kMiB);
  CHECK(trace[4].reserved_bytes == 0);
  CHECK(std::string(to_string(TraceAction::segment_map)) == "segment_map");
}

ALLOCATOR_TEST("allocator/expandable: a graph's pool grows a segment of its own",
               expandable_private_pool) {
  CachingAllocator& a = h.make(256 * kMiB, kExpandable);
  page_of(a);
  const cudaStream_t s = h.stream(1), s2 = h.stream(2);
  void* g = a.allocate(3 * kMiB, s);  // the general segment on s
  const auto pool = a.create_pool();
  a.begin_allocate_to_pool(pool, s);
  void* p = a.allocate(3 * kMiB, s);
  CHECK(segment_of(a, p).address != segment_of(a, g).address);
  a.deallocate(p);
  a.end_allocate_to_pool(pool);
  a.deallocate(g);
  a.empty_cache();  // the general segment goes; the pool's stays for the graph
  CHECK(a.memory_reserved() == i64(4 * kMiB));
  CHECK(segment_of(a, p).total_size == 4 * kMiB);
  a.release_pool(pool, s2);
  void* again = a.allocate(3 * kMiB, s2);  // the released pool's memory, now on s2
  CHECK(again == p);
  a.deallocate(again);
  a.empty_cache();
  CHECK(a.memory_reserved() == 0);
}

TEST_CASE(
    "allocator/expandable: a driver without virtual memory falls back to ordinary "
    "segments") {
  auto backend = std::make_unique<SimulatedBackend>(256 * kMiB);
  backend->set_virtual_memory(false);
  CachingAllocator a(std::move(backend), kExpandable);
  CHECK_FALSE(a.expandable_segments());
  void* p = a.allocate(3 * kMiB, nullptr);  // PyTorch's ordinary 20 MiB segment
  CHECK(a.memory_reserved() == i64(20 * kMiB));
  CHECK(a.memory_stats().at("address_space_bytes.all") == i64(20 * kMiB));
  a.deallocate(p);

  // The default backend (host memory) has none either.
  CachingAllocator host(std::make_unique<HostBackend>(), kExpandable);
  CHECK_FALSE(host.expandable_segments());
  host.deallocate(host.allocate(100, nullptr));
}

TEST_CASE("allocator/expandable: the simulated device maps, unmaps and refuses misuse") {
  SimulatedBackend sim(64 * kMiB);
  CHECK(sim.granularity() == 2 * kMiB);
  CHECK(contains(error_of([&] { sim.set_granularity(3000); }), "power of two"));
  void* base = sim.reserve_address_space(16 * kMiB);
  REQUIRE(base != nullptr);
  CHECK(addr(base) % (2 * kMiB) == 0);
  CHECK(sim.reservations() == 1);
  CHECK(sim.reserved_address_bytes() == 16 * kMiB);
  CHECK(contains(error_of([&] { sim.set_granularity(4 * kMiB); }), "already reserved"));
  CHECK(sim.map_pages(base, 4 * kMiB));
  static_cast<char*>(base)[4 * kMiB - 1] = 7;  // mapped pages are memory
  CHECK(sim.used() == 4 * kMiB);
  CHECK(contains(error_of([&] { sim.map_pages(base, 2 * kMiB); }), "already mapped"));
  CHECK(contains(error_of([&] { sim.map_pages(static_cast<char*>(base) + 4096, 2 * kMiB); }),
                 "not whole pages"));
  sim.fail_nth_alloc(1);
  CHECK_FALSE(sim.map_pages(static_cast<char*>(base) + 4 * kMiB, 2 * kMiB));  // scripted
  sim.set_capacity(6 * kMiB);
  CHECK_FALSE(sim.map_pages(static_cast<char*>(base) + 4 * kMiB, 4 * kMiB));  // over capacity
  CHECK(sim.map_pages(static_cast<char*>(base) + 4 * kMiB, 2 * kMiB));
  CHECK(sim.mapped_bytes() == 6 * kMiB);
  CHECK(sim.map_calls() == 6);  // failed and refused calls count too
  sim.unmap_pages(base, 6 * kMiB);
  CHECK(sim.mapped_bytes() == 0);
  CHECK(sim.used() == 0);
  CHECK(sim.map_pages(base, 2 * kMiB));  // remapped pages start over: contents are gone
  CHECK(static_cast<char*>(base)[2 * kMiB - 1] == 0);
  sim.unmap_pages(base, 2 * kMiB);
  CHECK(sim.unmap_calls() == 2);
  sim.release_address_space(base, 16 * kMiB);
  CHECK(sim.reservations() == 0);
  sim.set_virtual_memory(false);
  std::string why;
  CHECK_FALSE(sim.supports_virtual_memory(&why));
  CHECK(contains(why, "no virtual memory management"));
}
