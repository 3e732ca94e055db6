#include "core/memory/memory_snapshot.h"

#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <ostream>

#include "core/base/error.h"
#include "core/base/json_text.h"

namespace ember::memory {

const char* to_string(BlockState state) {
  switch (state) {
    case BlockState::allocated:
      return "allocated";
    case BlockState::active_pending_free:
      return "active_pending_free";
    case BlockState::inactive:
      return "inactive";
  }
  return "?";
}

const char* to_string(TraceAction action) {
  switch (action) {
    case TraceAction::alloc:
      return "alloc";
    case TraceAction::free_requested:
      return "free_requested";
    case TraceAction::free_completed:
      return "free_completed";
    case TraceAction::segment_alloc:
      return "segment_alloc";
    case TraceAction::segment_free:
      return "segment_free";
    case TraceAction::oom:
      return "oom";
    case TraceAction::step:
      return "step";
    case TraceAction::segment_map:
      return "segment_map";
    case TraceAction::segment_unmap:
      return "segment_unmap";
  }
  return "?";
}

namespace {

// Trace-event timestamps are microseconds; keep the nanoseconds as decimals.
void write_ts(std::ostream& out, int64_t ns) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%" PRId64 ".%03" PRId64, ns / 1000, ns % 1000);
  out << buf;
}

}  // namespace

void write_chrome_trace(const MemorySnapshot& snapshot, std::ostream& out) {
  const int pid = snapshot.device;
  out << "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[";
  out << "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" << pid
      << ",\"tid\":0,\"args\":{\"name\":";
  write_json_string(
      out, snapshot.host ? "ember CPU memory"
                         : ("ember CUDA:" + std::to_string(snapshot.device) + " memory").c_str());
  out << "}}";
  for (const TraceEntry& e : snapshot.trace) {
    if (e.action == TraceAction::step) {
      out << ",\n{\"name\":";
      write_json_string(out, e.tag ? e.tag : "step");
      out << ",\"cat\":\"step\",\"ph\":\"i\",\"s\":\"g\",\"pid\":" << pid << ",\"tid\":0,\"ts\":";
      write_ts(out, e.time_ns);
      out << ",\"args\":{\"allocated_bytes\":" << e.allocated_bytes
          << ",\"reserved_bytes\":" << e.reserved_bytes << "}}";
      continue;
    }
    if (e.action == TraceAction::oom) {
      out << ",\n{\"name\":\"oom\",\"ph\":\"i\",\"s\":\"p\",\"pid\":" << pid
          << ",\"tid\":0,\"ts\":";
      write_ts(out, e.time_ns);
      out << ",\"args\":{\"requested_bytes\":" << e.size
          << ",\"allocated_bytes\":" << e.allocated_bytes
          << ",\"reserved_bytes\":" << e.reserved_bytes << ",\"tag\":";
      write_json_string(out, e.tag);
      out << "}}";
      continue;
    }
    // One sample per counter after each event that can move it (a completed free
    // moves neither: allocated bytes dropped at its free_requested).
    if (e.action == TraceAction::free_completed) continue;
    bool moves_reserved =
        e.action == TraceAction::segment_alloc || e.action == TraceAction::segment_free ||
        e.action == TraceAction::segment_map || e.action == TraceAction::segment_unmap;
    const char* name = moves_reserved ? "reserved" : "allocated";
    int64_t value = moves_reserved ? e.reserved_bytes : e.allocated_bytes;
    out << ",\n{\"name\":\"" << name << "\",\"ph\":\"C\",\"pid\":" << pid << ",\"tid\":0,\"ts\":";
    write_ts(out, e.time_ns);
    out << ",\"args\":{\"bytes\":" << value << "}}";
  }
  out << "\n]}\n";
}

void write_chrome_trace(const MemorySnapshot& snapshot, const std::string& path) {
  std::ofstream file(path);
  EMBER_CHECK(file.good(), "write_chrome_trace: cannot open \"", path, "\" for writing");
  write_chrome_trace(snapshot, file);
  file.flush();
  EMBER_CHECK(file.good(), "write_chrome_trace: failed writing \"", path, "\"");
}

}  // namespace ember::memory
