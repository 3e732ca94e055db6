// conv2d through the implicit GEMM (detail::set_conv_implicit; cuda/kernels/conv_gemm.cu,
// the box arithmetic replayed on the CPU in tests/cuda/test_conv_gemm_plan.cpp): on the
// meta device, which passes run and what falls back to the columns; on a compute
// capability 9.0 GPU (suite cuda_sm90: skipped, not passed, elsewhere), the output
// and both gradients against the CPU in float64 from the same bfloat16 values. And
// what a bf16 CNN under autocast needs beside it: conv2d lowered by autocast, batch
// norm taking a bfloat16 input with float32 parameters (CUDA's fused case in
// tests/cuda/test_kernels_batch_norm.cpp).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "core/autocast.h"
#include "core/autograd.h"
#include "core/kernel_table.h"
#include "core/meta.h"
#include "core/ops.h"
#include "gradcheck.h"
#include "nn/nn.h"

using namespace ember;
using ember::testing::grad_cuda_vs_cpu;
using ember::testing::randn64;
using ember::testing::rel_error;

namespace {

// The implicit GEMM switched on (or off) for a scope.
struct ImplicitScope {
  explicit ImplicitScope(bool on) : before_(detail::conv_implicit()) {
    detail::set_conv_implicit(on);
  }
  ~ImplicitScope() { detail::set_conv_implicit(before_); }
  bool before_;
};

// Counts the meta device's conv_gemm calls by pass, and its im2col calls.
struct ConvCalls : MetaKernelObserver {
  int passes[3] = {0, 0, 0};
  int64_t splits = 0;
  int im2col_calls = 0;
  void conv_gemm(const kernels::ConvGemmArgs& a) override {
    ++passes[a.pass];
    if (a.pass == 2) splits = a.splits;
  }
  void im2col(const kernels::Im2colArgs&) override { ++im2col_calls; }
};

struct Case {
  int64_t n, c, h, w, o, k, s, p, d;
};

// One conv2d forward and backward on the meta device (mirroring CUDA) in bfloat16.
ConvCalls meta_run(const Case& k, bool x_grad) {
  ConvCalls calls;
  MetaDeviceScope scope(MetaDeviceOptions().observe(&calls));
  const TensorOptions o = TensorOptions(kBFloat16).device(kMeta);
  Tensor x = empty({k.n, k.c, k.h, k.w}, o);
  Tensor w = empty({k.o, k.c, k.k, k.k}, o);
  x.set_requires_grad(x_grad);
  w.set_requires_grad(true);
  Tensor y = conv2d(x, w, Tensor(), {k.s, k.s}, {k.p, k.p}, {k.d, k.d});
  const int64_t oh = (k.h + 2 * k.p - k.d * (k.k - 1) - 1) / k.s + 1;
  CHECK(y.sizes() == Shape{k.n, k.o, oh, oh});
  CHECK(y.dtype() == kBFloat16);
  sum(y).backward();
  CHECK(w.grad().sizes() == w.sizes());
  CHECK(w.grad().dtype() == kBFloat16);
  if (x_grad) CHECK(x.grad().sizes() == x.sizes());
  return calls;
}

bool device_takes(const Case& k, int pass) {
  const int64_t oh = (k.h + 2 * k.p - k.d * (k.k - 1) - 1) / k.s + 1;
  const kernels::ConvGemmShape s{k.n, k.c, k.h, k.w, k.o, k.k, k.k, k.s,
                                 k.s, k.p, k.p, k.d, k.d, oh,  oh};
  return kernels::kernels_for(kCUDA).conv_gemm_supported({Device::cuda(0), kBFloat16, pass, s});
}

}  // namespace

TEST_CASE("conv2d implicit GEMM: the meta device runs its three passes, the columns elsewhere") {
  const Case ok{2, 64, 16, 16, 64, 3, 1, 1, 1};
  if (!device_takes(ok, 0)) {
    // A GPU that is not compute capability 9.0: the meta device mirrors its answers.
    MESSAGE("CUDA device 0 has no implicit GEMM; the meta device mirrors it, nothing to count");
    return;
  }
  {
    ImplicitScope on(true);
    const ConvCalls c = meta_run(ok, true);
    CHECK(c.passes[0] == 1);
    CHECK(c.passes[1] == 1);
    CHECK(c.passes[2] == 1);
    CHECK(c.im2col_calls == 0);
    CHECK(c.splits >= 1);
    CHECK(
        static_cast<size_t>(c.splits) ==
        kernels::kernels_for(kCUDA).conv_gemm_splits(
            {Device::cuda(0), kBFloat16, 2, {2, 64, 16, 16, 64, 3, 3, 1, 1, 1, 1, 1, 1, 16, 16}}));
    // The input needs no gradient: no input-grad pass.
    const ConvCalls f = meta_run(ok, false);
    CHECK(f.passes[0] == 1);
    CHECK(f.passes[1] == 0);
    CHECK(f.passes[2] == 1);
    // Stride 2 with the input's gradient: the input grad has no implicit GEMM, so
    // the whole convolution takes the columns; without it, the implicit GEMM.
    const Case strided{2, 64, 32, 32, 64, 3, 2, 1, 1};
    const ConvCalls s = meta_run(strided, true);
    CHECK(s.passes[0] + s.passes[1] + s.passes[2] == 0);
    CHECK(s.im2col_calls >= 1);
    const ConvCalls s2 = meta_run(strided, false);
    CHECK(s2.passes[0] == 1);
    CHECK(s2.passes[2] == 1);
    CHECK(s2.im2col_calls == 0);
    // 32 channels: not a multiple of 64, the columns.
    const ConvCalls narrow = meta_run({2, 32, 16, 16, 64, 3, 1, 1, 1}, true);
    CHECK(narrow.passes[0] == 0);
    CHECK(narrow.im2col_calls >= 1);
  }
  ImplicitScope off(false);
  const ConvCalls c = meta_run(ok, true);
  CHECK(c.passes[0] + c.passes[1] + c.passes[2] == 0);
  CHECK(c.im2col_calls >= 1);
}

TEST_CASE("conv2d implicit GEMM: EMBER_CONV_IMPLICIT's setting is read and can be set") {
  ImplicitScope on(true);
  CHECK(detail::conv_implicit());
  detail::set_conv_implicit(false);
  CHECK_FALSE(detail::conv_implicit());
}

TEST_CASE("conv2d implicit GEMM: output and gradients against the CPU in float64 (bf16)" *
          doctest::test_suite("cuda_sm90")) {
  ImplicitScope on(true);
  const Case cases[] = {
      {2, 64, 16, 16, 64, 3, 1, 1, 1},   // 8 rows a tile
      {3, 128, 8, 8, 64, 3, 1, 1, 1},    // tiles across images, a partial last one
      {1, 64, 32, 32, 128, 1, 1, 0, 1},  // 1x1, 128 output channels (128x128 tiles)
      {1, 64, 16, 16, 64, 3, 1, 2, 2},   // dilation 2
      {2, 64, 8, 8, 64, 5, 1, 0, 1},     // 5x5 without padding: a 4x4 grid, 8 images a box
      {1, 64, 2, 256, 64, 3, 1, 1, 1},   // a grid wider than a tile
      {8, 64, 32, 32, 64, 3, 1, 1, 1},   // the weight grad split over many blocks
  };
  uint64_t seed = 900;
  for (const Case& k : cases) {
    const std::string what = "n " + std::to_string(k.n) + ", c " + std::to_string(k.c) + ", " +
                             std::to_string(k.h) + "x" + std::to_string(k.w) + ", o " +
                             std::to_string(k.o) + ", k " + std::to_string(k.k) + ", dilation " +
                             std::to_string(k.d);
    CAPTURE(what);
    REQUIRE(device_takes(k, 0));
    REQUIRE(device_takes(k, 1));
    REQUIRE(device_takes(k, 2));
    const Tensor x = randn64({k.n, k.c, k.h, k.w}, seed++);
    const Tensor w = randn64({k.o, k.c, k.k, k.k}, seed++);
    auto f = [&](const std::vector<Tensor>& in) {
      Tensor y = conv2d(in[0], in[1], Tensor(), {k.s, k.s}, {k.p, k.p}, {k.d, k.d});
      // On the GPU the implicit GEMM, not the columns, made it.
      if (y.is_cuda()) CHECK(std::string(y.grad_fn()->name()) == "ConvGemmBackward");
      return y;
    };
    // bf16 products of c kh kw terms summed in float32, rounded once to bf16.
    CHECK(grad_cuda_vs_cpu(f, {x, w}, kBFloat16, seed++) < 1e-2);
  }
}

TEST_CASE("conv2d implicit GEMM: stride 2 forward and weight grad (the input needs none)" *
          doctest::test_suite("cuda_sm90")) {
  ImplicitScope on(true);
  const Case k{2, 64, 32, 32, 128, 3, 2, 1, 1};
  REQUIRE(device_takes(k, 0));
  REQUIRE(device_takes(k, 2));
  const Tensor x = randn64({k.n, k.c, k.h, k.w}, 950).to(kBFloat16);
  const Tensor w = randn64({k.o, k.c, k.k, k.k}, 951).to(kBFloat16);
  auto run = [&](Device d, DType t) {
    Tensor xd = x.to(d).to(t);
    Tensor wd = w.to(d).to(t).detach();
    wd.set_requires_grad(true);
    Tensor y = conv2d(xd, wd, Tensor(), {2, 2}, {1, 1});
    if (d.is_cuda()) CHECK(std::string(y.grad_fn()->name()) == "ConvGemmBackward");
    sum(mul(y, y.detach())).backward();
    return std::pair<Tensor, Tensor>{y.to(kCPU).to(kFloat64), wd.grad().to(kCPU).to(kFloat64)};
  };
  const auto gpu = run(kCUDA, kBFloat16);
  const auto cpu = run(kCPU, kFloat64);
  CHECK(rel_error(gpu.first, cpu.first) < 1e-2);
  CHECK(rel_error(gpu.second, cpu.second) < 2e-2);
}

// ------------------------------------------------------------- autocast's mix

namespace {
struct BatchNormCalls : MetaKernelObserver {
  int forward = 0, backward = 0, mixed = 0;
  void batch_norm_fused(const kernels::BatchNormArgs& a) override {
    ++forward;
    if (a.params_f32 && a.dtype == kBFloat16) ++mixed;
  }
  void batch_norm_backward_fused(const kernels::BatchNormBackwardArgs& a) override {
    ++backward;
    if (a.params_f32 && a.dtype == kBFloat16) ++mixed;
  }
};
}  // namespace

TEST_CASE(
    "batch_norm: a bfloat16 input with float32 parameters returns bfloat16 (CPU, composed "
    "in float32)") {
  const Tensor x64 = randn64({4, 3, 5, 5}, 31).to(kBFloat16).to(kFloat64);
  const Tensor w64 = randn64({3}, 32), b64 = randn64({3}, 33);
  // The reference: float64 throughout from the same values.
  Tensor xr = x64.detach().set_requires_grad(true), wr = w64.detach().set_requires_grad(true);
  Tensor rm_r = zeros({3}, kFloat64), rv_r = ones({3}, kFloat64);
  Tensor yr = batch_norm(xr, rm_r, rv_r, wr, b64, true, 0.1, 1e-5);
  // A random upstream gradient (sum(y^2)'s d_x is zero up to rounding: no test of it).
  const Tensor g64 = randn64({4, 3, 5, 5}, 34).to(kBFloat16).to(kFloat64);
  sum(mul(yr, g64)).backward();
  // The mix: x bfloat16, weight, bias and running statistics float32.
  Tensor x = x64.to(kBFloat16).detach().set_requires_grad(true);
  Tensor w = w64.to(kFloat32).detach().set_requires_grad(true);
  Tensor rm = zeros({3}), rv = ones({3});
  Tensor y = batch_norm(x, rm, rv, w, b64.to(kFloat32), true, 0.1, 1e-5);
  CHECK(y.dtype() == kBFloat16);
  CHECK(rm.dtype() == kFloat32);
  sum(mul(y, g64.to(kBFloat16))).backward();
  CHECK(x.grad().dtype() == kBFloat16);
  CHECK(w.grad().dtype() == kFloat32);
  CHECK(rel_error(y.to(kFloat64), yr) < 1e-2);
  CHECK(rel_error(rm.to(kFloat64), rm_r) < 1e-5);
  CHECK(rel_error(rv.to(kFloat64), rv_r) < 1e-5);
  CHECK(rel_error(x.grad().to(kFloat64), xr.grad()) < 2e-2);
  CHECK(rel_error(w.grad().to(kFloat64), wr.grad()) < 2e-2);
}

TEST_CASE(
    "autocast: conv2d runs in bfloat16 and batch norm takes the mix fused (meta device "
    "mirroring CUDA)") {
  BatchNormCalls calls;
  MetaDeviceScope scope(MetaDeviceOptions().observe(&calls));
  const TensorOptions o = TensorOptions(kFloat32).device(kMeta);
  Tensor x = empty({8, 16, 12, 12}, o);
  Tensor w = empty({32, 16, 3, 3}, o).set_requires_grad(true);
  Tensor gamma = empty({32}, o).set_requires_grad(true), beta = empty({32}, o);
  Tensor rm = empty({32}, o), rv = empty({32}, o);
  Tensor y;
  {
    AutocastGuard autocast(kBFloat16);
    const Tensor c = conv2d(x, w, Tensor(), {1, 1}, {1, 1});
    CHECK(c.dtype() == kBFloat16);
    y = batch_norm(c, rm, rv, gamma, beta, true, 0.1, 1e-5);
    CHECK(y.dtype() == kBFloat16);
    CHECK(std::string(y.grad_fn()->name()) == "BatchNormBackward");
  }
  sum(y).backward();
  CHECK(w.grad().dtype() == kFloat32);  // through the recorded cast
  CHECK(gamma.grad().dtype() == kFloat32);
  CHECK(calls.forward == 1);
  CHECK(calls.backward == 1);
  CHECK(calls.mixed == 2);
  // On the CPU autocast does not apply: float32 throughout.
  AutocastGuard autocast(kBFloat16);
  const Tensor cpu =
      conv2d(randn64({1, 2, 4, 4}, 5).to(kFloat32), randn64({3, 2, 3, 3}, 6).to(kFloat32));
  CHECK(cpu.dtype() == kFloat32);
}

// ------------------------------------------------------------- batch norm + ReLU

TEST_CASE("batch_norm_relu: relu(batch_norm) in one op (CPU: composed), values and gradients") {
  const Tensor x = randn64({3, 4, 5, 5}, 41), w = randn64({4}, 42), b = randn64({4}, 43);
  Tensor rm1 = zeros({4}, kFloat64), rv1 = ones({4}, kFloat64);
  Tensor rm2 = zeros({4}, kFloat64), rv2 = ones({4}, kFloat64);
  const Tensor fused = batch_norm_relu(x, rm1, rv1, w, b, true, 0.1, 1e-5);
  const Tensor composed = relu(batch_norm(x, rm2, rv2, w, b, true, 0.1, 1e-5));
  CHECK(rel_error(fused, composed) == 0.0);
  CHECK(rel_error(rm1, rm2) == 0.0);
  CHECK(rel_error(rv1, rv2) == 0.0);
  CHECK(fused.min().item() == 0.0);  // some values were negative before the ReLU
  CHECK_GRADCHECK(
      [](const std::vector<Tensor>& in) {
        return batch_norm_relu(in[0], Tensor(), Tensor(), in[1], in[2], true, 0.1, 1e-3);
      },
      {randn64({3, 2, 2, 3}, 44), randn64({2}, 45), randn64({2}, 46)});
  // nn: forward_relu is relu(forward), the running statistics moved once.
  nn::BatchNorm2d bn(4);
  nn::BatchNorm2d twin(4);
  const Tensor xf = x.to(kFloat32);
  CHECK(rel_error(bn.forward_relu(xf).to(kFloat64), relu(twin.forward(xf)).to(kFloat64)) == 0.0);
  CHECK(rel_error(bn.running_mean.to(kFloat64), twin.running_mean.to(kFloat64)) == 0.0);
}

TEST_CASE("batch_norm_relu: the fused kernels take it on the meta device mirroring CUDA") {
  struct Heard : MetaKernelObserver {
    int relu_forward = 0, relu_backward = 0, unary_calls = 0;
    void batch_norm_fused(const kernels::BatchNormArgs& a) override { relu_forward += a.relu; }
    void batch_norm_backward_fused(const kernels::BatchNormBackwardArgs& a) override {
      relu_backward += a.relu && a.b != nullptr;
    }
    void unary(const kernels::UnaryArgs&) override { ++unary_calls; }
  } heard;
  MetaDeviceScope scope(MetaDeviceOptions().observe(&heard));
  const TensorOptions o = TensorOptions(kFloat32).device(kMeta);
  Tensor x = empty({8, 16, 6, 6}, o).set_requires_grad(true);
  Tensor w = empty({16}, o).set_requires_grad(true), b = empty({16}, o).set_requires_grad(true);
  Tensor y = batch_norm_relu(x, Tensor(), Tensor(), w, b, true, 0.1, 1e-5);
  CHECK(std::string(y.grad_fn()->name()) == "BatchNormReluBackward");
  sum(y).backward();
  CHECK(heard.relu_forward == 1);
  CHECK(heard.relu_backward == 1);
  CHECK(heard.unary_calls == 0);  // no separate ReLU
  CHECK(b.grad().sizes() == Shape{16});
}
