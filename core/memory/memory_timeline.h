// The memory timeline as a page a person can look at, from an allocator's history
// (record_memory_history): allocated and reserved bytes over time with step
// boundaries (mark_step) as vertical lines, so a leak shows as a rising staircase;
// the allocated bytes stacked by allocation site (scope / tag), so the site that
// grows stands out; and the segments at the peak of reserved memory with their
// blocks, so one sees which live blocks pin which segments (free memory a segment
// cannot return while they live). One self-contained HTML file with inline SVGs,
// no network; its one small script only checks what the browser drew and writes
// a summary into the page (<pre id="render-check">), which a test reads back.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "core/memory/memory_snapshot.h"

namespace ember::memory {

// What the page draws besides the two lines, computed from the history.
struct TimelineSite {
  std::string name;             // "scope / tag", "tag", or "(untagged)"
  int64_t peak_bytes = 0;       // largest live block bytes at once
  int64_t growth_per_step = 0;  // bytes, first to last step marker (0 without two)
};

struct TimelineBlock {
  uintptr_t address = 0;
  size_t size = 0;
  int site = -1;         // index into TimelineAnalysis::sites; -1: a site not drawn
  bool pending = false;  // freed, waiting for other streams
};

struct TimelineSegment {
  uintptr_t address = 0;
  size_t size = 0;
  std::vector<TimelineBlock> blocks;  // live or pending, in address order
  size_t free_bytes = 0;              // the rest of the segment
  int pinned_by = -1;                 // site with the most live bytes here (when free_bytes > 0)
};

struct TimelineAnalysis {
  static constexpr size_t kMaxSites = 8;
  // The sites drawn: the kMaxSites with the largest peak, largest first; the
  // rest are summed as "other".
  std::vector<TimelineSite> sites;
  int64_t other_peak_bytes = 0;
  // Bytes allocated before the history began (its frees come without allocs).
  bool history_began_late = false;
  // The segments when reserved memory first peaked (with the allocation that
  // made it), in address order, as far as the history shows them.
  int64_t peak_reserved = 0;
  size_t peak_entry = 0;  // index into MemorySnapshot::trace
  std::vector<TimelineSegment> segments_at_peak;
  size_t blocks_outside_known_segments = 0;  // the history began after their segment
  // Free bytes pinned at the peak, by the pinning site (index into `sites`, -1:
  // another site), largest first.
  std::vector<std::pair<int, int64_t>> pinned;
};

// Throws ember::Error if the snapshot holds no allocation history.
TimelineAnalysis analyze_memory_timeline(const MemorySnapshot& snapshot);

// Throws ember::Error if the snapshot holds no history or the file cannot be written.
void write_memory_timeline_html(const MemorySnapshot& snapshot, std::ostream& out,
                                const std::string& title = "ember memory timeline");
void write_memory_timeline_html(const MemorySnapshot& snapshot, const std::string& path,
                                const std::string& title = "ember memory timeline");

}  // namespace ember::memory
