// bench_conv: the convolution workloads of issue 29 on ember's column path (the im2col
// kernel, then matmul; backward the col2im kernel; core/ops/conv.cpp; EMBER_CONV_COMPOSED=1
// for the composition through index_select): conv 3x3 64->64 on 32x32, batch 128,
// forward and forward+backward in TF32 and bf16; batch_norm2d 128x64x32x32
// forward+backward (the op: its fused kernels, cuda/kernels/batch_norm.cu, by default and
// with --bn-fused; with --bn-composed, EMBER_BATCH_NORM_FUSED=0 for the whole run, its
// composition); a ResNet-8 training step (stem + basic blocks 64/128/256, batch 128, SGD
// with momentum) in TF32 and under bf16 autocast, each eager and captured in a
// cuda::Graph. EMBER_CONV_IMPLICIT=1 runs the convolutions it can (bf16, 64-multiple
// channels, stride 1 where the input needs its gradient) as the implicit GEMM
// (cuda/kernels/conv_gemm.cu) instead of the columns. benchmarks/peer_conv.py
// times the same in PyTorch (cuDNN, channels_last). Each workload is checked first on the
// GPU against the same ops in float64 (the conv also against a CPU float64 run on two
// images; batch norm's float64 composes, so it checks the fused kernels); a failed check
// prints no row and exits 1. --profile prints ember's profiler table (core/profiler.h) for
// five more conv and ResNet-8 steps after their timed rows. --memory compares
// predict_memory with the GPU's own figures for the ResNet-8 steps, and only that.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "benchmarks/check.h"
#include "benchmarks/timing.h"
#include "core/autograd.h"
#include "core/ops.h"
#include "core/predict.h"
#include "core/profiler.h"
#include "cuda/blas.h"
#include "cuda/graph.h"
#include "examples/workloads.h"
#include "nn/nn.h"
#include "optim/optim.h"

using namespace ember;

namespace {

constexpr int64_t kBatch = 128, kChannels = 64, kSide = 32;

bool checked(const char* what, double err, double tol) {
  std::printf("validate %-34s rel err %.2e (tolerance %.0e)\n", what, err, tol);
  if (err <= tol) return true;
  std::printf("VALIDATION FAILED\n");
  return false;
}

// --profile: five more calls of f under the profiler, its table by device time (after
// the timed rows: the profile does not touch them).
template <typename F>
void print_profile(const char* what, F&& f, size_t rows) {
  profiler::Profile prof;
  for (int i = 0; i < 5; ++i) {
    profiler::RecordFunction range(what);
    f();
  }
  prof.stop();
  std::printf("\nprofile: %s, 5 calls\n%s", what, prof.table("device", rows).c_str());
}

// --memory: predict_memory (the meta device mirroring CUDA) against measure_memory (the
// same step on the GPU, its allocator fresh) for the ResNet-8 step at batch 128, TF32
// and bf16 autocast, three steps each: peak allocated and reserved bytes, and each
// step's. Exits 1 when they differ.
int memory_check() {
  bool all_same = true;
  for (const bool bf16 : {false, true}) {
    const StepFactory factory = [bf16](Device d) { return workloads::resnet8(d, 128, 32, bf16); };
    const MemoryPrediction p = predict_memory(factory, PredictOptions().steps(3));
    const MemoryPrediction m = measure_memory(factory, kCUDA, PredictOptions().steps(3));
    bool same = p.peak_allocated == m.peak_allocated && p.peak_reserved == m.peak_reserved &&
                p.steps.size() == m.steps.size();
    for (size_t i = 0; same && i < p.steps.size(); ++i)
      same = p.steps[i].peak_allocated == m.steps[i].peak_allocated &&
             p.steps[i].peak_reserved == m.steps[i].peak_reserved;
    std::printf(
        "memory resnet8 %s b128 (3 steps): predicted peak allocated %lld B, reserved %lld B; "
        "measured %lld B, %lld B: %s\n",
        bf16 ? "bf16" : "tf32", static_cast<long long>(p.peak_allocated),
        static_cast<long long>(p.peak_reserved), static_cast<long long>(m.peak_allocated),
        static_cast<long long>(m.peak_reserved), same ? "equal, every step" : "DIFFER");
    all_same = all_same && same;
  }
  return all_same ? 0 : 1;
}

}  // namespace

namespace {

// The ResNet-8 rows of one precision (TF32, or bf16 autocast): the eager step, checked
// to learn (its loss on one batch falls over 10 steps; under autocast, its first loss
// within 2% of the TF32 twin's from the same weights and batch); then the same step
// captured in a cuda::Graph and replayed, checked against an eager twin (the losses of
// 5 replayed steps, then every parameter). Returns 1 when a check fails.
int resnet_rows(bench::Table& table, Generator& gen, bool bf16, int iters, bool profile) {
  const TensorOptions gpu = TensorOptions(kFloat32).device(kCUDA);
  const char* dt = bf16 ? "bf16" : "tf32";
  const char* what = bf16 ? "SGD momentum; bf16 autocast" : "SGD momentum";
  {
    workloads::ResNet8Step step(kCUDA, bf16);
    step.images = randn({kBatch, 3, kSide, kSide}, gpu, &gen);
    step.labels = randint(10, {kBatch}, TensorOptions(kInt64).device(kCUDA), &gen);
    if (bf16) {
      workloads::ResNet8Step twin(kCUDA, false);
      twin.images = step.images;
      twin.labels = step.labels;
      const double ref = twin().item();
      Tensor first_loss;
      {
        AutocastGuard autocast(kBFloat16);
        first_loss = cross_entropy(step.net->forward(step.images), step.labels);
      }
      const double err = std::fabs(first_loss.item() - ref) / std::max(std::fabs(ref), 1e-12);
      if (!checked("resnet8 bf16 first loss vs tf32", err, 2e-2)) return 1;
    }
    const double first = step().item();
    for (int i = 0; i < 8; ++i) step();
    const double last = step().item();
    std::printf("validate resnet8 %s: loss %.4f -> %.4f over 10 steps on one batch\n", dt, first,
                last);
    if (!(std::isfinite(last) && last < first)) {
      std::printf("VALIDATION FAILED\n");
      return 1;
    }
    bench::Spread s = bench::spread_ms([&] { step(); }, 3, iters);
    table.add({"resnet8 step", dt, "b128 3x32x32", "ember", s.median, 0, "", what, s.min, s.max});
    if (profile)
      print_profile(
          bf16 ? "resnet8 step bf16" : "resnet8 step tf32", [&] { step(); }, 20);
  }
  workloads::ResNet8Step eager(kCUDA, bf16), graphed(kCUDA, bf16);
  eager.images = graphed.images = randn({kBatch, 3, kSide, kSide}, gpu, &gen);
  eager.labels = graphed.labels = randint(10, {kBatch}, TensorOptions(kInt64).device(kCUDA), &gen);
  // Warm-up steps eagerly (momentum buffers and the allocator's blocks exist before
  // the capture, as PyTorch's graph recipe does).
  for (int i = 0; i < 3; ++i) {
    eager();
    graphed();
  }
  cuda::Graph graph;
  Tensor static_loss;
  std::string why;
  try {
    graph.capture([&] { static_loss = graphed(); });
  } catch (const std::exception& e) {
    why = e.what();
  }
  if (!graph.captured()) {
    std::printf("resnet8 %s graphed: the step could not be captured: %s\n", dt, why.c_str());
    return 0;
  }
  double loss_err = 0, param_err = 0;
  for (int i = 0; i < 5; ++i) {
    graph.replay();
    const double lg = static_loss.item(), le = eager().item();
    loss_err = std::max(loss_err, std::fabs(lg - le) / std::max(std::fabs(le), 1e-12));
  }
  const std::vector<Tensor> pe = eager.net->parameters(), pg = graphed.net->parameters();
  for (size_t i = 0; i < pe.size(); ++i)
    param_err = std::max(param_err, bench::rel_err_on_device(pg[i], pe[i]));
  if (!checked(bf16 ? "resnet8 bf16 graphed loss vs eager" : "resnet8 graphed loss vs eager",
               loss_err, 1e-5) ||
      !checked(bf16 ? "resnet8 bf16 graphed params vs eager" : "resnet8 graphed params vs eager",
               param_err, 1e-5))
    return 1;
  bench::Spread s = bench::spread_ms([&] { graph.replay(); }, 3, iters);
  table.add({"resnet8 step graphed", dt, "b128 3x32x32", "ember", s.median, 0, "",
             bf16 ? "SGD momentum; bf16 autocast; cuda::Graph" : "SGD momentum; cuda::Graph", s.min,
             s.max});
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (!bench::have_gpu("bench_conv")) return 0;
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--memory") == 0) return memory_check();
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  bool bn_composed = false, bn_fused = false, profile = false;
  for (int i = 1; i < argc; ++i) {
    profile |= std::strcmp(argv[i], "--profile") == 0;
    bn_composed |= std::strcmp(argv[i], "--bn-composed") == 0;
    bn_fused |= std::strcmp(argv[i], "--bn-fused") == 0;
  }
  if (bn_composed && bn_fused) {
    std::fprintf(stderr, "bench_conv: --bn-composed and --bn-fused exclude each other\n");
    return 2;
  }
  // Read once, at batch norm's first call: set before any op runs.
  if (bn_composed) setenv("EMBER_BATCH_NORM_FUSED", "0", 1);
  if (bn_fused) setenv("EMBER_BATCH_NORM_FUSED", "1", 1);
  const int iters = quick ? 5 : 20;
  cuda::set_allow_tf32(true);  // the peer's fp32 rows run TF32 too (cuDNN's default)
  const bool composed = detail::conv_composed();  // EMBER_CONV_COMPOSED=1
  std::printf("conv2d: the %s path%s\n",
              composed ? "composed (index_select, index_add)" : "column kernels (im2col, col2im)",
              detail::conv_implicit()
                  ? "; the implicit GEMM where it applies (EMBER_CONV_IMPLICIT=1)"
                  : "");
  bench::Table table(
      composed ? "conv: convolution composed (index_select + matmul), batch norm, ResNet-8 step"
               : "conv: convolution (im2col kernel + matmul), batch norm, ResNet-8 step");
  Generator gen(29);
  const TensorOptions gpu = TensorOptions(kFloat32).device(kCUDA);
  const char* shape = "128x64x32x32 k3";
  const double conv_flops = 2.0 * kBatch * kSide * kSide * kChannels * kChannels * 9;

  Tensor x32 = randn({kBatch, kChannels, kSide, kSide}, gpu, &gen);
  Tensor w32 = mul(randn({kChannels, kChannels, 3, 3}, gpu, &gen), 1.0 / 24.0);
  Tensor dy32 = randn({kBatch, kChannels, kSide, kSide}, gpu, &gen);
  // The reference: the same op in float64 on the GPU (GEMMs in full fp64), and on the
  // CPU for two images (the CPU's loops: an independent implementation of the GEMM).
  {
    Tensor y64 = conv2d(x32.to(kFloat64), w32.to(kFloat64), Tensor(), {1, 1}, {1, 1});
    Tensor cpu2 = conv2d(bench::f64(x32.slice(0, 0, 2)), bench::f64(w32), Tensor(), {1, 1}, {1, 1});
    if (!checked("conv fwd fp64 GPU vs CPU (2 images)", bench::rel_err(y64.slice(0, 0, 2), cpu2),
                 1e-12))
      return 1;
    for (DType dt : {kFloat32, kBFloat16}) {
      Tensor y = conv2d(x32.to(dt), w32.to(dt), Tensor(), {1, 1}, {1, 1});
      if (!checked(dt == kFloat32 ? "conv fwd tf32" : "conv fwd bf16",
                   bench::rel_err_on_device(y, y64), dt == kFloat32 ? 5e-3 : 2e-2))
        return 1;
    }
  }
  for (DType dt : {kFloat32, kBFloat16}) {
    const char* dn = dt == kFloat32 ? "tf32" : "bf16";
    Tensor x = x32.to(dt).detach(), w = w32.to(dt).detach(), dy = dy32.to(dt);
    x.set_requires_grad(true);
    w.set_requires_grad(true);
    // Backward checked against float64 autograd of the same op.
    {
      Tensor x64 = x32.to(kFloat64).detach(), w64 = w32.to(kFloat64).detach();
      x64.set_requires_grad(true);
      w64.set_requires_grad(true);
      std::vector<Tensor> want =
          grad({conv2d(x64, w64, Tensor(), {1, 1}, {1, 1})}, {x64, w64}, {dy32.to(kFloat64)});
      std::vector<Tensor> got = grad({conv2d(x, w, Tensor(), {1, 1}, {1, 1})}, {x, w}, {dy});
      const double tol = dt == kFloat32 ? 5e-3 : 3e-2;
      if (!checked("conv d_x", bench::rel_err_on_device(got[0], want[0]), tol) ||
          !checked("conv d_w", bench::rel_err_on_device(got[1], want[1]), tol))
        return 1;
    }
    auto fwd = [&] {
      NoGradGuard ng;
      Tensor y = conv2d(x, w, Tensor(), {1, 1}, {1, 1});
    };
    auto fwd_bwd = [&] {
      std::vector<Tensor> g = grad({conv2d(x, w, Tensor(), {1, 1}, {1, 1})}, {x, w}, {dy});
    };
    bench::Spread f = bench::spread_ms(fwd, 3, iters);
    table.add({"conv3x3 fwd", dn, shape, "ember", f.median, conv_flops / f.median / 1e9, "TFLOP/s",
               "", f.min, f.max});
    bench::Spread fb = bench::spread_ms(fwd_bwd, 3, iters);
    table.add({"conv3x3 fwd+bwd", dn, shape, "ember", fb.median, 3 * conv_flops / fb.median / 1e9,
               "TFLOP/s", "", fb.min, fb.max});
    if (profile) print_profile((std::string("conv3x3 fwd+bwd ") + dn).c_str(), fwd_bwd, 12);
  }

  // batch_norm2d forward + backward (training statistics), fp32.
  {
    Tensor x = x32.detach();
    x.set_requires_grad(true);
    Tensor wgt = add(mul(randn({kChannels}, gpu, &gen), 0.1), 1.0).detach();
    Tensor bias = randn({kChannels}, gpu, &gen).detach();
    wgt.set_requires_grad(true);
    bias.set_requires_grad(true);
    // Output and the three gradients against the op in float64 (which composes: an
    // independent path).
    Tensor x64 = x32.to(kFloat64).detach(), w64 = wgt.to(kFloat64).detach(),
           b64 = bias.to(kFloat64).detach();
    x64.set_requires_grad(true);
    w64.set_requires_grad(true);
    b64.set_requires_grad(true);
    Tensor y64 = batch_norm(x64, Tensor(), Tensor(), w64, b64, true);
    std::vector<Tensor> want = grad({y64}, {x64, w64, b64}, {dy32.to(kFloat64)});
    Tensor y = batch_norm(x, Tensor(), Tensor(), wgt, bias, true);
    const bool fused = y.grad_fn() && std::strcmp(y.grad_fn()->name(), "BatchNormBackward") == 0;
    std::printf("batch_norm: the %s path\n", fused ? "fused" : "composed");
    std::vector<Tensor> got = grad({y}, {x, wgt, bias}, {dy32});
    if (!checked("batch_norm y", bench::rel_err_on_device(y.detach(), y64.detach()), 1e-5) ||
        !checked("batch_norm d_x", bench::rel_err_on_device(got[0], want[0]), 1e-4) ||
        !checked("batch_norm d_w", bench::rel_err_on_device(got[1], want[1]), 1e-4) ||
        !checked("batch_norm d_b", bench::rel_err_on_device(got[2], want[2]), 1e-4))
      return 1;
    auto step = [&] {
      std::vector<Tensor> g =
          grad({batch_norm(x, Tensor(), Tensor(), wgt, bias, true)}, {x, wgt, bias}, {dy32});
    };
    bench::Spread s = bench::spread_ms(step, 3, iters);
    const double bytes = 5.0 * 4.0 * kBatch * kChannels * kSide * kSide;  // x, y, d_y, d_x, x again
    table.add({"batch_norm2d fwd+bwd", "f32", "128x64x32x32", "ember", s.median,
               bytes / s.median / 1e6, "GB/s",
               fused ? "fused; 5 accesses/elem" : "composed; 5 accesses/elem", s.min, s.max});
  }

  // ResNet-8 training step, batch 128 of 3x32x32, SGD(0.1, momentum 0.9), in TF32 and
  // under bf16 autocast; each eager, then captured in a cuda::Graph.
  for (const bool bf16 : {false, true}) {
    if (resnet_rows(table, gen, bf16, iters, profile) != 0) return 1;
  }
  table.write_json(bench::json_path(argc, argv));
  return 0;
}
