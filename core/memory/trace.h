// Allocator traces as CSV: what ember's allocator history records and what
// tools/convert_torch_trace.py makes of PyTorch's, in one format that replay.h
// replays. Reading checks every row and names the line of the first bad one.
//
// The format (a header line, then one row per event, oldest first):
//
//   # ember allocator trace v1          optional lines starting with '#' may come
//   # source: pytorch 2.11.0            first; "# key: value" ones are kept as
//   # torch_max_memory_reserved: 123    metadata (the tools write how a trace was made)
//   action,addr,size,stream
//   segment_alloc,0x7f0000000000,20971520,0
//   alloc,0x7f0000000000,4000000,0
//   free_requested,0x7f0000000000,4000000,0
//   free_completed,0x7f0000000000,4000000,0
//
//  * action: alloc, free_requested, free_completed, segment_alloc or segment_free.
//  * addr: the block's (or segment's) address, decimal or 0x-hex.
//  * size: for alloc and both frees, the bytes the caller REQUESTED (before any
//    rounding; the free rows repeat the alloc's); for segment rows, the segment's bytes.
//  * stream: the stream the block was allocated on (decimal or 0x-hex; 0 is the
//    default stream).
//
// Every free is two rows. free_requested is the caller's free: allocated bytes
// drop there. free_completed is the moment the block may be reused: right after
// free_requested for a block used on one stream, later for one recorded on other
// streams (record_stream), once their work has finished. The segment rows say what
// the recording allocator reserved; a replay decides segments by its own policy
// and uses segment_free rows only to mark where the program emptied its cache.
// A trace that starts while blocks are live (a wrapped history ring, PyTorch's
// recording begun mid-run) first allocates those blocks (with_prelude()).
#pragma once

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/memory/memory_snapshot.h"

namespace ember::memory {

enum class TraceOp : uint8_t { alloc, free_requested, free_completed, segment_alloc, segment_free };
const char* to_string(TraceOp op);

inline constexpr std::string_view kTraceHeader = "action,addr,size,stream";
// Sizes above this (4 EiB, the allocator's kMaxRequest) are refused when read, so
// that sums of live bytes cannot overflow 64 bits.
inline constexpr uint64_t kMaxTraceSize = uint64_t{1} << 62;

struct TraceEvent {
  uint64_t addr = 0;
  uint64_t size = 0;
  uint64_t stream = 0;
  TraceOp op = TraceOp::alloc;
};

struct Trace {
  std::string source;  // the file it was read from, or what made it
  std::vector<std::pair<std::string, std::string>> metadata;  // "# key: value" lines
  size_t first_line = 0;      // line number of the first row in the file; 0: not from a file
  size_t prelude_events = 0;  // leading events added by with_prelude (no line)
  std::vector<TraceEvent> events;

  // Where event i came from: "file.csv:17", "event 17" when not from a file, or
  // "prelude event 3" for one with_prelude added.
  std::string where(size_t i) const;
  // The file line of event i; 0 when it has none.
  size_t line_of(size_t i) const {
    return first_line == 0 || i < prelude_events ? 0 : first_line + (i - prelude_events);
  }
  // The metadata value for `key`, or "" when absent.
  std::string meta(std::string_view key) const;
};

// Parses CSV text. Throws ember::Error naming `source`, the line number and what
// is wrong: a missing or different header, a wrong number of fields, an unknown
// action, a number that does not parse or overflows, a size above kMaxTraceSize,
// an empty line between rows.
Trace parse_trace_csv(std::string_view text, const std::string& source);
// Reads and parses a file (throws ember::Error if it cannot be read).
Trace read_trace_csv(const std::string& path);

// Writes the header, the metadata as "# key: value" lines, and every event.
void write_trace_csv(const Trace& trace, std::ostream& out);
void write_trace_csv(const Trace& trace, const std::string& path);

// An allocator's history (MemorySnapshot::trace, oldest first) as trace rows:
// alloc and free rows with their requested sizes, segment rows with segment sizes;
// oom and step entries have no row. With a prelude (see with_prelude) when the
// history began while blocks were live.
Trace trace_from_history(const std::vector<TraceEntry>& history, const std::string& source);

// `trace` with alloc rows first for every block it frees (or that `live` lists)
// without having allocated it: blocks live before the trace began. They are
// allocated in address order, with the size and stream of their first row; a
// block whose first row is free_completed gets alloc + free_requested (it was
// waiting on other streams when the trace began). The number of blocks added is
// kept as metadata "prelude_allocs". `live` (addr, requested size, stream) lists
// blocks known to be live at the END of the trace (an allocator's current blocks).
Trace with_prelude(const Trace& trace, const std::vector<LiveBlock>& live = {});

}  // namespace ember::memory
