#include "core/memory/replay.h"

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <sstream>
#include <unordered_map>

#include "core/base/error.h"
#include "core/memory/backends.h"
#include "core/memory/caching_allocator.h"
#include "core/memory/memory_stats.h"

namespace ember::memory {

namespace {

thread_local int replay_depth = 0;

// Marks this thread as replaying while it lives.
struct ReplayScope {
  ReplayScope() { ++replay_depth; }
  ~ReplayScope() { --replay_depth; }
  ReplayScope(const ReplayScope&) = delete;
  ReplayScope& operator=(const ReplayScope&) = delete;
};

// Marker streams hold deferred frees: a value no real stream (a pointer, or 0)
// has, one per slot.
constexpr uint64_t kMarkerBit = uint64_t{1} << 63;
cudaStream_t marker_stream(uint32_t slot) {
  return reinterpret_cast<cudaStream_t>(static_cast<uintptr_t>(kMarkerBit | slot));
}

}  // namespace

bool replay_in_progress() {
  return replay_depth > 0;
}

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// =================================================================================
// Compiling a trace

ReplayProgram ReplayProgram::compile(Trace trace, const ReplayOptions& options) {
  ReplayProgram p;
  p.trace_ = std::move(trace);
  const Trace& t = p.trace_;
  const std::vector<TraceEvent>& ev = t.events;
  p.ops_.resize(ev.size());

  struct Live {
    uint32_t slot;
    uint32_t stream;
    uint64_t size;
    size_t alloc_event;
    size_t free_event;      // SIZE_MAX while not freed
    size_t allocs_at_free;  // how many allocs the trace had made at its free_requested
  };
  std::unordered_map<uint64_t, Live> live;
  live.reserve(1024);
  std::unordered_map<uint64_t, uint32_t> stream_index;
  std::vector<uint32_t> free_slots;
  std::unordered_map<uint64_t, uint64_t> segments;
  bool segments_known = true;
  bool any_segment = false;
  uint64_t reserved = 0, peak_reserved = 0;
  uint64_t live_requested = 0;
  constexpr size_t kNotFreed = SIZE_MAX;

  for (size_t i = 0; i < ev.size(); ++i) {
    const TraceEvent& e = ev[i];
    ReplayOp& op = p.ops_[i];
    switch (e.op) {
      case TraceOp::alloc: {
        EMBER_CHECK(e.size > 0, "trace ", t.where(i),
                    ": alloc of 0 bytes (a trace holds only "
                    "real allocations)");
        EMBER_CHECK((e.stream & kMarkerBit) == 0, "trace ", t.where(i), ": stream ", e.stream,
                    " has its top bit set, which the replay reserves for its own use");
        auto [it, fresh] = live.try_emplace(e.addr);
        if (!fresh) {
          const Live& prev = it->second;
          EMBER_FAIL("trace ", t.where(i), ": alloc at 0x", std::hex, e.addr, std::dec,
                     ", which is still ",
                     prev.free_event == kNotFreed ? "live" : "waiting for its free_completed",
                     " (allocated at ", t.where(prev.alloc_event), ")");
        }
        auto [sit, new_stream] =
            stream_index.try_emplace(e.stream, static_cast<uint32_t>(p.streams_.size()));
        if (new_stream) p.streams_.push_back(e.stream);
        uint32_t slot;
        if (!free_slots.empty()) {
          slot = free_slots.back();
          free_slots.pop_back();
        } else {
          slot = static_cast<uint32_t>(p.slots_++);
        }
        it->second = Live{slot, sit->second, e.size, i, kNotFreed, 0};
        op = ReplayOp{e.size, slot, sit->second, ReplayOpKind::alloc};
        ++p.allocs_;
        EMBER_CHECK(live_requested <= (uint64_t{1} << 63) - e.size, "trace ", t.where(i),
                    ": the bytes live at once overflow 63 bits");
        live_requested += e.size;
        p.peak_live_requested_ = std::max(p.peak_live_requested_, live_requested);
        if (e.size > p.largest_request_) {
          p.largest_request_ = e.size;
          p.largest_request_event_ = i;
        }
        break;
      }
      case TraceOp::free_requested: {
        auto it = live.find(e.addr);
        EMBER_CHECK(it != live.end(), "trace ", t.where(i), ": free of unknown address 0x",
                    std::hex, e.addr, std::dec,
                    " (no live alloc there; a trace that begins while blocks are live must "
                    "allocate them first: tools/convert_torch_trace.py and ember's history "
                    "writer add such a prelude)");
        Live& b = it->second;
        EMBER_CHECK(b.free_event == kNotFreed, "trace ", t.where(i), ": free_requested of 0x",
                    std::hex, e.addr, std::dec, " twice (first at ", t.where(b.free_event), ")");
        EMBER_CHECK(e.size == b.size, "trace ", t.where(i), ": free_requested of 0x", std::hex,
                    e.addr, std::dec, " with size ", e.size, ", but it was allocated with size ",
                    b.size, " (", t.where(b.alloc_event), ")");
        b.free_event = i;
        b.allocs_at_free = p.allocs_;
        // Deferred until its free_completed shows whether anything was allocated
        // in between; if nothing was, the free is replayed as immediate.
        op = ReplayOp{b.size, b.slot, b.stream, ReplayOpKind::free_deferred};
        live_requested -= b.size;
        break;
      }
      case TraceOp::free_completed: {
        auto it = live.find(e.addr);
        EMBER_CHECK(it != live.end() && it->second.free_event != kNotFreed, "trace ", t.where(i),
                    ": free_completed of 0x", std::hex, e.addr, std::dec,
                    it == live.end() ? " with no live alloc there" : " before its free_requested",
                    " (each free is free_requested, then free_completed)");
        const Live b = it->second;
        live.erase(it);
        if (b.allocs_at_free == p.allocs_) {
          p.ops_[b.free_event].kind = ReplayOpKind::free;
          op = ReplayOp{b.size, b.slot, b.stream, ReplayOpKind::nop};
        } else {
          op = ReplayOp{b.size, b.slot, b.stream, ReplayOpKind::complete};
        }
        free_slots.push_back(b.slot);
        break;
      }
      case TraceOp::segment_alloc: {
        any_segment = true;
        auto [it, fresh] = segments.try_emplace(e.addr, e.size);
        EMBER_CHECK(fresh, "trace ", t.where(i), ": segment_alloc at 0x", std::hex, e.addr,
                    std::dec, ", where a segment is already allocated");
        reserved += e.size;
        peak_reserved = std::max(peak_reserved, reserved);
        op.kind = ReplayOpKind::nop;
        break;
      }
      case TraceOp::segment_free: {
        any_segment = true;
        auto it = segments.find(e.addr);
        if (it == segments.end()) {
          segments_known = false;  // allocated before the trace began
        } else {
          reserved -= it->second;
          segments.erase(it);
        }
        const bool starts_run = i == 0 || ev[i - 1].op != TraceOp::segment_free;
        op.kind = options.empty_cache_at_segment_free && starts_run ? ReplayOpKind::empty_cache
                                                                    : ReplayOpKind::nop;
        break;
      }
    }
  }
  if (any_segment && segments_known) p.recorded_peak_reserved_ = peak_reserved;
  return p;
}

// =================================================================================
// Replaying through a caching allocator

std::pair<int64_t, int64_t> free_cache_shape(const CachingAllocator& allocator) {
  int64_t largest = 0, total = 0;
  for (const SegmentSnapshot& s : allocator.memory_snapshot().segments)
    for (const BlockSnapshot& b : s.blocks)
      if (b.state == BlockState::inactive) {
        largest = std::max(largest, static_cast<int64_t>(b.size));
        total += static_cast<int64_t>(b.size);
      }
  return {largest, total};
}

ReplayResult replay_through(const ReplayProgram& program, CachingAllocator& allocator,
                            const std::vector<cudaStream_t>& streams, ReplayBackend* events,
                            const RunSettings& settings, std::optional<size_t> last) {
  EMBER_CHECK(streams.size() == program.streams().size(), "replay_through: ", streams.size(),
              " streams given for a trace with ", program.streams().size());
  ReplayScope scope;
  ReplayResult r;
  r.capacity = settings.capacity;
  const std::vector<ReplayOp>& ops = program.ops();
  const size_t end = last ? std::min(*last + 1, ops.size()) : ops.size();
  std::vector<void*> ptrs(program.slots(), nullptr);
  uint64_t live_requested = 0;
  // The peak of what the device holds for the allocator, and when it first got
  // there (the simulated backend's count is cheap to read; a real one's is not).
  size_t peak_event = 0;
  int64_t peak_reserved = -1;
  auto reserved_now = [&]() -> int64_t {
    return events != nullptr ? static_cast<int64_t>(events->used()) : allocator.memory_reserved();
  };

  const auto t0 = std::chrono::steady_clock::now();
  const double cpu0 = thread_cpu_seconds();
  size_t i = 0;
  for (; i < end; ++i) {
    const ReplayOp& op = ops[i];
    switch (op.kind) {
      case ReplayOpKind::alloc: {
        try {
          ptrs[op.slot] = allocator.allocate(op.size, streams[op.stream]);
        } catch (const OutOfMemoryError& e) {
          ptrs[op.slot] = nullptr;
          ++r.ooms;
          if (!r.first_failure) {
            ReplayFailure f;
            f.event = i;
            f.size = op.size;
            f.stream = program.streams()[op.stream];
            f.live_requested = live_requested;
            f.allocated = allocator.memory_allocated();
            f.reserved = allocator.memory_reserved();
            f.message = e.what();
            r.first_failure = std::move(f);
          }
          if (settings.stop_at_first_oom) {
            ++i;
            goto done;
          }
          break;
        }
        live_requested += op.size;
        const int64_t res = reserved_now();
        if (res > peak_reserved) {
          peak_reserved = res;
          peak_event = i;
        }
        break;
      }
      case ReplayOpKind::free:
        if (void* p = ptrs[op.slot]) {
          allocator.deallocate(p);
          live_requested -= op.size;
        }
        break;
      case ReplayOpKind::free_deferred:
        if (void* p = ptrs[op.slot]) {
          live_requested -= op.size;
          if (events != nullptr) {
            const cudaStream_t marker = marker_stream(op.slot);
            events->hold(marker);
            allocator.record_stream(p, marker);
            allocator.deallocate(p);
          }
          // Without controllable events the deallocate waits for `complete`.
        }
        break;
      case ReplayOpKind::complete:
        if (void* p = ptrs[op.slot]) {
          if (events != nullptr)
            events->release(marker_stream(op.slot));
          else
            allocator.deallocate(p);
          ptrs[op.slot] = nullptr;
        }
        break;
      case ReplayOpKind::empty_cache:
        allocator.empty_cache();
        break;
      case ReplayOpKind::nop:
        break;
    }
  }
done:
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.cpu_seconds = thread_cpu_seconds() - cpu0;
  r.events = i;
  const MemoryStats s = allocator.stats();
  r.peak_allocated = s.allocated_bytes[kAggregate].peak;
  r.peak_reserved = s.reserved_bytes[kAggregate].peak;
  r.peak_segments = s.segment[kAggregate].peak;
  r.retries = s.num_alloc_retries;
  r.peak_reserved_event = peak_event;
  return r;
}

namespace {

// AllocatorOptions::expandable_segments where this build has it (the field and
// the policy arrive together).
template <typename O>
bool set_expandable(O& o) {
  if constexpr (requires { o.expandable_segments = true; }) {
    o.expandable_segments = true;
    return true;
  } else {
    return false;
  }
}
template <typename O>
bool is_expandable(const O& o) {
  if constexpr (requires { bool(o.expandable_segments); })
    return o.expandable_segments;
  else
    return false;
}

// =================================================================================
// Policies

class CachingPolicy final : public ReplayPolicy {
 public:
  CachingPolicy(std::string name, AllocatorOptions options, std::string unavailable)
      : name_(std::move(name)), options_(std::move(options)), unavailable_(std::move(unavailable)) {
    EMBER_CHECK(!options_.sanitize, "replay: policy ", name_,
                ": the sanitizer mode cannot be "
                "replayed (its guards need real memory)");
  }

  std::string name() const override { return name_; }
  std::string unavailable() const override { return unavailable_; }
  bool simulated() const override { return true; }

  ReplayResult run(const ReplayProgram& program, const RunSettings& settings) override {
    EMBER_CHECK(unavailable_.empty(), "replay: policy ", name_, " is unavailable: ", unavailable_);
    std::vector<cudaStream_t> streams;
    for (uint64_t s : program.streams())
      streams.push_back(reinterpret_cast<cudaStream_t>(static_cast<uintptr_t>(s)));
    ReplayResult r = replay_once(program, streams, settings, {});
    r.policy = name_;
    if (settings.measure_fragmentation && r.peak_reserved > 0) {
      // Deterministic: a second run stopped where the first peaked sees the same cache.
      RunSettings partial = settings;
      partial.stop_at_first_oom = false;
      auto backend = std::make_unique<ReplayBackend>(settings.capacity);
      ReplayBackend* events = backend.get();
      CachingAllocator again(std::move(backend), options_);
      replay_through(program, again, streams, events, partial, r.peak_reserved_event);
      auto [largest, cached] = free_cache_shape(again);
      r.largest_free_at_peak = largest;
      r.free_cached_at_peak = cached;
      r.fragmentation =
          cached > 0 ? 1.0 - static_cast<double>(largest) / static_cast<double>(cached) : 0.0;
    }
    return r;
  }

 private:
  ReplayResult replay_once(const ReplayProgram& program, const std::vector<cudaStream_t>& streams,
                           const RunSettings& settings, std::optional<size_t> last) {
    auto backend = std::make_unique<ReplayBackend>(settings.capacity);
    ReplayBackend* events = backend.get();
    CachingAllocator allocator(std::move(backend), options_);
    return replay_through(program, allocator, streams, events, settings, last);
  }

  std::string name_;
  AllocatorOptions options_;
  std::string unavailable_;
};

}  // namespace

std::unique_ptr<ReplayPolicy> make_caching_policy(std::string name, AllocatorOptions options) {
  return std::make_unique<CachingPolicy>(std::move(name), std::move(options), "");
}

bool expandable_segments_supported(std::string* why_not) {
  try {
    AllocatorOptions::parse("expandable_segments:True");
    return true;
  } catch (const Error& e) {
    if (why_not != nullptr) *why_not = e.what();
    return false;
  }
}

std::unique_ptr<ReplayPolicy> make_caching_policy(const std::string& conf) {
  const std::string name = conf.empty() ? "native" : conf;
  if (conf.empty() || conf == "native") return make_caching_policy("native", AllocatorOptions{});
  std::string why;
  if (conf.find("expandable_segments:True") != std::string::npos &&
      !expandable_segments_supported(&why))
    return std::make_unique<CachingPolicy>(name, AllocatorOptions{},
                                           "not supported by this build's allocator");
  return make_caching_policy(name, AllocatorOptions::parse(conf));
}

std::vector<std::unique_ptr<ReplayPolicy>> default_simulated_policies() {
  std::vector<std::unique_ptr<ReplayPolicy>> out;
  out.push_back(make_caching_policy("native"));
  out.push_back(make_caching_policy("expandable_segments:True"));
  return out;
}

// =================================================================================
// Bisection

std::optional<uint64_t> find_min_capacity(ReplayPolicy& policy, const ReplayProgram& program,
                                          uint64_t upper, uint64_t granularity) {
  EMBER_CHECK(granularity > 0, "find_min_capacity: granularity must be > 0");
  EMBER_CHECK(policy.simulated(), "find_min_capacity: policy ", policy.name(),
              " does not run on the simulated backend");
  RunSettings s;
  s.stop_at_first_oom = true;
  s.measure_fragmentation = false;
  auto fits = [&](uint64_t units) {
    s.capacity = units * granularity;
    return policy.run(program, s).ooms == 0;
  };
  constexpr uint64_t kLimit = uint64_t{1} << 50;
  uint64_t hi = std::max<uint64_t>(1, (upper + granularity - 1) / granularity);
  // Nothing smaller than the largest request can fit it.
  uint64_t lo = program.largest_request() / granularity;  // fits(lo) is false or lo == 0
  if (lo > 0 && program.largest_request() % granularity == 0) --lo;
  if (hi <= lo) hi = lo + 1;
  while (!fits(hi)) {
    lo = hi;
    if (hi * granularity >= kLimit) return std::nullopt;
    hi *= 2;
  }
  // Invariant: fits(hi); lo == 0 or !fits(lo) (assumed monotone).
  while (hi - lo > 1) {
    const uint64_t mid = lo + (hi - lo) / 2;
    if (fits(mid))
      hi = mid;
    else
      lo = mid;
  }
  return hi * granularity;
}

// =================================================================================
// The out-of-memory suggestion

std::optional<std::string> replay_out_of_memory_advisor(const std::vector<TraceEntry>& history,
                                                        const OutOfMemoryRequest& request) {
  if (history.empty() || request.options == nullptr || request.capacity == 0) return std::nullopt;
  OomReplayInput in;
  in.history = history;
  in.live = request.live_blocks;
  in.request = request.requested_bytes;
  in.stream = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(request.stream));
  in.capacity = static_cast<uint64_t>(std::max<int64_t>(0, history.back().reserved_bytes)) +
                request.free_bytes;
  in.options = *request.options;
  std::string line = suggest_options_for_oom(in);
  if (line.empty()) return std::nullopt;
  return line;
}

std::string suggest_options_for_oom(const OomReplayInput& input) {
  if (replay_in_progress() || input.history.empty() || input.capacity == 0) return "";
  try {
    // The window: at most the last kWindow entries, with blocks live before it
    // (and those live now) allocated first; the failed request last.
    constexpr size_t kWindow = 200000;
    const size_t from = input.history.size() > kWindow ? input.history.size() - kWindow : 0;
    std::vector<TraceEntry> window(input.history.begin() + static_cast<std::ptrdiff_t>(from),
                                   input.history.end());
    // Segment rows would replay the recording allocator's own decisions
    // (empty_cache on its retry); the policies under test make their own.
    std::erase_if(window, [](const TraceEntry& e) {
      return e.action == TraceAction::segment_alloc || e.action == TraceAction::segment_free;
    });
    Trace t = trace_from_history(window, "the allocator's recent history");
    t = with_prelude(t, input.live);
    t.events.push_back(TraceEvent{0, input.request, input.stream, TraceOp::alloc});
    // The failed request needs an address no live block has: one past the highest.
    uint64_t top = 0;
    for (const TraceEvent& e : t.events) top = std::max(top, e.addr);
    t.events.back().addr = top + 1;
    const ReplayProgram program = ReplayProgram::compile(std::move(t));
    const size_t last = program.ops().size() - 1;

    RunSettings s;
    s.capacity = input.capacity;
    s.stop_at_first_oom = true;
    s.measure_fragmentation = false;
    // The replay must fail where the program did, at the last request, or it
    // does not model this allocator well enough to judge the others.
    CachingPolicy own("current", input.options, "");
    const ReplayResult mine = own.run(program, s);
    if (!mine.first_failure || mine.first_failure->event != last) return "";

    std::vector<std::pair<std::string, AllocatorOptions>> candidates;
    {
      // The user's other options stay; only the segment policy changes.
      AllocatorOptions o = input.options;
      if (!is_expandable(o) && expandable_segments_supported() && set_expandable(o))
        candidates.emplace_back("expandable_segments:True", o);
    }
    for (int mb : {64, 128, 256, 512, 1024}) {
      const size_t bytes = static_cast<size_t>(mb) << 20;
      if (input.options.max_split_size == bytes) continue;
      AllocatorOptions o = input.options;
      o.max_split_size = bytes;
      candidates.emplace_back("max_split_size_mb:" + std::to_string(mb), o);
    }
    {
      AllocatorOptions o = input.options;
      if (o.divisions_for(size_t{1} << 30) != 4) {
        o.roundup_power2_divisions.fill(4);
        candidates.emplace_back("roundup_power2_divisions:4", o);
      }
    }
    std::vector<std::string> fit;
    for (auto& [name, options] : candidates) {
      CachingPolicy other(name, options, "");
      if (other.run(program, s).ooms == 0) fit.push_back(name);
      if (fit.size() == 3) break;
    }
    if (fit.empty()) return "";
    std::string list;
    for (size_t i = 0; i < fit.size(); ++i)
      list += (i == 0 ? "" : i + 1 == fit.size() ? " or " : ", ") + fit[i];
    return detail::str_cat("A replay of the last ", window.size(),
                           " allocator events on a device of ", format_bytes(input.capacity),
                           " fails here too with the current options, but fits with ", list,
                           ": try ", kAllocConfEnvVar, "=", fit.front(), ".");
  } catch (const std::exception&) {
    // A suggestion is a courtesy: never let it replace the out-of-memory error.
    return "";
  }
}

}  // namespace ember::memory
