// bench_alloc_train: a training loop whose batch size changes every step, on the
// device allocator as it is (native) and with expandable_segments:True: an MLP
// 1024 -> 4096 -> 4096 -> 1024 (ReLU in the GEMM epilogues), MSELoss, Adam, batch
// sizes from a fixed sequence in 128..2048, on cuda:0. The device allocator reads
// EMBER_CUDA_ALLOC_CONF once per process, so each run is a child process of this
// one, the two modes interleaved over --repeats runs each. Per run: the median
// step time over the timed steps (every step ends with a device synchronisation,
// in both modes), peak allocated and peak reserved.
// Checked before anything is reported: each child ran the mode it was asked for;
// every run of either mode gives the same losses (to 1e-5 relative; the
// allocator must not change the arithmetic), and every run of one mode the same
// peak allocated bytes (the modes differ by the slack of unsplit blocks).
// A failed check prints no timing and exits 1.
// Usage: bench_alloc_train [--repeats N] [--steps N] [--json FILE]
//        bench_alloc_train --child --steps N   (one run, mode from the environment)
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/memory.h"
#include "core/ops.h"
#include "cuda/runtime.h"
#include "nn/nn.h"
#include "optim/optim.h"

using namespace ember;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int kWarmup = 30;
constexpr int kLosses = 8;  // compared across runs
constexpr double kMiB = 1024.0 * 1024.0;

std::vector<int64_t> batch_sizes(int steps) {
  std::vector<int64_t> out;
  uint64_t state = 2024;
  for (int i = 0; i < steps; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    out.push_back(128 + static_cast<int64_t>((state >> 33) % 1921));
  }
  return out;
}

struct RunResult {
  int expandable = -1;
  double step_ms = 0;
  long long peak_allocated = 0, peak_reserved = 0;
  double losses[kLosses] = {};
};

// One run in this process, in the mode EMBER_CUDA_ALLOC_CONF sets; prints a RESULT line.
int child(int steps) {
  if (!cuda::is_available()) {
    std::fprintf(stderr, "bench_alloc_train: no CUDA device\n");
    return 1;
  }
  manual_seed(0);
  auto net = std::make_shared<nn::Sequential>();
  net->push_back(
      std::make_shared<nn::Linear>(nn::LinearOptions(1024, 4096).activation(Activation::Relu)));
  net->push_back(
      std::make_shared<nn::Linear>(nn::LinearOptions(4096, 4096).activation(Activation::Relu)));
  net->push_back(std::make_shared<nn::Linear>(nn::LinearOptions(4096, 1024)));
  net->to(kCUDA);
  optim::Adam opt(net->parameters(), optim::AdamOptions(1e-3));
  nn::MSELoss criterion;
  const TensorOptions on_gpu = TensorOptions(kFloat32).device(kCUDA);
  const std::vector<int64_t> batches = batch_sizes(kWarmup + steps);
  RunResult r;
  r.expandable = caching_allocator(kCUDA).expandable_segments() ? 1 : 0;
  std::vector<double> times;
  for (int i = 0; i < kWarmup + steps; ++i) {
    Generator gen(static_cast<uint64_t>(i) + 1);
    const auto t0 = Clock::now();
    Tensor x = randn({batches[static_cast<size_t>(i)], 1024}, on_gpu, &gen);
    Tensor y = randn({batches[static_cast<size_t>(i)], 1024}, on_gpu, &gen);
    opt.zero_grad();
    Tensor loss = criterion.forward(net->forward(x), y);
    loss.backward();
    opt.step();
    cuda::synchronize(0);
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    if (i < kLosses) r.losses[i] = loss.item();
    if (i >= kWarmup) times.push_back(ms);
  }
  std::sort(times.begin(), times.end());
  r.step_ms = times[times.size() / 2];
  r.peak_allocated = max_memory_allocated(kCUDA);
  r.peak_reserved = max_memory_reserved(kCUDA);
  std::printf("RESULT %d %.6f %lld %lld", r.expandable, r.step_ms, r.peak_allocated,
              r.peak_reserved);
  for (double l : r.losses) std::printf(" %.17g", l);
  std::printf("\n");
  return 0;
}

bool run_child(const std::string& exe, bool expandable, int steps, RunResult& r) {
  const std::string command = std::string("EMBER_CUDA_ALLOC_CONF=") +
                              (expandable ? "expandable_segments:True" : "") + " '" + exe +
                              "' --child --steps " + std::to_string(steps);
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return false;
  char line[4096];
  bool found = false;
  while (std::fgets(line, sizeof line, pipe) != nullptr) {
    if (std::strncmp(line, "RESULT ", 7) != 0) continue;
    int offset = 0;
    if (std::sscanf(line + 7, "%d %lf %lld %lld%n", &r.expandable, &r.step_ms, &r.peak_allocated,
                    &r.peak_reserved, &offset) != 4)
      continue;
    const char* rest = line + 7 + offset;
    found = true;
    for (double& l : r.losses) {
      int used = 0;
      if (std::sscanf(rest, " %lf%n", &l, &used) != 1) found = false;
      rest += used;
    }
  }
  return pclose(pipe) == 0 && found;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int repeats = 5, steps = 200;
  bool is_child = false;
  const char* json = nullptr;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--child"))
      is_child = true;
    else if (!std::strcmp(argv[i], "--repeats") && i + 1 < argc)
      repeats = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--steps") && i + 1 < argc)
      steps = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--json") && i + 1 < argc)
      json = argv[++i];
    else {
      std::fprintf(stderr, "usage: %s [--repeats N] [--steps N] [--json FILE]\n", argv[0]);
      return 2;
    }
  }
  if (repeats < 1 || steps < 1) {
    std::fprintf(stderr, "bench_alloc_train: --repeats and --steps must be at least 1\n");
    return 2;
  }
  if (is_child) return child(steps);
  if (!cuda::is_available()) {
    std::printf("bench_alloc_train: no CUDA device, nothing to measure\n");
    return 0;
  }
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) {
    std::fprintf(stderr, "bench_alloc_train: cannot find its own executable\n");
    return 1;
  }
  exe[n] = '\0';

  std::vector<RunResult> runs[2];  // [0] native, [1] expandable
  for (int rep = 0; rep < repeats; ++rep) {
    for (int k = 0; k < 2; ++k) {
      const bool expandable = (k + rep) % 2 == 1;  // alternate which mode goes first
      RunResult r;
      if (!run_child(exe, expandable, steps, r)) {
        std::fprintf(stderr, "bench_alloc_train: the %s run failed\n",
                     expandable ? "expandable" : "native");
        return 1;
      }
      if (r.expandable != (expandable ? 1 : 0)) {
        std::fprintf(stderr,
                     "bench_alloc_train: check failed: a run asked for %s segments "
                     "reported %s (no virtual memory management?)\n",
                     expandable ? "expandable" : "native", r.expandable ? "expandable" : "native");
        return 1;
      }
      runs[expandable ? 1 : 0].push_back(r);
    }
  }
  const RunResult& ref = runs[0][0];
  for (const auto& mode : runs)
    for (const RunResult& r : mode) {
      // Peak allocated counts blocks, not requests: a native segment hands out a
      // block whole when less than 1 MiB would remain, an expandable one splits it,
      // so the two modes' peaks differ by that slack; each mode's runs must agree.
      const RunResult& same_mode = mode.front();
      for (int i = 0; i < kLosses; ++i)
        if (!(std::fabs(r.losses[i] - ref.losses[i]) <= 1e-5 * std::fabs(ref.losses[i]))) {
          std::fprintf(stderr,
                       "bench_alloc_train: check failed: loss %d is %.9g in one run and "
                       "%.9g in another\n",
                       i, r.losses[i], ref.losses[i]);
          return 1;
        }
      if (r.peak_allocated != same_mode.peak_allocated) {
        std::fprintf(stderr,
                     "bench_alloc_train: check failed: peak allocated differs between "
                     "runs of one mode (%lld vs %lld bytes)\n",
                     r.peak_allocated, same_mode.peak_allocated);
        return 1;
      }
    }
  std::printf(
      "validated: %d runs per mode, the same first %d losses (to 1e-5) in all and "
      "the same peak allocated within each mode\n",
      repeats, kLosses);

  std::printf(
      "\nvarying-batch training loop: MLP 1024-4096-4096-1024, Adam, batch 128..2048, "
      "%d timed steps after %d warm-up, cuda:0; %d runs per mode, interleaved\n",
      steps, kWarmup, repeats);
  std::printf("%-11s %14s %18s %16s %15s %7s\n", "allocator", "ms/step (med)", "[min - max]",
              "peak allocated", "peak reserved", "ratio");
  double med[2] = {};
  for (int m = 0; m < 2; ++m) {
    std::vector<double> t, reserved;
    for (const RunResult& r : runs[m]) {
      t.push_back(r.step_ms);
      reserved.push_back(static_cast<double>(r.peak_reserved));
    }
    med[m] = median(t);
    const double res = median(reserved);
    std::printf("%-11s %14.4f   [%6.4f - %6.4f] %12.1f MiB %11.1f MiB %7.3f\n",
                m == 0 ? "native" : "expandable", med[m], *std::min_element(t.begin(), t.end()),
                *std::max_element(t.begin(), t.end()),
                static_cast<double>(runs[m][0].peak_allocated) / kMiB, res / kMiB,
                res / static_cast<double>(runs[m][0].peak_allocated));
  }
  std::vector<double> ratios;
  for (int rep = 0; rep < repeats; ++rep)
    ratios.push_back(runs[1][static_cast<size_t>(rep)].step_ms /
                     runs[0][static_cast<size_t>(rep)].step_ms);
  const double lo = *std::min_element(ratios.begin(), ratios.end());
  const double hi = *std::max_element(ratios.begin(), ratios.end());
  const double ratio = med[1] / med[0];
  std::printf(
      "\ntarget: expandable step time within 2%% of native: %.4f [per-run %.4f - %.4f] "
      "%s\n",
      ratio, lo, hi,
      hi <= 1.02  ? "met"
      : lo > 1.02 ? "MISSED"
                  : "not decided (the spread straddles 1.02)");
  if (json != nullptr) {
    FILE* f = std::fopen(json, "w");
    if (f == nullptr) {
      std::fprintf(stderr, "bench_alloc_train: cannot write %s\n", json);
      return 1;
    }
    std::fprintf(f, "{\"steps\":%d,\"repeats\":%d,\"modes\":{", steps, repeats);
    for (int m = 0; m < 2; ++m) {
      std::fprintf(f, "%s\"%s\":[", m ? "," : "", m == 0 ? "native" : "expandable");
      for (size_t i = 0; i < runs[m].size(); ++i)
        std::fprintf(f, "%s{\"ms_per_step\":%.6f,\"peak_allocated\":%lld,\"peak_reserved\":%lld}",
                     i ? "," : "", runs[m][i].step_ms, runs[m][i].peak_allocated,
                     runs[m][i].peak_reserved);
      std::fprintf(f, "]");
    }
    std::fprintf(f, "},\"ratio\":%.6f}\n", ratio);
    std::fclose(f);
  }
  return 0;
}
