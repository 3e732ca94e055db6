// The table of a replay (format_replay_table, core/memory/replay.h): one row per
// policy, its peaks, fragmentation, speed and smallest capacity.
#include "core/memory/replay.h"

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "core/base/error.h"
#include "core/memory/memory_stats.h"

namespace ember::memory {

namespace {

std::string bytes_or_dash(int64_t b) {
  return b < 0 ? "-" : format_bytes(static_cast<uint64_t>(b));
}

std::string fixed(double v, int digits) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string rate(double per_second) {
  if (per_second <= 0) return "-";
  char buf[32];
  if (per_second >= 1e6)
    std::snprintf(buf, sizeof buf, "%.1f M/s", per_second / 1e6);
  else
    std::snprintf(buf, sizeof buf, "%.0f k/s", per_second / 1e3);
  return buf;
}

}  // namespace

std::string format_replay_table(const ReplayProgram& program,
                                const std::vector<ReplayResult>& results,
                                const ReplayTableOptions& options) {
  const Trace& t = program.trace();
  std::ostringstream out;
  out << (options.markdown ? "### " : "") << "trace " << t.source << ": " << t.events.size()
      << " events (" << program.allocs() << " allocs), " << program.streams().size() << " stream"
      << (program.streams().size() == 1 ? "" : "s") << ", largest request "
      << format_bytes(program.largest_request()) << ", peak live requested "
      << format_bytes(program.peak_live_requested()) << "\n";
  if (options.markdown) out << "\n";
  std::vector<std::string> facts;
  if (auto rec = program.recorded_peak_reserved())
    facts.push_back("peak reserved as recorded (segment rows) " + format_bytes(*rec));
  for (const char* key : {"torch_max_memory_reserved", "torch_max_memory_allocated"}) {
    const std::string v = t.meta(key);
    if (!v.empty()) {
      uint64_t n = std::strtoull(v.c_str(), nullptr, 10);
      facts.push_back(std::string(key) + " " + format_bytes(n));
    }
  }
  if (options.show_capacity && !results.empty())
    facts.push_back("device capacity " + format_bytes(results.front().capacity));
  if (!t.meta("prelude_allocs").empty())
    facts.push_back(t.meta("prelude_allocs") +
                    " blocks live before recording began, allocated first");
  for (const std::string& f : facts) out << (options.markdown ? "- " : "  ") << f << "\n";
  if (options.markdown && !facts.empty()) out << "\n";

  const std::vector<std::string> head = {
      "policy",  "peak allocated", "peak reserved", "reserved/allocated", "segments",
      "retries", "OOMs",           "frag@peak",     "events/s",           "min capacity"};
  std::vector<std::vector<std::string>> rows;
  for (const ReplayResult& r : results) {
    if (!r.skipped.empty()) {
      rows.push_back({r.policy, "skipped: " + r.skipped});
      continue;
    }
    std::string min_cap = r.min_capacity                ? format_bytes(*r.min_capacity)
                          : r.min_capacity_note.empty() ? "-"
                                                        : r.min_capacity_note;
    rows.push_back({r.policy, bytes_or_dash(r.peak_allocated), bytes_or_dash(r.peak_reserved),
                    r.peak_allocated > 0 ? fixed(static_cast<double>(r.peak_reserved) /
                                                     static_cast<double>(r.peak_allocated),
                                                 3)
                                         : "-",
                    r.peak_segments < 0 ? "-" : std::to_string(r.peak_segments),
                    r.retries < 0 ? "-" : std::to_string(r.retries), std::to_string(r.ooms),
                    r.fragmentation < 0 ? "-" : fixed(r.fragmentation, 3),
                    rate(r.events_per_second()), min_cap});
  }
  if (options.markdown) {
    out << "|";
    for (const auto& h : head) out << " " << h << " |";
    out << "\n|";
    for (size_t c = 0; c < head.size(); ++c) out << (c == 0 ? "---|" : "---:|");
    out << "\n";
    for (const auto& row : rows) {
      out << "|";
      for (size_t c = 0; c < head.size(); ++c) out << " " << (c < row.size() ? row[c] : "") << " |";
      out << "\n";
    }
  } else {
    std::vector<size_t> w(head.size());
    for (size_t c = 0; c < head.size(); ++c) w[c] = head[c].size();
    for (const auto& row : rows)
      if (row.size() == head.size())
        for (size_t c = 0; c < row.size(); ++c) w[c] = std::max(w[c], row[c].size());
    auto line = [&](const std::vector<std::string>& row) {
      std::string s;
      for (size_t c = 0; c < row.size(); ++c) {
        std::string cell = row[c];
        if (row.size() == head.size()) {
          const size_t pad = w[c] - cell.size();
          cell = c == 0 ? cell + std::string(pad, ' ') : std::string(pad, ' ') + cell;
        }
        s += (c == 0 ? "  " : "  ") + cell;
      }
      while (!s.empty() && s.back() == ' ') s.pop_back();
      return s + "\n";
    };
    out << line(head);
    for (const auto& row : rows) out << line(row);
  }
  for (const ReplayResult& r : results) {
    if (!r.first_failure) continue;
    const ReplayFailure& f = *r.first_failure;
    out << (options.markdown ? "\n" : "") << "  " << r.policy << " at capacity "
        << format_bytes(r.capacity) << ": first OOM at " << t.where(f.event) << ", alloc of "
        << format_bytes(f.size) << " on stream " << f.stream
        << "; live then: " << format_bytes(f.live_requested) << " requested";
    if (f.allocated >= 0)
      out << ", " << format_bytes(static_cast<uint64_t>(f.allocated)) << " allocated";
    if (f.reserved >= 0)
      out << ", " << format_bytes(static_cast<uint64_t>(f.reserved)) << " reserved";
    out << "\n";
  }
  return out.str();
}

}  // namespace ember::memory
