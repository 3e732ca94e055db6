// bench_allocator: what ember's caching allocator costs and wastes.
//   1. allocate+free round trips at 512 B, 1 MiB and 64 MiB: ember vs cudaMalloc/cudaFree
//      vs cudaMallocAsync/cudaFreeAsync, host time, median of many batches after warm-up;
//   2. a replay of a training loop's allocation trace (a small MLP with Adam): time
//      per step and peak reserved / peak allocated.
// Without a GPU it says so, measures the host-only part on the simulated backend and
// exits 0. Usage: bench_allocator [--json FILE]
#include <algorithm>
#include <chrono>
#include <cstdio>
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

// ------------------------------------------------------------------------------
// A training loop's allocations, written out deterministically: a 4-layer MLP
// (1024 -> 4096 -> 4096 -> 4096 -> 1000, batch 256, fp32) trained with Adam,
// gradients set to none at every zero_grad (PyTorch's default).

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
  size_t size() const { return events_.size(); }
  std::vector<TraceEvent> take() { return std::move(events_); }
  uint32_t ids() const { return next_; }

 private:
  std::vector<TraceEvent> events_;
  uint32_t next_ = 0;
};

struct Trace {
  std::vector<TraceEvent> setup, step, teardown;
  uint32_t ids = 0;
};

Trace mlp_training_trace() {
  constexpr size_t kBatch = 256;
  constexpr size_t kFloat = 4;
  const std::vector<size_t> dims = {1024, 4096, 4096, 4096, 1000};
  const size_t layers = dims.size() - 1;
  TraceWriter w;
  Trace t;

  std::vector<uint32_t> weights, biases, exp_avg, exp_avg_sq;
  for (size_t l = 0; l < layers; ++l) {
    weights.push_back(w.alloc(dims[l + 1] * dims[l] * kFloat));
    biases.push_back(w.alloc(dims[l + 1] * kFloat));
  }
  // Adam's state appears at the first step; allocating it up front is the same
  // steady state and keeps every step identical.
  for (size_t l = 0; l < layers; ++l) {
    for (auto* state : {&exp_avg, &exp_avg_sq}) {
      state->push_back(w.alloc(dims[l + 1] * dims[l] * kFloat));
      state->push_back(w.alloc(dims[l + 1] * kFloat));
    }
  }
  t.setup = w.take();

  // Forward: each layer saves its pre-activation and activation for backward.
  uint32_t x = w.alloc(kBatch * dims[0] * kFloat);
  uint32_t target = w.alloc(kBatch * dims[layers] * kFloat);
  std::vector<uint32_t> pre(layers), act(layers);
  for (size_t l = 0; l < layers; ++l) {
    pre[l] = w.alloc(kBatch * dims[l + 1] * kFloat);
    if (l + 1 < layers) act[l] = w.alloc(kBatch * dims[l + 1] * kFloat);
  }
  uint32_t loss = w.alloc(kFloat);
  uint32_t d_out = w.alloc(kBatch * dims[layers] * kFloat);  // MSE's gradient
  // Backward, last layer first; saved tensors go as soon as their node has run.
  std::vector<uint32_t> d_w(layers), d_b(layers);
  uint32_t d_act = d_out;
  for (size_t l = layers; l-- > 0;) {
    uint32_t d_pre = d_act;
    if (l + 1 < layers) {
      d_pre = w.alloc(kBatch * dims[l + 1] * kFloat);  // relu backward
      w.free(d_act);
      w.free(act[l]);
    }
    w.free(pre[l]);
    d_w[l] = w.alloc(dims[l + 1] * dims[l] * kFloat);
    d_b[l] = w.alloc(dims[l + 1] * kFloat);
    if (l > 0) d_act = w.alloc(kBatch * dims[l] * kFloat);
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
  t.step = w.take();

  for (auto* group : {&weights, &biases, &exp_avg, &exp_avg_sq})
    for (uint32_t id : *group) w.free(id);
  t.teardown = w.take();
  t.ids = w.ids();
  return t;
}

size_t live_peak_bytes(const Trace& t) {
  std::vector<size_t> sizes(t.ids, 0);
  size_t live = 0, peak = 0;
  for (const auto* part : {&t.setup, &t.step, &t.teardown})
    for (const TraceEvent& e : *part) {
      if (e.alloc) {
        sizes[e.id] = e.bytes;
        live += e.bytes;
      } else {
        live -= sizes[e.id];
      }
      peak = std::max(peak, live);
    }
  return peak;
}

using AllocFn = std::function<void*(size_t)>;
using FreeFn = std::function<void(void*)>;

void replay(const std::vector<TraceEvent>& events, std::vector<void*>& slots, const AllocFn& alloc,
            const FreeFn& release) {
  for (const TraceEvent& e : events) {
    if (e.alloc) {
      slots[e.id] = alloc(e.bytes);
    } else {
      release(slots[e.id]);
      slots[e.id] = nullptr;
    }
  }
}

struct ReplayResult {
  double step_us = 0;
  int64_t peak_allocated = 0;
  int64_t peak_reserved = 0;
};

// Median microseconds per training step over `steps` steps after two warm-up steps.
double time_steps(const Trace& t, std::vector<void*>& slots, const AllocFn& alloc,
                  const FreeFn& release, int steps, const std::function<void()>& fence) {
  for (int i = 0; i < 2; ++i) replay(t.step, slots, alloc, release);
  std::vector<double> samples;
  for (int i = 0; i < steps; ++i) {
    fence();
    auto start = Clock::now();
    replay(t.step, slots, alloc, release);
    fence();
    samples.push_back(seconds_since(start) * 1e6);
  }
  std::nth_element(samples.begin(), samples.begin() + steps / 2, samples.end());
  return samples[static_cast<size_t>(steps) / 2];
}

ReplayResult replay_with(CachingAllocator& a, const Trace& t, int steps) {
  std::vector<void*> slots(t.ids, nullptr);
  auto alloc = [&a](size_t n) { return a.allocate(n, nullptr); };
  auto release = [&a](void* p) { a.deallocate(p); };
  replay(t.setup, slots, alloc, release);
  ReplayResult r;
  r.step_us = time_steps(t, slots, alloc, release, steps, [] {});
  replay(t.teardown, slots, alloc, release);
  check(a.memory_allocated() == 0, "the trace frees everything it allocates");
  r.peak_allocated = a.max_memory_allocated();
  r.peak_reserved = a.max_memory_reserved();
  return r;
}

struct RoundTrip {
  const char* label;
  size_t bytes;
  double ember_ns = 0, sim_ns = 0, malloc_ns = 0, async_ns = 0;
};

std::string json_number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3f", v);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  std::string json_path;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--json") == 0 && i + 1 < argc) {
      json_path = argv[++i];
    } else {
      std::fprintf(stderr, "usage: %s [--json FILE]\n", argv[0]);
      return 2;
    }
  }
  const bool gpu = is_available();
  std::vector<RoundTrip> sizes = {{"512 B", 512}, {"1 MiB", kMiB}, {"64 MiB", 64 * kMiB}};
  const Trace trace = mlp_training_trace();
  const int kSteps = 21;

  // Host-only: the allocator's own bookkeeping, on the simulated backend.
  CachingAllocator sim(std::make_unique<SimulatedBackend>(size_t{64} << 30));
  for (RoundTrip& rt : sizes) {
    void* p = sim.allocate(rt.bytes, nullptr);
    check(p != nullptr, "simulated allocation");
    sim.deallocate(p);
    rt.sim_ns = median_ns_per_call([&] { sim.deallocate(sim.allocate(rt.bytes, nullptr)); });
  }
  sim.empty_cache();
  sim.reset_peak_memory_stats();
  const ReplayResult sim_replay = replay_with(sim, trace, kSteps);

  std::string device_name = "none (host-only results)";
  ReplayResult ember_replay, async_replay, malloc_replay;
  if (!gpu) {
    std::printf("bench_allocator: no CUDA device; the GPU columns are skipped, host-only "
                "(simulated backend) results follow.\n\n");
  } else {
    set_device(0);
    cudaDeviceProp prop{};
    cuda_ok(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
    device_name = prop.name;
    Stream stream(0);
    cudaMemPool_t pool = nullptr;
    cuda_ok(cudaDeviceGetDefaultMemPool(&pool, 0), "cudaDeviceGetDefaultMemPool");
    uint64_t keep_all = UINT64_MAX;  // let the async pool cache as ember does
    cuda_ok(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep_all),
            "cudaMemPoolSetAttribute");

    CachingAllocator ember(std::make_unique<CudaBackend>(0));
    for (RoundTrip& rt : sizes) {
      void* p = ember.allocate(rt.bytes, nullptr);
      check(p != nullptr && ember.memory_allocated() >= static_cast<int64_t>(rt.bytes),
            "ember allocation");
      ember.deallocate(p);
      rt.ember_ns =
          median_ns_per_call([&] { ember.deallocate(ember.allocate(rt.bytes, nullptr)); });
      rt.malloc_ns = median_ns_per_call([&] {
        void* q = nullptr;
        cuda_ok(cudaMalloc(&q, rt.bytes), "cudaMalloc");
        cuda_ok(cudaFree(q), "cudaFree");
      });
      rt.async_ns = median_ns_per_call([&] {
        void* q = nullptr;
        cuda_ok(cudaMallocAsync(&q, rt.bytes, stream.get()), "cudaMallocAsync");
        cuda_ok(cudaFreeAsync(q, stream.get()), "cudaFreeAsync");
      });
      stream.synchronize();
    }
    check(ember.memory_allocated() == 0, "ember round trips free everything");
    ember.empty_cache();
    ember.reset_peak_memory_stats();
    ember_replay = replay_with(ember, trace, kSteps);
    ember.empty_cache();

    {
      std::vector<void*> slots(trace.ids, nullptr);
      cudaStream_t s = stream.get();
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
      replay(trace.setup, slots, alloc, release);
      async_replay.step_us =
          time_steps(trace, slots, alloc, release, kSteps, [&stream] { stream.synchronize(); });
      replay(trace.teardown, slots, alloc, release);
      stream.synchronize();
      uint64_t reserved_high = 0, used_high = 0;
      cuda_ok(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &reserved_high), "get");
      cuda_ok(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &used_high), "get");
      async_replay.peak_reserved = static_cast<int64_t>(reserved_high);
      async_replay.peak_allocated = static_cast<int64_t>(used_high);
    }
    {
      std::vector<void*> slots(trace.ids, nullptr);
      auto alloc = [](size_t n) {
        void* q = nullptr;
        cuda_ok(cudaMalloc(&q, n), "cudaMalloc");
        return q;
      };
      auto release = [](void* q) { cuda_ok(cudaFree(q), "cudaFree"); };
      replay(trace.setup, slots, alloc, release);
      malloc_replay.step_us = time_steps(trace, slots, alloc, release, kSteps, [] {});
      replay(trace.teardown, slots, alloc, release);
      malloc_replay.peak_allocated = malloc_replay.peak_reserved =
          static_cast<int64_t>(live_peak_bytes(trace));
    }
  }

  std::printf("allocate+free round trip, host ns (median of %d batches), device: %s\n", kBatches,
              device_name.c_str());
  std::printf("%-8s %12s %12s %14s %16s %14s\n", "size", "ember(sim)", "ember(cuda)",
              "cudaMalloc", "cudaMallocAsync", "async/ember");
  for (const RoundTrip& rt : sizes) {
    if (gpu) {
      std::printf("%-8s %12.1f %12.1f %14.1f %16.1f %13.1fx\n", rt.label, rt.sim_ns, rt.ember_ns,
                  rt.malloc_ns, rt.async_ns, rt.async_ns / rt.ember_ns);
    } else {
      std::printf("%-8s %12.1f %12s %14s %16s %14s\n", rt.label, rt.sim_ns, "-", "-", "-", "-");
    }
  }

  std::printf("\ntraining-loop trace: MLP 1024-4096-4096-4096-1000, batch 256, Adam; %zu events "
              "per step, %d timed steps\n",
              trace.step.size(), kSteps);
  std::printf("%-18s %14s %16s %16s %10s\n", "allocator", "us/step", "peak allocated",
              "peak reserved", "ratio");
  auto row = [](const char* name, const ReplayResult& r) {
    std::printf("%-18s %14.1f %13.1f MiB %13.1f MiB %10.3f\n", name, r.step_us,
                static_cast<double>(r.peak_allocated) / kMiB,
                static_cast<double>(r.peak_reserved) / kMiB,
                static_cast<double>(r.peak_reserved) / static_cast<double>(r.peak_allocated));
  };
  row("ember (simulated)", sim_replay);
  if (gpu) {
    row("ember (cuda)", ember_replay);
    row("cudaMallocAsync", async_replay);
    row("cudaMalloc", malloc_replay);
  }

  const double ratio = static_cast<double>(sim_replay.peak_reserved) /
                       static_cast<double>(sim_replay.peak_allocated);
  std::printf("\ntargets: peak reserved / peak allocated <= 1.10: %.3f %s\n", ratio,
              ratio <= 1.10 ? "met" : "MISSED");
  if (gpu) {
    for (const RoundTrip& rt : sizes)
      std::printf("         %s round trip < 100 ns and <= 1/20 of cudaMallocAsync: %.1f ns, "
                  "1/%.1f %s\n",
                  rt.label, rt.ember_ns, rt.async_ns / rt.ember_ns,
                  rt.ember_ns < 100 && rt.async_ns / rt.ember_ns >= 20 ? "met" : "MISSED");
  }

  if (!json_path.empty()) {
    std::ofstream out(json_path);
    check(out.good(), "open the --json file");
    out << "{\"device\":\"" << device_name << "\",\"round_trip_ns\":[";
    for (size_t i = 0; i < sizes.size(); ++i) {
      const RoundTrip& rt = sizes[i];
      out << (i ? "," : "") << "{\"bytes\":" << rt.bytes
          << ",\"ember_simulated\":" << json_number(rt.sim_ns);
      if (gpu)
        out << ",\"ember_cuda\":" << json_number(rt.ember_ns)
            << ",\"cudaMalloc\":" << json_number(rt.malloc_ns)
            << ",\"cudaMallocAsync\":" << json_number(rt.async_ns);
      out << "}";
    }
    out << "],\"trace\":{\"events_per_step\":" << trace.step.size();
    auto put = [&out](const char* name, const ReplayResult& r) {
      out << ",\"" << name << "\":{\"us_per_step\":" << json_number(r.step_us)
          << ",\"peak_allocated\":" << r.peak_allocated << ",\"peak_reserved\":" << r.peak_reserved
          << "}";
    };
    put("ember_simulated", sim_replay);
    if (gpu) {
      put("ember_cuda", ember_replay);
      put("cudaMallocAsync", async_replay);
      put("cudaMalloc", malloc_replay);
    }
    out << "}}\n";
    check(out.good(), "write the --json file");
    std::printf("wrote %s\n", json_path.c_str());
  }
  return 0;
}
