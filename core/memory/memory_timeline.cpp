#include "core/memory/memory_timeline.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <numeric>
#include <ostream>
#include <unordered_map>
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

std::string site_name(const char* scope, const char* tag) {
  if (scope != nullptr && tag != nullptr) return std::string(scope) + " / " + tag;
  if (scope != nullptr) return scope;
  if (tag != nullptr) return tag;
  return "(untagged)";
}

// Live bytes per allocation site, entry by entry (a block counts from its alloc to
// its free_requested, as allocated bytes do). Site ids follow first appearance.
struct SiteWalker {
  std::map<std::string, int> ids;
  std::vector<std::string> names;
  std::vector<int64_t> live, peak;
  std::unordered_map<uintptr_t, std::pair<int, int64_t>> blocks;  // address -> site, bytes
  bool began_late = false;

  int site_of(const TraceEntry& e) {
    auto [it, fresh] = ids.try_emplace(site_name(e.scope, e.tag), static_cast<int>(names.size()));
    if (fresh) {
      names.push_back(it->first);
      live.push_back(0);
      peak.push_back(0);
    }
    return it->second;
  }

  void apply(const TraceEntry& e) {
    if (e.action == TraceAction::alloc) {
      const int s = site_of(e);
      blocks[e.address] = {s, static_cast<int64_t>(e.size)};
      live[s] += static_cast<int64_t>(e.size);
      peak[s] = std::max(peak[s], live[s]);
    } else if (e.action == TraceAction::free_requested) {
      auto it = blocks.find(e.address);
      if (it == blocks.end()) {
        began_late = true;  // allocated before the history began
        return;
      }
      live[it->second.first] -= it->second.second;
      blocks.erase(it);
    }
  }
};

// Colours of the sites drawn (in order), then "other" and "before the history".
constexpr const char* kSiteColours[] = {"#4e79a7", "#f28e2b", "#59a14f", "#e15759",
                                        "#76b7b2", "#edc948", "#b07aa1", "#9c755f"};
constexpr const char* kOtherColour = "#bab0ac";
constexpr const char* kBeforeColour = "#dddddd";
const char* site_colour(int site) {
  return site < 0 ? kOtherColour : kSiteColours[site % 8];
}

std::vector<const TraceEntry*> history_events(const MemorySnapshot& snap) {
  std::vector<const TraceEntry*> events;
  for (const TraceEntry& e : snap.trace)
    if (e.action != TraceAction::step && e.action != TraceAction::oom) events.push_back(&e);
  return events;
}

}  // namespace

TimelineAnalysis analyze_memory_timeline(const MemorySnapshot& snap) {
  const std::vector<const TraceEntry*> events = history_events(snap);
  EMBER_CHECK(!events.empty(),
              "analyze_memory_timeline: the snapshot has no allocation history; "
              "call record_memory_history(true) before the run");
  TimelineAnalysis a;

  // Sites: peaks, and live bytes at the first and last step markers.
  SiteWalker walk;
  std::vector<int64_t> first_step, last_step;
  size_t steps = 0;
  for (const TraceEntry& e : snap.trace) {
    if (e.action == TraceAction::step) {
      (steps++ == 0 ? first_step : last_step) = walk.live;
      continue;
    }
    walk.apply(e);
  }
  a.history_began_late = walk.began_late;
  std::vector<int> order(walk.names.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int x, int y) { return walk.peak[x] > walk.peak[y]; });
  std::vector<int> drawn(walk.names.size(), -1);  // walker id -> index in a.sites
  for (size_t k = 0; k < order.size(); ++k) {
    const int id = order[k];
    if (k >= TimelineAnalysis::kMaxSites) {
      a.other_peak_bytes += walk.peak[id];
      continue;
    }
    TimelineSite site;
    site.name = walk.names[id];
    site.peak_bytes = walk.peak[id];
    if (steps >= 2) {
      auto at = [&](const std::vector<int64_t>& v) { return id < int(v.size()) ? v[id] : 0; };
      site.growth_per_step = (at(last_step) - at(first_step)) / static_cast<int64_t>(steps - 1);
    }
    drawn[id] = static_cast<int>(k);
    a.sites.push_back(site);
  }

  // The peak of reserved memory (its first moment), with the allocation that needed it.
  size_t p = 0;
  a.peak_reserved = -1;
  for (size_t i = 0; i < snap.trace.size(); ++i) {
    const TraceEntry& e = snap.trace[i];
    if (e.action == TraceAction::step || e.action == TraceAction::oom) continue;
    if (e.reserved_bytes > a.peak_reserved) {
      a.peak_reserved = e.reserved_bytes;
      p = i;
    }
  }
  // The segment (or the pages mapped onto an expandable one) came for the next
  // allocation: the peak is the moment that allocation holds it.
  if (p + 1 < snap.trace.size() &&
      (snap.trace[p].action == TraceAction::segment_alloc ||
       snap.trace[p].action == TraceAction::segment_map) &&
      snap.trace[p + 1].action == TraceAction::alloc)
    ++p;
  a.peak_entry = p;

  // The segments and blocks at that entry.
  struct LiveBlock {
    size_t size;
    int site;
    bool pending;
  };
  std::map<uintptr_t, size_t> segments;
  std::map<uintptr_t, LiveBlock> blocks;
  SiteWalker ids = walk;  // the same site ids
  for (size_t i = 0; i <= p; ++i) {
    const TraceEntry& e = snap.trace[i];
    switch (e.action) {
      case TraceAction::segment_alloc:
        segments[e.address] = e.size;
        break;
      case TraceAction::segment_free:
        segments.erase(e.address);
        break;
      case TraceAction::segment_map: {
        // Pages mapped at the end of an expandable segment: its mapped part grows
        // (or, for its first pages, begins).
        auto it = segments.lower_bound(e.address);
        if (it != segments.begin() && std::prev(it)->first + std::prev(it)->second == e.address)
          std::prev(it)->second += e.size;
        else
          segments[e.address] = e.size;
        break;
      }
      case TraceAction::segment_unmap: {
        // Pages unmapped from its end: it shrinks to what stays mapped.
        auto it = segments.upper_bound(e.address);
        if (it == segments.begin()) break;
        --it;
        if (it->first == e.address)
          segments.erase(it);
        else
          it->second = e.address - it->first;
        break;
      }
      case TraceAction::alloc:
        blocks[e.address] = LiveBlock{e.size, drawn[ids.site_of(e)], false};
        break;
      case TraceAction::free_requested:
        if (auto it = blocks.find(e.address); it != blocks.end()) it->second.pending = true;
        break;
      case TraceAction::free_completed:
        blocks.erase(e.address);
        break;
      default:
        break;
    }
  }
  std::map<int, int64_t> pinned;
  size_t inside = 0;
  for (const auto& [base, size] : segments) {
    TimelineSegment seg;
    seg.address = base;
    seg.size = size;
    size_t used = 0;
    std::map<int, int64_t> by_site;
    for (auto it = blocks.lower_bound(base); it != blocks.end() && it->first < base + size; ++it) {
      seg.blocks.push_back(
          TimelineBlock{it->first, it->second.size, it->second.site, it->second.pending});
      used += it->second.size;
      by_site[it->second.site] += static_cast<int64_t>(it->second.size);
      ++inside;
    }
    seg.free_bytes = size - std::min(size, used);
    if (seg.free_bytes > 0 && !by_site.empty()) {
      seg.pinned_by =
          std::max_element(by_site.begin(), by_site.end(), [](const auto& x, const auto& y) {
            return x.second < y.second;
          })->first;
      pinned[seg.pinned_by] += static_cast<int64_t>(seg.free_bytes);
    }
    a.segments_at_peak.push_back(std::move(seg));
  }
  a.blocks_outside_known_segments = blocks.size() - inside;
  a.pinned.assign(pinned.begin(), pinned.end());
  std::stable_sort(a.pinned.begin(), a.pinned.end(),
                   [](const auto& x, const auto& y) { return x.second > y.second; });
  return a;
}

namespace {

// Run by the browser after the page is laid out: counts the shapes drawn with a
// non-empty box and compares with what the writer emitted (data-* attributes).
constexpr const char* kRenderCheckScript = R"JS((function () {
  var pre = document.getElementById('render-check');
  function drawn(sel, needHeight) {
    var n = 0;
    document.querySelectorAll(sel).forEach(function (e) {
      var b = e.getBBox();
      if (b.width > 0 && (b.height > 0 || !needHeight)) n++;
    });
    return n;
  }
  var got = {lines: drawn('#timeline path.line', false), bands: drawn('#sites path.band', true),
             segments: drawn('#segmap rect.seg', true), blocks: drawn('#segmap rect.blk', true)};
  var ok = true, parts = [];
  for (var k in got) {
    parts.push(k + '=' + got[k]);
    if (String(got[k]) !== pre.dataset[k]) ok = false;
  }
  pre.textContent = 'render-check: ' + (ok ? 'ok ' : 'MISMATCH ') + parts.join(' ');
})();
)JS";

constexpr double kSitesHeight = 320, kSitesTop = 16, kSitesBottom = 24;

// The allocated bytes stacked by site: "before the history" (blocks whose alloc
// the history did not see) at the bottom, then the sites drawn, largest first,
// then "other". Returns how many bands it drew.
template <typename XOf>
size_t write_site_view(std::ostream& out, const TimelineAnalysis& a,
                       const std::vector<const TraceEntry*>& events, size_t ncols, XOf xof,
                       size_t nsteps) {
  SiteWalker walk;
  std::map<std::string, int> drawn_index;
  for (size_t k = 0; k < a.sites.size(); ++k) drawn_index[a.sites[k].name] = static_cast<int>(k);
  const size_t nsites = a.sites.size();
  const bool other = a.other_peak_bytes > 0, before = a.history_began_late;
  // Bands: 0 = before, 1..nsites = sites, nsites + 1 = other.
  const size_t nb = nsites + 2;
  std::vector<std::vector<double>> vals(ncols);
  std::vector<bool> has(ncols, false);
  std::vector<int> drawn_of;  // walker id -> drawn index or -1
  int64_t total_live = 0;
  for (const TraceEntry* e : events) {
    const size_t known = walk.names.size();
    int64_t delta = 0;
    if (e->action == TraceAction::alloc) delta = static_cast<int64_t>(e->size);
    if (e->action == TraceAction::free_requested) {
      auto it = walk.blocks.find(e->address);
      if (it != walk.blocks.end()) delta = -it->second.second;
    }
    walk.apply(*e);
    total_live += delta;
    for (size_t id = known; id < walk.names.size(); ++id) {
      auto it = drawn_index.find(walk.names[id]);
      drawn_of.push_back(it == drawn_index.end() ? -1 : it->second);
    }
    const size_t c =
        std::min(ncols - 1, static_cast<size_t>(std::max(0.0, xof(e->time_ns) - kLeft)));
    std::vector<double>& v = vals[c];
    v.assign(nb, 0.0);
    int64_t drawn_sum = 0;
    for (size_t id = 0; id < walk.names.size(); ++id) {
      if (drawn_of[id] < 0) continue;
      v[1 + static_cast<size_t>(drawn_of[id])] = static_cast<double>(walk.live[id]);
      drawn_sum += walk.live[id];
    }
    v[nsites + 1] = static_cast<double>(total_live - drawn_sum);
    v[0] = static_cast<double>(std::max<int64_t>(0, e->allocated_bytes - total_live));
    has[c] = true;
  }
  // Columns without an event hold the previous column's state.
  size_t first = 0;
  while (first < ncols && !has[first]) ++first;
  for (size_t c = first + 1; c < ncols; ++c)
    if (!has[c]) vals[c] = vals[c - 1];
  double top = 1;
  for (size_t c = first; c < ncols; ++c)
    top = std::max(top, std::accumulate(vals[c].begin(), vals[c].end(), 0.0));

  out << "<h2>Allocated memory by allocation site</h2>\n<p>Live bytes of each site (scope / tag "
         "when it was allocated), stacked; a band that widens step after step is the site that "
         "grows.</p>\n";
  const double pw = kWidth - kLeft - kRight, ph = kSitesHeight - kSitesTop - kSitesBottom;
  const double ystep = nice_byte_step(top, 4);
  const double ymax = std::ceil(top * 1.05 / ystep) * ystep;
  auto yof = [&](double b) { return kSitesTop + ph * (1.0 - b / ymax); };
  char buf[512];
  out << "<svg id=\"sites\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kWidth
      << "\" height=\"" << kSitesHeight << "\">\n";
  std::snprintf(buf, sizeof buf,
                "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#fafafa\" "
                "stroke=\"#ccc\"/>\n",
                kLeft, kSitesTop, pw, ph);
  out << buf;
  for (double b = 0; b <= ymax + 0.5; b += ystep) {
    std::snprintf(buf, sizeof buf,
                  "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#e4e4e4\"/>"
                  "<text class=\"ax\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">",
                  kLeft, kLeft + pw, yof(b), yof(b), kLeft - 6, yof(b) + 4);
    out << buf << human_bytes(b) << "</text>\n";
  }
  auto band_name = [&](size_t b) {
    return b == 0        ? std::string("(allocated before the history began)")
           : b <= nsites ? a.sites[b - 1].name
                         : std::string("other sites");
  };
  auto band_colour = [&](size_t b) {
    return b == 0        ? kBeforeColour
           : b <= nsites ? site_colour(static_cast<int>(b - 1))
                         : kOtherColour;
  };
  size_t drawn_bands = 0;
  std::vector<double> below(ncols, 0.0);
  for (size_t b = 0; b < nb; ++b) {
    if ((b == 0 && !before) || (b == nb - 1 && !other)) continue;
    double peak = 0;
    for (size_t c = first; c < ncols; ++c) peak = std::max(peak, vals[c][b]);
    if (peak <= 0 || first >= ncols) continue;
    std::string d;
    for (size_t c = first; c < ncols; ++c) {
      std::snprintf(buf, sizeof buf, "%s%.1f %.1f", c == first ? "M" : " L",
                    kLeft + static_cast<double>(c), yof(below[c] + vals[c][b]));
      d += buf;
    }
    for (size_t c = ncols; c-- > first;) {
      std::snprintf(buf, sizeof buf, " L%.1f %.1f",
                    kLeft + static_cast<double>(c) + (c + 1 == ncols ? 0 : 1), yof(below[c]));
      d += buf;
      below[c] += vals[c][b];
    }
    out << "<path class=\"band\" d=\"" << d << " Z\" fill=\"" << band_colour(b)
        << "\" stroke=\"none\"><title>" << escape_html(band_name(b)) << ": peak "
        << human_bytes(peak) << "</title></path>\n";
    ++drawn_bands;
  }
  out << "</svg>\n";
  // The legend, largest first, with growth per step where steps were marked.
  for (size_t k = 0; k < nsites; ++k) {
    const TimelineSite& site = a.sites[k];
    out << "<div class=\"lg\"><span class=\"sw\" style=\"background:"
        << site_colour(static_cast<int>(k)) << "\"></span>" << escape_html(site.name)
        << " &middot; peak " << human_bytes(static_cast<double>(site.peak_bytes));
    if (nsteps >= 2)
      out << " &middot; " << (site.growth_per_step > 0 ? "+" : "")
          << human_bytes(static_cast<double>(site.growth_per_step)) << " per step";
    out << "</div>\n";
  }
  if (other)
    out << "<div class=\"lg\"><span class=\"sw\" style=\"background:" << kOtherColour
        << "\"></span>other sites</div>\n";
  if (before)
    out << "<div class=\"lg\"><span class=\"sw\" style=\"background:" << kBeforeColour
        << "\"></span>allocated before the history began (its site is unknown)</div>\n";
  return drawn_bands;
}

// The segments at the peak of reserved memory, the most free space first: each a
// bar (width by size) with its live blocks in their sites' colours. Returns how
// many segments and blocks it drew.
std::pair<size_t, size_t> write_segment_map(std::ostream& out, const TimelineAnalysis& a) {
  constexpr size_t kMaxRows = 60;
  constexpr double kLabel = 250, kBar = kWidth - 250 - 20, kRow = 16, kGap = 4;
  std::vector<const TimelineSegment*> rows;
  size_t total_reserved = 0, total_free = 0, pinned_free = 0, live = 0;
  for (const TimelineSegment& s : a.segments_at_peak) {
    rows.push_back(&s);
    total_reserved += s.size;
    total_free += s.free_bytes;
    if (!s.blocks.empty()) pinned_free += s.free_bytes;
    for (const TimelineBlock& b : s.blocks) live += b.size;
  }
  std::stable_sort(rows.begin(), rows.end(),
                   [](const TimelineSegment* x, const TimelineSegment* y) {
                     return x->free_bytes > y->free_bytes;
                   });
  const size_t shown = std::min(rows.size(), kMaxRows);
  size_t largest = 1;
  for (const TimelineSegment* s : rows) largest = std::max(largest, s->size);
  const double scale = kBar / static_cast<double>(largest);

  out << "<h2>Segments at the peak of reserved memory ("
      << human_bytes(static_cast<double>(a.peak_reserved))
      << "): which blocks pin which segments</h2>\n<p>" << a.segments_at_peak.size()
      << " segments, " << human_bytes(static_cast<double>(total_reserved)) << " reserved, "
      << human_bytes(static_cast<double>(live)) << " in blocks still in use, "
      << human_bytes(static_cast<double>(total_free)) << " free, of which "
      << human_bytes(static_cast<double>(pinned_free))
      << " in segments that blocks in use keep from being returned (empty_cache returns only "
         "whole free segments). Bars are drawn to scale, the most free space first";
  if (shown < rows.size()) out << "; " << shown << " of " << rows.size() << " shown";
  out << ".";
  if (a.blocks_outside_known_segments > 0)
    out << " " << a.blocks_outside_known_segments
        << " blocks lie in segments made before the history began (not drawn).";
  out << "</p>\n";
  for (const auto& [site, bytes] : a.pinned) {
    out << "<div class=\"lg\"><span class=\"sw\" style=\"background:" << site_colour(site)
        << "\"></span>" << human_bytes(static_cast<double>(bytes)) << " free pinned by "
        << escape_html(site < 0 ? std::string("other sites")
                                : a.sites[static_cast<size_t>(site)].name)
        << "</div>\n";
  }
  char buf[512];
  const double height = static_cast<double>(shown) * (kRow + kGap) + 8;
  out << "<svg id=\"segmap\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kWidth
      << "\" height=\"" << height << "\">\n";
  size_t blocks = 0;
  for (size_t r = 0; r < shown; ++r) {
    const TimelineSegment& s = *rows[r];
    const double y = 4 + static_cast<double>(r) * (kRow + kGap);
    const double w = std::max(1.0, static_cast<double>(s.size) * scale);
    const double free_pct = 100.0 * static_cast<double>(s.free_bytes) /
                            static_cast<double>(std::max<size_t>(1, s.size));
    std::snprintf(buf, sizeof buf, "<text class=\"ax\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">",
                  kLabel - 8, y + kRow - 4);
    out << buf << human_bytes(static_cast<double>(s.size)) << ", "
        << static_cast<int>(free_pct + 0.5) << "% free</text>\n";
    std::snprintf(buf, sizeof buf,
                  "<rect class=\"seg\" x=\"%.1f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" "
                  "fill=\"#f1f1f1\" stroke=\"#999\" stroke-width=\"0.5\"><title>segment 0x%llx: ",
                  kLabel, y, w, kRow, static_cast<unsigned long long>(s.address));
    out << buf << human_bytes(static_cast<double>(s.size)) << ", "
        << human_bytes(static_cast<double>(s.free_bytes)) << " free</title></rect>\n";
    for (const TimelineBlock& b : s.blocks) {
      const double x = kLabel + static_cast<double>(b.address - s.address) * scale;
      const double bw = std::max(0.5, static_cast<double>(b.size) * scale);
      std::snprintf(buf, sizeof buf,
                    "<rect class=\"blk\" x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" "
                    "fill=\"%s\" stroke=\"#fff\" stroke-width=\"0.6\"%s><title>",
                    x, y + 1, bw, kRow - 2, b.pending ? "#888888" : site_colour(b.site),
                    b.pending ? " fill-opacity=\"0.6\"" : "");
      out << buf << human_bytes(static_cast<double>(b.size)) << " at 0x" << std::hex << b.address
          << std::dec << ", "
          << escape_html(b.site < 0 ? std::string("another site")
                                    : a.sites[static_cast<size_t>(b.site)].name)
          << (b.pending ? " (freed, waiting for other streams)" : "") << "</title></rect>\n";
      ++blocks;
    }
  }
  out << "</svg>\n";
  return {shown, blocks};
}

}  // namespace

void write_memory_timeline_html(const MemorySnapshot& snap, std::ostream& out,
                                const std::string& title) {
  const std::vector<const TraceEntry*> events = history_events(snap);
  std::vector<const TraceEntry*> steps;
  for (const TraceEntry& e : snap.trace)
    if (e.action == TraceAction::step) steps.push_back(&e);
  EMBER_CHECK(!events.empty(),
              "write_memory_timeline_html: the snapshot has no allocation "
              "history; call record_memory_history(true) before the run");
  const TimelineAnalysis analysis = analyze_memory_timeline(snap);

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
         "h1{font-size:18px;margin:0 0 4px}h2{font-size:15px;margin:18px 0 4px}"
         "p{margin:2px 0 8px;font-size:13px}.ax{font-size:11px;fill:#444}"
         ".st{font-size:10px;fill:#777}.lg{font-size:12px;margin:2px 0}"
         ".sw{display:inline-block;width:11px;height:11px;margin-right:5px;vertical-align:-1px}"
         "#render-check{font-size:11px;color:#888}</style></head><body>\n";
  out << "<h1>" << escape_html(title) << "</h1>\n<p>"
      << (snap.host ? std::string("CPU (host allocator)") : "CUDA:" + std::to_string(snap.device))
      << " &middot; peak allocated " << human_bytes(static_cast<double>(peak_alloc))
      << " &middot; peak reserved " << human_bytes(static_cast<double>(peak_res)) << " &middot; "
      << escape_html(growth) << " &middot; " << events.size() << " allocator events</p>\n";
  out << "<svg id=\"timeline\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kWidth
      << "\" height=\"" << kHeight << "\">\n<rect x=\"" << kLeft << "\" y=\"" << kTop
      << "\" width=\"" << pw << "\" height=\"" << ph << "\" fill=\"#fafafa\" stroke=\"#ccc\"/>\n";
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
  out << "<path class=\"line\" d=\"" << path(true)
      << "\" fill=\"none\" stroke=\"#e8862a\" stroke-width=\"1.5\"/>\n<path class=\"line\" d=\""
      << path(false) << "\" fill=\"none\" stroke=\"#2a6fdb\" stroke-width=\"1.5\"/>\n";
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
  out << buf << "</svg>\n";
  const size_t bands = write_site_view(out, analysis, events, cols.size(), xof, steps.size());
  const auto [segments, blocks] = write_segment_map(out, analysis);
  // The check a test reads back (tools: the browser test): how many of the shapes
  // written here the browser laid out with a non-empty box.
  out << "<pre id=\"render-check\" data-lines=\"2\" data-bands=\"" << bands << "\" data-segments=\""
      << segments << "\" data-blocks=\"" << blocks
      << "\">render-check: not run (scripts off)</pre>\n<script>\n"
      << kRenderCheckScript << "</script>\n</body></html>\n";
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
