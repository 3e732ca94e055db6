// A picture of an allocator at one moment: every segment with its blocks, and the
// recent history of allocator events when recording is on. The history exports as
// Chrome trace-event JSON, which Perfetto and chrome://tracing open.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "core/base/cuda_handles.h"

namespace ember::memory {

enum class BlockState : uint8_t {
  allocated,            // handed to a caller
  active_pending_free,  // freed, but waiting for work on other streams (record_stream)
  inactive,             // cached, free for reuse
};
const char* to_string(BlockState state);

struct BlockSnapshot {
  uintptr_t address = 0;
  size_t size = 0;            // bytes the block spans (rounded)
  size_t requested_size = 0;  // bytes the caller asked for; 0 when inactive
  BlockState state = BlockState::inactive;
  const char* tag = nullptr;    // AllocationTag current when it was allocated
  const char* scope = nullptr;  // AllocationScope current when it was allocated
};

struct SegmentSnapshot {
  uintptr_t address = 0;
  // Bytes of memory: the segment, or the mapped part of an expandable segment.
  size_t total_size = 0;
  // Bytes of address space: total_size, or an expandable segment's whole range
  // (address .. address + address_space_size), of which the first total_size
  // bytes are mapped and tiled by `blocks`.
  size_t address_space_size = 0;
  bool expandable = false;
  size_t allocated_size = 0;  // sum of allocated blocks
  size_t active_size = 0;     // allocated + pending free
  size_t requested_size = 0;
  cudaStream_t stream = nullptr;      // blocks of a segment serve only this stream
  bool is_large = false;              // large pool (else small pool)
  std::vector<BlockSnapshot> blocks;  // in address order
};

// free_requested: the caller freed the block (allocated bytes drop). free_completed:
// it became reusable, at once or, for a block used on other streams, once their
// work finished (record_stream). step: a mark_step() boundary, tag = label.
// segment_map / segment_unmap: pages of an expandable segment mapped / unmapped
// (address and size: those pages).
enum class TraceAction : uint8_t {
  alloc,
  free_requested,
  free_completed,
  segment_alloc,
  segment_free,
  oom,
  step,
  segment_map,
  segment_unmap
};
const char* to_string(TraceAction action);

struct TraceEntry {
  TraceAction action = TraceAction::alloc;
  uintptr_t address = 0;      // 0 for oom
  size_t size = 0;            // block or segment bytes; for oom, the rounded request
  size_t requested_size = 0;  // alloc and frees: the bytes the caller asked for
  cudaStream_t stream = nullptr;
  int64_t time_ns = 0;  // since the allocator was created
  const char* tag = nullptr;
  const char* scope = nullptr;  // AllocationScope of the block (alloc/free)
  int64_t allocated_bytes = 0;  // allocator totals just after the event
  int64_t reserved_bytes = 0;
};

// A block in use (or waiting on other streams) as a replay needs it: where, the
// bytes requested for it, and its stream (core/memory/trace.h, with_prelude).
struct LiveBlock {
  uint64_t addr = 0;
  uint64_t size = 0;
  uint64_t stream = 0;
};

struct MemorySnapshot {
  int device = 0;
  bool host = false;
  // The steady_clock time (ns since its epoch) that the trace's time_ns count
  // from: the allocator's creation. The profiler (core/profiler.h) puts the
  // history on its own time axis with it.
  int64_t clock_origin_ns = 0;
  std::vector<SegmentSnapshot> segments;  // in address order
  std::vector<TraceEntry> trace;          // oldest first; empty unless recording
};

// The history as a Chrome trace: counter tracks "allocated" and "reserved" (bytes of
// memory: mapped pages of expandable segments count, their unmapped address space not)
// and an instant event per OOM and per step marker. Throws ember::Error if the file cannot be
// written.
void write_chrome_trace(const MemorySnapshot& snapshot, std::ostream& out);
void write_chrome_trace(const MemorySnapshot& snapshot, const std::string& path);

}  // namespace ember::memory
