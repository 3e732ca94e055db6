// The memory timeline as a page a person can look at: allocated and reserved
// bytes over time from an allocator's history (record_memory_history), with step
// boundaries (mark_step) drawn as vertical lines, so a leak shows as a rising
// staircase. One self-contained HTML file with an inline SVG: no script, no network.
#pragma once

#include <iosfwd>
#include <string>

#include "core/memory/memory_snapshot.h"

namespace ember::memory {

// Throws ember::Error if the snapshot holds no history or the file cannot be written.
void write_memory_timeline_html(const MemorySnapshot& snapshot, std::ostream& out,
                                const std::string& title = "ember memory timeline");
void write_memory_timeline_html(const MemorySnapshot& snapshot, const std::string& path,
                                const std::string& title = "ember memory timeline");

}  // namespace ember::memory
