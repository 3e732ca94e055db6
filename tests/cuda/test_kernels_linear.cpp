// linear with its fused epilogue on CUDA (core/ops/linear.cpp over ours or
// cuBLASLt): forward and backward against the CPU float64 reference and against
// the unfused composition on the GPU, with both backends forced by EMBER_GEMM,
// in fp32, TF32 and bf16; transposed and strided inputs; empty sizes.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/autograd.h"
#include "core/ops.h"
#include "cuda/blas.h"
#include "gradcheck.h"

using namespace ember;
using ember::testing::randn64;
using ember::testing::rel_error;

namespace {

struct BackendGuard {  // EMBER_GEMM for one scope
  explicit BackendGuard(const char* v) { setenv("EMBER_GEMM", v, 1); }
  ~BackendGuard() { unsetenv("EMBER_GEMM"); }
};

double tol(DType dtype) {
  if (dtype == kBFloat16) return 1e-2;
  return cuda::allow_tf32() ? 1e-3 : 1e-5;
}

Tensor composed(const Tensor& x, const Tensor& w, const Tensor& b, Activation act) {
  Tensor y = linear(x, w, b);
  return act == Activation::Relu ? relu(y) : act == Activation::Gelu ? gelu(y) : y;
}

// TF32 tensor cores read only the top 10 mantissa bits of an fp32 input (the
// low 13 are dropped, not rounded). Inputs built this way are exact in TF32, so
// the reference sees the same operands the tensor cores do, as bf16 inputs are
// rounded to bf16 first; what remains is accumulation and the rounding of the
// intermediate gradients.
Tensor tf32_exact(const Tensor& t64) {
  std::vector<double> v = t64.to_vector<double>();
  for (double& d : v) {
    float f = static_cast<float>(d);
    uint32_t bits;
    std::memcpy(&bits, &f, sizeof bits);
    bits &= 0xFFFFE000u;
    std::memcpy(&f, &bits, sizeof bits);
    d = f;
  }
  return from_vector(v, t64.sizes(), TensorOptions(kFloat64));
}

// Output and gradients of sum(linear(x, w, b, act) * wy) on CUDA in dtype vs
// float64 on the CPU (same rounded inputs); worst rel_error. transpose_w passes
// w as a transposed view; the CUDA side may use the composition instead.
double linear_vs_cpu(DType dtype, int64_t m, int64_t n, int64_t k, Activation act, bool transpose_w,
                     bool unfused, uint64_t seed) {
  std::vector<Tensor> cpu, gpu;
  const bool tf32 = dtype == kFloat32 && cuda::allow_tf32();
  auto operand = [&](const Shape& s, uint64_t sd) {
    Tensor t = randn64(s, sd).to(dtype).to(kFloat64);
    return tf32 ? tf32_exact(t) : t;
  };
  Tensor x = operand({m, k}, seed);
  Tensor w = transpose_w ? operand({k, n}, seed + 1) : operand({n, k}, seed + 1);
  Tensor b = randn64({n}, seed + 2).to(dtype).to(kFloat64);
  for (const Tensor& t : {x, w, b}) {
    cpu.push_back(t.detach().clone().set_requires_grad(true));
    gpu.push_back(t.to(kCUDA, dtype).set_requires_grad(true));
  }
  auto f = [&](const std::vector<Tensor>& in, bool use_composed) {
    Tensor wt = transpose_w ? in[1].t() : in[1];
    return use_composed ? composed(in[0], wt, in[2], act) : linear(in[0], wt, in[2], act);
  };
  Tensor wy = operand({m, n}, seed + 3);
  Tensor y_gpu = f(gpu, unfused);
  // ReLU is discontinuous at 0: a pre-activation within rounding of 0 may land on
  // either side on the GPU, and the gradient through it flips between 0 and its
  // full value. So the reference takes the GPU's branch (its mask y > 0) and
  // computes everything else in float64; the forward check still bounds the
  // flipped elements, whose pre-activations are within rounding of 0.
  Tensor y_cpu = act == Activation::Relu
                     ? mul(linear(cpu[0], transpose_w ? cpu[1].t() : cpu[1], cpu[2]),
                           gt(y_gpu.detach().to(kCPU).to(kFloat64), 0.0))
                     : f(cpu, false);
  std::vector<Tensor> g_cpu = grad({mul(y_cpu, wy).sum()}, cpu);
  std::vector<Tensor> g_gpu = grad({mul(y_gpu, wy.to(kCUDA, dtype)).sum()}, gpu);
  double worst = rel_error(y_gpu.to(kCPU).to(kFloat64), y_cpu);
  for (size_t i = 0; i < 3; ++i) {
    const double e = rel_error(g_gpu[i].to(kCPU).to(kFloat64), g_cpu[i]);
    worst = std::max(worst, e);
  }
  return worst;
}

}  // namespace

TEST_CASE("kernels/linear: fused forward and backward match the CPU on both backends" *
          doctest::test_suite("cuda")) {
  uint64_t seed = 1000;
  for (const char* backend : {"ours", "cublas"})
    for (bool tf32 : {false, true})
      for (DType dtype : {kFloat32, kBFloat16}) {
        if (tf32 && dtype != kFloat32) continue;
        if (tf32 && backend[0] == 'o') continue;  // ours has no TF32 mode
        BackendGuard guard(backend);
        cuda::set_allow_tf32(tf32);
        for (Activation act : {Activation::None, Activation::Relu, Activation::Gelu})
          for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{1, 7, 127},
                                 {127, 128, 7},
                                 {64, 4097, 16},
                                 {130, 24, 257}}) {
            INFO(backend, " ", dtype, " tf32=", tf32, " act=", static_cast<int>(act), " m=", m,
                 " n=", n, " k=", k);
            CHECK(linear_vs_cpu(dtype, m, n, k, act, false, false, seed++) <= tol(dtype));
          }
      }
  cuda::set_allow_tf32(false);
}

TEST_CASE("kernels/linear: transposed weight and the unfused composition agree" *
          doctest::test_suite("cuda")) {
  uint64_t seed = 2000;
  for (DType dtype : {kFloat32, kBFloat16})
    for (Activation act : {Activation::Relu, Activation::Gelu}) {
      INFO(dtype, " act=", static_cast<int>(act));
      CHECK(linear_vs_cpu(dtype, 33, 40, 17, act, true, false, seed++) <= tol(dtype));
      CHECK(linear_vs_cpu(dtype, 33, 40, 17, act, false, true, seed++) <= tol(dtype));
    }
}

TEST_CASE("kernels/linear: fused backward equals the unfused composition on the GPU" *
          doctest::test_suite("cuda")) {
  for (Activation act : {Activation::None, Activation::Relu, Activation::Gelu}) {
    std::vector<Tensor> a = {randn64({96, 64}, 30).to(kCUDA, kFloat32),
                             randn64({48, 64}, 31).to(kCUDA, kFloat32),
                             randn64({48}, 32).to(kCUDA, kFloat32)};
    std::vector<Tensor> c;
    for (Tensor& t : a) {
      c.push_back(t.detach().clone().set_requires_grad(true));
      t.set_requires_grad(true);
    }
    Tensor wy = randn64({96, 48}, 33).to(kCUDA, kFloat32);
    std::vector<Tensor> ga = grad({mul(linear(a[0], a[1], a[2], act), wy).sum()}, a);
    std::vector<Tensor> gc = grad({mul(composed(c[0], c[1], c[2], act), wy).sum()}, c);
    for (size_t i = 0; i < 3; ++i) {
      INFO("act=", static_cast<int>(act), " input ", i);
      CHECK(rel_error(ga[i].to(kCPU).to(kFloat64), gc[i].to(kCPU).to(kFloat64)) <= 1e-5);
    }
  }
}

TEST_CASE("kernels/linear: empty batch, no outputs and no features" * doctest::test_suite("cuda")) {
  const TensorOptions o = TensorOptions(kFloat32).device(kCUDA);
  for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{0, 4, 3}, {5, 0, 3}, {5, 4, 0}}) {
    INFO("m=", m, " n=", n, " k=", k);
    Tensor x = randn64({m, k}, 1).to(kCUDA, kFloat32).set_requires_grad(true);
    Tensor w = randn64({n, k}, 2).to(kCUDA, kFloat32).set_requires_grad(true);
    Tensor b = randn64({n}, 3).to(kCUDA, kFloat32).set_requires_grad(true);
    Tensor y = linear(x, w, b, Activation::Relu);
    CHECK(y.sizes() == Shape{m, n});
    if (k == 0)
      CHECK(rel_error(y.to(kCPU).to(kFloat64),
                      relu(b.detach().to(kCPU).to(kFloat64)).expand({m, n})) == 0.0);
    y.sum().backward();
    CHECK(x.grad().sizes() == x.sizes());
    CHECK(w.grad().sizes() == w.sizes());
    CHECK(b.grad().sizes() == b.sizes());
    (void)o;
  }
}
