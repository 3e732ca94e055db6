// The allocator keeps PyTorch's word where it uses PyTorch's names (issue 20): its
// out-of-memory sequence, and private pools under concurrent captures; and what
// ember adds (issue 15): fragmentation gauges in memory_stats and an out-of-memory
// message that names the largest free block, the sites holding memory and an
// advisor's suggestion. Behaviour tests run on both backends (ALLOCATOR_TEST); the
// capture tests here are simulated (tests/cuda/test_allocator_capture.cpp repeats
// them with real captures).
#include <doctest/doctest.h>

#include <cstdint>
#include <optional>
#include <sstream>
#include <stdexcept>
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

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

std::string oom_message(CachingAllocator& a, size_t bytes, cudaStream_t stream) {
  try {
    a.allocate(bytes, stream);
  } catch (const OutOfMemoryError& e) {
    return e.what();
  }
  return "(no out-of-memory error)";
}

cudaStream_t fake_stream(int i) {
  return reinterpret_cast<cudaStream_t>(static_cast<uintptr_t>(i) * 0x1000);
}

BlockState state_at(const CachingAllocator& a, const void* p) {
  for (const SegmentSnapshot& s : a.memory_snapshot().segments)
    for (const BlockSnapshot& b : s.blocks)
      if (b.address == addr(p)) return b.state;
  FAIL("no block starts at the pointer");
  return BlockState::inactive;
}

int pending_blocks(const CachingAllocator& a) {
  int n = 0;
  for (const SegmentSnapshot& s : a.memory_snapshot().segments)
    for (const BlockSnapshot& b : s.blocks) n += b.state == BlockState::active_pending_free;
  return n;
}

}  // namespace

ALLOCATOR_TEST(
    "allocator/oom: PyTorch's sequence: oversize blocks just large enough, then "
    "everything, then one retry",
    oom_sequence) {
  CachingAllocator& a = h.make(200 * kMiB, AllocatorOptions::parse("max_split_size_mb:40"));
  const cudaStream_t s = h.stream(0);
  a.deallocate(a.allocate(1024, s));  // a cached small segment (2 MiB)
  void* m30 = a.allocate(30 * kMiB, s);
  void* x60 = a.allocate(60 * kMiB, s);  // oversize (>= 40 MiB)
  void* y100 = a.allocate(100 * kMiB, s);
  for (void* p : {m30, x60, y100}) a.deallocate(p);
  CHECK(a.memory_reserved() == i64(192 * kMiB));

  // 70 MiB fits no cached block (the 100 MiB one would waste 30 >= 20 MiB) and the
  // device is full: the smallest oversize block of at least 70 MiB goes, alone, and
  // the request is tried again. Not a "retry" in PyTorch's counting.
  void* p70 = a.allocate(70 * kMiB, s);
  CHECK(stat(a, "num_device_free") == 1);
  CHECK(stat(a, "num_alloc_retries") == 0);
  CHECK(a.memory_reserved() == i64((2 + 30 + 60 + 70) * kMiB));

  // 110 MiB: no single oversize block is enough, so they go from the largest down
  // until as many bytes went (70 + 60); the 30 MiB block (not oversize) stays.
  a.deallocate(p70);
  void* p110 = a.allocate(110 * kMiB, s);
  CHECK(stat(a, "num_device_free") == 3);
  CHECK(stat(a, "num_alloc_retries") == 0);
  CHECK(a.memory_reserved() == i64((2 + 30 + 110) * kMiB));

  // 80 MiB: no oversize block is cached; everything cached goes (the 30 MiB and
  // the small segment) and the last retry succeeds.
  void* p80 = a.allocate(80 * kMiB, s);
  CHECK(stat(a, "num_device_free") == 5);
  CHECK(stat(a, "num_alloc_retries") == 1);
  CHECK(stat(a, "num_ooms") == 0);
  CHECK(a.memory_reserved() == i64(190 * kMiB));
  a.deallocate(p110);
  a.deallocate(p80);
}

ALLOCATOR_TEST(
    "allocator/oom: the message names the largest free block and the sites holding "
    "memory",
    oom_message_sites) {
  CachingAllocator& a = h.make(100 * kMiB);
  const cudaStream_t s = h.stream(0);
  std::vector<void*> live;
  {
    AllocationScope scope("model.fc1");
    AllocationTag tag("linear");
    live.push_back(a.allocate(24 * kMiB, s));
  }
  {
    AllocationTag tag("adam.exp_avg");
    live.push_back(a.allocate(12 * kMiB, s));
    live.push_back(a.allocate(12 * kMiB, s));
  }
  live.push_back(a.allocate(5 * kMiB, s));  // untagged; a 20 MiB segment, 15 MiB left free
  static const char* kSites[] = {"site0", "site1", "site2", "site3", "site4", "site5"};
  for (const char* site : kSites) {
    AllocationTag tag(site);
    live.push_back(a.allocate(1000, s));  // 1024 bytes each, in one small segment
  }
  const std::string message = oom_message(a, 40 * kMiB, s);  // 70 + 40 > 100
  const std::vector<std::string> lines = lines_of(message);
  REQUIRE(lines.size() == 8);
  CHECK(lines[0] ==
        "CUDA out of memory. Tried to allocate 40.00 MiB. GPU 0 has a total capacity of "
        "100.00 MiB of which 30.00 MiB is free. Of the allocated memory 53.01 MiB is allocated "
        "by ember, and 16.99 MiB is reserved by ember but unallocated. If reserved but "
        "unallocated memory is large try setting EMBER_CUDA_ALLOC_CONF=expandable_segments:True "
        "to avoid fragmentation.");
  CHECK(lines[1] == "Largest free block: 15.00 MiB (16.99 MiB cached in 2 free blocks).");
  CHECK(lines[2] == "Live memory by allocation site (the largest 5 of 9):");
  CHECK(lines[3] == "  24.00 MiB in 2 blocks: adam.exp_avg");
  CHECK(lines[4] == "  24.00 MiB in 1 block: model.fc1 / linear");
  CHECK(lines[5] == "  5.00 MiB in 1 block: (untagged)");
  CHECK(lines[6] == "  1024 bytes in 1 block: site0");
  CHECK(lines[7] == "  1024 bytes in 1 block: site1");
  for (void* p : live) a.deallocate(p);
}

ALLOCATOR_TEST("allocator/oom: an advisor adds one line, given the history and the request",
               oom_advisor) {
  CachingAllocator& a = h.make(40 * kMiB);
  const cudaStream_t s = h.stream(0);
  a.record_memory_history(true, 100);
  std::vector<TraceEntry> seen;
  OutOfMemoryRequest asked;
  a.set_out_of_memory_advisor(
      [&](const std::vector<TraceEntry>& history, const OutOfMemoryRequest& request) {
        seen = history;
        asked = request;
        return std::optional<std::string>("expandable_segments:True would have fit\nsecond line");
      });
  void* p = a.allocate(24 * kMiB, s);
  const std::vector<std::string> lines = lines_of(oom_message(a, 30 * kMiB - 100, s));
  REQUIRE(lines.size() == 5);
  CHECK(lines.back() == "expandable_segments:True would have fit");  // one line only
  CHECK(asked.requested_bytes == 30 * kMiB - 100);
  CHECK(asked.rounded_bytes == 30 * kMiB);
  CHECK(asked.allocation_bytes == 30 * kMiB);
  CHECK(asked.stream == s);
  CHECK(asked.capacity == 40 * kMiB);
  CHECK(asked.free_bytes == 16 * kMiB);
  CHECK(asked.options == &a.options());
  // The history so far, oldest first: the segment and the allocation of p (the
  // oom entry is recorded first too, so the advisor sees what failed).
  REQUIRE(seen.size() == 3);
  CHECK(seen[0].action == TraceAction::segment_alloc);
  CHECK(seen[1].action == TraceAction::alloc);
  CHECK(seen[1].address == addr(p));
  CHECK(seen[2].action == TraceAction::oom);

  // An advisor that throws or has nothing to say adds nothing.
  a.set_out_of_memory_advisor(
      [](const std::vector<TraceEntry>&, const OutOfMemoryRequest&) -> std::optional<std::string> {
        throw std::runtime_error("replay failed");
      });
  CHECK(lines_of(oom_message(a, 30 * kMiB, s)).size() == 4);
  a.set_out_of_memory_advisor(
      [](const std::vector<TraceEntry>&, const OutOfMemoryRequest&) { return std::nullopt; });
  CHECK(lines_of(oom_message(a, 30 * kMiB, s)).size() == 4);

  // The process-wide default serves allocators without an advisor of their own.
  set_default_out_of_memory_advisor(
      [](const std::vector<TraceEntry>& history, const OutOfMemoryRequest&) {
        return std::optional<std::string>("default advisor saw " + std::to_string(history.size()) +
                                          " events");
      });
  CachingAllocator& b = h.make(40 * kMiB);
  void* q = b.allocate(24 * kMiB, s);
  CHECK(lines_of(oom_message(b, 30 * kMiB, s)).back() == "default advisor saw 0 events");
  CHECK(lines_of(oom_message(a, 30 * kMiB, s)).size() == 4);  // a's own advisor wins
  set_default_out_of_memory_advisor(nullptr);
  CHECK(lines_of(oom_message(b, 30 * kMiB, s)).size() == 4);
  b.deallocate(q);
  a.deallocate(p);
}

ALLOCATOR_TEST(
    "allocator/stats: fragmentation gauges: the largest free block and reserved but "
    "unallocated bytes, per pool",
    fragmentation_gauges) {
  CachingAllocator& a = h.make(256 * kMiB);
  const cudaStream_t s = h.stream(0);
  void* big = a.allocate(3 * kMiB, s);  // 3 MiB of a 20 MiB segment
  void* tiny = a.allocate(1000, s);     // 1024 bytes of a 2 MiB segment
  auto stats = a.memory_stats();
  CHECK(stats.at("largest_free_block_bytes.all") == i64(17 * kMiB));
  CHECK(stats.at("largest_free_block_bytes.large_pool") == i64(17 * kMiB));
  CHECK(stats.at("largest_free_block_bytes.small_pool") == i64(2 * kMiB - 1024));
  CHECK(stats.at("reserved_unallocated_bytes.all") == i64(22 * kMiB - 3 * kMiB - 1024));
  CHECK(stats.at("reserved_unallocated_bytes.large_pool") == i64(17 * kMiB));
  CHECK(stats.at("reserved_unallocated_bytes.small_pool") == i64(2 * kMiB - 1024));
  CHECK(stats.at("address_space_bytes.all") == i64(22 * kMiB));  // = reserved: no expandable

  // A second 3 MiB block splits the free 17 MiB; freeing the first leaves a 3 MiB
  // hole the largest free block does not include.
  void* big2 = a.allocate(3 * kMiB, s);
  a.deallocate(big);
  stats = a.memory_stats();
  CHECK(stats.at("largest_free_block_bytes.large_pool") == i64(14 * kMiB));
  CHECK(stats.at("reserved_unallocated_bytes.large_pool") == i64(17 * kMiB));
  a.deallocate(big2);
  a.deallocate(tiny);
  stats = a.memory_stats();
  CHECK(stats.at("largest_free_block_bytes.all") == i64(20 * kMiB));
  CHECK(stats.at("reserved_unallocated_bytes.all") == i64(22 * kMiB));
}

ALLOCATOR_TEST("allocator/reuse: of equal free blocks the lowest address serves first",
               equal_blocks_lowest_address) {
  // The best-fit search compares (stream, size) strictly, so among blocks of the
  // size asked for it lands on the first, the lowest address.
  CachingAllocator& a = h.make(256 * kMiB);
  const cudaStream_t s = h.stream(0);
  std::vector<void*> p;
  for (int i = 0; i < 5; ++i) p.push_back(a.allocate(2 * kMiB, s));  // one 20 MiB segment
  a.deallocate(p[3]);
  a.deallocate(p[1]);  // two free 2 MiB blocks (p[1] lower), and the 10 MiB tail
  CHECK(a.allocate(2 * kMiB, s) == p[1]);
  CHECK(a.allocate(2 * kMiB, s) == p[3]);
  CHECK(a.allocate(2 * kMiB, s) == static_cast<char*>(p[4]) + 2 * kMiB);  // then the tail
  for (int i = 0; i < 5; ++i) a.deallocate(p[static_cast<size_t>(i)]);
  a.deallocate(static_cast<char*>(p[4]) + 2 * kMiB);
  CHECK(a.memory_allocated() == 0);
}

TEST_CASE(
    "allocator/pool: blocks freed during two concurrent captures go back to the right "
    "graph's pool") {
  // Run twice: the captures end and their pools are released in either order.
  for (const bool a_first : {true, false}) {
    CAPTURE(a_first);
    CachingAllocator a(std::make_unique<SimulatedBackend>(256 * kMiB));
    const cudaStream_t s0 = fake_stream(0), s1 = fake_stream(1), s2 = fake_stream(2);
    void* g = a.allocate(kMiB, s0);  // made before the captures (an input, say)
    const auto pool_a = a.create_pool(), pool_b = a.create_pool();
    a.begin_allocate_to_pool(pool_a, s1);
    a.begin_allocate_to_pool(pool_b, s2);
    void* a1 = a.allocate(kMiB, s1);              // graph A's segment
    void* b1 = a.allocate(kMiB, s2);              // graph B's segment
    CHECK(a.memory_reserved() == i64(6 * kMiB));  // three small segments

    // Freed while both capture, each block returns to its own graph's pool.
    a.deallocate(b1);
    void* a2 = a.allocate(kMiB, s1);
    CHECK(a2 != b1);  // A never gets B's block
    CHECK(a.allocate(kMiB, s2) == b1);
    a.deallocate(a1);
    CHECK(a.allocate(kMiB, s1) == a1);
    CHECK(a.memory_reserved() == i64(6 * kMiB));

    // A general block freed while both capture may be used by either graph: it
    // is held until both pools are released, whichever goes first.
    a.deallocate(g);
    const auto first = a_first ? pool_a : pool_b, second = a_first ? pool_b : pool_a;
    a.end_allocate_to_pool(first);
    a.end_allocate_to_pool(second);
    CHECK(pending_blocks(a) == 1);
    void* x = a.allocate(kMiB, s0);
    CHECK(x != g);
    a.release_pool(first, s0);
    CHECK(state_at(a, g) == BlockState::active_pending_free);  // the other graph may replay
    void* y = a.allocate(kMiB, s0);
    CHECK(y != g);
    a.release_pool(second, s0);
    CHECK(pending_blocks(a) == 0);
    CHECK(state_at(a, g) == BlockState::inactive);  // cached, free for reuse

    for (void* p : {x, y, a1, a2, b1}) a.deallocate(p);
    a.empty_cache();
    CHECK(a.memory_reserved() == 0);
    CHECK(a.memory_allocated() == 0);
  }
}

TEST_CASE(
    "allocator/pool: a block used on another stream and freed during captures waits for "
    "its events once no capture is underway") {
  auto backend = std::make_unique<SimulatedBackend>(256 * kMiB);
  SimulatedBackend* sim = backend.get();
  CachingAllocator a(std::move(backend));
  const cudaStream_t s0 = fake_stream(0), s1 = fake_stream(1), s2 = fake_stream(2),
                     s3 = fake_stream(3);
  void* g = a.allocate(kMiB, s0);
  a.record_stream(g, s3);
  sim->hold(s3);  // work on s3 that uses g is still running
  const auto pool_a = a.create_pool(), pool_c = a.create_pool();
  a.begin_allocate_to_pool(pool_a, s1);
  a.deallocate(g);  // held by A
  a.end_allocate_to_pool(pool_a);
  a.begin_allocate_to_pool(pool_c, s2);  // a later capture, which g is not held for
  a.release_pool(pool_a, s0);            // g's holders are gone, but no event may be recorded now
  CHECK(sim->live_events() == 0);
  CHECK(pending_blocks(a) == 1);
  a.end_allocate_to_pool(pool_c);
  void* x = a.allocate(kMiB, s0);  // no capture: g's event is recorded on s3
  CHECK(x != g);
  CHECK(sim->live_events() == 1);
  CHECK(pending_blocks(a) == 1);
  sim->release(s3);
  void* y = a.allocate(kMiB, s0);  // the event completed: g is free and reused
  CHECK(y == g);
  a.deallocate(x);
  a.deallocate(y);
  a.release_pool(pool_c, s0);
  a.empty_cache();
  CHECK(a.memory_reserved() == 0);
}
