// bench_allocator: what ember's caching allocator costs and wastes.
//   1. The allocate+free round trip of a cached block at 512 B, 1 MiB and 64 MiB:
//      ember on the simulated backend (the allocator's own bookkeeping, no device),
//      ember on CUDA, both also with expandable segments, cudaMalloc/cudaFree and
//      cudaMallocAsync/cudaFreeAsync; host ns per round trip, median of many
//      batches after warm-up. Every side runs on the same stream and none
//      synchronises it inside the timed loop (ember's and cudaFreeAsync's frees
//      are stream-ordered; the stream is synchronised between measurements only).
//   2. Replays of two training loops' allocation traces, native and with expandable
//      segments: a fixed-shape MLP with Adam, and the same MLP with a batch size
//      that changes every step. Time per step, peak reserved / peak allocated.
// Every timed path is checked first: a round trip must hit the cache (no new
// memory while timed, the same block back) and a replay must free all it
// allocates; a failed check prints no row and exits 1. Without a GPU it says so,
// measures the host-only part on the simulated backend and exits 0.
// Usage: bench_allocator [--json FILE]
//        bench_allocator --callgrind BYTES N [expandable]  (N simulated round trips
//        only, for `valgrind --tool=callgrind`: instruction counts are repeatable
//        where wall time is noisy)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "core/memory/caching_allocator.h"
#include "cuda/cuda_backend.h"
#include "cuda/runtime.h"

namespace {

using namespace ember::cuda;
using namespace ember::memory;
using Clock = std::chrono::steady_clock;

constexpr size_t kMiB = size_t{1} << 20;
constexpr int kBatches = 31;
constexpr double kBatchTargetNs = 2e6;  // each timed batch runs about 2 ms
const AllocatorOptions kNative{};
const AllocatorOptions kExpandable = AllocatorOptions::parse("expandable_segments:True");

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "bench_allocator: check failed: %s\n", what);
    std::exit(1);
  }
}

void cuda_ok(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    std::fprintf(stderr, "bench_allocator: %s: %s\n", what, cudaGetErrorString(err));
    std::exit(1);
  }
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Median host nanoseconds per call of `fn`, timed in batches sized from a warm-up.
template <typename Fn>
double median_ns_per_call(Fn&& fn) {
  auto t0 = Clock::now();
  int warm = 0;
  while (warm < 10 || (warm < 100000 && seconds_since(t0) < 0.02)) {
    fn();
    ++warm;
  }
  const double per_call = seconds_since(t0) * 1e9 / warm;
  const int calls = static_cast<int>(std::clamp(kBatchTargetNs / per_call, 1.0, 200000.0));
  std::vector<double> samples;
  for (int b = 0; b < kBatches; ++b) {
    auto start = Clock::now();
    for (int i = 0; i < calls; ++i) fn();
    samples.push_back(seconds_since(start) * 1e9 / calls);
  }
  std::nth_element(samples.begin(), samples.begin() + kBatches / 2, samples.end());
  return samples[kBatches / 2];
}

// The round trip of a cached block on `a`, checked to hit the cache: the block
// comes back at the same address and no memory is asked of the backend while timed.
double ember_round_trip_ns(CachingAllocator& a, size_t bytes, cudaStream_t stream) {
  void* first = a.allocate(bytes, stream);
  check(first != nullptr, "ember allocation");
  a.deallocate(first);
  const int64_t device_allocs = a.memory_stats().at("num_device_alloc");
  const double ns = median_ns_per_call([&] { a.deallocate(a.allocate(bytes, stream)); });
  void* again = a.allocate(bytes, stream);
  check(again == first, "the round trip reuses the cached block");
  a.deallocate(again);
  check(a.memory_stats().at("num_device_alloc") == device_allocs,
        "the timed round trips asked the backend for no memory");
  check(a.memory_allocated() == 0, "the round trips free everything");
  return ns;
}

// ------------------------------------------------------------------------------
// Training loops' allocations, written out deterministically: a 4-layer MLP
// (1024 -> 4096 -> 4096 -> 4096 -> 1000, fp32) trained with Adam, gradients set to
// none at every zero_grad (PyTorch's default). Each step frees all it allocates.

struct TraceEvent {
  bool alloc;
  uint32_t id;
  size_t bytes;
};

class TraceWriter {
 public:
  uint32_t alloc(size_t bytes) {
    events_.push_back({true, next_, bytes});
    return next_++;
  }
  void free(uint32_t id) { events_.push_back({false, id, 0}); }
  std::vector<TraceEvent> take() { return std::move(events_); }
  uint32_t ids() const { return next_; }

 private:
  std::vector<TraceEvent> events_;
  uint32_t next_ = 0;
};

struct Trace {
  std::vector<TraceEvent> setup, teardown;
  std::vector<std::vector<TraceEvent>> steps;  // replayed in turn
  uint32_t ids = 0;
  size_t events_per_step() const {
    size_t n = 0;
    for (const auto& s : steps) n += s.size();
    return n / steps.size();
  }
};

// One step of the MLP at batch `batch`; `params` are the weights then biases.
void mlp_step(TraceWriter& w, const std::vector<size_t>& dims, size_t batch) {
  constexpr size_t kFloat = 4;
  const size_t layers = dims.size() - 1;
  // Forward: each layer saves its pre-activation and activation for backward.
  uint32_t x = w.alloc(batch * dims[0] * kFloat);
  uint32_t target = w.alloc(batch * dims[layers] * kFloat);
  std::vector<uint32_t> pre(layers), act(layers);
  for (size_t l = 0; l < layers; ++l) {
    pre[l] = w.alloc(batch * dims[l + 1] * kFloat);
    if (l + 1 < layers) act[l] = w.alloc(batch * dims[l + 1] * kFloat);
  }
  uint32_t loss = w.alloc(kFloat);
  uint32_t d_out = w.alloc(batch * dims[layers] * kFloat);  // MSE's gradient
  // Backward, last layer first; saved tensors go as soon as their node has run.
  std::vector<uint32_t> d_w(layers), d_b(layers);
  uint32_t d_act = d_out;
  for (size_t l = layers; l-- > 0;) {
    uint32_t d_pre = d_act;
    if (l + 1 < layers) {
      d_pre = w.alloc(batch * dims[l + 1] * kFloat);  // relu backward
      w.free(d_act);
      w.free(act[l]);
    }
    w.free(pre[l]);
    d_w[l] = w.alloc(dims[l + 1] * dims[l] * kFloat);
    d_b[l] = w.alloc(dims[l + 1] * kFloat);
    if (l > 0) d_act = w.alloc(batch * dims[l] * kFloat);
    w.free(d_pre);
  }
  w.free(x);
  w.free(target);
  w.free(loss);
  // Adam: one temporary (the denominator) per parameter, then zero_grad.
  for (size_t l = 0; l < layers; ++l) {
    w.free(w.alloc(dims[l + 1] * dims[l] * kFloat));
    w.free(w.alloc(dims[l + 1] * kFloat));
  }
  for (size_t l = 0; l < layers; ++l) {
    w.free(d_w[l]);
    w.free(d_b[l]);
  }
}

// `batches`: one step per entry (a single entry: every step the same).
Trace mlp_training_trace(const std::vector<size_t>& batches) {
  constexpr size_t kFloat = 4;
  const std::vector<size_t> dims = {1024, 4096, 4096, 4096, 1000};
  const size_t layers = dims.size() - 1;
  TraceWriter w;
  Trace t;
  std::vector<uint32_t> params;
  for (size_t l = 0; l < layers; ++l) {
    params.push_back(w.alloc(dims[l + 1] * dims[l] * kFloat));
    params.push_back(w.alloc(dims[l + 1] * kFloat));
  }
  // Adam's state appears at the first step; allocating it up front is the same
  // steady state and keeps every step alike.
  for (int state = 0; state < 2; ++state)
    for (size_t l = 0; l < layers; ++l) {
      params.push_back(w.alloc(dims[l + 1] * dims[l] * kFloat));
      params.push_back(w.alloc(dims[l + 1] * kFloat));
    }
  t.setup = w.take();
  for (size_t batch : batches) {
    mlp_step(w, dims, batch);
    t.steps.push_back(w.take());
  }
  for (uint32_t id : params) w.free(id);
  t.teardown = w.take();
  t.ids = w.ids();
  return t;
}

// Batch sizes that change every step, as in bucketed or variable-length data:
// 16 steps between 64 and 512 in no order, from a fixed LCG.
std::vector<size_t> varying_batches() {
  std::vector<size_t> out;
  uint64_t state = 12345;
  for (int i = 0; i < 16; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    out.push_back(64 + (state >> 33) % 449);
  }
  return out;
}

size_t live_peak_bytes(const Trace& t) {
  std::vector<size_t> sizes(t.ids, 0);
  size_t live = 0, peak = 0;
  auto run = [&](const std::vector<TraceEvent>& events) {
    for (const TraceEvent& e : events) {
      if (e.alloc) {
        sizes[e.id] = e.bytes;
        live += e.bytes;
      } else {
        live -= sizes[e.id];
      }
      peak = std::max(peak, live);
    }
  };
  run(t.setup);
  for (const auto& s : t.steps) run(s);
  run(t.teardown);
  return peak;
}

using AllocFn = std::function<void*(size_t)>;
using FreeFn = std::function<void(void*)>;

void replay(const std::vector<TraceEvent>& events, std::vector<void*>& slots, const AllocFn& alloc,
            const FreeFn& release) {
  for (const TraceEvent& e : events) {
    if (e.alloc) {
      slots[e.id] = alloc(e.bytes);
      check(slots[e.id] != nullptr, "a replayed allocation returned memory");
    } else {
      release(slots[e.id]);
      slots[e.id] = nullptr;
    }
  }
}

struct ReplayResult {
  bool ran = false;
  double step_us = 0;
  int64_t peak_allocated = 0;
  int64_t peak_reserved = 0;
};

// Median microseconds per step over `rounds` passes through every step of the
// trace, after one untimed pass; `fence` runs before and after each timed pass.
double time_steps(const Trace& t, std::vector<void*>& slots, const AllocFn& alloc,
                  const FreeFn& release, int rounds, const std::function<void()>& fence) {
  for (const auto& s : t.steps) replay(s, slots, alloc, release);
  std::vector<double> samples;
  for (int i = 0; i < rounds; ++i) {
    fence();
    auto start = Clock::now();
    for (const auto& s : t.steps) replay(s, slots, alloc, release);
    fence();
    samples.push_back(seconds_since(start) * 1e6 / static_cast<double>(t.steps.size()));
  }
  std::nth_element(samples.begin(), samples.begin() + rounds / 2, samples.end());
  return samples[static_cast<size_t>(rounds) / 2];
}

ReplayResult replay_with(CachingAllocator& a, const Trace& t, int rounds, cudaStream_t stream) {
  a.empty_cache();
  a.reset_peak_memory_stats();
  std::vector<void*> slots(t.ids, nullptr);
  auto alloc = [&a, stream](size_t n) { return a.allocate(n, stream); };
  auto release = [&a](void* p) { a.deallocate(p); };
  replay(t.setup, slots, alloc, release);
  ReplayResult r;
  r.ran = true;
  r.step_us = time_steps(t, slots, alloc, release, rounds, [] {});
  replay(t.teardown, slots, alloc, release);
  check(a.memory_allocated() == 0, "the trace frees everything it allocates");
  r.peak_allocated = a.max_memory_allocated();
  r.peak_reserved = a.max_memory_reserved();
  check(r.peak_allocated >= static_cast<int64_t>(live_peak_bytes(t)),
        "peak allocated covers the trace's live bytes (rounded up)");
  return r;
}

struct RoundTrip {
  const char* label;
  size_t bytes;
  double sim_ns = 0, sim_expandable_ns = 0, ember_ns = 0, expandable_ns = 0, malloc_ns = 0,
         async_ns = 0;
};

std::string json_number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3f", v);
  return buf;
}

// The simulated backend, large enough that no trace here runs out.
std::unique_ptr<SimulatedBackend> simulated_device() {
  return std::make_unique<SimulatedBackend>(size_t{64} << 30);
}

int callgrind_mode(size_t bytes, long n, bool expandable) {
  CachingAllocator a(simulated_device(), expandable ? kExpandable : kNative);
  a.deallocate(a.allocate(bytes, nullptr));
  for (long i = 0; i < n; ++i) a.deallocate(a.allocate(bytes, nullptr));
  std::printf("%ld round trips of %zu bytes (%s)\n", n, bytes,
              expandable ? "expandable" : "native");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string json_path;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--json") == 0 && i + 1 < argc) {
      json_path = argv[++i];
    } else if (std::strcmp(argv[i], "--callgrind") == 0 && i + 2 < argc) {
      const bool expandable = i + 3 < argc && std::strcmp(argv[i + 3], "expandable") == 0;
      return callgrind_mode(std::strtoull(argv[i + 1], nullptr, 10),
                            std::strtol(argv[i + 2], nullptr, 10), expandable);
    } else {
      std::fprintf(stderr, "usage: %s [--json FILE] | --callgrind BYTES N [expandable]\n", argv[0]);
      return 2;
    }
  }
  const bool gpu = is_available();
  std::vector<RoundTrip> sizes = {{"512 B", 512}, {"1 MiB", kMiB}, {"64 MiB", 64 * kMiB}};
  struct TraceRun {
    const char* name;
    Trace trace;
    ReplayResult sim, sim_expandable, ember, expandable, async, malloc;
  };
  std::vector<TraceRun> traces;
  traces.push_back({"fixed-shape MLP 1024-4096-4096-4096-1000, batch 256, Adam",
                    mlp_training_trace({256}),
                    {},
                    {},
                    {},
                    {},
                    {},
                    {}});
  traces.push_back({"varying-batch MLP (16 batch sizes in 64..512), Adam",
                    mlp_training_trace(varying_batches()),
                    {},
                    {},
                    {},
                    {},
                    {},
                    {}});
  const int kRounds = 21;

  // Host-only: the allocator's own bookkeeping, on the simulated backend.
  {
    CachingAllocator sim(simulated_device());
    CachingAllocator sim_expandable(simulated_device(), kExpandable);
    check(sim_expandable.expandable_segments(), "the simulated device has expandable segments");
    for (RoundTrip& rt : sizes) {
      rt.sim_ns = ember_round_trip_ns(sim, rt.bytes, nullptr);
      rt.sim_expandable_ns = ember_round_trip_ns(sim_expandable, rt.bytes, nullptr);
    }
    for (TraceRun& t : traces) {
      t.sim = replay_with(sim, t.trace, kRounds, nullptr);
      t.sim_expandable = replay_with(sim_expandable, t.trace, kRounds, nullptr);
    }
  }

  std::string device_name = "none (host-only results)";
  if (!gpu) {
    std::printf(
        "bench_allocator: no CUDA device; the GPU columns are skipped, host-only "
        "(simulated backend) results follow.\n\n");
  } else {
    set_device(0);
    cudaDeviceProp prop{};
    cuda_ok(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
    device_name = prop.name;
    Stream stream(0);
    const cudaStream_t s = stream.get();
    cudaMemPool_t pool = nullptr;
    cuda_ok(cudaDeviceGetDefaultMemPool(&pool, 0), "cudaDeviceGetDefaultMemPool");
    uint64_t keep_all = UINT64_MAX;  // let the async pool cache as ember does
    cuda_ok(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep_all),
            "cudaMemPoolSetAttribute");

    CachingAllocator ember(std::make_unique<CudaBackend>(0));
    CachingAllocator expandable(std::make_unique<CudaBackend>(0), kExpandable);
    if (!expandable.expandable_segments())
      std::printf(
          "bench_allocator: this driver has no virtual memory management; the "
          "expandable columns use ordinary segments\n");
    for (RoundTrip& rt : sizes) {
      rt.ember_ns = ember_round_trip_ns(ember, rt.bytes, s);
      rt.expandable_ns = ember_round_trip_ns(expandable, rt.bytes, s);
      rt.malloc_ns = median_ns_per_call([&] {
        void* q = nullptr;
        cuda_ok(cudaMalloc(&q, rt.bytes), "cudaMalloc");
        cuda_ok(cudaFree(q), "cudaFree");
      });
      // The same stream as ember's, and no synchronisation inside the loop on
      // either side; the frees queue behind whatever the stream holds.
      rt.async_ns = median_ns_per_call([&] {
        void* q = nullptr;
        cuda_ok(cudaMallocAsync(&q, rt.bytes, s), "cudaMallocAsync");
        cuda_ok(cudaFreeAsync(q, s), "cudaFreeAsync");
      });
      stream.synchronize();
    }
    ember.empty_cache();
    expandable.empty_cache();

    for (TraceRun& t : traces) {
      t.ember = replay_with(ember, t.trace, kRounds, s);
      ember.empty_cache();
      t.expandable = replay_with(expandable, t.trace, kRounds, s);
      expandable.empty_cache();
      {
        std::vector<void*> slots(t.trace.ids, nullptr);
        auto alloc = [s](size_t n) {
          void* q = nullptr;
          cuda_ok(cudaMallocAsync(&q, n, s), "cudaMallocAsync");
          return q;
        };
        auto release = [s](void* q) { cuda_ok(cudaFreeAsync(q, s), "cudaFreeAsync"); };
        stream.synchronize();
        cuda_ok(cudaMemPoolTrimTo(pool, 0), "cudaMemPoolTrimTo");
        uint64_t zero = 0;
        cuda_ok(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &zero), "reset");
        cuda_ok(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &zero), "reset");
        replay(t.trace.setup, slots, alloc, release);
        t.async.step_us = time_steps(t.trace, slots, alloc, release, kRounds,
                                     [&stream] { stream.synchronize(); });
        replay(t.trace.teardown, slots, alloc, release);
        stream.synchronize();
        uint64_t reserved_high = 0, used_high = 0;
        cuda_ok(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &reserved_high),
                "get");
        cuda_ok(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &used_high), "get");
        t.async.ran = true;
        t.async.peak_reserved = static_cast<int64_t>(reserved_high);
        t.async.peak_allocated = static_cast<int64_t>(used_high);
      }
      {
        std::vector<void*> slots(t.trace.ids, nullptr);
        auto alloc = [](size_t n) {
          void* q = nullptr;
          cuda_ok(cudaMalloc(&q, n), "cudaMalloc");
          return q;
        };
        auto release = [](void* q) { cuda_ok(cudaFree(q), "cudaFree"); };
        replay(t.trace.setup, slots, alloc, release);
        t.malloc.step_us = time_steps(t.trace, slots, alloc, release, kRounds, [] {});
        replay(t.trace.teardown, slots, alloc, release);
        t.malloc.ran = true;
        t.malloc.peak_allocated = t.malloc.peak_reserved =
            static_cast<int64_t>(live_peak_bytes(t.trace));
      }
    }
  }

  std::printf(
      "allocate+free round trip of a cached block, host ns (median of %d batches), one "
      "stream, no synchronisation inside any timed loop; device: %s\n",
      kBatches, device_name.c_str());
  std::printf("%-8s %10s %12s %11s %13s %12s %16s %12s\n", "size", "ember(sim)", "exp.seg(sim)",
              "ember(cuda)", "exp.seg(cuda)", "cudaMalloc", "cudaMallocAsync", "async/ember");
  for (const RoundTrip& rt : sizes) {
    if (gpu) {
      std::printf("%-8s %10.1f %12.1f %11.1f %13.1f %12.1f %16.1f %11.1fx\n", rt.label, rt.sim_ns,
                  rt.sim_expandable_ns, rt.ember_ns, rt.expandable_ns, rt.malloc_ns, rt.async_ns,
                  rt.async_ns / rt.ember_ns);
    } else {
      std::printf("%-8s %10.1f %12.1f %11s %13s %12s %16s %12s\n", rt.label, rt.sim_ns,
                  rt.sim_expandable_ns, "-", "-", "-", "-", "-");
    }
  }

  auto row = [](const char* name, const ReplayResult& r) {
    if (!r.ran) return;
    std::printf("%-22s %12.1f %13.1f MiB %13.1f MiB %8.3f\n", name, r.step_us,
                static_cast<double>(r.peak_allocated) / kMiB,
                static_cast<double>(r.peak_reserved) / kMiB,
                static_cast<double>(r.peak_reserved) / static_cast<double>(r.peak_allocated));
  };
  for (const TraceRun& t : traces) {
    std::printf("\ntrace: %s; %zu steps of about %zu events, %d timed passes\n", t.name,
                t.trace.steps.size(), t.trace.events_per_step(), kRounds);
    std::printf("%-22s %12s %17s %17s %8s\n", "allocator", "us/step", "peak allocated",
                "peak reserved", "ratio");
    row("ember (sim)", t.sim);
    row("ember exp.seg (sim)", t.sim_expandable);
    row("ember (cuda)", t.ember);
    row("ember exp.seg (cuda)", t.expandable);
    row("cudaMallocAsync", t.async);
    row("cudaMalloc", t.malloc);
  }

  auto ratio = [](const ReplayResult& r) {
    return static_cast<double>(r.peak_reserved) / static_cast<double>(r.peak_allocated);
  };
  std::printf("\ntargets:\n");
  std::printf("  fixed-shape trace, native: peak reserved / peak allocated <= 1.10: %.3f %s\n",
              ratio(traces[0].sim), ratio(traces[0].sim) <= 1.10 ? "met" : "MISSED");
  std::printf(
      "  varying-batch trace, expandable: peak reserved / peak allocated <= 1.05: "
      "%.3f %s (native %.3f)\n",
      ratio(traces[1].sim_expandable), ratio(traces[1].sim_expandable) <= 1.05 ? "met" : "MISSED",
      ratio(traces[1].sim));
  for (const RoundTrip& rt : sizes) {
    const double ns = gpu ? rt.ember_ns : rt.sim_ns;
    std::printf("  %s cached round trip < 50 ns (%s): %.1f ns %s\n", rt.label,
                gpu ? "cuda" : "simulated", ns, ns < 50 ? "met" : "MISSED");
  }

  if (!json_path.empty()) {
    std::ofstream out(json_path);
    check(out.good(), "open the --json file");
    out << "{\"device\":\"" << device_name << "\",\"round_trip_ns\":[";
    for (size_t i = 0; i < sizes.size(); ++i) {
      const RoundTrip& rt = sizes[i];
      out << (i ? "," : "") << "{\"bytes\":" << rt.bytes
          << ",\"ember_simulated\":" << json_number(rt.sim_ns)
          << ",\"ember_expandable_simulated\":" << json_number(rt.sim_expandable_ns);
      if (gpu)
        out << ",\"ember_cuda\":" << json_number(rt.ember_ns)
            << ",\"ember_expandable_cuda\":" << json_number(rt.expandable_ns)
            << ",\"cudaMalloc\":" << json_number(rt.malloc_ns)
            << ",\"cudaMallocAsync\":" << json_number(rt.async_ns);
      out << "}";
    }
    out << "],\"traces\":[";
    for (size_t i = 0; i < traces.size(); ++i) {
      const TraceRun& t = traces[i];
      out << (i ? "," : "") << "{\"name\":\"" << t.name
          << "\",\"events_per_step\":" << t.trace.events_per_step();
      auto put = [&out](const char* name, const ReplayResult& r) {
        if (!r.ran) return;
        out << ",\"" << name << "\":{\"us_per_step\":" << json_number(r.step_us)
            << ",\"peak_allocated\":" << r.peak_allocated
            << ",\"peak_reserved\":" << r.peak_reserved << "}";
      };
      put("ember_simulated", t.sim);
      put("ember_expandable_simulated", t.sim_expandable);
      put("ember_cuda", t.ember);
      put("ember_expandable_cuda", t.expandable);
      put("cudaMallocAsync", t.async);
      put("cudaMalloc", t.malloc);
      out << "}";
    }
    out << "]}\n";
    check(out.good(), "write the --json file");
    std::printf("wrote %s\n", json_path.c_str());
  }
  return 0;
}
