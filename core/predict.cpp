// predict_memory, measure_memory and largest_fitting_batch (core/predict.h): one
// bookkeeping loop over an allocator (the meta device's, a private simulated one
// for the CPU, or a CUDA device's), so a prediction and a measurement are the same
// numbers taken the same way.
#include "core/predict.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <unordered_map>
#include <utility>

#include "core/alloc_site.h"
#include "core/base/error.h"
#include "core/device_services.h"
#include "core/kernel_table.h"
#include "core/memory.h"
#include "core/memory/allocator.h"
#include "core/memory/backends.h"
#include "core/memory/caching_allocator.h"
#include "core/meta.h"

namespace ember {

namespace {

// Enough history for thousands of steps of a large model; the ring grows only as
// events come.
constexpr size_t kHistoryEntries = size_t{1} << 24;

const char* step_label(int i) {
  return intern_site_name("predict step " + std::to_string(i));
}

StepMemory figures(const memory::CachingAllocator& a, int64_t previous_allocated) {
  const memory::MemoryStats s = a.stats();
  StepMemory m;
  m.allocated = s.allocated_bytes[memory::kAggregate].current;
  m.reserved = s.reserved_bytes[memory::kAggregate].current;
  m.peak_allocated = s.allocated_bytes[memory::kAggregate].peak;
  m.peak_reserved = s.reserved_bytes[memory::kAggregate].peak;
  m.growth = m.allocated - previous_allocated;
  return m;
}

// The sites whose blocks were live when allocated memory first reached its peak,
// rebuilt from the allocator's history (which starts with the run, on an empty
// allocator).
std::vector<SiteMemory> sites_at_peak(const std::vector<memory::TraceEntry>& trace, size_t top) {
  size_t peak_index = trace.size();
  int64_t peak = -1;
  for (size_t i = 0; i < trace.size(); ++i)
    if (trace[i].action == memory::TraceAction::alloc && trace[i].allocated_bytes > peak) {
      peak = trace[i].allocated_bytes;
      peak_index = i;
    }
  if (peak_index == trace.size()) return {};
  struct Live {
    size_t size;
    const char* tag;
    const char* scope;
  };
  std::unordered_map<uintptr_t, Live> live;
  using memory::TraceAction;
  for (size_t i = 0; i <= peak_index; ++i) {
    const memory::TraceEntry& e = trace[i];
    if (e.action == TraceAction::alloc)
      live[e.address] = Live{e.size, e.tag, e.scope};
    else if (e.action != TraceAction::segment_alloc && e.action != TraceAction::segment_free &&
             e.action != TraceAction::oom && e.action != TraceAction::step)
      live.erase(e.address);  // the block was freed (every other action is a free)
  }
  std::map<std::string, SiteMemory> by_site;
  for (const auto& [address, l] : live) {
    SiteMemory& s = by_site[site_name(l.scope, l.tag)];
    s.bytes += static_cast<int64_t>(l.size);
    s.blocks += 1;
  }
  std::vector<SiteMemory> sites;
  for (auto& [name, s] : by_site) {
    s.site = name;
    sites.push_back(std::move(s));
  }
  std::stable_sort(sites.begin(), sites.end(),
                   [](const SiteMemory& a, const SiteMemory& b) { return a.bytes > b.bytes; });
  if (sites.size() > top) sites.resize(top);
  return sites;
}

// Runs the factory and `steps` steps on `device`, whose tensors take their bytes
// from `alloc`, recording the allocator's figures after the set-up and each step.
// Out of memory ends the run as a result.
MemoryPrediction run_steps(const StepFactory& make_step, Device device,
                           memory::CachingAllocator& alloc, const PredictOptions& o) {
  EMBER_CHECK(make_step != nullptr, "predict_memory: the step factory is empty");
  EMBER_CHECK(o.steps_ >= 0, "predict_memory: steps must be >= 0, got ", o.steps_);
  MemoryPrediction r;
  r.steps_asked = o.steps_;
  alloc.record_memory_history(true, kHistoryEntries);
  alloc.reset_peak_memory_stats();
  int where = -1;
  int64_t last_allocated = alloc.memory_allocated();
  // Outside the try: at an out-of-memory the figures are taken while the step's
  // state (model, optimizer) still lives, as the failing program still held it;
  // destroying it frees in an order that may follow host addresses (the
  // optimizer's state map), which no figure should depend on.
  StepFunction step;
  try {
    step = make_step(device);
    EMBER_CHECK(step != nullptr, "predict_memory: the step factory returned an empty step");
    r.setup = figures(alloc, last_allocated);
    last_allocated = r.setup.allocated;
    for (int i = 0; i < o.steps_; ++i) {
      where = i;
      alloc.reset_peak_memory_stats();
      alloc.mark_step(step_label(i));
      step(i);
      r.steps.push_back(figures(alloc, last_allocated));
      last_allocated = r.steps.back().allocated;
    }
    where = -2;
    r.stats = alloc.stats();
  } catch (const OutOfMemoryError& e) {
    r.fits = false;
    r.failure = e.what();
    r.failed_step = where;
    // The failed part's peaks count too: up to where it stopped.
    StepMemory partial = figures(alloc, last_allocated);
    if (where == -1) r.setup = partial;
    r.stats = alloc.stats();
    r.peak_allocated = partial.peak_allocated;
    r.peak_reserved = partial.peak_reserved;
    r.peak_step = where;
  } catch (...) {
    step = nullptr;
    alloc.record_memory_history(false);
    throw;
  }
  step = nullptr;  // frees what the run made, after its figures were taken
  auto consider = [&](const StepMemory& m, int index) {
    if (m.peak_allocated > r.peak_allocated) {
      r.peak_allocated = m.peak_allocated;
      r.peak_step = index;
    }
    r.peak_reserved = std::max(r.peak_reserved, m.peak_reserved);
  };
  if (r.fits || r.failed_step >= 0) consider(r.setup, -1);
  for (size_t i = 0; i < r.steps.size(); ++i) consider(r.steps[i], static_cast<int>(i));
  memory::MemorySnapshot snap = alloc.memory_snapshot();
  alloc.record_memory_history(false);
  r.peak_sites = sites_at_peak(snap.trace, o.top_sites_);
  if (o.keep_trace_) r.trace = std::move(snap.trace);
  return r;
}

std::string mirror_name(DeviceType mirror) {
  return "meta (mirroring " + Device(mirror).str() + ")";
}

// One meta run: `run`'s steps, mirror and bookkeeping, on a fresh meta device of
// `capacity` with `allocator`'s options.
MemoryPrediction predict_once(const StepFactory& make_step, const PredictOptions& run,
                              size_t capacity, const memory::AllocatorOptions& allocator) {
  MetaDeviceScope scope(MetaDeviceOptions()
                            .mirror_device(run.mirror_)
                            .capacity_bytes(capacity)
                            .allocator_options(allocator));
  MemoryPrediction r = run_steps(make_step, kMeta, scope.allocator(), run);
  r.device = mirror_name(run.mirror_);
  r.capacity = capacity;
  r.library_bytes = scope.library_bytes();
  return r;
}

size_t resolve_capacity(const PredictOptions& o) {
  if (o.capacity_ != 0) return o.capacity_;
  if (o.mirror_ == DeviceType::CUDA && device_count(DeviceType::CUDA) > 0) {
    // What this process could get on cuda:0 now: the device's free memory plus
    // what ember's allocator already holds there.
    memory::CachingAllocator& a = caching_allocator(kCUDA);
    return a.backend().memory_info().free + static_cast<size_t>(a.memory_reserved());
  }
  return kNoCapacityLimit;
}

// Scopes whose allocator still had blocks when the run ended keep it (never
// freed), so tensors that escaped the step can still be freed safely.
void retire(memory::CachingAllocator* alloc) {
  static std::mutex mutex;
  static auto* retired = new std::vector<memory::CachingAllocator*>();
  std::lock_guard lock(mutex);
  retired->push_back(alloc);
}

std::string bytes_cell(int64_t b) {
  return std::to_string(b) + " (" + memory::format_bytes(static_cast<uint64_t>(b < 0 ? -b : b)) +
         (b < 0 ? " less" : "") + ")";
}

}  // namespace

// ---------------------------------------------------------------- MemoryPrediction

int64_t MemoryPrediction::growth_per_step() const {
  return steps.empty() ? 0 : steps.back().growth;
}

bool MemoryPrediction::grows() const {
  if (steps.size() < 4) return false;
  for (size_t i = 2; i < steps.size(); ++i)
    if (steps[i].growth <= 0) return false;
  return true;
}

std::string MemoryPrediction::table() const {
  std::ostringstream os;
  char line[256];
  os << device << ", " << steps.size() << " of " << steps_asked << " steps, capacity "
     << (capacity >= kNoCapacityLimit ? std::string("unlimited")
                                      : bytes_cell(static_cast<int64_t>(capacity)))
     << "\n";
  std::snprintf(line, sizeof(line), "%-7s %14s %14s %14s %14s %12s\n", "step", "allocated",
                "reserved", "peak alloc.", "peak reserved", "growth");
  os << line;
  auto row = [&](const char* name, const StepMemory& m) {
    std::snprintf(line, sizeof(line), "%-7s %14lld %14lld %14lld %14lld %12lld\n", name,
                  static_cast<long long>(m.allocated), static_cast<long long>(m.reserved),
                  static_cast<long long>(m.peak_allocated), static_cast<long long>(m.peak_reserved),
                  static_cast<long long>(m.growth));
    os << line;
  };
  row("set-up", setup);
  for (size_t i = 0; i < steps.size(); ++i) row(std::to_string(i).c_str(), steps[i]);
  os << "peak allocated  " << bytes_cell(peak_allocated) << ", in "
     << (peak_step < 0 ? std::string("the set-up") : "step " + std::to_string(peak_step)) << "\n";
  os << "peak reserved   " << bytes_cell(peak_reserved) << "\n";
  if (library_bytes > 0)
    os << "outside the allocator: " << bytes_cell(static_cast<int64_t>(library_bytes))
       << " of cuBLAS/cuBLASLt workspaces\n";
  if (fits) {
    os << "fits: yes";
    if (capacity < kNoCapacityLimit) {
      const int64_t used = peak_reserved + static_cast<int64_t>(library_bytes);
      os << ", " << memory::format_bytes(static_cast<uint64_t>(used)) << " of "
         << memory::format_bytes(capacity) << " ("
         << memory::format_bytes(capacity - static_cast<size_t>(used)) << " to spare)";
    }
    os << "\n";
  } else {
    os << "fits: NO, out of memory in "
       << (failed_step < 0 ? std::string("the set-up") : "step " + std::to_string(failed_step));
    if (needed_bytes > 0)
      os << "; without a limit it needs " << bytes_cell(needed_bytes) << " ("
         << memory::format_bytes(static_cast<uint64_t>(needed_bytes) > capacity
                                     ? static_cast<uint64_t>(needed_bytes) - capacity
                                     : 0)
         << " more than the capacity)";
    os << "\n  " << failure << "\n";
  }
  if (grows()) {
    os << "LEAK: allocated memory grows every step, by " << bytes_cell(growth_per_step())
       << " in the last";
    if (capacity < kNoCapacityLimit && growth_per_step() > 0) {
      const int64_t room =
          static_cast<int64_t>(capacity) - peak_reserved - static_cast<int64_t>(library_bytes);
      os << "; at that rate the device is full after about "
         << std::max<int64_t>(0, room) / growth_per_step() << " more steps";
    }
    os << "\n";
  } else if (steps.size() >= 4) {
    os << "growth: none from step 2 on\n";
  }
  if (!peak_sites.empty()) {
    os << "largest allocation sites live at the peak:\n";
    for (const SiteMemory& s : peak_sites) {
      std::snprintf(line, sizeof(line), "  %14lld %10s  %4lld block%s  %s\n",
                    static_cast<long long>(s.bytes),
                    memory::format_bytes(static_cast<uint64_t>(s.bytes)).c_str(),
                    static_cast<long long>(s.blocks), s.blocks == 1 ? " " : "s", s.site.c_str());
      os << line;
    }
  }
  if (!policies.empty()) {
    os << "allocator policies (the same requests):\n";
    for (const PolicyMemory& p : policies) {
      std::snprintf(line, sizeof(line), "  %-36s peak reserved %14lld (%s), %lld segments%s\n",
                    p.policy.empty() ? "(default)" : p.policy.c_str(),
                    static_cast<long long>(p.peak_reserved),
                    memory::format_bytes(static_cast<uint64_t>(p.peak_reserved)).c_str(),
                    static_cast<long long>(p.segments), p.fits ? "" : ", does NOT fit");
      os << line;
    }
  }
  return os.str();
}

// ---------------------------------------------------------------- entry points

MemoryPrediction predict_memory(const StepFactory& make_step, const PredictOptions& options) {
  const size_t capacity = resolve_capacity(options);
  MemoryPrediction r = predict_once(make_step, options, capacity, options.allocator_);
  PredictOptions quiet = options;  // the extra runs need only their figures
  quiet.top_sites_ = 0;
  quiet.keep_trace_ = false;
  if (!r.fits) {
    // How much it would need: the same run without a limit.
    const MemoryPrediction u = predict_once(make_step, quiet, kNoCapacityLimit, options.allocator_);
    if (u.fits) r.needed_bytes = u.peak_reserved + static_cast<int64_t>(u.library_bytes);
  }
  // Each policy is a run of its own: the requests are the same (the meta device's
  // ops do not depend on the allocator), so this is exact where a replay of the
  // trace (core/memory/replay.h) would be too; a replay adds the policies the
  // native allocator does not have.
  for (const std::string& conf : options.policies_) {
    const memory::AllocatorOptions policy = memory::AllocatorOptions::parse(conf);
    const MemoryPrediction p = predict_once(make_step, quiet, capacity, policy);
    r.policies.push_back(
        PolicyMemory{conf, p.peak_allocated, p.peak_reserved, p.stats.num_device_alloc, p.fits});
  }
  return r;
}

MemoryPrediction measure_memory(const StepFactory& make_step, Device device,
                                const PredictOptions& options) {
  check_device(device);
  if (device.is_meta()) return predict_memory(make_step, options);
  if (device.is_cpu()) {
    const size_t capacity = options.capacity_ != 0 ? options.capacity_ : kNoCapacityLimit;
    auto* alloc = new memory::CachingAllocator(
        std::make_unique<memory::SimulatedBackend>(capacity, 0, memory::SimulatedMemory::host),
        options.allocator_);
    MemoryPrediction r;
    try {
      memory::HostAllocatorOverride guard(*alloc);
      r = run_steps(make_step, device, *alloc, options);
    } catch (...) {
      if (alloc->memory_allocated() > 0)
        retire(alloc);
      else
        delete alloc;
      throw;
    }
    if (alloc->memory_allocated() > 0)
      retire(alloc);
    else
      delete alloc;
    r.device = "cpu (simulated device)";
    r.capacity = capacity;
    return r;
  }
  memory::CachingAllocator& alloc = caching_allocator(device);
  empty_cache(device);
  EMBER_CHECK(alloc.memory_allocated() == 0 && alloc.memory_reserved() == 0,
              "measure_memory: ", device, " holds ", alloc.memory_allocated(), " allocated and ",
              alloc.memory_reserved(),
              " reserved bytes before the run; free those tensors first, or the figures would "
              "not be the step's alone");
  alloc.reset_accumulated_memory_stats();
  // What the process takes beside the allocator during the run (cuBLAS and
  // cuBLASLt handles and workspaces made on first use, kernel code loaded on first
  // launch) shows as free device memory lost beyond what the allocator still
  // reserves afterwards.
  const memory::Backend::MemoryInfo before = alloc.backend().memory_info();
  MemoryPrediction r = run_steps(make_step, device, alloc, options);
  const memory::Backend::MemoryInfo after = alloc.backend().memory_info();
  const int64_t taken = static_cast<int64_t>(before.free) - static_cast<int64_t>(after.free);
  r.library_bytes = static_cast<size_t>(std::max<int64_t>(0, taken - alloc.memory_reserved()));
  r.device = device.str();
  r.capacity = before.total;
  return r;
}

BatchSearch largest_fitting_batch(const BatchStepFactory& make_step, int64_t lo, int64_t hi,
                                  const PredictOptions& options) {
  EMBER_CHECK(make_step != nullptr, "largest_fitting_batch: the step factory is empty");
  EMBER_CHECK(lo >= 1 && lo <= hi, "largest_fitting_batch: need 1 <= lo <= hi, got [", lo, ", ", hi,
              "]");
  BatchSearch search;
  PredictOptions quiet = options;
  quiet.policies_.clear();
  auto probe = [&](int64_t batch) {
    MemoryPrediction p =
        predict_memory([&make_step, batch](Device d) { return make_step(d, batch); }, quiet);
    search.probes.emplace_back(batch, p.fits);
    return p;
  };
  MemoryPrediction at_lo = probe(lo);
  if (!at_lo.fits) {
    search.at_batch = std::move(at_lo);
    return search;  // batch 0: nothing fits
  }
  search.batch = lo;
  search.at_batch = std::move(at_lo);
  if (lo == hi) return search;
  MemoryPrediction at_hi = probe(hi);
  if (at_hi.fits) {
    search.batch = hi;
    search.at_batch = std::move(at_hi);
    return search;
  }
  // fits(lo), !fits(hi)
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    MemoryPrediction p = probe(mid);
    if (p.fits) {
      lo = mid;
      search.batch = mid;
      search.at_batch = std::move(p);
    } else {
      hi = mid;
    }
  }
  return search;
}

}  // namespace ember
