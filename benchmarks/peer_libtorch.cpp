// peer_libtorch: the libtorch (C++) peer of ember's host-bound rows, so that ember's
// C++ is compared with PyTorch's C++ and not only with its Python. Built on the GPU
// machine against the torch package's own headers and libraries by
// benchmarks/peer_libtorch.sh (never by ember's build: there is no libtorch here).
// The same work, timed the same way, as:
//   bench_train_step --only seed  the seed step (Linear(10, 10), MSELoss, Adam lr
//                                 1e-2, batch 32): eager with fused Adam (the kernel
//                                 Adam(fused=True) runs: at::_fused_adam_, steps on
//                                 the device), with emptyCache() every step, and
//                                 captured once in an at::cuda::CUDAGraph and
//                                 replayed; wall time per step, median of rounds;
//   bench_op_overhead             add of two [16] tensors on cuda:0 without and with
//                                 grad, [16] and [4096] on the CPU: host ns per op,
//                                 median of 50 batches of 200;
//   bench_linear_small            Linear forward and forward+backward at 32x10->10,
//                                 64x128->128 and 256x256->256 in fp32: CUDA-event
//                                 median per call.
// Each path is checked before it is timed (the graph against eager, bit for bit;
// add and linear against float64 on the CPU); a failed check prints no row and the
// program exits 1. Rows go to DIR/libtorch_{train_step,op_overhead,linear_small}.json,
// in the formats of the ember binaries' own JSON.
// Usage: peer_libtorch [--out DIR] [--quick]
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct Spread {
  double median = 0, min = 0, max = 0;
};
Spread spread_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v.front(), v.back()};
}

void sync() {
  cudaDeviceSynchronize();
}

// --- the three timing methods, as ember's benchmarks use them

// Median (min, max) over `rounds` of (wall time of `steps` calls, then one sync) / steps.
Spread wall_ms_per_step(const std::function<void(int)>& f, int warmup, int rounds, int steps) {
  for (int i = 0; i < warmup; ++i) f(i);
  sync();
  std::vector<double> per;
  int it = 0;
  for (int r = 0; r < rounds; ++r) {
    const auto t0 = Clock::now();
    for (int s = 0; s < steps; ++s) f(it++);
    sync();
    per.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / steps);
  }
  return spread_of(per);
}

constexpr int kBatch = 200;
constexpr int kBatches = 50;

// Median host ns per call over kBatches timed batches of kBatch calls, each batch
// followed by an untimed sync; one untimed batch first.
double host_ns(const std::function<void()>& f, const std::function<void()>& after) {
  for (int i = 0; i < kBatch; ++i) f();
  after();
  std::vector<double> ns;
  for (int r = 0; r < kBatches; ++r) {
    const auto start = Clock::now();
    for (int i = 0; i < kBatch; ++i) f();
    const std::chrono::duration<double, std::nano> d = Clock::now() - start;
    after();
    ns.push_back(d.count() / kBatch);
  }
  return spread_of(ns).median;
}

// CUDA-event milliseconds per call on the current stream: median (min, max).
Spread event_ms(const std::function<void()>& f, int warmup, int iters) {
  for (int i = 0; i < warmup; ++i) f();
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  std::vector<double> ms;
  for (int i = 0; i < iters; ++i) {
    cudaEventRecord(start, stream);
    f();
    cudaEventRecord(stop, stream);
    cudaEventSynchronize(stop);
    float t = 0;
    cudaEventElapsedTime(&t, start, stop);
    ms.push_back(t);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return spread_of(ms);
}

// --- rows, written in the ember binaries' JSON formats

struct Row {
  std::string workload, dtype, shape, impl, note;
  Spread ms;
  double rate = 0;
  std::string unit;
};
struct OpRow {
  std::string workload, device, shape;
  double ns = 0;
};

void print_row(const Row& r) {
  std::printf("%-22s %-6s %-14s %-20s %10.4f [%.4f-%.4f] %s\n", r.workload.c_str(), r.dtype.c_str(),
              r.shape.c_str(), r.impl.c_str(), r.ms.median, r.ms.min, r.ms.max, r.note.c_str());
  std::fflush(stdout);
}

void write_rows(const std::string& path, const char* title, const std::vector<Row>& rows) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) return;
  std::fprintf(f, "{\"benchmark\": \"%s\", \"torch\": \"%s\", \"rows\": [\n", title, TORCH_VERSION);
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    std::fprintf(f,
                 "  {\"workload\": \"%s\", \"dtype\": \"%s\", \"shape\": \"%s\", \"impl\": \"%s\", "
                 "\"ms\": %.6f, \"ms_min\": %.6f, \"ms_max\": %.6f, \"rate\": %.3f, \"unit\": "
                 "\"%s\", \"note\": \"%s\"}%s\n",
                 r.workload.c_str(), r.dtype.c_str(), r.shape.c_str(), r.impl.c_str(), r.ms.median,
                 r.ms.min, r.ms.max, r.rate, r.unit.c_str(), r.note.c_str(),
                 i + 1 < rows.size() ? "," : "");
  }
  std::fprintf(f, "]}\n");
  std::fclose(f);
}

void write_op_rows(const std::string& path, const std::vector<OpRow>& rows) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) return;
  std::fprintf(f, "{\"benchmark\": \"op_overhead (libtorch)\", \"torch\": \"%s\", \"rows\": [\n",
               TORCH_VERSION);
  for (size_t i = 0; i < rows.size(); ++i)
    std::fprintf(f,
                 "  {\"workload\": \"%s\", \"device\": \"%s\", \"shape\": \"%s\", "
                 "\"host_ns_per_op\": %.1f, \"ratio_to_bare_launch\": 0}%s\n",
                 rows[i].workload.c_str(), rows[i].device.c_str(), rows[i].shape.c_str(),
                 rows[i].ns, i + 1 < rows.size() ? "," : "");
  std::fprintf(f, "]}\n");
  std::fclose(f);
}

// ||a - b|| / ||b|| in float64.
double rel_err(const torch::Tensor& a, const torch::Tensor& b) {
  const torch::Tensor x = a.detach().cpu().to(torch::kFloat64),
                      y = b.detach().cpu().to(torch::kFloat64);
  return std::sqrt((x - y).pow(2).sum().item<double>() /
                   std::max(y.pow(2).sum().item<double>(), 1e-300));
}

// --- the seed step

struct Seed {
  static constexpr int kBatches = 16;
  torch::nn::Linear fc{nullptr};
  std::vector<torch::Tensor> params, exp_avgs, exp_avg_sqs, steps;
  std::vector<torch::Tensor> xs, ys;

  Seed() {
    torch::manual_seed(0);
    fc = torch::nn::Linear(10, 10);
    fc->to(torch::kCUDA);
    params = {fc->weight, fc->bias};
    // Adam(fused=True)'s state: moments, and step counts as float32 on the device.
    for (const torch::Tensor& p : params) {
      exp_avgs.push_back(torch::zeros_like(p));
      exp_avg_sqs.push_back(torch::zeros_like(p));
      steps.push_back(torch::zeros({}, torch::TensorOptions(torch::kFloat32).device(torch::kCUDA)));
    }
    const torch::Tensor map = torch::randn({10, 10});
    for (int i = 0; i < kBatches; ++i) {
      const torch::Tensor x = torch::randn({32, 10});
      xs.push_back(x.cuda());
      ys.push_back((x.matmul(map) + 0.1 * torch::randn({32, 10})).cuda());
    }
  }
  // zero_grad(set_to_none=True), forward, MSE, backward, then what Adam(fused=True)
  // does for one device and dtype: _foreach_add_(steps, 1) and _fused_adam_.
  torch::Tensor step(const torch::Tensor& x, const torch::Tensor& y) {
    for (torch::Tensor& p : params) p.mutable_grad().reset();
    torch::Tensor loss = torch::mse_loss(fc->forward(x), y);
    loss.backward();
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> grads;
    for (const torch::Tensor& p : params) grads.push_back(p.grad());
    at::_foreach_add_(steps, 1);
    at::_fused_adam_(params, grads, exp_avgs, exp_avg_sqs, /*max_exp_avg_sqs=*/{}, steps,
                     /*lr=*/1e-2, /*beta1=*/0.9, /*beta2=*/0.999, /*weight_decay=*/0.0,
                     /*eps=*/1e-8, /*amsgrad=*/false, /*maximize=*/false);
    return loss;
  }
  torch::Tensor flat_params() const { return torch::cat({params[0].flatten(), params[1]}).cpu(); }
};

constexpr int kSeedChecked = 23;

bool seed_rows(std::vector<Row>& rows, int rounds, int steps_per_round) {
  bool ok = true;
  {  // eager; first: fused Adam's parameters after one step against float64 by hand
    Seed s;
    const torch::Tensor w0 = s.flat_params().to(torch::kFloat64);
    s.step(s.xs[0], s.ys[0]);
    torch::Tensor g =
        torch::cat({s.params[0].grad().flatten(), s.params[1].grad()}).cpu().to(torch::kFloat64);
    // Adam's first step: p -= lr * g / (|g| + eps) (bias-corrected moments m = g, v = g^2).
    const torch::Tensor want = w0 - 1e-2 * g / (g.abs() + 1e-8);
    const double err = rel_err(s.flat_params(), want);
    std::printf("validate seed eager: first fused Adam step against float64, rel err %.2e%s\n", err,
                err <= 1e-6 ? "" : "  FAILED");
    if (err <= 1e-6) {
      Seed t;
      const Spread ms = wall_ms_per_step(
          [&](int i) { t.step(t.xs[i % Seed::kBatches], t.ys[i % Seed::kBatches]); }, 20, rounds,
          steps_per_round);
      rows.push_back({"seed step", "f32", "32x10->10", "eager", "libtorch, at::_fused_adam_", ms,
                      1.0 / ms.median, "k/s"});
      print_row(rows.back());
    } else {
      ok = false;
    }
  }
  {  // eager with emptyCache() every step
    Seed s;
    const Spread ms = wall_ms_per_step(
        [&](int i) {
          s.step(s.xs[i % Seed::kBatches], s.ys[i % Seed::kBatches]);
          c10::cuda::CUDACachingAllocator::emptyCache();
        },
        20, rounds, steps_per_round);
    rows.push_back({"seed step", "f32", "32x10->10", "eager+empty_cache", "libtorch, emptyCache()",
                    ms, 1.0 / ms.median, "k/s"});
    print_row(rows.back());
  }
  {  // graphed: warm up on a side stream, capture there, replay; first against eager
    Seed eager, graphed;
    torch::Tensor sx = graphed.xs[0].clone(), sy = graphed.ys[0].clone(), static_loss;
    at::cuda::CUDAGraph graph;
    const int warm = 3;
    {
      c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool();
      side.synchronize();
      sync();
      c10::cuda::CUDAStreamGuard guard(side);
      for (int i = 0; i < warm; ++i) graphed.step(graphed.xs[i], graphed.ys[i]);
      sync();
      graph.capture_begin();
      static_loss = graphed.step(sx, sy);
      graph.capture_end();
    }
    sync();
    auto replay = [&](int i) {
      const int b = i % Seed::kBatches;
      sx.copy_(graphed.xs[b]);
      sy.copy_(graphed.ys[b]);
      graph.replay();
    };
    for (int i = warm; i < kSeedChecked; ++i) replay(i);
    for (int i = 0; i < kSeedChecked; ++i)
      eager.step(eager.xs[i % Seed::kBatches], eager.ys[i % Seed::kBatches]);
    sync();
    // PyTorch does not promise a replay bitwise equal to eager (cuBLAS may choose
    // another kernel inside a capture): within fp32 GEMM precision is asked.
    const double err = rel_err(graphed.flat_params(), eager.flat_params());
    const bool same = err <= 1e-5;
    std::printf(
        "validate seed graph: parameters after %d steps against the eager run's, rel err "
        "%.2e%s\n",
        kSeedChecked, err, same ? "" : "  FAILED");
    if (same) {
      const Spread ms = wall_ms_per_step(replay, 5, rounds, steps_per_round * 5);
      rows.push_back({"seed step", "f32", "32x10->10", "graphed", "libtorch, at::cuda::CUDAGraph",
                      ms, 1.0 / ms.median, "k/s"});
      print_row(rows.back());
    } else {
      ok = false;
    }
  }
  return ok;
}

// --- per-op overhead

bool op_rows(std::vector<OpRow>& rows) {
  bool ok = true;
  auto add_rows = [&](torch::Device dev, int64_t n, const std::function<void()>& after) {
    torch::manual_seed(0);
    const auto o = torch::TensorOptions(torch::kFloat32).device(dev);
    torch::Tensor a = torch::randn({n}, o), b = torch::randn({n}, o);
    torch::Tensor ga = a.detach().clone().requires_grad_(true);
    torch::Tensor gb = b.detach().clone().requires_grad_(true);
    const torch::Tensor want = a.cpu().to(torch::kFloat64) + b.cpu().to(torch::kFloat64);
    torch::Tensor c = at::add(ga, gb);
    const bool right = rel_err(at::add(a, b), want) <= 1e-6 && rel_err(c, want) <= 1e-6 &&
                       c.requires_grad() && c.grad_fn() != nullptr;
    if (!right) {
      std::printf("validate add on %s [%lld]: FAILED\n", dev.str().c_str(),
                  static_cast<long long>(n));
      ok = false;
      return;
    }
    const std::string device = dev.is_cuda() ? "cuda:0" : "cpu";
    const std::string shape = "[" + std::to_string(n) + "]";
    rows.push_back(
        {"add, no grad", device, shape, host_ns([&] { torch::Tensor r = at::add(a, b); }, after)});
    rows.push_back({"add, inputs require grad", device, shape,
                    host_ns([&] { torch::Tensor r = at::add(ga, gb); }, after)});
    for (size_t i = rows.size() - 2; i < rows.size(); ++i)
      std::printf("%-34s %-7s %-7s %10.0f ns\n", rows[i].workload.c_str(), rows[i].device.c_str(),
                  rows[i].shape.c_str(), rows[i].ns);
  };
  for (int64_t n : {16, 4096}) add_rows(torch::kCPU, n, [] {});
  for (int64_t n : {16, 4096}) add_rows(torch::Device(torch::kCUDA, 0), n, [] { sync(); });
  return ok;
}

// --- small Linear shapes

bool linear_rows(std::vector<Row>& rows) {
  bool ok = true;
  struct S {
    int64_t m, k, n;
  };
  for (const S& s : {S{32, 10, 10}, S{64, 128, 128}, S{256, 256, 256}}) {
    torch::manual_seed(1);
    const auto o = torch::TensorOptions(torch::kFloat32).device(torch::kCUDA);
    torch::Tensor x = torch::randn({s.m, s.k}, o);
    torch::Tensor w = torch::randn({s.n, s.k}, o) / std::sqrt(double(s.k));
    torch::Tensor b = torch::randn({s.n}, o), dy = torch::randn({s.m, s.n}, o);
    const std::string shape =
        std::to_string(s.m) + "x" + std::to_string(s.k) + "->" + std::to_string(s.n);
    // Check: forward and the three gradients against float64 on the CPU.
    torch::Tensor xr = x.detach().clone().requires_grad_(true);
    torch::Tensor wr = w.detach().clone().requires_grad_(true);
    torch::Tensor br = b.detach().clone().requires_grad_(true);
    torch::Tensor y = at::linear(xr, wr, br);
    std::vector<torch::Tensor> g = torch::autograd::grad({y}, {xr, wr, br}, {dy});
    const auto d = [](const torch::Tensor& t) { return t.detach().cpu().to(torch::kFloat64); };
    const double err =
        std::max({rel_err(y, d(x).matmul(d(w).t()) + d(b)), rel_err(g[0], d(dy).matmul(d(w))),
                  rel_err(g[1], d(dy).t().matmul(d(x))), rel_err(g[2], d(dy).sum(0))});
    std::printf("validate linear %s: forward and gradients against float64, rel err %.2e%s\n",
                shape.c_str(), err, err <= 1e-5 ? "" : "  FAILED");
    if (!(err <= 1e-5)) {
      ok = false;
      continue;
    }
    const double flops = 2.0 * s.m * s.n * s.k;
    {
      torch::NoGradGuard no_grad;
      const Spread ms = event_ms([&] { torch::Tensor r = at::linear(x, w, b); }, 3, 30);
      rows.push_back(
          {"fwd", "f32", shape, "libtorch", "at::linear", ms, flops / ms.median / 1e9, "TF/s"});
      print_row(rows.back());
    }
    const Spread ms = event_ms(
        [&] {
          torch::Tensor yy = at::linear(xr, wr, br);
          std::vector<torch::Tensor> gg = torch::autograd::grad({yy}, {xr, wr, br}, {dy});
        },
        3, 30);
    rows.push_back({"fwd+bwd op", "f32", shape, "libtorch", "at::linear + autograd::grad", ms,
                    3 * flops / ms.median / 1e9, "TF/s"});
    print_row(rows.back());
  }
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  std::string out = ".";
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--out") && i + 1 < argc) out = argv[++i];
    if (!std::strcmp(argv[i], "--quick")) quick = true;
  }
  if (!torch::cuda::is_available()) {
    std::printf("peer_libtorch: no CUDA device, nothing to measure\n");
    return 0;
  }
  at::globalContext().setAllowTF32CuBLAS(false);
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::printf("peer_libtorch: libtorch %s on %s\n", TORCH_VERSION, prop.name);
  std::vector<Row> train, linear;
  std::vector<OpRow> ops;
  bool ok = seed_rows(train, quick ? 3 : 7, quick ? 50 : 200);
  ok = op_rows(ops) && ok;
  ok = linear_rows(linear) && ok;
  write_rows(out + "/libtorch_train_step.json", "train_step (libtorch)", train);
  write_op_rows(out + "/libtorch_op_overhead.json", ops);
  write_rows(out + "/libtorch_linear_small.json", "linear small shapes (libtorch)", linear);
  if (!ok) std::printf("peer_libtorch: a validation failed; its rows are not printed\n");
  return ok ? 0 : 1;
}
