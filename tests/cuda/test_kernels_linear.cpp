// linear with its fused epilogue on CUDA (core/ops/linear.cpp over ours or
// cuBLAS(Lt), cuda/gemm_dispatch.h): forward and backward against the CPU float64
// reference and against the unfused composition on the GPU, with each backend
// forced by EMBER_GEMM and the rule's own pick, in fp32, TF32 and bf16, every
// activation; shapes TMA can address (the Hopper kernels on compute capability
// 9.0) and shapes it cannot (the fallbacks); transposed and strided inputs;
// empty sizes.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <tuple>
#include <vector>

#include "core/autograd.h"
#include "core/kernel_table.h"
#include "core/ops.h"
#include "cuda/blas.h"
#include "cuda/gemm_dispatch.h"
#include "gradcheck.h"

using namespace ember;
using ember::testing::randn64;
using ember::testing::rel_error;

namespace {

const double kNaN64 = std::numeric_limits<double>::quiet_NaN();

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
  switch (act) {
    case Activation::Relu:
      return relu(y);
    case Activation::Gelu:
      return gelu(y);
    case Activation::GeluTanh:
      return gelu(y, "tanh");
    case Activation::Silu:
      return silu(y);
    default:
      return y;
  }
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
// w as a transposed view; x_pad > 0 passes x as a view with row stride k + x_pad;
// the CUDA side may use the composition instead (unfused).
double linear_vs_cpu(DType dtype, int64_t m, int64_t n, int64_t k, Activation act, bool transpose_w,
                     bool unfused, uint64_t seed, int64_t x_pad = 0) {
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
  if (x_pad > 0) {  // the same values in the first k columns of a wider leaf
    Tensor wide = full({m, k + x_pad}, kNaN64, TensorOptions(kFloat64));
    wide = cat({x, slice(wide, 1, k, k + x_pad)}, 1);
    gpu[0] = wide.to(kCUDA, dtype).set_requires_grad(true);
  }
  auto x_of = [&](const std::vector<Tensor>& in, bool on_gpu) {
    return on_gpu && x_pad > 0 ? slice(in[0], 1, 0, k) : in[0];
  };
  auto f = [&](const std::vector<Tensor>& in, bool on_gpu, bool use_composed) {
    Tensor wt = transpose_w ? in[1].t() : in[1];
    const Tensor xv = x_of(in, on_gpu);
    return use_composed ? composed(xv, wt, in[2], act) : linear(xv, wt, in[2], act);
  };
  Tensor wy = operand({m, n}, seed + 3);
  // Outputs and gradients come from the caching allocator, which hands back the
  // blocks just freed: poisoning blocks of their sizes with NaN first makes an
  // element a kernel leaves unwritten show up as NaN (NaN never passes).
  {
    const TensorOptions o = TensorOptions(dtype).device(kCUDA);
    std::vector<Tensor> poison;
    for (const Shape& s : {Shape{m, n}, Shape{m, n}, Shape{m, k}, Shape{n, k}, Shape{n}})
      poison.push_back(full(s, kNaN64, o));
  }
  Tensor y_gpu = f(gpu, true, unfused);
  // ReLU is discontinuous at 0: a pre-activation within rounding of 0 may land on
  // either side on the GPU, and the gradient through it flips between 0 and its
  // full value. So the reference takes the GPU's branch (its mask y > 0) and
  // computes everything else in float64; the forward check still bounds the
  // flipped elements, whose pre-activations are within rounding of 0.
  Tensor y_cpu = act == Activation::Relu
                     ? mul(linear(cpu[0], transpose_w ? cpu[1].t() : cpu[1], cpu[2]),
                           gt(y_gpu.detach().to(kCPU).to(kFloat64), 0.0))
                     : f(cpu, false, false);
  std::vector<Tensor> g_cpu = grad({mul(y_cpu, wy).sum()}, cpu);
  std::vector<Tensor> g_gpu = grad({mul(y_gpu, wy.to(kCUDA, dtype)).sum()}, gpu);
  if (x_pad > 0) {
    CHECK(rel_error(slice(g_gpu[0], 1, k, k + x_pad).to(kCPU).to(kFloat64),
                    zeros({m, x_pad}, TensorOptions(kFloat64))) == 0.0);
    g_gpu[0] = slice(g_gpu[0], 1, 0, k);
  }
  double worst = rel_error(y_gpu.to(kCPU).to(kFloat64), y_cpu);
  for (size_t i = 0; i < 3; ++i) {
    const double e = rel_error(g_gpu[i].to(kCPU).to(kFloat64), g_cpu[i]);
    worst = std::max(worst, e);
  }
  return worst;
}

using Dims = std::tuple<int64_t, int64_t, int64_t>;  // rows, out features, in features
// Where every product can go through TMA (in and out multiples of 8: 16-byte
// rows in bf16 and fp32), with 1, 7, 129 and 4097 rows...
const std::vector<Dims> kAligned = {{1, 8, 8}, {129, 136, 264}, {4097, 24, 16}, {7, 4104, 40}};
// ...and where they cannot (contiguous rows of 7, 127, 257 or 4097 elements):
// ours falls back to the older kernels (forward) and cuBLAS (backward).
const std::vector<Dims> kUnaligned = {{1, 7, 127}, {127, 128, 7}, {64, 4097, 16}, {130, 24, 257}};

}  // namespace

TEST_CASE("kernels/linear: fused forward and backward match the CPU on both backends" *
          doctest::test_suite("cuda")) {
  uint64_t seed = 1000;
  for (const char* backend : {"ours", "cublas", "auto"})
    for (bool tf32 : {false, true})
      for (DType dtype : {kFloat32, kBFloat16}) {
        if (tf32 && dtype != kFloat32) continue;
        BackendGuard guard(backend);
        cuda::set_allow_tf32(tf32);
        for (Activation act : {Activation::None, Activation::Relu, Activation::Gelu,
                               Activation::GeluTanh, Activation::Silu})
          for (const std::vector<Dims>* dims : {&kAligned, &kUnaligned})
            for (auto [m, n, k] : *dims) {
              INFO(backend, " ", dtype, " tf32=", tf32, " act=", activation_name(act), " m=", m,
                   " n=", n, " k=", k);
              CHECK(linear_vs_cpu(dtype, m, n, k, act, false, false, seed++) <= tol(dtype));
            }
        // x as a view whose rows are 8 elements apart more than their length.
        INFO(backend, " ", dtype, " tf32=", tf32, " strided x");
        CHECK(linear_vs_cpu(dtype, 129, 136, 264, Activation::Gelu, false, false, seed++, 8) <=
              tol(dtype));
        CHECK(linear_vs_cpu(dtype, 129, 136, 264, Activation::GeluTanh, false, false, seed++, 8) <=
              tol(dtype));
      }
  cuda::set_allow_tf32(false);
}

// What EMBER_GEMM=ours runs: the Hopper kernel for every product whose operands
// TMA can address (so the case above did test it), the older kernels or cuBLAS
// where it cannot. The pointers are never dereferenced by planning.
TEST_CASE(
    "kernels/linear: EMBER_GEMM=ours plans the Hopper kernel wherever TMA can address the "
    "operands" *
    doctest::test_suite("cuda_sm90")) {
  BackendGuard guard("ours");
  const void* p = reinterpret_cast<const void*>(uintptr_t{1} << 20);  // 16-byte aligned
  void* out = reinterpret_cast<void*>(uintptr_t{1} << 21);
  using cuda::GemmKernel;
  using cuda::LinearProduct;
  for (bool tf32 : {false, true})
    for (DType dtype : {kBFloat16, kFloat32}) {
      if (tf32 && dtype != kFloat32) continue;
      cuda::set_allow_tf32(tf32);
      for (const std::vector<Dims>* dims : {&kAligned, &kUnaligned})
        for (auto [m, n, k] : *dims)
          for (LinearProduct prod :
               {LinearProduct::Forward, LinearProduct::InputGrad, LinearProduct::WeightGrad}) {
            cuda::LinearGemm g;
            g.product = prod, g.dtype = dtype, g.rows = m, g.out = n, g.in = k;
            g.x = p, g.ldx = k, g.w = p, g.ldw = k, g.d_y = p, g.ldd = n, g.result = out;
            g.b = p, g.d_b = prod == LinearProduct::WeightGrad ? out : nullptr;
            const GemmKernel got = cuda::plan_linear(g, 0);
            // TMA: rows of 16-byte multiples (the forward reads rows of `in`, the
            // backward products rows of `in` and of `out`); TF32 wgmma reads
            // K-major operands only, so TF32's d_x and d_w go to cuBLAS.
            const int64_t a = 16 / static_cast<int64_t>(element_size(dtype));
            const bool rows_ok = k % a == 0 && (prod == LinearProduct::Forward || n % a == 0);
            const bool sm90 = rows_ok && (dtype == kBFloat16 || tf32) &&
                              (dtype == kBFloat16 || prod == LinearProduct::Forward);
            // cuBLAS for d_x and d_w, except a d_w the op composes (gemm_rule.h).
            const bool composes =
                prod == LinearProduct::WeightGrad && cuda::weight_grad_composes(dtype, m, n, k, k);
            const GemmKernel fallback = composes                         ? GemmKernel::None
                                        : prod != LinearProduct::Forward ? GemmKernel::Cublas
                                        : dtype == kBFloat16             ? GemmKernel::MmaSync
                                                                         : GemmKernel::Simt;
            INFO(dtype, " tf32=", tf32, " ", cuda::to_string(prod), " m=", m, " n=", n, " k=", k,
                 ": ", cuda::to_string(got));
            CHECK(got == (sm90 ? GemmKernel::Sm90 : fallback));
          }
    }
  cuda::set_allow_tf32(false);
}

TEST_CASE("kernels/linear: transposed weight and the unfused composition agree" *
          doctest::test_suite("cuda")) {
  uint64_t seed = 2000;
  for (DType dtype : {kFloat32, kBFloat16})
    for (Activation act : {Activation::Relu, Activation::Gelu, Activation::GeluTanh}) {
      INFO(dtype, " act=", activation_name(act));
      CHECK(linear_vs_cpu(dtype, 33, 40, 17, act, true, false, seed++) <= tol(dtype));
      CHECK(linear_vs_cpu(dtype, 33, 40, 17, act, false, true, seed++) <= tol(dtype));
    }
}

TEST_CASE("kernels/linear: fused backward equals the unfused composition on the GPU" *
          doctest::test_suite("cuda")) {
  for (Activation act :
       {Activation::None, Activation::Relu, Activation::Gelu, Activation::GeluTanh}) {
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
      INFO("act=", activation_name(act), " input ", i);
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

// The weight-gradient family's float32 output and sum (linear_cross_entropy's
// chunks, core/ops/cross_entropy.cpp): d_w = s + d_y0^T x0 + d_y1^T x1 with
// bfloat16 operands and a float32 d_w, and with float32 operands (TF32 off),
// against the CPU float64 sum of the same rounded operands. The products of bf16
// values are exact in float32, so only the float32 sums round: 1e-5 for both.
// A bias gradient with either option is declined, leaving d_w untouched.
TEST_CASE("kernels/linear: the weight gradient summed into a float32 d_w (cuBLASLt beta 1)" *
          doctest::test_suite("cuda")) {
  const bool tf32 = cuda::allow_tf32();
  cuda::set_allow_tf32(false);
  const int64_t m = 333, n = 517, k = 72;  // d_y (m, n), x (m, k), d_w (n, k)
  const kernels::KernelTable& table = kernels::kernels_for(Device(kCUDA));
  for (DType dtype : {kBFloat16, kFloat32}) {
    INFO("dtype=", dtype);
    const Tensor s64 = randn64({n, k}, 41);
    Tensor want = s64;
    Tensor d_w = s64.to(kCUDA, kFloat32);
    for (uint64_t part = 0; part < 2; ++part) {
      const Tensor x64 = randn64({m, k}, 42 + 2 * part).to(dtype).to(kFloat64);
      const Tensor d64 = randn64({m, n}, 43 + 2 * part).to(dtype).to(kFloat64);
      want = add(want, matmul(d64.t(), x64));
      const Tensor x = x64.to(kCUDA, dtype), d = d64.to(kCUDA, dtype);
      kernels::LinearWeightGradArgs a{Device(kCUDA), dtype,          m,      n, k, x.raw_data(), k,
                                      d.raw_data(),  d_w.raw_data(), nullptr};
      a.d_w_float32 = true;
      a.accumulate = true;
      REQUIRE(table.linear_weight_grad_fused(a));
    }
    CHECK(rel_error(d_w.to(kCPU).to(kFloat64), want) < 1e-5);
    // No bias gradient with a sum: declined, d_w as it was.
    const Tensor before = d_w.to(kCPU);
    Tensor d_b = zeros({n}, TensorOptions(kFloat32).device(kCUDA));
    const Tensor x = randn64({m, k}, 50).to(kCUDA, dtype), d = randn64({m, n}, 51).to(kCUDA, dtype);
    kernels::LinearWeightGradArgs a{
        Device(kCUDA),  dtype,         m, n, k, x.raw_data(), k, d.raw_data(),
        d_w.raw_data(), d_b.raw_data()};
    a.accumulate = true;
    CHECK_FALSE(table.linear_weight_grad_fused(a));
    CHECK(rel_error(d_w.to(kCPU).to(kFloat64), before.to(kFloat64)) == 0.0);
  }
  cuda::set_allow_tf32(tf32);
}
