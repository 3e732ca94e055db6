// bench_train_step: whole training steps, the workloads of issue 8, each timed
// the way a training loop sees it (wall clock over many steps, one sync per
// round; the median round, with the fastest and slowest rounds as the spread):
//   seed: Linear(10, 10), MSELoss, Adam(lr 1e-2), batch 32 on cuda:0 —
//         eager; eager with empty_cache() every step; captured once in a
//         cuda::Graph and replayed (new batch copied into static inputs first);
//   mlp:  4 x Linear(4096, 4096) with ReLU between (fused in the GEMM epilogue),
//         batch 8192, MSELoss, Adam(lr 1e-3) — fp32, TF32, bf16 (AutocastGuard:
//         bf16 GEMMs, float32 master weights, as torch.autocast).
//
// Every workload is checked before it is timed, on the code path that is timed;
// a failed check prints no row for it and the program exits 1:
//   seed: 23 eager steps against the same steps in float64 on the CPU (the CPU
//         kernels are ember's reference): every loss and every parameter, relative
//         error <= 1e-5 (DESIGN.md's fp32 GEMM threshold); the empty_cache and
//         graphed variants against the eager run, bit for bit.
//   mlp:  the targets are a fixed teacher network's outputs (another 4-layer ReLU
//         MLP), so the loss depends on every layer (the program prints how far a
//         network that output zeros would be off). The first step of each mode is
//         checked op by op on the tensors that step made, against float64 on the
//         CPU on slices: each layer's output (GEMM + bias + ReLU), the loss and
//         its gradient, each layer's d_x, d_w and d_b, and Adam's update of every
//         parameter, at DESIGN.md's per-op thresholds for the mode (GEMMs: fp32
//         1e-5, TF32 1e-3, bf16 1e-2; element-wise fp32 1e-6). Per op, because a
//         whole step cannot meet a per-op threshold per element: a ReLU whose
//         input is near zero flips between precisions, and Adam's first steps move
//         each weight by about lr whatever its gradient's size, so where a gradient
//         is near zero its sign decides (benchmarks/NOTES.md measures this). Then
//         steps 2-3: their losses against fp32's, at the mode's threshold times the
//         4 GEMMs a loss passes through.
// benchmarks/peer_train_step.py is the PyTorch side, benchmarks/peer_libtorch.cpp
// the libtorch one; benchmarks/compare.sh joins them.
// Usage: bench_train_step [--json FILE] [--quick] [--only seed|mlp]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "benchmarks/check.h"
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

// Median (and min, max) over `rounds` of (wall time of `steps` calls of f, then one
// sync) / steps, in ms.
bench::Spread wall_ms_per_step(const std::function<void(int)>& f, int warmup, int rounds,
                               int steps) {
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
  return bench::spread_of(per);
}

using bench::f64;
using bench::rel_err;

// Prints one check; returns whether it passed (NaN never passes).
bool report(const char* what, double err, double tol) {
  const bool ok = err <= tol;
  std::printf("  %-52s rel err %.2e  (limit %.0e)%s\n", what, err, tol, ok ? "" : "  FAILED");
  return ok;
}

// PyTorch's Adam, first step, in float64: m = (1-b1) g, v = (1-b2) g^2,
// p -= lr / (1-b1) * m / (sqrt(v) / sqrt(1-b2) + eps).
std::vector<double> adam_first_step(std::vector<double> p, const std::vector<double>& g,
                                    double lr) {
  const double b1 = 0.9, b2 = 0.999, eps = 1e-8;
  for (size_t i = 0; i < p.size(); ++i) {
    const double m = (1 - b1) * g[i], v = (1 - b2) * g[i] * g[i];
    p[i] -= lr / (1 - b1) * m / (std::sqrt(v) / std::sqrt(1 - b2) + eps);
  }
  return p;
}

// ---------------------------------------------------------------- seed

struct Seed {
  static constexpr int kBatches = 16;
  std::shared_ptr<nn::Linear> fc;
  std::unique_ptr<optim::Adam> opt;
  nn::MSELoss criterion;
  std::vector<Tensor> xs, ys;  // batches on `device`

  // The same model, data and optimizer on CUDA (float32) or on the CPU (float64).
  explicit Seed(Device device = kCUDA, DType dtype = kFloat32) {
    manual_seed(0);
    fc = std::make_shared<nn::Linear>(10, 10);
    fc->to(device, dtype);
    opt = std::make_unique<optim::Adam>(fc->parameters(), optim::AdamOptions(1e-2));
    Tensor map = randn({10, 10});
    for (int i = 0; i < kBatches; ++i) {
      Tensor x = randn({32, 10});
      xs.push_back(x.to(device, dtype));
      ys.push_back((matmul(x, map) + 0.1 * randn({32, 10})).to(device, dtype));
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

constexpr int kSeedChecked = 23;  // steps compared (3 warm-up + 20 replays for the graph)

// The eager step against float64 on the CPU, step by step.
bool validate_seed_eager() {
  Seed gpu, ref(kCPU, kFloat64);
  std::vector<double> got_losses, want_losses;
  for (int i = 0; i < kSeedChecked; ++i) {
    const int b = i % Seed::kBatches;
    got_losses.push_back(gpu.step(gpu.xs[b], gpu.ys[b]).item());
    want_losses.push_back(ref.step(ref.xs[b], ref.ys[b]).item());
  }
  std::printf("validate seed eager: %d steps against float64 on the CPU\n", kSeedChecked);
  bool ok = report("losses, every step", rel_err(got_losses, want_losses), 1e-5);
  ok = report("weight and bias after the last step", rel_err(gpu.params(), ref.params()), 1e-5) &&
       ok;
  return ok;
}

// ---------------------------------------------------------------- mlp

constexpr int64_t kWidth = 4096;
constexpr int kLayers = 4;
constexpr int64_t kSlice = 8;  // rows (or features) compared against float64

// 4 x Linear(4096, 4096), ReLU fused into the first three (an nn::Sequential's
// forward is the same calls in the same order).
std::vector<std::shared_ptr<nn::Linear>> make_mlp(uint64_t seed) {
  manual_seed(seed);
  std::vector<std::shared_ptr<nn::Linear>> layers;
  for (int i = 0; i < kLayers; ++i) {
    nn::LinearOptions o(kWidth, kWidth);
    if (i + 1 < kLayers) o.activation(Activation::Relu);
    layers.push_back(std::make_shared<nn::Linear>(o));
    layers.back()->to(kCUDA);
  }
  return layers;
}

struct Mlp {
  std::vector<std::shared_ptr<nn::Linear>> layers;
  std::unique_ptr<optim::Adam> opt;
  nn::MSELoss criterion;
  Tensor x, y;

  Mlp(const Tensor& inputs, const Tensor& targets) : layers(make_mlp(1)), x(inputs), y(targets) {
    std::vector<Tensor> params;
    for (const auto& l : layers)
      for (const Tensor& p : l->parameters()) params.push_back(p);
    opt = std::make_unique<optim::Adam>(params, optim::AdamOptions(1e-3));
  }
  // The forward and loss, under autocast when asked; `trace` (validation only)
  // keeps each layer's output.
  Tensor forward_loss(bool autocast, std::vector<Tensor>* trace = nullptr) {
    AutocastGuard guard(kBFloat16, autocast);
    Tensor h = x;
    for (const auto& l : layers) {
      h = l->forward(h);
      if (trace) trace->push_back(h);
    }
    return criterion.forward(h, y);
  }
  // One training step, as timed.
  Tensor step(bool autocast) {
    opt->zero_grad();
    Tensor loss = forward_loss(autocast);
    loss.backward();  // outside autocast, as in PyTorch
    opt->step();
    return loss;
  }
};

// The teacher's outputs for x: the targets (float32, TF32 off).
Tensor teacher_targets(const Tensor& x) {
  NoGradGuard no_grad;
  cuda::set_allow_tf32(false);
  std::vector<std::shared_ptr<nn::Linear>> teacher = make_mlp(2);
  Tensor h = x;
  for (const auto& l : teacher) h = l->forward(h);
  return h;
}

struct ModeTol {
  double gemm;       // DESIGN.md's threshold for one GEMM in this mode
  double loss_grad;  // for the loss's gradient: element-wise, rounded to the output's dtype
};

// The first step of one mode, op by op against float64 on the CPU (see the header).
// Leaves the model after that step, with its loss in *first_loss.
bool validate_mlp_first_step(Mlp& m, bool autocast, const ModeTol& tol, double* first_loss) {
  m.opt->zero_grad();
  std::vector<Tensor> ys;  // each layer's output
  Tensor loss = m.forward_loss(autocast, &ys);
  // The gradient reaching each layer's output: the same backward nodes, run down to
  // that output (autograd::grad leaves .grad() alone; the graph is kept for the
  // real backward below).
  std::vector<Tensor> d(kLayers);
  for (int l = 0; l < kLayers; ++l) d[l] = grad({loss}, {ys[l]}, {}, /*retain_graph=*/true)[0];
  // What a layer computed with, as float64: under autocast the bf16 copies it used.
  auto operand = [&](const Tensor& t) { return autocast ? f64(t.to(kBFloat16)) : f64(t); };
  // The weights the forward and backward used, taken before the step moves them
  // (the check of each product reads these; Adam's check the float32 originals).
  std::vector<Tensor> w_before, b_before, w_used, b_used;
  for (const auto& l : m.layers) {
    w_before.push_back(f64(l->weight.slice(0, 0, kSlice)));
    b_before.push_back(f64(l->bias));
    w_used.push_back(operand(l->weight));
    b_used.push_back(operand(l->bias));
  }
  loss.backward();
  m.opt->step();
  *first_loss = loss.item();

  NoGradGuard no_grad;
  bool ok = true;
  const int64_t n = m.y.numel();
  // The loss and its gradient, from the last layer's output.
  const Tensor out = f64(ys.back()), target = f64(m.y);
  const Tensor diff = out - target;
  const double want_loss = (diff * diff).sum().item() / static_cast<double>(n);
  ok = report("loss (mean over all elements)", std::abs(*first_loss - want_loss) / want_loss,
              1e-5) &&
       ok;
  ok = report("d loss / d output, first rows",
              rel_err(d.back().slice(0, 0, kSlice), diff.slice(0, 0, kSlice) * (2.0 / n)),
              tol.loss_grad) &&
       ok;
  for (int l = 0; l < kLayers; ++l) {
    const nn::Linear& layer = *m.layers[static_cast<size_t>(l)];
    const Tensor a = l == 0 ? operand(m.x) : f64(ys[static_cast<size_t>(l - 1)]);  // (B, in)
    const Tensor& w = w_used[static_cast<size_t>(l)];
    const Tensor& b = b_used[static_cast<size_t>(l)];
    const bool relu = l + 1 < kLayers;
    char what[96];
    // Forward: this layer's output on the first rows.
    const Tensor w_t = w.t().contiguous();  // (in, out): the CPU matmul reads rows
    Tensor pre = matmul(a.slice(0, 0, kSlice), w_t) + b;
    Tensor want_y = relu ? ember::relu(pre) : pre;
    std::snprintf(what, sizeof what, "layer %d output (GEMM + bias%s), first rows", l,
                  relu ? " + ReLU" : "");
    ok = report(what, rel_err(ys[static_cast<size_t>(l)].slice(0, 0, kSlice), want_y), tol.gemm) &&
         ok;
    // Backward, from the gradient this step gave the layer's output.
    Tensor d_pre = f64(d[static_cast<size_t>(l)]);
    if (relu) d_pre = d_pre * gt(f64(ys[static_cast<size_t>(l)]), 0.0);
    std::snprintf(what, sizeof what, "layer %d d_w, first rows", l);
    const Tensor want_dw = matmul(d_pre.slice(1, 0, kSlice).t(), a);  // (slice, in)
    ok = report(what, rel_err(layer.weight.grad().slice(0, 0, kSlice), want_dw), tol.gemm) && ok;
    std::snprintf(what, sizeof what, "layer %d d_b", l);
    const Tensor want_db = d_pre.sum(0);
    ok = report(what, rel_err(layer.bias.grad(), want_db), tol.gemm) && ok;
    if (l > 0) {
      std::snprintf(what, sizeof what, "layer %d d_x, first rows", l);
      ok = report(what,
                  rel_err(d[static_cast<size_t>(l - 1)].slice(0, 0, kSlice),
                          matmul(d_pre.slice(0, 0, kSlice), w)),
                  tol.gemm) &&
           ok;
    }
    // Adam's first step on this layer, from the gradient the step computed.
    const std::vector<double> gw = f64(layer.weight.grad().slice(0, 0, kSlice)).to_vector<double>();
    const std::vector<double> gb = f64(layer.bias.grad()).to_vector<double>();
    std::vector<double> want_w =
        adam_first_step(w_before[static_cast<size_t>(l)].to_vector<double>(), gw, 1e-3);
    std::vector<double> want_b =
        adam_first_step(b_before[static_cast<size_t>(l)].to_vector<double>(), gb, 1e-3);
    std::snprintf(what, sizeof what, "layer %d Adam step: weight (first rows), bias", l);
    const double e =
        std::max(rel_err(f64(layer.weight.slice(0, 0, kSlice)).to_vector<double>(), want_w),
                 rel_err(f64(layer.bias).to_vector<double>(), want_b));
    ok = report(what, e, 1e-6) && ok;
  }
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  if (!bench::have_gpu("bench_train_step")) return 0;
  bool quick = false;
  std::string only;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--quick")) quick = true;
    if (!std::strcmp(argv[i], "--only") && i + 1 < argc) only = argv[i + 1];
  }
  bench::Table table("train_step: whole training steps, wall time per step");
  int failures = 0;
  const int rounds = quick ? 3 : 7, steps = quick ? 50 : 200;

  if (only.empty() || only == "seed") {
    // --- seed, eager: first against float64 on the CPU
    const bool eager_ok = validate_seed_eager();
    failures += eager_ok ? 0 : 1;
    if (eager_ok) {
      Seed s;
      const bench::Spread ms = wall_ms_per_step(
          [&](int i) { s.step(s.xs[i % Seed::kBatches], s.ys[i % Seed::kBatches]); }, 20, rounds,
          steps);
      table.add({"seed step", "f32", "32x10->10", "eager", ms.median, 1.0 / ms.median, "k/s",
                 "checked = float64 CPU", ms.min, ms.max});
    }
    // --- seed, eager with empty_cache() every step (the story's "fix"): the same
    // parameters as eager, bit for bit
    {
      Seed plain, remedy;
      for (int i = 0; i < kSeedChecked; ++i) {
        const int b = i % Seed::kBatches;
        plain.step(plain.xs[b], plain.ys[b]);
        remedy.step(remedy.xs[b], remedy.ys[b]);
        empty_cache(kCUDA);
      }
      const bool same = plain.params() == remedy.params();
      std::printf("validate seed eager+empty_cache: parameters after %d steps %s the eager run's\n",
                  kSeedChecked, same ? "equal (bitwise)" : "DIFFER FROM");
      failures += same && eager_ok ? 0 : 1;
      if (same && eager_ok) {
        Seed s;
        const bench::Spread ms = wall_ms_per_step(
            [&](int i) {
              s.step(s.xs[i % Seed::kBatches], s.ys[i % Seed::kBatches]);
              empty_cache(kCUDA);
            },
            20, rounds, steps);
        table.add({"seed step", "f32", "32x10->10", "eager+empty_cache", ms.median, 1.0 / ms.median,
                   "k/s", "checked = eager, bitwise", ms.min, ms.max});
      }
    }
    // --- seed, graphed; first check it against eager, bit for bit
    {
      Seed eager, graphed;
      Tensor sx = empty({32, 10}, TensorOptions(kFloat32).device(kCUDA));
      Tensor sy = empty_like(sx);
      const int warm = 3;
      for (int i = 0; i < warm; ++i) graphed.step(graphed.xs[i], graphed.ys[i]);
      cuda::Graph graph;
      copy_(sx, graphed.xs[warm]);
      copy_(sy, graphed.ys[warm]);
      Tensor static_loss;
      graph.capture([&] { static_loss = graphed.step(sx, sy); });  // capture does not run the step
      for (int i = warm; i < kSeedChecked; ++i) {
        const int b = i % Seed::kBatches;
        copy_(sx, graphed.xs[b]);
        copy_(sy, graphed.ys[b]);
        graph.replay();
      }
      for (int i = 0; i < kSeedChecked; ++i)
        eager.step(eager.xs[i % Seed::kBatches], eager.ys[i % Seed::kBatches]);
      const bool same = eager.params() == graphed.params();
      std::printf("validate seed graph: parameters after %d steps %s the eager run's\n",
                  kSeedChecked, same ? "equal (bitwise)" : "DIFFER FROM");
      failures += same && eager_ok ? 0 : 1;
      if (same && eager_ok) {
        const bench::Spread ms = wall_ms_per_step(
            [&](int i) {
              const int b = i % Seed::kBatches;
              copy_(sx, graphed.xs[b]);
              copy_(sy, graphed.ys[b]);
              graph.replay();
            },
            5, rounds, steps * 5);
        table.add({"seed step", "f32", "32x10->10", "graphed", ms.median, 1.0 / ms.median, "k/s",
                   "checked = eager, bitwise", ms.min, ms.max});
      }
    }
  }

  if (only.empty() || only == "mlp") {
    // --- MLP: fp32, TF32, bf16 autocast, on a teacher's targets
    const int64_t batch = 8192;
    const double flops = 2.0 * batch * 4096.0 * 4096.0 * (4 * 3 - 1);  // no d_x for layer 1
    manual_seed(3);
    const Tensor x = randn({batch, kWidth}, TensorOptions(kFloat32).device(kCUDA));
    const Tensor targets = teacher_targets(x);
    double zero_target_loss = 0;  // the loss of a network that outputs zeros
    {
      NoGradGuard no_grad;
      const Tensor t = f64(targets);
      zero_target_loss = (t * t).mean().item();
      std::printf("mlp targets: a teacher network's outputs; mean(target^2) = %.4e\n",
                  zero_target_loss);
    }
    constexpr int kCompared = 3;  // steps whose losses are compared with fp32's
    std::vector<double> f32_losses;
    for (const char* mode : {"f32", "tf32", "bf16"}) {
      const bool tf32 = !std::strcmp(mode, "tf32"), autocast = !std::strcmp(mode, "bf16");
      const ModeTol tol = autocast ? ModeTol{1e-2, 1e-2}
                          : tf32   ? ModeTol{1e-3, 1e-6}
                                   : ModeTol{1e-5, 1e-6};
      cuda::set_allow_tf32(tf32);
      Mlp m(x, targets);
      std::printf("validate mlp %s: the first step op by op against float64 on the CPU\n", mode);
      double first = 0;
      bool ok = validate_mlp_first_step(m, autocast, tol, &first);
      {
        // The loss must depend on the network far beyond the tolerance its
        // comparison with fp32 gets below.
        const double margin = std::abs(zero_target_loss - first) / first;
        const bool strong = margin > 2 * kLayers * tol.gemm && margin > 0.1;
        std::printf(
            "  a network that output zeros would have loss %.4e, off by %.0f%% (loss %.4e)%s\n",
            zero_target_loss, 100 * margin, first, strong ? "" : "  FAILED: too weak a check");
        ok = strong && ok;
      }
      std::vector<double> losses{first};
      for (int s = 1; s < kCompared; ++s) losses.push_back(m.step(autocast).item());
      if (!tf32 && !autocast) f32_losses = losses;
      std::printf("  losses of steps 1-%d:", kCompared);
      for (double l : losses) std::printf(" %.6e", l);
      std::printf("\n");
      if (tf32 || autocast)
        ok = report("losses of steps 1-3 against fp32's", rel_err(losses, f32_losses),
                    kLayers * tol.gemm) &&
             ok;
      failures += ok ? 0 : 1;
      if (ok) {
        const bench::Spread ms =
            wall_ms_per_step([&](int) { m.step(autocast); }, 2, quick ? 3 : 5, quick ? 3 : 10);
        table.add({"mlp step", mode, "4x4096, batch 8192", "eager", ms.median,
                   flops / ms.median / 1e9, "TF/s",
                   autocast ? "AutocastGuard(bf16), fp32 masters; checked" : "checked", ms.min,
                   ms.max});
      }
      cuda::set_allow_tf32(false);
    }
  }
  table.write_json(bench::json_path(argc, argv));
  if (failures) std::printf("%d validation failure(s): their rows are not printed\n", failures);
  return failures ? 1 : 0;
}
