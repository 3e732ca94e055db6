#include "core/leak_check.h"

#include <algorithm>
#include <cstdio>
#include <exception>
#include <iostream>
#include <sstream>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "core/alloc_site.h"
#include "core/autograd.h"
#include "core/device_services.h"
#include "core/live_tensors.h"
#include "core/memory.h"

namespace ember {

namespace {

std::string device_str(Device d) {
  std::ostringstream os;
  os << d;
  return os.str();
}

std::string tensor_desc(const Shape& sizes, DType dtype) {
  std::ostringstream os;
  os << shape_str(sizes) << ' ' << dtype;
  return os.str();
}

// "12.0 KiB (12288 bytes)": the exact count for asserting, the short one for reading.
std::string bytes_str(int64_t b) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB"};
  double v = static_cast<double>(b < 0 ? -b : b);
  int u = 0;
  while (v >= 1024 && u < 3) v /= 1024, ++u;
  char buf[64];
  if (u == 0)
    std::snprintf(buf, sizeof buf, "%lld bytes", static_cast<long long>(b));
  else
    std::snprintf(buf, sizeof buf, "%s%.1f %s (%lld bytes)", b < 0 ? "-" : "", v, units[u],
                  static_cast<long long>(b));
  return buf;
}

int64_t allocated_on(const std::vector<Device>& devices) {
  int64_t total = 0;
  for (Device d : devices) total += memory_allocated(d);
  return total;
}

void apply_mode(LeakMode mode, bool leaked, const std::string& text) {
  if (!leaked || mode == LeakMode::record) return;
  if (mode == LeakMode::warn) {
    std::cerr << text << std::flush;
    return;
  }
  if (std::uncaught_exceptions() == 0) throw Error(text);
  std::cerr << text << std::flush;  // already unwinding: a second throw would terminate
}

}  // namespace

// ---------------------------------------------------------------- devices, markers

std::vector<Device> all_memory_devices() {
  std::vector<Device> out{kCPU};
  const int n = device_count(DeviceType::CUDA);
  for (int i = 0; i < n; ++i) out.push_back(Device::cuda(i));
  return out;
}

void mark_step(const std::string& label, std::vector<Device> devices) {
  if (devices.empty()) devices = all_memory_devices();
  const char* interned = intern_site_name(label);
  for (Device d : devices) caching_allocator(d).mark_step(interned);
}

// ---------------------------------------------------------------- report

bool LeakReport::leaked() const {
  if (!survivors.empty()) return true;
  return std::any_of(graphs.begin(), graphs.end(),
                     [](const RetainedGraph& g) { return g.leaks(); });
}

std::string LeakReport::str() const {
  std::ostringstream os;
  os << "ember leak check [" << label << "]: ";
  if (!leaked()) {
    os << "no leak (allocated " << allocated_before << " -> " << allocated_after << " bytes)\n";
  } else {
    os << "memory survived the scope: allocated " << bytes_str(allocated_before) << " -> "
       << bytes_str(allocated_after) << "\n";
  }
  if (!survivors.empty()) {
    os << "  allocations made in the scope and still alive at its end, by site and shape:\n";
    for (const LeakSite& s : survivors)
      os << "    +" << s.count << " x " << s.shape << " on " << device_str(s.device) << " at "
         << s.site << ": " << bytes_str(s.bytes) << " (allocated " << s.allocated_bytes << ")\n";
  }
  for (const RetainedGraph& g : graphs) {
    os << "  a tensor made at " << g.site << " (" << g.shape << ", grad_fn=" << g.grad_fn
       << ") outlived the scope holding an autograd graph of " << g.nodes << " nodes";
    if (g.nodes_before > 0) os << ", " << g.nodes_before << " of them from earlier steps";
    os << ", keeping " << bytes_str(static_cast<int64_t>(g.saved_activation_bytes))
       << " of saved activations alive\n";
  }
  if (leaked()) {
    os << "  what to do: find what keeps these tensors past the step (a list appended to every"
          " step, a module member, a running total).";
    if (!graphs.empty())
      os << " Keep a number, not a tensor with its graph: total += loss.item(); use .detach()"
            " for tensors you keep, and run evaluation under NoGradGuard.";
    os << "\n";
  }
  return os.str();
}

// ---------------------------------------------------------------- StepLeakCheck

StepLeakCheck::StepLeakCheck(std::string label, LeakMode mode, std::vector<Device> devices)
    : label_(std::move(label)), mode_(mode), devices_(std::move(devices)) {
  if (devices_.empty()) devices_ = all_memory_devices();
  mark_step(label_, devices_);
  start_ = snapshot();
  allocated_before_ = allocated_on(devices_);
  first_node_ = next_node_sequence_nr();
}

StepLeakCheck::StepLeakCheck(LeakTracker& tracker, std::string label)
    : StepLeakCheck(std::move(label), LeakMode::record, tracker.devices()) {
  tracker_ = &tracker;
}

StepLeakCheck::~StepLeakCheck() noexcept(false) {
  if (!done_) finish();
}

StepLeakCheck::Blocks StepLeakCheck::snapshot() const {
  // Which tensor views each block: the one spanning the most of it names its shape.
  struct View {
    int64_t numel;
    Shape sizes;
    DType dtype;
  };
  std::unordered_map<const void*, View> views;
  detail::for_each_live_tensor([&](const TensorImpl& t) {
    if (!t.storage || t.storage->data() == nullptr) return;
    const int64_t n = numel_of(t.sizes);
    auto [it, inserted] = views.try_emplace(t.storage->data(), View{n, t.sizes, t.dtype});
    if (!inserted && n > it->second.numel) it->second = View{n, t.sizes, t.dtype};
  });
  Blocks blocks;
  for (size_t slot = 0; slot < devices_.size(); ++slot) {
    memory::MemorySnapshot snap = memory_snapshot(devices_[slot]);
    for (const memory::SegmentSnapshot& seg : snap.segments) {
      for (const memory::BlockSnapshot& b : seg.blocks) {
        if (b.state != memory::BlockState::allocated) continue;
        Block blk;
        blk.tag = b.tag;
        blk.scope = b.scope;
        blk.requested = b.requested_size;
        blk.size = b.size;
        auto it = views.find(reinterpret_cast<const void*>(b.address));
        if (it != views.end()) {
          blk.has_tensor = true;
          blk.sizes = it->second.sizes;
          blk.dtype = it->second.dtype;
        }
        blocks.emplace(std::pair{static_cast<int>(slot), b.address}, std::move(blk));
      }
    }
  }
  return blocks;
}

LeakReport StepLeakCheck::finish() {
  done_ = true;
  LeakReport r;
  r.label = label_;
  r.devices = devices_;
  r.allocated_before = allocated_before_;
  r.allocated_after = allocated_on(devices_);

  // Net growth per (device, site, shape): churn at one site and shape cancels out.
  using Key = std::tuple<int, std::string, std::string>;
  std::map<Key, LeakSite> net;
  auto add = [&](int slot, const Block& b, int sign) {
    LeakSite& s =
        net[{slot, site_name(b.scope, b.tag), b.has_tensor ? tensor_desc(b.sizes, b.dtype) : "-"}];
    s.count += sign;
    s.bytes += sign * static_cast<int64_t>(b.requested);
    s.allocated_bytes += sign * static_cast<int64_t>(b.size);
  };
  Blocks end = snapshot();
  for (const auto& [key, b] : end) {
    auto it = start_.find(key);
    if (it == start_.end() || !it->second.same_site(b)) add(key.first, b, +1);
  }
  for (const auto& [key, b] : start_) {
    auto it = end.find(key);
    if (it == end.end() || !it->second.same_site(b)) add(key.first, b, -1);
  }
  for (auto& [key, s] : net) {
    if (s.allocated_bytes <= 0 && s.bytes <= 0) continue;
    s.device = devices_[std::get<0>(key)];
    s.site = std::get<1>(key);
    s.shape = std::get<2>(key);
    r.survivors.push_back(s);
  }
  std::sort(r.survivors.begin(), r.survivors.end(), [](const LeakSite& a, const LeakSite& b) {
    return a.allocated_bytes > b.allocated_bytes;
  });

  // Tensors made in the scope (their node is newer than its start) holding a graph.
  struct Holder {
    std::shared_ptr<Node> node;
    std::string site, shape;
    Device device;
  };
  std::vector<Holder> holders;
  detail::for_each_live_tensor([&](const TensorImpl& t) {
    if (!t.autograd || !t.autograd->grad_fn || !t.storage) return;
    if (t.autograd->grad_fn->sequence_nr < first_node_) return;
    if (std::find(devices_.begin(), devices_.end(), t.storage->device()) == devices_.end()) return;
    holders.push_back({t.autograd->grad_fn, site_name(t.site_scope, t.site_op),
                       tensor_desc(t.sizes, t.dtype), t.storage->device()});
  });
  std::sort(holders.begin(), holders.end(),
            [](const Holder& a, const Holder& b) { return a.node < b.node; });
  holders.erase(std::unique(holders.begin(), holders.end(),
                            [](const Holder& a, const Holder& b) { return a.node == b.node; }),
                holders.end());
  for (const Holder& h : holders) {
    GraphStats st = graph_stats(h.node.get(), first_node_);
    RetainedGraph g;
    g.site = h.site;
    g.shape = h.shape;
    g.device = h.device;
    g.grad_fn = h.node->name();
    g.nodes = st.nodes;
    g.nodes_before = st.nodes_before;
    g.saved_activation_bytes = st.saved_activation_bytes;
    g.saved_leaf_bytes = st.saved_leaf_bytes;
    r.graphs.push_back(std::move(g));
  }
  // A graph inside another retained graph is reported through the outer one.
  std::sort(r.graphs.begin(), r.graphs.end(), [](const RetainedGraph& a, const RetainedGraph& b) {
    return std::tie(a.saved_activation_bytes, a.nodes) >
           std::tie(b.saved_activation_bytes, b.nodes);
  });

  if (tracker_)
    tracker_->add(r);
  else
    apply_mode(mode_, r.leaked(), r.str());
  return r;
}

// ---------------------------------------------------------------- LeakTracker

LeakTracker::LeakTracker(LeakMode mode, int warmup, std::vector<Device> devices)
    : mode_(mode), warmup_(warmup), devices_(std::move(devices)) {
  EMBER_CHECK(warmup >= 0, "LeakTracker: warmup must be >= 0 steps, got ", warmup);
  if (devices_.empty()) devices_ = all_memory_devices();
}

void LeakTracker::add(LeakReport report) {
  if (seen_++ < warmup_) return;
  reports_.push_back(std::move(report));
}

LeakTrend LeakTracker::trend() const {
  LeakTrend t;
  t.steps = static_cast<int>(reports_.size());
  if (reports_.empty()) return t;
  t.allocated_first = reports_.front().allocated_after;
  t.allocated_last = reports_.back().allocated_after;
  if (t.steps < 2) return t;

  using Key = std::tuple<std::string, std::string, std::string>;  // device, site, shape
  std::map<Key, GrowingSite> sites;
  std::map<Key, int> grew;
  for (const LeakReport& r : reports_) {
    for (const LeakSite& s : r.survivors) {
      Key k{device_str(s.device), s.site, s.shape};
      GrowingSite& g = sites[k];
      g.site = s.site;
      g.shape = s.shape;
      g.device = s.device;
      g.total_bytes += s.bytes;
      g.allocated_bytes_per_step += s.allocated_bytes;  // a sum until divided below
      ++grew[k];
    }
  }
  for (auto& [k, g] : sites) {
    if (grew[k] != t.steps) continue;  // grew on some steps only: churn, not a leak
    g.steps = t.steps;
    g.bytes_per_step = g.total_bytes / t.steps;
    g.allocated_bytes_per_step /= t.steps;
    t.sites.push_back(g);
  }
  std::sort(t.sites.begin(), t.sites.end(), [](const GrowingSite& a, const GrowingSite& b) {
    return a.allocated_bytes_per_step > b.allocated_bytes_per_step;
  });

  // A retained graph (same site and node type every step) that gets bigger every step.
  using GKey = std::pair<std::string, std::string>;
  std::map<GKey, std::vector<const RetainedGraph*>> series;
  for (const LeakReport& r : reports_) {
    std::map<GKey, const RetainedGraph*> largest;
    for (const RetainedGraph& g : r.graphs) {
      const RetainedGraph*& best = largest[{g.site, g.grad_fn}];
      if (!best || g.nodes > best->nodes) best = &g;
    }
    for (auto& [k, g] : largest) series[k].push_back(g);
  }
  for (auto& [k, s] : series) {
    if (static_cast<int>(s.size()) != t.steps) continue;
    bool nodes_grow = true, saved_grow = true;
    for (size_t i = 1; i < s.size(); ++i) {
      nodes_grow = nodes_grow && s[i]->nodes > s[i - 1]->nodes;
      saved_grow = saved_grow && s[i]->saved_activation_bytes > s[i - 1]->saved_activation_bytes;
    }
    if (!nodes_grow && !saved_grow) continue;
    GrowingGraph g;
    g.site = k.first;
    g.grad_fn = k.second;
    g.steps = t.steps;
    g.nodes = s.back()->nodes;
    g.nodes_per_step = static_cast<double>(s.back()->nodes - s.front()->nodes) / (t.steps - 1);
    g.saved_activation_bytes = s.back()->saved_activation_bytes;
    g.saved_bytes_per_step = (static_cast<double>(s.back()->saved_activation_bytes) -
                              static_cast<double>(s.front()->saved_activation_bytes)) /
                             (t.steps - 1);
    t.graphs.push_back(g);
  }
  return t;
}

LeakTrend LeakTracker::check() const {
  LeakTrend t = trend();
  apply_mode(mode_, t.leaked(), t.str());
  return t;
}

std::string LeakTrend::str() const {
  std::ostringstream os;
  os << "ember leak tracker over " << steps << " steps: ";
  if (!leaked()) {
    os << "no leak; allocated memory after each step " << allocated_first << " -> "
       << allocated_last << " bytes\n";
    return os.str();
  }
  if (sites.empty())
    os << "an autograd graph grows every step (allocated memory flat at "
       << bytes_str(allocated_last) << "; the graph's nodes are host memory)\n";
  else
    os << "memory grows every step (allocated after each step " << bytes_str(allocated_first)
       << " -> " << bytes_str(allocated_last) << ")\n";
  for (const GrowingSite& s : sites)
    os << "  " << s.site << " " << s.shape << " on " << device_str(s.device) << ": +"
       << bytes_str(s.bytes_per_step) << " per step (allocated +" << s.allocated_bytes_per_step
       << " per step), " << bytes_str(s.total_bytes) << " over " << s.steps << " steps\n";
  for (const GrowingGraph& g : graphs) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.1f", g.nodes_per_step);
    os << "  a tensor made at " << g.site << " (grad_fn=" << g.grad_fn
       << ") holds a graph growing by " << buf << " nodes per step (" << g.nodes << " now) and "
       << bytes_str(static_cast<int64_t>(g.saved_bytes_per_step))
       << " of saved activations per step ("
       << bytes_str(static_cast<int64_t>(g.saved_activation_bytes)) << " now)\n";
  }
  if (!graphs.empty())
    os << "  what to do: a tensor kept across steps still holds its graph. Keep a number "
          "(total += loss.item()), .detach() tensors you keep, update statistics and run "
          "evaluation under NoGradGuard\n";
  else
    os << "  what to do: something keeps these tensors past every step (a list appended to, a "
          "cache that never hits, a member). Keep numbers (.item(), to_vector()) or bound it\n";
  return os.str();
}

}  // namespace ember
