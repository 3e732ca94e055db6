// Know before you run: predict_memory runs a training step (the same code that
// runs for real, given a Device) for N steps on the meta device (core/meta.h),
// through a caching allocator over a simulated device configured like the target
// GPU, and returns what the allocator would report there: peak allocated and
// reserved bytes, per-step growth (a leak shows before it happens), the largest
// allocation sites live at the peak, and whether it fits. The allocator is
// deterministic for a given request sequence and the meta device makes the
// mirrored device's requests, so the figures are the real run's, byte for byte
// (tests/core/test_predict.cpp holds CPU runs to it; tests/core/test_predict_cuda.cpp
// the H200). measure_memory runs the same code on a real device with the same
// bookkeeping, and largest_fitting_batch bisects over meta runs.
//
//   auto p = predict_memory([&](Device d) { return make_training_step(d); },
//                           PredictOptions().steps(10).capacity(80ull << 30));
//   std::cout << p.table();   // fits? peak, growth per step, sites at the peak
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/base/device.h"
#include "core/memory/alloc_config.h"
#include "core/memory/memory_snapshot.h"
#include "core/memory/memory_stats.h"

namespace ember {

// One step of the user's program (`step` counts from 0), and what makes it for a
// device: builds the model, optimizer and data there and returns the step, which
// keeps them alive. On the meta device the step must not read values (item(),
// printing): do that only when !device.is_meta(). The factory is called once per
// run: predict_memory makes extra runs for each policy compared and, when the step
// does not fit, one without a limit (to say how much it needs).
using StepFunction = std::function<void(int step)>;
using StepFactory = std::function<StepFunction(Device device)>;

struct PredictOptions {
  int steps_ = 10;
  // Bytes of the target device. 0: what cuda:0 has free now when there is a GPU,
  // otherwise no limit.
  size_t capacity_ = 0;
  // The allocator's options; default: EMBER_CUDA_ALLOC_CONF, as the device's.
  memory::AllocatorOptions allocator_ = memory::AllocatorOptions::from_env();
  // Whose kernel choices the meta device makes (core/meta.h): CUDA, or the CPU
  // (to compare with a CPU run).
  DeviceType mirror_ = DeviceType::CUDA;
  size_t top_sites_ = 8;
  // Other allocator policies to compare, each in EMBER_CUDA_ALLOC_CONF's syntax
  // ("max_split_size_mb:128", "roundup_power2_divisions:4", ...): each is a meta
  // run of its own, the same requests through that policy.
  std::vector<std::string> policies_;
  bool keep_trace_ = false;  // keep the allocator's event history in the result

  PredictOptions& steps(int n) {
    steps_ = n;
    return *this;
  }
  PredictOptions& capacity(size_t bytes) {
    capacity_ = bytes;
    return *this;
  }
  PredictOptions& allocator(const memory::AllocatorOptions& o) {
    allocator_ = o;
    return *this;
  }
  PredictOptions& mirror(DeviceType t) {
    mirror_ = t;
    return *this;
  }
  PredictOptions& top_sites(size_t n) {
    top_sites_ = n;
    return *this;
  }
  PredictOptions& policy(const std::string& conf) {
    policies_.push_back(conf);
    return *this;
  }
  PredictOptions& keep_trace(bool on = true) {
    keep_trace_ = on;
    return *this;
  }
};

// The allocator's figures over one step (or over the set-up before step 0).
struct StepMemory {
  int64_t allocated = 0;  // at its end
  int64_t reserved = 0;
  int64_t peak_allocated = 0;  // highest during it
  int64_t peak_reserved = 0;
  int64_t growth = 0;  // allocated at its end minus at the previous one's end
};

// Live blocks of one allocation site ("model.fc1.forward / linear").
struct SiteMemory {
  std::string site;
  int64_t bytes = 0;  // as the allocator counts them (rounded blocks)
  int64_t blocks = 0;
};

// One allocator policy's figures for the same run (PredictOptions::policies_).
struct PolicyMemory {
  std::string policy;
  int64_t peak_allocated = 0;
  int64_t peak_reserved = 0;
  int64_t segments = 0;  // device allocations (cudaMalloc calls) over the run
  bool fits = true;
};

struct MemoryPrediction {
  std::string device;   // "meta (mirroring cuda:0)", or the device measured
  size_t capacity = 0;  // kNoCapacityLimit (core/meta.h) when unlimited
  int steps_asked = 0;
  StepMemory setup;               // from the factory's start to step 0
  std::vector<StepMemory> steps;  // the steps that completed
  int64_t peak_allocated = 0;
  int64_t peak_reserved = 0;
  int peak_step = -1;                  // where allocated peaked; -1: the set-up
  std::vector<SiteMemory> peak_sites;  // live at the allocated peak, largest first
  // Device memory outside the allocator. Predicted: the mirrored CUDA device's
  // cuBLAS and cuBLASLt workspaces (32 MiB each, when first used). Measured on a
  // GPU: how much free device memory the process lost during the run beyond what
  // the allocator reserves (those handles and workspaces, made on first use in the
  // process, what the libraries take with them, and kernel code the driver loads
  // on first launch); 0 on the CPU.
  size_t library_bytes = 0;
  bool fits = true;
  std::string failure;   // the out-of-memory message when it did not fit
  int failed_step = -2;  // where: -1 the set-up, else the step; -2 none
  // Reserved bytes plus library workspaces the run needs with no capacity limit
  // (filled when it did not fit, so the report can say by how much).
  int64_t needed_bytes = 0;
  std::vector<PolicyMemory> policies;
  memory::MemoryStats stats;              // the allocator's counters at the end of the last step
  std::vector<memory::TraceEntry> trace;  // with keep_trace

  // Allocated growth over the last step, and whether allocated memory grew in
  // every step from the third on (steps 0 and 1 may still make optimizer state
  // and gradients; needs 4 steps).
  int64_t growth_per_step() const;
  bool grows() const;
  // The figures as a table (bytes exact, with a readable size beside them).
  std::string table() const;
};

// Runs `make_step(kMeta)` and its step options.steps_ times on a fresh meta
// device mirroring options.mirror_, with options.capacity_ and options.allocator_.
// Out of memory is a result (fits = false, failure, failed_step), not an error;
// other errors (a step reading values on meta, bad shapes) propagate.
MemoryPrediction predict_memory(const StepFactory& make_step, const PredictOptions& options = {});

// The same bookkeeping on a real device: the CPU through a private caching
// allocator over a SimulatedBackend of options.capacity_ with options.allocator_
// (memory::HostAllocatorOverride, this thread's CPU tensors only), or a CUDA
// device through its own allocator, which must hold no allocation when called
// (its cache is emptied first; its options are EMBER_CUDA_ALLOC_CONF's).
MemoryPrediction measure_memory(const StepFactory& make_step, Device device,
                                const PredictOptions& options = {});

// The largest batch size in [lo, hi] whose step fits options.capacity_, by
// bisection over meta runs (fitting is taken to be monotonic in the batch size).
using BatchStepFactory = std::function<StepFunction(Device device, int64_t batch)>;
struct BatchSearch {
  int64_t batch = 0;                             // 0 when even lo does not fit
  MemoryPrediction at_batch;                     // the prediction at `batch` (at lo when none fits)
  std::vector<std::pair<int64_t, bool>> probes;  // (batch, fits), in the order run
};
BatchSearch largest_fitting_batch(const BatchStepFactory& make_step, int64_t lo, int64_t hi,
                                  const PredictOptions& options = {});

}  // namespace ember
