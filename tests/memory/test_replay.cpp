// The replay engine (core/memory/replay.h) against numbers worked out by hand:
// peaks, segments, retries, fragmentation at the peak, deferred frees, streams,
// empty_cache at segment_free rows, the smallest device a trace fits, the first
// failing event at a set capacity, inconsistent traces named by line, ember's own
// history replayed to its own peaks, and the out-of-memory suggestion.
#include <doctest/doctest.h>

#include <cstdint>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "core/base/error.h"
#include "core/memory/caching_allocator.h"
#include "core/memory/replay.h"
#include "core/memory/trace.h"
#include "error_text.h"
#include "source_dir.h"

namespace {

using namespace ember;
using namespace ember::memory;
using ember::testing::contains;
using ember::testing::error_of;

constexpr uint64_t kMiB = 1024 * 1024;

ReplayProgram program_of(const std::string& rows, ReplayOptions options = {}) {
  return ReplayProgram::compile(parse_trace_csv("action,addr,size,stream\n" + rows, "t.csv"),
                                options);
}

std::string data(const std::string& name) {
  return (ember::testing::source_dir() / "tests" / "data" / "traces" / name).string();
}

ReplayResult run(const ReplayProgram& p, const std::string& conf = "native",
                 uint64_t capacity = RunSettings::kUnlimitedCapacity) {
  RunSettings s;
  s.capacity = capacity;
  return make_caching_policy(conf)->run(p, s);
}

std::string compile_error(const std::string& rows) {
  return error_of([&] { program_of(rows); });
}

}  // namespace

// synthetic_small.csv, by hand (native rounding: 512 bytes; 1 MiB and less from
// 2 MiB small segments, under 10 MiB from 20 MiB segments, else rounded to 2 MiB):
//   alloc 1000      -> block 1024 in a new 2 MiB small segment           reserved  2 MiB
//   alloc 3000000   -> block 3000320 in a new 20 MiB segment             reserved 22 MiB
//   free 1000 (at once)
//   alloc 30000000  -> block 30000128 in a new 30 MiB segment (15 x 2 MiB)   52 MiB (peak)
//                      allocated 3000320 + 30000128 = 33000448 (peak)
//   free_requested 3000000, its free_completed comes after the next alloc
//   alloc 1000000   -> block 1000448 from the small segment
// At the peak the cache holds 2 MiB (small, whole), 20 MiB - 3000320 = 17971200 and
// 30 MiB - 30000128 = 1457152: 21525504 bytes, the largest 17971200.
TEST_CASE("replay/native: peaks, segments and fragmentation of a small trace, by hand") {
  const ReplayProgram p = ReplayProgram::compile(read_trace_csv(data("synthetic_small.csv")));
  CHECK(p.allocs() == 4);
  CHECK(p.streams().size() == 1);
  CHECK(p.largest_request() == 30000000);
  CHECK(p.peak_live_requested() == 33000000);
  CHECK_FALSE(p.recorded_peak_reserved().has_value());  // no segment rows
  const ReplayResult r = run(p);
  CHECK(r.ooms == 0);
  CHECK(r.retries == 0);
  CHECK(r.peak_reserved == int64_t(52 * kMiB));
  CHECK(r.peak_allocated == 33000448);
  CHECK(r.peak_segments == 3);
  CHECK(r.peak_reserved_event == 4);
  CHECK(r.events == p.ops().size());
  CHECK(r.largest_free_at_peak == 17971200);
  CHECK(r.free_cached_at_peak == 21525504);
  CHECK(r.fragmentation == doctest::Approx(1.0 - 17971200.0 / 21525504.0));
  CHECK(r.events_per_second() > 0);
}

TEST_CASE("replay/capacity: the first failing event and what was live then") {
  const ReplayProgram p = ReplayProgram::compile(read_trace_csv(data("synthetic_small.csv")));
  // At 40 MiB the 30 MB request (row 5, line 9) needs a 30 MiB segment beside the
  // 20 MiB one holding the 3 MB block; the retry frees the whole 2 MiB small
  // segment, which is not enough.
  const ReplayResult r = run(p, "native", 40 * kMiB);
  REQUIRE(r.first_failure.has_value());
  CHECK(r.first_failure->event == 4);
  CHECK(p.trace().line_of(4) == 9);
  CHECK(r.first_failure->size == 30000000);
  CHECK(r.first_failure->live_requested == 3000000);
  CHECK(r.first_failure->allocated == 3000320);
  CHECK(r.first_failure->reserved == int64_t(20 * kMiB));
  CHECK(contains(r.first_failure->message, "out of memory"));
  CHECK(r.ooms == 1);  // the later 1 MB request fits in a new small segment
  CHECK(r.peak_reserved == int64_t(22 * kMiB));
  const std::string table = format_replay_table(p, {r}, ReplayTableOptions{false, true});
  CHECK(contains(table, "first OOM at " + data("synthetic_small.csv") + ":9, alloc of 28.61 MiB"));
  CHECK(contains(table, "live then: 2.86 MiB requested, 2.86 MiB allocated, 20.00 MiB reserved"));
}

// torch_snapshot_small.csv (tools/convert_torch_trace.py of tests/data/torch/
// snapshot_small.json), by hand:
//   prelude: alloc 2000 (live before recording) -> a 2 MiB small segment     2 MiB
//   alloc 4 MiB -> a 20 MiB segment                                          22 MiB (peak)
//   alloc 1048577 -> 1049088 bytes split from that segment's remainder
//   free 2000; free_requested 4 MiB (completed after the next alloc)
//   alloc 8 MiB -> split from the remainder (15728128 bytes)       allocated 9437696 (peak)
//   frees; segment_free -> empty_cache
// At the first peak (after the 4 MiB alloc) the cache holds 2 MiB - 2048 and
// 16 MiB: fragmentation 1 - 16 MiB / (16 MiB + 2095104). The trace's own segment
// rows saw only the 20 MiB segment (the small one predates recording).
TEST_CASE("replay/pytorch: a converted PyTorch trace, by hand") {
  const ReplayProgram p = ReplayProgram::compile(read_trace_csv(data("torch_snapshot_small.csv")));
  CHECK(p.trace().meta("prelude_allocs") == "1");
  CHECK(p.trace().meta("dropped_oom") == "1");
  CHECK(p.allocs() == 4);
  CHECK(p.recorded_peak_reserved() == 20 * kMiB);
  CHECK(p.ops()[6].kind == ReplayOpKind::free_deferred);
  CHECK(p.ops()[8].kind == ReplayOpKind::complete);
  CHECK(p.ops()[13].kind == ReplayOpKind::empty_cache);
  const ReplayResult r = run(p);
  CHECK(r.peak_reserved == int64_t(22 * kMiB));
  CHECK(r.peak_allocated == 9437696);
  CHECK(r.peak_segments == 2);
  CHECK(r.peak_reserved_event == 2);
  CHECK(r.free_cached_at_peak == int64_t(16 * kMiB + 2095104));
  CHECK(r.largest_free_at_peak == int64_t(16 * kMiB));
  CHECK(r.fragmentation == doctest::Approx(1.0 - 16.0 * kMiB / (16.0 * kMiB + 2095104.0)));
}

TEST_CASE("replay/bisection: the smallest device the trace fits, by hand") {
  const ReplayProgram p = ReplayProgram::compile(read_trace_csv(data("synthetic_small.csv")));
  auto native = make_caching_policy("native");
  // 50 MiB: the 30 MiB segment fits once the retry frees the small segment (20 + 30);
  // the 1 MB request then needs a small segment again, and the retry waits for the
  // 3 MB block's other stream, frees its 20 MiB segment, and fits (30 + 2).
  // 48 MiB: 20 + 30 > 48 even after the retry.
  CHECK(find_min_capacity(*native, p, 52 * kMiB) == 50 * kMiB);
  CHECK(find_min_capacity(*native, p, 8 * kMiB) == 50 * kMiB);  // a low bound is raised
  const ReplayResult at50 = run(p, "native", 50 * kMiB);
  CHECK(at50.ooms == 0);
  CHECK(at50.retries == 2);
  CHECK(run(p, "native", 48 * kMiB).ooms == 1);
}

TEST_CASE(
    "replay/streams: a freed block serves only its stream; segment_free rows empty the cache") {
  // synthetic_streams.csv: 12 MiB on stream 1, freed; 12 MiB on stream 2 cannot
  // take it (24 MiB); stream 1 reuses its own; both segments are freed
  // (empty_cache); a 14 MiB block needs a new segment: 14 MiB.
  const ReplayProgram p = ReplayProgram::compile(read_trace_csv(data("synthetic_streams.csv")));
  CHECK(p.streams().size() == 2);
  CHECK(p.recorded_peak_reserved() == 24 * kMiB);
  const ReplayResult r = run(p);
  CHECK(r.peak_reserved == int64_t(24 * kMiB));
  CHECK(r.peak_allocated == int64_t(14 * kMiB));
  CHECK(r.peak_segments == 2);
  // Ignoring the segment rows the cache is never emptied: 12 + 12 + 14 MiB.
  ReplayOptions keep;
  keep.empty_cache_at_segment_free = false;
  const ReplayProgram q =
      ReplayProgram::compile(read_trace_csv(data("synthetic_streams.csv")), keep);
  CHECK(run(q).peak_reserved == int64_t(38 * kMiB));
  // The smallest device: 14 MiB (each 12 MiB request fits after the retry frees
  // the other stream's cached segment).
  auto native = make_caching_policy("native");
  CHECK(find_min_capacity(*native, p, 24 * kMiB) == 14 * kMiB);
  const ReplayResult at14 = run(p, "native", 14 * kMiB);
  CHECK(at14.ooms == 0);
  CHECK(at14.retries == 2);
  CHECK(at14.peak_reserved == int64_t(14 * kMiB));
}

TEST_CASE(
    "replay/deferred free: a block freed while used elsewhere is not reused until completed") {
  // 12 MiB freed; the next 12 MiB request comes before its free_completed: it
  // needs its own segment (24 MiB). Completed at once, the block is reused (12 MiB).
  const std::string deferred =
      "alloc,0x1000,12582912,0\nfree_requested,0x1000,12582912,0\n"
      "alloc,0x2000,12582912,0\nfree_completed,0x1000,12582912,0\n";
  const std::string at_once =
      "alloc,0x1000,12582912,0\nfree_requested,0x1000,12582912,0\n"
      "free_completed,0x1000,12582912,0\nalloc,0x2000,12582912,0\n";
  const ReplayProgram d = program_of(deferred);
  CHECK(d.ops()[1].kind == ReplayOpKind::free_deferred);
  CHECK(d.ops()[3].kind == ReplayOpKind::complete);
  CHECK(run(d).peak_reserved == int64_t(24 * kMiB));
  // ...though allocated bytes dropped at free_requested.
  CHECK(run(d).peak_allocated == int64_t(12 * kMiB));
  const ReplayProgram a = program_of(at_once);
  CHECK(a.ops()[1].kind == ReplayOpKind::free);
  CHECK(a.ops()[2].kind == ReplayOpKind::nop);
  CHECK(run(a).peak_reserved == int64_t(12 * kMiB));
  // A free_completed after other frees only is still a free at once.
  const ReplayProgram b = program_of(
      "alloc,1,512,0\nalloc,2,512,0\nfree_requested,1,512,0\nfree_requested,2,512,0\n"
      "free_completed,2,512,0\nfree_completed,1,512,0\n");
  CHECK(b.ops()[2].kind == ReplayOpKind::free);
  CHECK(b.ops()[3].kind == ReplayOpKind::free);
}

TEST_CASE("replay/options: max_split_size_mb keeps a large cached block whole") {
  // A 300 MiB block cached; six 4 MiB requests split it (native) or take 20 MiB
  // segments (max_split_size_mb:64: the 300 MiB block is never split, 5 + 1 blocks
  // in two segments); all but the sixth freed; then 290 MiB. Native: the free
  // pieces are 20 and 276 MiB, so a new 290 MiB segment (300 + 290). The variant:
  // the whole 300 MiB block serves it (it wastes 10 MiB, under 20): 300 + 40 MiB.
  std::string rows =
      "alloc,0x100000,314572800,0\nfree_requested,0x100000,314572800,0\n"
      "free_completed,0x100000,314572800,0\n";
  for (int i = 1; i <= 6; ++i) rows += "alloc," + std::to_string(i) + ",4194304,0\n";
  for (int i = 1; i <= 5; ++i)
    rows += "free_requested," + std::to_string(i) + ",4194304,0\nfree_completed," +
            std::to_string(i) + ",4194304,0\n";
  rows += "alloc,0x7,304087040,0\n";
  const ReplayProgram p = program_of(rows);
  CHECK(run(p).peak_reserved == int64_t(590 * kMiB));
  CHECK(run(p).peak_segments == 2);
  const ReplayResult split = run(p, "max_split_size_mb:64");
  CHECK(split.peak_reserved == int64_t(340 * kMiB));
  CHECK(split.peak_segments == 3);
  // At 400 MiB native fails on the 290 MiB request (its segment is split, so the
  // retry frees nothing) and the variant fits.
  const ReplayResult native_400 = run(p, "native", 400 * kMiB);
  CHECK(native_400.ooms == 1);
  CHECK(native_400.retries == 1);
  CHECK(run(p, "max_split_size_mb:64", 400 * kMiB).ooms == 0);
}

TEST_CASE("replay/expandable: a larger request grows the segment instead of adding one") {
  // 12 MiB freed, then 14 MiB. Native: a 12 MiB segment cached, a 14 MiB one added
  // (26 MiB). Expandable: the free 12 MiB at the segment's end gets 2 MiB more
  // pages (14 MiB, one segment).
  const ReplayProgram p = program_of(
      "alloc,1,12582912,0\nfree_requested,1,12582912,0\nfree_completed,1,12582912,0\n"
      "alloc,2,14680064,0\n");
  const ReplayResult native = run(p);
  CHECK(native.peak_reserved == int64_t(26 * kMiB));
  CHECK(native.peak_segments == 2);
  REQUIRE(expandable_segments_supported());
  const ReplayResult grown = run(p, "expandable_segments:True");
  CHECK(grown.peak_reserved == int64_t(14 * kMiB));
  CHECK(grown.peak_segments == 1);
  CHECK(grown.fragmentation == 0.0);  // nothing cached at the peak
  auto expandable = make_caching_policy("expandable_segments:True");
  CHECK(find_min_capacity(*expandable, p, 14 * kMiB) == 14 * kMiB);
  auto native_policy = make_caching_policy("native");
  // Native at 14 MiB: the retry returns the cached 12 MiB segment first: it fits too.
  CHECK(find_min_capacity(*native_policy, p, 26 * kMiB) == 14 * kMiB);
}

TEST_CASE("replay/compile: inconsistent rows are errors naming their line") {
  CHECK(contains(compile_error("alloc,0x10,512,0\nfree_requested,0x20,512,0\n"),
                 "trace t.csv:3: free of unknown address 0x20"));
  CHECK(contains(compile_error("alloc,0x10,512,0\nalloc,0x10,512,0\n"),
                 "trace t.csv:3: alloc at 0x10, which is still live (allocated at t.csv:2)"));
  CHECK(contains(compile_error("alloc,0x10,512,0\nfree_requested,0x10,512,0\nalloc,0x10,1,0\n"),
                 "trace t.csv:4: alloc at 0x10, which is still waiting for its free_completed"));
  CHECK(contains(compile_error("alloc,0x10,512,0\nfree_requested,0x10,513,0\n"),
                 "trace t.csv:3: free_requested of 0x10 with size 513, but it was allocated with "
                 "size 512 (t.csv:2)"));
  CHECK(contains(
      compile_error("alloc,0x10,512,0\nfree_requested,0x10,512,0\nfree_requested,0x10,512,0\n"),
      "trace t.csv:4: free_requested of 0x10 twice (first at t.csv:3)"));
  CHECK(contains(compile_error("alloc,0x10,512,0\nfree_completed,0x10,512,0\n"),
                 "trace t.csv:3: free_completed of 0x10 before its free_requested"));
  CHECK(contains(compile_error("free_completed,0x10,512,0\n"),
                 "trace t.csv:2: free_completed of 0x10 with no live alloc there"));
  CHECK(contains(compile_error("alloc,0x10,0,0\n"), "trace t.csv:2: alloc of 0 bytes"));
  CHECK(contains(compile_error("segment_alloc,0x10,2097152,0\nsegment_alloc,0x10,2097152,0\n"),
                 "trace t.csv:3: segment_alloc at 0x10, where a segment is already allocated"));
  const std::string quarter = "4611686018427387904,0\n";  // 2^62, the largest size a row may hold
  CHECK(contains(compile_error("alloc,1," + quarter + "alloc,2," + quarter + "alloc,3," + quarter),
                 "trace t.csv:4: the bytes live at once overflow 63 bits"));
  CHECK(contains(compile_error("alloc,1,512,9223372036854775808\n"), "has its top bit set"));
  // A segment freed that the trace never allocated: the recorded peak is unknown.
  CHECK_FALSE(program_of("segment_free,0x10,2097152,0\n").recorded_peak_reserved().has_value());
}

TEST_CASE("replay/policies: unavailable and bad variants say why") {
  CHECK(
      contains(error_of([] { make_caching_policy("max_split_size_mb:5"); }), "max_split_size_mb"));
  CHECK(contains(error_of([] { make_caching_policy("sanitize:True"); }),
                 "the sanitizer mode cannot be replayed"));
  std::string why;
  auto exp = make_caching_policy("expandable_segments:True");
  if (expandable_segments_supported(&why)) {
    CHECK(exp->unavailable().empty());
  } else {
    CHECK(exp->unavailable() == "not supported by this build's allocator");
    CHECK(contains(error_of([&] { exp->run(program_of("alloc,1,512,0\n"), RunSettings{}); }),
                   "unavailable"));
  }
  auto policies = default_simulated_policies();
  REQUIRE(policies.size() == 2);
  CHECK(policies[0]->name() == "native");
  CHECK(policies[1]->name() == "expandable_segments:True");
}

TEST_CASE("replay/history: ember's own history replays to the allocator's own peaks") {
  auto backend = std::make_unique<SimulatedBackend>(1024 * kMiB);
  SimulatedBackend* sim = backend.get();
  CachingAllocator a(std::move(backend));
  auto s1 = reinterpret_cast<cudaStream_t>(uintptr_t{0x1000});
  auto s2 = reinterpret_cast<cudaStream_t>(uintptr_t{0x2000});
  a.record_memory_history(true);
  void* p1 = a.allocate(5 * kMiB, s1);
  void* p2 = a.allocate(700 * 1024, s1);
  void* p3 = a.allocate(25 * kMiB + 77, s2);
  a.record_stream(p1, s2);
  sim->hold(s2);
  a.deallocate(p1);                      // waits for s2
  void* p4 = a.allocate(16 * kMiB, s1);  // cannot take p1's 20 MiB: a new segment
  sim->release(s2);
  void* p5 = a.allocate(kMiB, s1);  // p1 completes first
  a.deallocate(p2);
  a.deallocate(p3);
  a.empty_cache();
  void* p6 = a.allocate(40 * kMiB, s2);
  a.deallocate(p4);
  a.deallocate(p5);
  a.deallocate(p6);

  std::ostringstream csv;
  write_trace_csv(trace_from_history(a.memory_snapshot().trace, "history"), csv);
  const ReplayProgram p = ReplayProgram::compile(parse_trace_csv(csv.str(), "history.csv"));
  CHECK(p.recorded_peak_reserved() == uint64_t(a.max_memory_reserved()));
  const ReplayResult r = run(p);
  CHECK(r.peak_reserved == a.max_memory_reserved());
  CHECK(r.peak_allocated == a.max_memory_allocated());
  CHECK(r.peak_segments == a.stats().segment[kAggregate].peak);
  CHECK(r.ooms == 0);
  // The same numbers, worked out: 20 (p1) + 2 (p2) + 26 (p3) + 16 (p4, a segment of
  // its own since p1 was pending) = 64 MiB; empty_cache returns p3's and p1's
  // segments (18 MiB left), p6 adds 40 MiB: 58 MiB.
  CHECK(a.max_memory_reserved() == int64_t(64 * kMiB));
}

TEST_CASE("replay/oom: the out-of-memory message names an option that a replay shows would fit") {
  // 400 MiB device: a 300 MiB block cached, twelve 4 MiB blocks carved from it
  // (native splits it), all but the sixth freed, then 290 MiB: no cached block is
  // large enough and 300 + 290 MiB > 400, so native fails. With
  // max_split_size_mb:64 (or 128, 256) the 4 MiB blocks take 20 MiB segments
  // instead and the 300 MiB block serves the request whole; with 512 or 1024 the
  // block is splittable again, and roundup_power2_divisions:4 asks 320 MiB.
  auto make = [] {
    return std::make_unique<CachingAllocator>(std::make_unique<SimulatedBackend>(400 * kMiB));
  };
  auto workload = [](CachingAllocator& a) {
    a.deallocate(a.allocate(300 * kMiB, nullptr));
    std::vector<void*> b;
    for (int i = 0; i < 12; ++i) b.push_back(a.allocate(4 * kMiB, nullptr));
    for (int i = 0; i < 12; ++i)
      if (i != 5) a.deallocate(b[i]);
    return error_of([&] { a.allocate(290 * kMiB, nullptr); });
  };
  auto recorded = make();
  recorded->record_memory_history(true);
  const std::string msg = workload(*recorded);
  CHECK(contains(msg, "CUDA out of memory. Tried to allocate 290.00 MiB"));
  CHECK(contains(msg, "\nA replay of the last "));
  CHECK(contains(msg, "on a device of 400.00 MiB fails here too with the current options"));
  CHECK(contains(msg, "max_split_size_mb:64"));
  CHECK_FALSE(contains(msg, "max_split_size_mb:512"));
  CHECK_FALSE(contains(msg, "roundup_power2_divisions"));
  // Expandable segments fit too: the 276 MiB free tail of the one segment grows by
  // 14 MiB of pages (300 + 14 <= 400 MiB). The line names the first three that fit.
  if (expandable_segments_supported())
    CHECK(contains(msg,
                   "fits with expandable_segments:True, max_split_size_mb:64 or "
                   "max_split_size_mb:128: try EMBER_CUDA_ALLOC_CONF=expandable_segments:True."));
  else
    CHECK(contains(msg,
                   "fits with max_split_size_mb:64, max_split_size_mb:128 or "
                   "max_split_size_mb:256: try EMBER_CUDA_ALLOC_CONF=max_split_size_mb:64."));
  // The allocator carries on: the suggestion's replays did not touch it.
  CHECK(recorded->memory_allocated() == int64_t(4 * kMiB));
  CHECK(recorded->memory_reserved() == int64_t(300 * kMiB));

  // Without history there is nothing to replay: PyTorch's message alone.
  auto plain = make();
  const std::string bare = workload(*plain);
  CHECK(contains(bare, "CUDA out of memory"));
  CHECK_FALSE(contains(bare, "replay"));

  // When no option fits (more live than the device), nothing is suggested.
  auto full = make();
  full->record_memory_history(true);
  void* keep = full->allocate(300 * kMiB, nullptr);
  const std::string none = error_of([&] { full->allocate(200 * kMiB, nullptr); });
  CHECK(contains(none, "CUDA out of memory"));
  CHECK_FALSE(contains(none, "replay"));
  full->deallocate(keep);
}

// Traces recorded from real PyTorch training loops on an H200 (tools/
// record_torch_traces.py; tests/data/traces/torch/MANIFEST.md says how): replayed
// through ember's policy of the same options on a simulated device, the peaks equal
// the ones PyTorch's own allocator reported (torch.cuda.max_memory_reserved() and
// max_memory_allocated(), kept in each file's metadata), to the byte.
TEST_CASE("replay/torch: recorded PyTorch loops replay to PyTorch's own peaks") {
  for (const char* name : {"mlp_adam", "conv", "varying_batch", "varying_batch_expandable"}) {
    CAPTURE(name);
    Trace t = read_trace_csv(data(std::string("torch/") + name + ".csv"));
    const std::string conf = t.meta("alloc_conf").empty() ? "native" : t.meta("alloc_conf");
    const int64_t want_reserved = std::stoll(t.meta("torch_max_memory_reserved"));
    const int64_t want_allocated = std::stoll(t.meta("torch_max_memory_allocated"));
    const ReplayProgram p = ReplayProgram::compile(std::move(t));
    const ReplayResult r = run(p, conf);
    CHECK(r.ooms == 0);
    CHECK(r.events == p.ops().size());
    CHECK(r.peak_reserved == want_reserved);
    CHECK(r.peak_allocated == want_allocated);
  }
}
