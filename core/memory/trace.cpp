#include "core/memory/trace.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <ostream>
#include <sstream>
#include <unordered_map>

#include "core/base/error.h"

namespace ember::memory {

const char* to_string(TraceOp op) {
  switch (op) {
    case TraceOp::alloc:
      return "alloc";
    case TraceOp::free_requested:
      return "free_requested";
    case TraceOp::free_completed:
      return "free_completed";
    case TraceOp::segment_alloc:
      return "segment_alloc";
    case TraceOp::segment_free:
      return "segment_free";
  }
  return "?";
}

std::string Trace::where(size_t i) const {
  if (i < prelude_events)
    return "prelude event " + std::to_string(i) + " (a block live before the trace began)";
  if (first_line == 0) return "event " + std::to_string(i);
  return source + ":" + std::to_string(line_of(i));
}

std::string Trace::meta(std::string_view key) const {
  for (const auto& [k, v] : metadata)
    if (k == key) return v;
  return "";
}

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

// Shown in errors: the field as read, shortened if absurdly long.
std::string shown(std::string_view s) {
  if (s.size() > 40) return std::string(s.substr(0, 40)) + "...";
  return std::string(s);
}

// Decimal or 0x-hex, no sign. Returns false when `s` is not such a number;
// sets `overflow` when it is one that does not fit 64 bits.
bool parse_u64(std::string_view s, uint64_t& out, bool& overflow) {
  overflow = false;
  uint64_t v = 0;
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
    s.remove_prefix(2);
    for (char c : s) {
      unsigned d;
      if (c >= '0' && c <= '9')
        d = static_cast<unsigned>(c - '0');
      else if (c >= 'a' && c <= 'f')
        d = static_cast<unsigned>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F')
        d = static_cast<unsigned>(c - 'A' + 10);
      else
        return false;
      if (v >> 60 != 0) overflow = true;
      v = (v << 4) | d;
    }
  } else {
    if (s.empty()) return false;
    for (char c : s) {
      if (c < '0' || c > '9') return false;
      const uint64_t d = static_cast<uint64_t>(c - '0');
      if (v > (UINT64_MAX - d) / 10) overflow = true;
      v = v * 10 + d;
    }
  }
  out = v;
  return true;
}

// The action named by `s`, or false.
bool parse_op(std::string_view s, TraceOp& op) {
  // Dispatch on length first: every name has a distinct one but the two frees.
  switch (s.size()) {
    case 5:
      if (s == "alloc") return op = TraceOp::alloc, true;
      break;
    case 12:
      if (s == "segment_free") return op = TraceOp::segment_free, true;
      break;
    case 13:
      if (s == "segment_alloc") return op = TraceOp::segment_alloc, true;
      break;
    case 14:
      if (s == "free_requested") return op = TraceOp::free_requested, true;
      if (s == "free_completed") return op = TraceOp::free_completed, true;
      break;
    default:
      break;
  }
  return false;
}

}  // namespace

Trace parse_trace_csv(std::string_view text, const std::string& source) {
  Trace trace;
  trace.source = source;
  size_t pos = 0;
  size_t line = 0;
  auto next_line = [&](std::string_view& out) {
    if (pos >= text.size()) return false;
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    out = text.substr(pos, end - pos);
    if (!out.empty() && out.back() == '\r') out.remove_suffix(1);
    pos = end + 1;
    ++line;
    return true;
  };

  // Comments and metadata, then the header.
  std::string_view l;
  bool header = false;
  while (next_line(l)) {
    std::string_view t = trim(l);
    if (t.empty()) continue;
    if (t.front() == '#') {
      t.remove_prefix(1);
      size_t colon = t.find(':');
      if (colon != std::string_view::npos) {
        std::string_view key = trim(t.substr(0, colon));
        if (!key.empty() && key.find(' ') == std::string_view::npos)
          trace.metadata.emplace_back(std::string(key), std::string(trim(t.substr(colon + 1))));
      }
      continue;
    }
    EMBER_CHECK(t == kTraceHeader, "trace ", source, ":", line, ": expected the header line \"",
                kTraceHeader, "\", got \"", shown(t), "\"");
    header = true;
    break;
  }
  EMBER_CHECK(header, "trace ", source, ": no header line \"", kTraceHeader,
              "\" (an empty file, or comments only)");
  trace.first_line = line + 1;

  // A rough count of rows, so the vector grows once.
  trace.events.reserve(static_cast<size_t>(std::count(
                           text.begin() + static_cast<std::ptrdiff_t>(std::min(pos, text.size())),
                           text.end(), '\n')) +
                       1);
  size_t blank_line = 0;  // the first blank line seen after the header, if any
  while (next_line(l)) {
    if (trim(l).empty()) {
      if (blank_line == 0) blank_line = line;
      continue;
    }
    EMBER_CHECK(blank_line == 0, "trace ", source, ":", blank_line,
                ": empty line between rows (rows must be contiguous)");
    std::string_view f[4];
    size_t n = 0, start = 0;
    for (size_t i = 0; i <= l.size(); ++i) {
      if (i == l.size() || l[i] == ',') {
        if (n < 4) f[n] = l.substr(start, i - start);
        ++n;
        start = i + 1;
      }
    }
    EMBER_CHECK(n == 4, "trace ", source, ":", line, ": expected 4 fields (", kTraceHeader,
                "), got ", n, ": \"", shown(l), "\"");
    TraceEvent e;
    EMBER_CHECK(parse_op(trim(f[0]), e.op), "trace ", source, ":", line, ": unknown action \"",
                shown(trim(f[0])),
                "\" (expected alloc, free_requested, free_completed, segment_alloc or "
                "segment_free)");
    const char* names[4] = {"action", "addr", "size", "stream"};
    uint64_t* values[4] = {nullptr, &e.addr, &e.size, &e.stream};
    for (int k = 1; k < 4; ++k) {
      const std::string_view v = trim(f[k]);
      bool overflow = false;
      EMBER_CHECK(parse_u64(v, *values[k], overflow), "trace ", source, ":", line, ": ", names[k],
                  " \"", shown(v), "\" is not a number (decimal, or hex with 0x; no sign)");
      EMBER_CHECK(!overflow, "trace ", source, ":", line, ": ", names[k], " ", shown(v),
                  " overflows 64 bits");
    }
    EMBER_CHECK(e.size <= kMaxTraceSize, "trace ", source, ":", line, ": size ", e.size,
                " is above the largest size a trace may hold (2^62 bytes)");
    trace.events.push_back(e);
  }
  return trace;
}

Trace read_trace_csv(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  EMBER_CHECK(file.good(), "read_trace_csv: cannot open \"", path, "\"");
  std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  EMBER_CHECK(!file.bad(), "read_trace_csv: failed reading \"", path, "\"");
  return parse_trace_csv(text, path);
}

void write_trace_csv(const Trace& trace, std::ostream& out) {
  out << "# ember allocator trace v1\n";
  for (const auto& [k, v] : trace.metadata) out << "# " << k << ": " << v << "\n";
  out << kTraceHeader << "\n";
  char buf[96];
  for (const TraceEvent& e : trace.events) {
    const int n = std::snprintf(buf, sizeof buf, "%s,0x%" PRIx64 ",%" PRIu64 ",%" PRIu64 "\n",
                                to_string(e.op), e.addr, e.size, e.stream);
    out.write(buf, n);
  }
}

void write_trace_csv(const Trace& trace, const std::string& path) {
  std::ofstream file(path, std::ios::binary);
  EMBER_CHECK(file.good(), "write_trace_csv: cannot open \"", path, "\" for writing");
  write_trace_csv(trace, file);
  file.flush();
  EMBER_CHECK(file.good(), "write_trace_csv: failed writing \"", path, "\"");
}

Trace trace_from_history(const std::vector<TraceEntry>& history, const std::string& source) {
  Trace trace;
  trace.source = source;
  trace.events.reserve(history.size());
  for (const TraceEntry& h : history) {
    TraceEvent e;
    e.addr = h.address;
    e.stream = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(h.stream));
    switch (h.action) {
      case TraceAction::alloc:
        e.op = TraceOp::alloc;
        break;
      case TraceAction::free_requested:
        e.op = TraceOp::free_requested;
        break;
      case TraceAction::free_completed:
        e.op = TraceOp::free_completed;
        break;
      case TraceAction::segment_alloc:
        e.op = TraceOp::segment_alloc;
        break;
      case TraceAction::segment_free:
        e.op = TraceOp::segment_free;
        break;
      // Pages of expandable segments mapped and unmapped: no row (as PyTorch's
      // converter drops its segment_map/segment_unmap).
      case TraceAction::segment_map:
      case TraceAction::segment_unmap:
      case TraceAction::oom:
      case TraceAction::step:
        continue;
    }
    const bool block = e.op == TraceOp::alloc || e.op == TraceOp::free_requested ||
                       e.op == TraceOp::free_completed;
    e.size = block ? h.requested_size : h.size;
    trace.events.push_back(e);
  }
  return with_prelude(trace);
}

Trace with_prelude(const Trace& trace, const std::vector<LiveBlock>& live) {
  // The first row of each block address decides: alloc means the trace saw it
  // born; a free means it was live (or pending) before the trace began.
  struct First {
    TraceOp op;
    uint64_t size, stream;
  };
  std::map<uint64_t, First> before;  // address -> its first row, when that is a free
  std::unordered_map<uint64_t, bool> seen;
  seen.reserve(trace.events.size() / 2 + 1);
  for (const TraceEvent& e : trace.events) {
    if (e.op == TraceOp::segment_alloc || e.op == TraceOp::segment_free) continue;
    if (!seen.emplace(e.addr, true).second) continue;
    if (e.op != TraceOp::alloc) before.emplace(e.addr, First{e.op, e.size, e.stream});
  }
  for (const LiveBlock& b : live)
    if (seen.find(b.addr) == seen.end())
      before.emplace(b.addr, First{TraceOp::alloc, b.size, b.stream});

  Trace out;
  out.source = trace.source;
  out.metadata = trace.metadata;
  out.first_line = trace.first_line;
  out.prelude_events = trace.prelude_events;
  if (before.empty()) {
    out.events = trace.events;
    return out;
  }
  out.events.reserve(trace.events.size() + 2 * before.size());
  for (const auto& [addr, first] : before) {
    out.events.push_back(TraceEvent{addr, first.size, first.stream, TraceOp::alloc});
    if (first.op == TraceOp::free_completed)
      out.events.push_back(TraceEvent{addr, first.size, first.stream, TraceOp::free_requested});
  }
  out.prelude_events += out.events.size();
  out.events.insert(out.events.end(), trace.events.begin(), trace.events.end());
  out.metadata.emplace_back("prelude_allocs", std::to_string(before.size()));
  return out;
}

}  // namespace ember::memory
