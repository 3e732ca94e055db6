#include "core/memory/memory_timeline.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <ostream>
#include <vector>

#include "core/base/error.h"

namespace ember::memory {

namespace {

constexpr double kWidth = 1160, kHeight = 600;
constexpr double kLeft = 90, kRight = 20, kTop = 30, kBottom = 50;
constexpr size_t kMaxStepLabels = 24;

std::string escape_html(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (std::fabs(b) >= 1024 && u < 4) b /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", b, units[u]);
  return buf;
}

// A round tick spacing giving about `n` ticks over `range`.
double nice_step(double range, int n) {
  double raw = range / n;
  double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (m * mag >= raw) return m * mag;
  return 10 * mag;
}

double nice_byte_step(double range, int n) {
  // Steps of 2^k bytes read better than decimal ones for memory.
  double raw = range / n;
  double step = 1;
  while (step < raw) step *= 2;
  return step;
}

struct Column {
  bool any = false;
  int64_t max_alloc = 0, last_alloc = 0, max_res = 0, last_res = 0;
};

}  // namespace

void write_memory_timeline_html(const MemorySnapshot& snap, std::ostream& out,
                                const std::string& title) {
  std::vector<const TraceEntry*> events, steps;
  for (const TraceEntry& e : snap.trace) {
    if (e.action == TraceAction::step)
      steps.push_back(&e);
    else if (e.action != TraceAction::oom)
      events.push_back(&e);
  }
  EMBER_CHECK(!events.empty(),
              "write_memory_timeline_html: the snapshot has no allocation "
              "history; call record_memory_history(true) before the run");

  const int64_t t0 =
      std::min(events.front()->time_ns, steps.empty() ? INT64_MAX : steps.front()->time_ns);
  const int64_t t1 = std::max<int64_t>(events.back()->time_ns, t0 + 1);
  int64_t peak_alloc = 0, peak_res = 0;
  for (const TraceEntry* e : events) {
    peak_alloc = std::max(peak_alloc, e->allocated_bytes);
    peak_res = std::max(peak_res, e->reserved_bytes);
  }
  const double pw = kWidth - kLeft - kRight, ph = kHeight - kTop - kBottom;
  const double ystep = nice_byte_step(std::max<double>(peak_res, 1), 5);
  const double ymax = std::ceil(std::max<double>(peak_res, 1) * 1.05 / ystep) * ystep;
  // With step markers every step gets the same width (time to scale within it):
  // a slow first step (CUDA context, cuBLAS set-up) would otherwise squeeze the
  // staircase into a corner. Without markers the axis is plain time.
  std::vector<int64_t> breaks{t0};
  for (const TraceEntry* s : steps)
    if (s->time_ns > breaks.back()) breaks.push_back(s->time_ns);
  if (t1 > breaks.back()) breaks.push_back(t1);
  const bool by_step = !steps.empty() && breaks.size() > 2;
  auto xof = [&](int64_t t) {
    if (!by_step) return kLeft + pw * static_cast<double>(t - t0) / (t1 - t0);
    size_t k =
        static_cast<size_t>(std::upper_bound(breaks.begin(), breaks.end(), t) - breaks.begin());
    k = std::clamp<size_t>(k, 1, breaks.size() - 1) - 1;
    const double within =
        static_cast<double>(t - breaks[k]) / static_cast<double>(breaks[k + 1] - breaks[k]);
    return kLeft + pw * (static_cast<double>(k) + std::clamp(within, 0.0, 1.0)) /
                       static_cast<double>(breaks.size() - 1);
  };
  auto yof = [&](double b) { return kTop + ph * (1.0 - b / ymax); };

  // One column per pixel keeps the page small for any history length; within a
  // column the peak is drawn, so no spike is lost.
  const size_t ncols = static_cast<size_t>(pw);
  std::vector<Column> cols(ncols + 1);
  for (const TraceEntry* e : events) {
    size_t c = static_cast<size_t>((xof(e->time_ns) - kLeft));
    Column& col = cols[std::min(c, ncols)];
    col.max_alloc = col.any ? std::max(col.max_alloc, e->allocated_bytes) : e->allocated_bytes;
    col.max_res = col.any ? std::max(col.max_res, e->reserved_bytes) : e->reserved_bytes;
    col.last_alloc = e->allocated_bytes;
    col.last_res = e->reserved_bytes;
    col.any = true;
  }
  auto path = [&](bool reserved) {
    std::string d;
    char buf[96];
    bool started = false;
    for (size_t c = 0; c <= ncols; ++c) {
      const Column& col = cols[c];
      if (!col.any) continue;
      double x = kLeft + static_cast<double>(c);
      double ymaxv = yof(static_cast<double>(reserved ? col.max_res : col.max_alloc));
      double ylast = yof(static_cast<double>(reserved ? col.last_res : col.last_alloc));
      if (!started)
        std::snprintf(buf, sizeof buf, "M%.1f %.1f V%.1f", x, ymaxv, ylast);
      else
        std::snprintf(buf, sizeof buf, " H%.1f V%.1f V%.1f", x, ymaxv, ylast);
      d += buf;
      started = true;
    }
    std::snprintf(buf, sizeof buf, " H%.1f", kLeft + pw);
    return d + buf;
  };

  // Growth per step, read at the step markers.
  std::string growth = "no step markers recorded";
  if (steps.size() >= 2) {
    double per =
        static_cast<double>(steps.back()->allocated_bytes - steps.front()->allocated_bytes) /
        static_cast<double>(steps.size() - 1);
    growth = (per > 0 ? "+" : "") + human_bytes(per) + " allocated per step over " +
             std::to_string(steps.size() - 1) + " steps";
  }

  out << "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>" << escape_html(title)
      << "</title>\n<style>body{font-family:sans-serif;margin:12px;color:#222}"
         "h1{font-size:18px;margin:0 0 4px}p{margin:2px 0 8px;font-size:13px}"
         ".ax{font-size:11px;fill:#444}.st{font-size:10px;fill:#777}</style></head><body>\n";
  out << "<h1>" << escape_html(title) << "</h1>\n<p>"
      << (snap.host ? std::string("CPU (host allocator)") : "CUDA:" + std::to_string(snap.device))
      << " &middot; peak allocated " << human_bytes(static_cast<double>(peak_alloc))
      << " &middot; peak reserved " << human_bytes(static_cast<double>(peak_res)) << " &middot; "
      << escape_html(growth) << " &middot; " << events.size() << " allocator events</p>\n";
  out << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kWidth << "\" height=\"" << kHeight
      << "\">\n<rect x=\"" << kLeft << "\" y=\"" << kTop << "\" width=\"" << pw << "\" height=\""
      << ph << "\" fill=\"#fafafa\" stroke=\"#ccc\"/>\n";
  char buf[1024];
  for (double b = 0; b <= ymax + 0.5; b += ystep) {
    std::snprintf(buf, sizeof buf,
                  "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#e4e4e4\"/>"
                  "<text class=\"ax\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">",
                  kLeft, kLeft + pw, yof(b), yof(b), kLeft - 6, yof(b) + 4);
    out << buf << human_bytes(b) << "</text>\n";
  }
  const double ms = static_cast<double>(t1 - t0) / 1e6;
  const double xstep = nice_step(std::max(ms, 1e-6), 8);
  for (double m = 0; !by_step && m <= ms + 1e-9; m += xstep) {
    double x = kLeft + pw * m / ms;
    std::snprintf(buf, sizeof buf,
                  "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#bbb\"/>"
                  "<text class=\"ax\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%g ms</text>\n",
                  x, x, kTop + ph, kTop + ph + 5, x, kTop + ph + 18, m);
    out << buf;
  }
  const size_t label_every =
      std::max<size_t>(1, (steps.size() + kMaxStepLabels - 1) / kMaxStepLabels);
  for (size_t i = 0; i < steps.size(); ++i) {
    double x = xof(steps[i]->time_ns);
    std::snprintf(buf, sizeof buf,
                  "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#9a9a9a\" "
                  "stroke-dasharray=\"3,3\"><title>",
                  x, x, kTop, kTop + ph);
    out << buf << escape_html(steps[i]->tag ? steps[i]->tag : "step") << ": allocated "
        << human_bytes(static_cast<double>(steps[i]->allocated_bytes)) << "</title></line>\n";
    if (i % label_every == 0) {
      std::snprintf(buf, sizeof buf, "<text class=\"st\" x=\"%.1f\" y=\"%.1f\">", x + 2, kTop - 6);
      out << buf << escape_html(steps[i]->tag ? steps[i]->tag : "step") << "</text>\n";
    }
  }
  out << "<path d=\"" << path(true)
      << "\" fill=\"none\" stroke=\"#e8862a\" stroke-width=\"1.5\"/>\n<path d=\"" << path(false)
      << "\" fill=\"none\" stroke=\"#2a6fdb\" stroke-width=\"1.5\"/>\n";
  std::snprintf(buf, sizeof buf,
                "<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"3\" fill=\"#2a6fdb\"/>"
                "<text class=\"ax\" x=\"%.1f\" y=\"%.1f\">allocated</text>"
                "<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"3\" fill=\"#e8862a\"/>"
                "<text class=\"ax\" x=\"%.1f\" y=\"%.1f\">reserved</text>"
                "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#9a9a9a\" "
                "stroke-dasharray=\"3,3\"/><text class=\"ax\" x=\"%.1f\" y=\"%.1f\">step</text>\n",
                kLeft + 10, kTop + 12, kLeft + 26, kTop + 16, kLeft + 100, kTop + 12, kLeft + 116,
                kTop + 16, kLeft + 190, kLeft + 202, kTop + 13.5, kTop + 13.5, kLeft + 206,
                kTop + 16);
  out << buf;
  char total[32];
  std::snprintf(total, sizeof total, "%.1f", ms);
  const std::string axis_label =
      by_step ? std::string("steps, each drawn the same width (time to scale within a step); ") +
                    total + " ms in all"
              : "time since first event";
  std::snprintf(buf, sizeof buf,
                "<text class=\"ax\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n",
                kLeft + pw / 2, kHeight - 8, axis_label.c_str());
  out << buf << "</svg>\n</body></html>\n";
}

void write_memory_timeline_html(const MemorySnapshot& snapshot, const std::string& path,
                                const std::string& title) {
  std::ofstream file(path);
  EMBER_CHECK(file.good(), "write_memory_timeline_html: cannot open \"", path, "\" for writing");
  write_memory_timeline_html(snapshot, file, title);
  file.flush();
  EMBER_CHECK(file.good(), "write_memory_timeline_html: failed writing \"", path, "\"");
}

}  // namespace ember::memory
