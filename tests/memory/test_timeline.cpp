// The memory timeline page's analysis (core/memory/memory_timeline.h): sites and
// their growth, the segments at the peak of reserved memory and which blocks pin
// them, against the hand-worked run of timeline_workload.h; the page carries the
// views and the counts its render check compares (tests/browser checks them in
// a real browser).
#include <doctest/doctest.h>

#include <memory>
#include <sstream>
#include <string>

#include "core/memory/caching_allocator.h"
#include "core/memory/memory_timeline.h"
#include "error_text.h"
#include "memory/timeline_workload.h"

namespace {

using namespace ember;
using namespace ember::memory;
using ember::testing::contains;

constexpr int64_t kMiB = 1024 * 1024;

}  // namespace

TEST_CASE("timeline/analysis: sites, growth per step and the segments at the peak, by hand") {
  const MemorySnapshot snap = ember::testing::timeline_workload();
  const TimelineAnalysis a = analyze_memory_timeline(snap);
  REQUIRE(a.sites.size() == 3);
  CHECK(a.sites[0].name == "weights");
  CHECK(a.sites[0].peak_bytes == 24 * kMiB);
  CHECK(a.sites[0].growth_per_step == 0);
  CHECK(a.sites[1].name == "model.fc1.forward / linear");
  CHECK(a.sites[1].peak_bytes == 15 * kMiB);
  CHECK(a.sites[1].growth_per_step == 3 * kMiB);  // 0 at "step 0", 15 MiB at "end": 5 steps
  CHECK(a.sites[2].name == "scratch");
  CHECK(a.sites[2].peak_bytes == 6 * kMiB);
  CHECK(a.other_peak_bytes == 0);
  CHECK_FALSE(a.history_began_late);

  CHECK(a.peak_reserved == 64 * kMiB);
  CHECK(snap.trace[a.peak_entry].action == TraceAction::alloc);  // the scratch block of step 4
  CHECK(snap.trace[a.peak_entry].size == size_t(6 * kMiB));
  REQUIRE(a.segments_at_peak.size() == 4);
  CHECK(a.blocks_outside_known_segments == 0);
  int full = 0, with_linear = 0, with_scratch = 0;
  for (const TimelineSegment& s : a.segments_at_peak) {
    if (s.size == size_t(12 * kMiB)) {
      ++full;
      CHECK(s.free_bytes == 0);
      CHECK(s.pinned_by == -1);
      REQUIRE(s.blocks.size() == 1);
      CHECK(s.blocks[0].site == 0);
    } else if (s.blocks.size() == 5) {
      ++with_linear;
      CHECK(s.size == size_t(20 * kMiB));
      CHECK(s.free_bytes == size_t(5 * kMiB));
      CHECK(s.pinned_by == 1);
      for (size_t i = 0; i < 5; ++i) CHECK(s.blocks[i].address == s.address + i * 3 * kMiB);
    } else {
      ++with_scratch;
      REQUIRE(s.blocks.size() == 1);
      CHECK(s.blocks[0].site == 2);
      CHECK(s.free_bytes == size_t(14 * kMiB));
      CHECK(s.pinned_by == 2);
    }
  }
  CHECK(full == 2);
  CHECK(with_linear == 1);
  CHECK(with_scratch == 1);
  REQUIRE(a.pinned.size() == 2);
  CHECK(a.pinned[0] == std::pair<int, int64_t>{2, 14 * kMiB});
  CHECK(a.pinned[1] == std::pair<int, int64_t>{1, 5 * kMiB});
}

TEST_CASE("timeline/page: the views and the render check's expected counts") {
  std::ostringstream out;
  write_memory_timeline_html(ember::testing::timeline_workload(), out, "t");
  const std::string html = out.str();
  CHECK(contains(html, "<svg id=\"timeline\""));
  CHECK(contains(html, "<svg id=\"sites\""));
  CHECK(contains(html, "<svg id=\"segmap\""));
  CHECK(contains(html,
                 "model.fc1.forward / linear &middot; peak 15.0 MiB &middot; +3.0 MiB per step"));
  CHECK(contains(html, "14.0 MiB free pinned by scratch"));
  CHECK(contains(html, "5.0 MiB free pinned by model.fc1.forward / linear"));
  CHECK(contains(html,
                 "<pre id=\"render-check\" data-lines=\"2\" data-bands=\"3\" "
                 "data-segments=\"4\" data-blocks=\"8\">"));
  size_t bands = 0;
  for (size_t p = html.find("class=\"band\""); p != std::string::npos;
       p = html.find("class=\"band\"", p + 1))
    ++bands;
  CHECK(bands == 3);
}

TEST_CASE("timeline/analysis: a history that began while blocks were live says so") {
  MemorySnapshot snap;
  TraceEntry e;
  e.action = TraceAction::free_requested;  // a block allocated before the history
  e.address = 0x1000;
  e.size = 512;
  e.allocated_bytes = 1024;
  e.reserved_bytes = 2 * kMiB;
  snap.trace.push_back(e);
  const TimelineAnalysis a = analyze_memory_timeline(snap);
  CHECK(a.history_began_late);
  CHECK(a.sites.empty());
  std::ostringstream out;
  write_memory_timeline_html(snap, out);
  CHECK(contains(out.str(), "allocated before the history began"));
  CHECK(contains(ember::testing::error_of([] { analyze_memory_timeline(MemorySnapshot{}); }),
                 "no allocation history"));
}

TEST_CASE("timeline/analysis: an expandable segment at the peak is its mapped pages") {
  // 3 MiB maps 4 MiB of the large pool's segment; 5 MiB more takes the free 1 MiB
  // at its end and 4 MiB of new pages: one segment of 8 MiB, two blocks, nothing free.
  CachingAllocator a(std::make_unique<SimulatedBackend>(256 * kMiB),
                     AllocatorOptions::parse("expandable_segments:True"));
  a.record_memory_history(true);
  void* p = a.allocate(3 * kMiB, nullptr);
  void* q = a.allocate(5 * kMiB, nullptr);
  a.deallocate(q);
  a.empty_cache();  // unmaps the free end: the peak stays 8 MiB
  const TimelineAnalysis t = analyze_memory_timeline(a.memory_snapshot());
  CHECK(t.peak_reserved == 8 * kMiB);
  REQUIRE(t.segments_at_peak.size() == 1);
  const TimelineSegment& s = t.segments_at_peak[0];
  CHECK(s.address == reinterpret_cast<uintptr_t>(p));
  CHECK(s.size == size_t(8 * kMiB));
  REQUIRE(s.blocks.size() == 2);
  CHECK(s.blocks[1].address == reinterpret_cast<uintptr_t>(q));
  CHECK(s.blocks[1].size == size_t(5 * kMiB));
  CHECK(s.free_bytes == 0);
  a.deallocate(p);
}
