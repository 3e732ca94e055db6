// Allocator traces as CSV (core/memory/trace.h): writing and reading back, every
// malformed input named by its line, ember's own history as rows (requested sizes,
// free_requested apart from free_completed), and the prelude for blocks live
// before a trace began.
#include <doctest/doctest.h>

#include <cstdint>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "core/memory/caching_allocator.h"
#include "core/memory/trace.h"
#include "error_text.h"

namespace {

using namespace ember;
using namespace ember::memory;
using ember::testing::contains;
using ember::testing::error_of;

constexpr uint64_t kMiB = 1024 * 1024;

std::string to_csv(const Trace& t) {
  std::ostringstream out;
  write_trace_csv(t, out);
  return out.str();
}

std::string parse_error(const std::string& text) {
  return error_of([&] { parse_trace_csv(text, "t.csv"); });
}

const char* kHeader = "action,addr,size,stream\n";

}  // namespace

TEST_CASE("trace/csv: every action, metadata and big numbers survive a round trip") {
  Trace t;
  t.source = "hand";
  t.metadata = {{"source", "a test"}, {"torch_max_memory_reserved", "54525952"}};
  t.events = {
      {0x7f0000000000, 20 * kMiB, 0, TraceOp::segment_alloc},
      {0x7f0000000000, 4000001, 0, TraceOp::alloc},
      {0x7f0000400000, 1, 0xffffffffffffff, TraceOp::alloc},
      {0x7f0000000000, 4000001, 0, TraceOp::free_requested},
      {0x7f0000000000, 4000001, 0, TraceOp::free_completed},
      {0x7f0000000000, 20 * kMiB, 0, TraceOp::segment_free},
      {UINT64_MAX, kMaxTraceSize, UINT64_MAX >> 1, TraceOp::alloc},
  };
  const std::string csv = to_csv(t);
  CHECK(contains(csv, "# source: a test\n"));
  CHECK(contains(csv, "\naction,addr,size,stream\nsegment_alloc,0x7f0000000000,20971520,0\n"));
  const Trace back = parse_trace_csv(csv, "back.csv");
  REQUIRE(back.events.size() == t.events.size());
  for (size_t i = 0; i < t.events.size(); ++i) {
    CHECK(back.events[i].op == t.events[i].op);
    CHECK(back.events[i].addr == t.events[i].addr);
    CHECK(back.events[i].size == t.events[i].size);
    CHECK(back.events[i].stream == t.events[i].stream);
  }
  CHECK(back.meta("torch_max_memory_reserved") == "54525952");
  CHECK(back.meta("source") == "a test");
  CHECK(back.meta("absent") == "");
  // Line 1 is the format's comment, 2-3 the metadata, 4 the header.
  CHECK(back.first_line == 5);
  CHECK(back.line_of(2) == 7);
  CHECK(back.where(2) == "back.csv:7");
}

TEST_CASE("trace/csv: decimal and hex numbers, CRLF and blank lines before the header") {
  const Trace t = parse_trace_csv(
      "\r\n# comment without a colon\r\naction,addr,size,stream\r\nalloc,4096,0x200,0X10\r\n"
      "free_requested, 0x1000 ,512,16\r\n\r\n\r\n",
      "crlf.csv");
  REQUIRE(t.events.size() == 2);
  CHECK(t.events[0].addr == 4096);
  CHECK(t.events[0].size == 512);
  CHECK(t.events[0].stream == 16);
  CHECK(t.events[1].op == TraceOp::free_requested);
  CHECK(t.events[1].addr == 4096);
  CHECK(t.first_line == 4);
  CHECK(t.metadata.empty());
}

TEST_CASE("trace/csv: a malformed line is an error naming its line and the problem") {
  const std::string h = kHeader;
  CHECK(contains(parse_error(""), "no header line"));
  CHECK(contains(parse_error("# only\n"), "t.csv: no header line"));
  CHECK(contains(parse_error("action,addr,size\nalloc,1,2\n"),
                 "t.csv:1: expected the header line \"action,addr,size,stream\""));
  CHECK(contains(parse_error(h + "alloc,1,2,0\nalloc,1,2\n"),
                 "t.csv:3: expected 4 fields (action,addr,size,stream), got 3"));
  CHECK(contains(parse_error(h + "alloc,1,2,0,9\n"), "t.csv:2: expected 4 fields"));
  CHECK(contains(parse_error(h + "alloca,1,2,0\n"), "t.csv:2: unknown action \"alloca\""));
  CHECK(contains(parse_error(h + "free,1,2,0\n"), "t.csv:2: unknown action \"free\""));
  CHECK(contains(parse_error(h + "alloc,1,-2,0\n"), "t.csv:2: size \"-2\" is not a number"));
  CHECK(contains(parse_error(h + "alloc,0xg,2,0\n"), "t.csv:2: addr \"0xg\" is not a number"));
  CHECK(contains(parse_error(h + "alloc,1,,0\n"), "t.csv:2: size \"\" is not a number"));
  CHECK(contains(parse_error(h + "alloc,1,2,s\n"), "t.csv:2: stream \"s\" is not a number"));
  CHECK(contains(parse_error(h + "alloc,1,18446744073709551616,0\n"),
                 "t.csv:2: size 18446744073709551616 overflows 64 bits"));
  CHECK(contains(parse_error(h + "alloc,0x10000000000000000,2,0\n"),
                 "t.csv:2: addr 0x10000000000000000 overflows 64 bits"));
  CHECK(contains(parse_error(h + "alloc,1,4611686018427387905,0\n"),
                 "t.csv:2: size 4611686018427387905 is above the largest size"));
  CHECK(contains(parse_error(h + "alloc,1,2,0\n\nalloc,3,4,0\n"),
                 "t.csv:3: empty line between rows"));
  CHECK(parse_error(h + "alloc,1,4611686018427387904,0\n") == "(no error)");  // 2^62 itself
}

TEST_CASE("trace/history: ember's history becomes rows with requested sizes and both frees") {
  auto backend = std::make_unique<SimulatedBackend>(256 * kMiB);
  SimulatedBackend* sim = backend.get();
  CachingAllocator a(std::move(backend));
  auto s1 = reinterpret_cast<cudaStream_t>(uintptr_t{0x1000});
  auto s2 = reinterpret_cast<cudaStream_t>(uintptr_t{0x2000});
  a.record_memory_history(true);
  void* p = a.allocate(5 * kMiB + 3, s1);  // segment_alloc 20 MiB, alloc
  a.mark_step("step 1");                   // no row
  a.record_stream(p, s2);
  sim->hold(s2);
  a.deallocate(p);                 // free_requested; waits for s2
  void* q = a.allocate(1000, s1);  // segment_alloc 2 MiB, alloc
  sim->release(s2);
  a.deallocate(q);                // (events processed at the next allocate)
  void* r = a.allocate(512, s1);  // free_completed of p, then the alloc
  a.deallocate(r);

  const Trace t = trace_from_history(a.memory_snapshot().trace, "history");
  const std::vector<TraceEvent> want = {
      {0, 20 * kMiB, 0x1000, TraceOp::segment_alloc},
      {0, 5 * kMiB + 3, 0x1000, TraceOp::alloc},
      {0, 5 * kMiB + 3, 0x1000, TraceOp::free_requested},
      {1, 2 * kMiB, 0x1000, TraceOp::segment_alloc},
      {1, 1000, 0x1000, TraceOp::alloc},
      {1, 1000, 0x1000, TraceOp::free_requested},
      {1, 1000, 0x1000, TraceOp::free_completed},
      {0, 5 * kMiB + 3, 0x1000, TraceOp::free_completed},
      {1, 512, 0x1000, TraceOp::alloc},
      {1, 512, 0x1000, TraceOp::free_requested},
      {1, 512, 0x1000, TraceOp::free_completed},
  };
  REQUIRE(t.events.size() == want.size());
  const uint64_t big = t.events[0].addr, small = t.events[3].addr;
  for (size_t i = 0; i < want.size(); ++i) {
    CAPTURE(i);
    CHECK(t.events[i].op == want[i].op);
    CHECK(t.events[i].size == want[i].size);
    CHECK(t.events[i].stream == want[i].stream);
    CHECK(t.events[i].addr == (want[i].addr == 0 ? big : small));
  }
  CHECK(t.meta("prelude_allocs") == "");
  CHECK(t.prelude_events == 0);
}

TEST_CASE(
    "trace/prelude: blocks freed (or live) without an alloc in the trace are allocated first") {
  Trace t;
  t.source = "window.csv";
  t.first_line = 2;
  t.events = {
      {0x5000, 700, 3, TraceOp::free_requested},  // live before: alloc
      {0x5000, 700, 3, TraceOp::free_completed}, {0x9000, 64, 0, TraceOp::alloc},
      {0x1000, 100, 1, TraceOp::free_completed},  // pending before: alloc + free_requested
      {0x9000, 64, 0, TraceOp::free_requested},  {0x9000, 64, 0, TraceOp::free_completed},
      {0x9000, 64, 0, TraceOp::alloc},  // seen in the trace: no prelude
  };
  const std::vector<LiveBlock> live = {{0x9000, 64, 0}, {0x7000, 9, 2}};
  const Trace p = with_prelude(t, live);
  REQUIRE(p.events.size() == t.events.size() + 4);
  CHECK(p.prelude_events == 4);
  // In address order: 0x1000 (pending), 0x5000, 0x7000 (live at the end).
  CHECK(p.events[0].op == TraceOp::alloc);
  CHECK(p.events[0].addr == 0x1000);
  CHECK(p.events[0].size == 100);
  CHECK(p.events[0].stream == 1);
  CHECK(p.events[1].op == TraceOp::free_requested);
  CHECK(p.events[1].addr == 0x1000);
  CHECK(p.events[2].addr == 0x5000);
  CHECK(p.events[2].size == 700);
  CHECK(p.events[2].stream == 3);
  CHECK(p.events[3].addr == 0x7000);
  CHECK(p.events[3].size == 9);
  CHECK(p.meta("prelude_allocs") == "3");
  // Rows keep their lines; prelude rows say what they are.
  CHECK(p.line_of(4) == 2);
  CHECK(p.where(5) == "window.csv:3");
  CHECK(contains(p.where(1), "prelude event 1"));
  // A trace with nothing live before it is returned as it was.
  const Trace same =
      with_prelude(parse_trace_csv("action,addr,size,stream\nalloc,1,2,0\n", "x"), {});
  CHECK(same.prelude_events == 0);
  CHECK(same.events.size() == 1);
}
