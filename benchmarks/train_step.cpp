// bench_train_step: whole training steps, the workloads of issue 8, each timed
// the way a training loop sees it (wall clock over many steps, one sync per
// round; the median round):
//   seed: Linear(10, 10), MSELoss, Adam(lr 1e-2), batch 32 on cuda:0 —
//         eager; eager with empty_cache() every step; captured once in a
//         cuda::Graph and replayed (new batch copied into static inputs first);
//   mlp:  4 x Linear(4096, 4096) with ReLU between (fused in the GEMM epilogue),
//         batch 8192, MSELoss, Adam — fp32, TF32, bf16 (AutocastGuard: bf16
//         GEMMs, float32 master weights, as torch.autocast).
// Every workload first checks its result: the graphed seed step must give the
// same parameters as the eager one, bit for bit. benchmarks/peer_train_step.py
// is the PyTorch side; benchmarks/compare.sh joins the two.
// Usage: bench_train_step [--json FILE] [--quick]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "benchmarks/timing.h"
#include "core/autocast.h"
#include "core/autograd.h"
#include "core/memory.h"
#include "core/ops.h"
#include "cuda/blas.h"
#include "cuda/graph.h"
#include "nn/nn.h"
#include "optim/optim.h"

using namespace ember;
using Clock = std::chrono::steady_clock;

namespace {

// Median over `rounds` of (wall time of `steps` calls of f, then one sync) / steps, in ms.
double wall_ms_per_step(const std::function<void(int)>& f, int warmup, int rounds, int steps) {
  for (int i = 0; i < warmup; ++i) f(i);
  cuda::synchronize(0);
  std::vector<double> per;
  int it = 0;
  for (int r = 0; r < rounds; ++r) {
    const auto t0 = Clock::now();
    for (int s = 0; s < steps; ++s) f(it++);
    cuda::synchronize(0);
    per.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / steps);
  }
  std::sort(per.begin(), per.end());
  return per[per.size() / 2];
}

struct Seed {
  static constexpr int kBatches = 16;
  std::shared_ptr<nn::Linear> fc;
  std::unique_ptr<optim::Adam> opt;
  nn::MSELoss criterion;
  std::vector<Tensor> xs, ys;  // batches on the GPU

  Seed() {
    manual_seed(0);
    fc = std::make_shared<nn::Linear>(10, 10);
    fc->to(kCUDA);
    opt = std::make_unique<optim::Adam>(fc->parameters(), optim::AdamOptions(1e-2));
    Tensor map = randn({10, 10});
    for (int i = 0; i < kBatches; ++i) {
      Tensor x = randn({32, 10});
      xs.push_back(x.to(kCUDA));
      ys.push_back((matmul(x, map) + 0.1 * randn({32, 10})).to(kCUDA));
    }
  }
  Tensor step(const Tensor& x, const Tensor& y) {
    opt->zero_grad();
    Tensor loss = criterion.forward(fc->forward(x), y);
    loss.backward();
    opt->step();
    return loss;
  }
  std::vector<double> params() const {
    std::vector<double> v = fc->weight.to(kCPU).to_vector<double>();
    for (double b : fc->bias.to(kCPU).to_vector<double>()) v.push_back(b);
    return v;
  }
};

struct Mlp {
  std::shared_ptr<nn::Sequential> net;
  std::unique_ptr<optim::Adam> opt;
  nn::MSELoss criterion;
  Tensor x, y;

  explicit Mlp(int64_t batch) {
    manual_seed(1);
    net = std::make_shared<nn::Sequential>();
    for (int i = 0; i < 4; ++i) {
      nn::LinearOptions o(4096, 4096);
      if (i < 3) o.activation(Activation::Relu);
      net->push_back(std::make_shared<nn::Linear>(o));
    }
    net->to(kCUDA);
    opt = std::make_unique<optim::Adam>(net->parameters(), optim::AdamOptions(1e-3));
    const TensorOptions o = TensorOptions(kFloat32).device(kCUDA);
    x = randn({batch, 4096}, o);
    y = randn({batch, 4096}, o);
  }
  Tensor step(bool autocast) {
    opt->zero_grad();
    Tensor loss;
    {
      AutocastGuard guard(kBFloat16, autocast);
      loss = criterion.forward(net->forward(x), y);
    }
    loss.backward();
    opt->step();
    return loss;
  }
};

}  // namespace

int main(int argc, char** argv) {
  if (!bench::have_gpu("bench_train_step")) return 0;
  bool quick = false;
  for (int i = 1; i < argc; ++i)
    if (!std::strcmp(argv[i], "--quick")) quick = true;
  bench::Table table("train_step: whole training steps, wall time per step");
  int failures = 0;
  const int rounds = quick ? 3 : 7, steps = quick ? 50 : 200;

  // --- seed, eager
  {
    Seed s;
    const double ms = wall_ms_per_step(
        [&](int i) { s.step(s.xs[i % Seed::kBatches], s.ys[i % Seed::kBatches]); }, 20, rounds,
        steps);
    table.add({"seed step", "f32", "32x10->10", "eager", ms, 1.0 / ms, "k/s", ""});
  }
  // --- seed, eager with empty_cache() every step (the story's "fix")
  {
    Seed s;
    const double ms = wall_ms_per_step(
        [&](int i) {
          s.step(s.xs[i % Seed::kBatches], s.ys[i % Seed::kBatches]);
          empty_cache(kCUDA);
        },
        20, rounds, steps);
    table.add({"seed step", "f32", "32x10->10", "eager+empty_cache", ms, 1.0 / ms, "k/s", ""});
  }
  // --- seed, graphed; first check it against eager, bit for bit
  {
    Seed eager, graphed;
    Tensor sx = empty({32, 10}, TensorOptions(kFloat32).device(kCUDA));
    Tensor sy = empty_like(sx);
    const int warm = 3, checked = 20;
    for (int i = 0; i < warm; ++i) graphed.step(graphed.xs[i], graphed.ys[i]);
    cuda::Graph graph;
    copy_(sx, graphed.xs[warm]);
    copy_(sy, graphed.ys[warm]);
    Tensor static_loss;
    graph.capture([&] { static_loss = graphed.step(sx, sy); });  // capture does not run the step
    for (int i = warm; i < warm + checked; ++i) {
      const int b = i % Seed::kBatches;
      copy_(sx, graphed.xs[b]);
      copy_(sy, graphed.ys[b]);
      graph.replay();
    }
    for (int i = 0; i < warm + checked; ++i)
      eager.step(eager.xs[i % Seed::kBatches], eager.ys[i % Seed::kBatches]);
    const bool same = eager.params() == graphed.params();
    std::printf("validate seed graph: parameters after %d steps %s the eager run's\n",
                warm + checked, same ? "equal (bitwise)" : "DIFFER FROM");
    failures += same ? 0 : 1;
    const double ms = wall_ms_per_step(
        [&](int i) {
          const int b = i % Seed::kBatches;
          copy_(sx, graphed.xs[b]);
          copy_(sy, graphed.ys[b]);
          graph.replay();
        },
        5, rounds, steps * 5);
    table.add({"seed step", "f32", "32x10->10", "graphed", ms, 1.0 / ms, "k/s",
               same ? "checked = eager, bitwise" : "MISMATCH"});
  }
  // --- MLP: fp32, TF32, bf16 autocast
  const int64_t batch = 8192;
  const double flops = 2.0 * batch * 4096.0 * 4096.0 * (4 * 3 - 1);  // no d_x for layer 1
  // Validation: the same initial weights and data in every mode, so the first
  // step's loss (before any update) must agree with fp32's to the mode's
  // precision (TF32 1e-3, bf16 1e-2 relative, DESIGN.md's thresholds), and the
  // second (after one Adam step) must be finite.
  double f32_first = 0;
  for (const char* mode : {"f32", "tf32", "bf16"}) {
    const bool tf32 = !std::strcmp(mode, "tf32"), autocast = !std::strcmp(mode, "bf16");
    cuda::set_allow_tf32(tf32);
    Mlp m(batch);
    const double first = m.step(autocast).item();
    const double second = m.step(autocast).item();
    if (!tf32 && !autocast) f32_first = first;
    const double rel = std::abs(first - f32_first) / std::abs(f32_first);
    const double tol = autocast ? 1e-2 : tf32 ? 1e-3 : 0.0;
    const bool ok = rel <= tol && std::isfinite(second);
    std::printf("validate mlp %s: first loss %.6f (rel. diff to fp32 %.1e, limit %.0e), then %.6f%s\n",
                mode, first, rel, tol, second, ok ? "" : "  FAILED");
    failures += ok ? 0 : 1;
    const double ms =
        wall_ms_per_step([&](int) { m.step(autocast); }, 2, quick ? 3 : 5, quick ? 3 : 10);
    table.add({"mlp step", mode, "4x4096, batch 8192", "eager", ms, flops / ms / 1e9, "TF/s",
               autocast ? "AutocastGuard(bf16), fp32 masters" : ""});
    cuda::set_allow_tf32(false);
  }
  table.write_json(bench::json_path(argc, argv));
  if (failures) std::printf("%d validation failure(s)\n", failures);
  return failures ? 1 : 0;
}
