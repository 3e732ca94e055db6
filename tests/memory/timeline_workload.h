// A scripted allocator run with three allocation sites, shared by the timeline
// tests (tests/memory/test_timeline.cpp) and the browser test's page
// (tests/browser/timeline_fixture.cpp). What it leaves, worked out by hand:
//   "weights": two 12 MiB blocks, each its own 12 MiB segment (24 MiB, all steps);
//   "model.fc1.forward / linear": 3 MiB kept every step (a leak: +3 MiB per step),
//     carved one after another from one 20 MiB segment A;
//   "scratch": 6 MiB allocated and freed every step, from A's free tail, until
//     step 4, when A has 5 MiB left and a new 20 MiB segment B is made:
//     the peak of reserved memory, 12 + 12 + 20 + 20 = 64 MiB.
// At that peak: A holds five 3 MiB blocks and 5 MiB free (pinned by linear), B
// the 6 MiB scratch block and 14 MiB free (pinned by scratch); 4 segments, 8 blocks.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/base/alloc_tag.h"
#include "core/memory/caching_allocator.h"

namespace ember::testing {

inline memory::MemorySnapshot timeline_workload() {
  constexpr size_t kMiB = size_t{1} << 20;
  memory::CachingAllocator a(std::make_unique<memory::SimulatedBackend>(1024 * kMiB));
  a.record_memory_history(true);
  std::vector<void*> kept;
  {
    AllocationTag tag("weights");
    kept.push_back(a.allocate(12 * kMiB, nullptr));
    kept.push_back(a.allocate(12 * kMiB, nullptr));
  }
  static const char* const kSteps[] = {"step 0", "step 1", "step 2", "step 3", "step 4"};
  for (const char* step : kSteps) {
    a.mark_step(step);
    {
      AllocationScope scope("model.fc1.forward");
      AllocationTag tag("linear");
      kept.push_back(a.allocate(3 * kMiB, nullptr));
    }
    AllocationTag tag("scratch");
    a.deallocate(a.allocate(6 * kMiB, nullptr));
  }
  a.mark_step("end");
  memory::MemorySnapshot snap = a.memory_snapshot();
  for (void* p : kept) a.deallocate(p);
  return snap;
}

}  // namespace ember::testing
