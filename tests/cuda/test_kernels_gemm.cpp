// ember's own GEMM kernels (cuda/kernels/gemm.cu) and the cuBLASLt epilogue path,
// each against the CPU float64 reference by relative error (DESIGN.md: fp32 GEMM
// <= 1e-5, TF32 <= 1e-3, bf16 <= 1e-2; NaN never passes): ragged sizes that are
// multiples of no tile (1, 7, 127, 4097), strided rows, every epilogue, and K = 0.
// Outputs are poisoned with NaN first, so an unwritten element fails.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <tuple>
#include <vector>

#include "core/ops.h"
#include "cuda/blas.h"
#include "cuda/gemm_dispatch.h"
#include "cuda/kernels/gemm.h"
#include "cuda/runtime.h"
#include "error_text.h"
#include "gradcheck.h"

using namespace ember;
using ember::testing::contains;
using ember::testing::error_of;
using ember::testing::randn64;
using ember::testing::rel_error;

namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();

struct Case {
  int64_t m, n, k;
};
// Ragged in every position; the CPU reference stays under ~70 M multiply-adds each.
const std::vector<Case> kRaggedCases = {
    {1, 1, 1},      {1, 7, 127},    {7, 1, 4097},   {127, 7, 1},    {127, 4097, 7},
    {4097, 7, 127}, {7, 127, 4097}, {129, 130, 67}, {256, 128, 64}, {131, 257, 520}};

// Runs one kernel launch (ours, or cuBLASLt when lt) for y = act(x w^T + b) on
// inputs rounded to dtype; x has row stride k + pad (pad > 0: strided rows).
// Returns rel_error of y and, when want_pre, of the pre-activation.
std::pair<double, double> run_gemm(DType dtype, Case c, Activation act, bool bias, int64_t pad,
                                   bool lt, bool want_pre, uint64_t seed) {
  Tensor xb = randn64({c.m, c.k + pad}, seed).to(dtype).to(kFloat64);
  Tensor w = randn64({c.n, c.k}, seed + 1).to(dtype).to(kFloat64);
  Tensor b = bias ? randn64({c.n}, seed + 2).to(dtype).to(kFloat64) : Tensor();
  Tensor x = xb.slice(1, 0, c.k);
  Tensor pre_ref = linear(x, w, b);
  Tensor ref = linear(x, w, b, act);

  Tensor xg = xb.to(kCUDA, dtype), wg = w.to(kCUDA, dtype);
  Tensor bg = bias ? b.to(kCUDA, dtype) : Tensor();
  Tensor y = full({c.m, c.n}, kNaN, TensorOptions(dtype).device(kCUDA));
  Tensor pre = want_pre ? full({c.m, c.n}, kNaN, TensorOptions(dtype).device(kCUDA)) : Tensor();
  cudaStream_t s = cuda::current_stream(0);
  if (lt) {
    const bool ran =
        cuda::lt_linear_forward(dtype, c.m, c.n, c.k, xg.raw_data(), c.k + pad, wg.raw_data(), c.k,
                                bias ? bg.raw_data() : nullptr, y.raw_data(),
                                want_pre ? pre.raw_data() : nullptr, act, 0, s);
    if (!ran) return {-1.0, -1.0};  // no algorithm: the caller falls back (tested elsewhere)
  } else {
    cuda::launch_linear_gemm(dtype, xg.raw_data(), c.k + pad, wg.raw_data(), c.k,
                             bias ? bg.raw_data() : nullptr, y.raw_data(),
                             want_pre ? pre.raw_data() : nullptr, c.m, c.n, c.k, act, s);
  }
  const double e_y = rel_error(y.to(kCPU).to(kFloat64), ref);
  const double e_pre = want_pre ? rel_error(pre.to(kCPU).to(kFloat64), pre_ref) : 0.0;
  return {e_y, e_pre};
}

double tol(DType dtype) {
  if (dtype == kBFloat16) return 1e-2;
  return cuda::allow_tf32() ? 1e-3 : 1e-5;
}

}  // namespace

TEST_CASE("kernels/gemm: our fp32 and bf16 GEMMs match the CPU at ragged sizes" *
          doctest::test_suite("cuda")) {
  uint64_t seed = 100;
  for (DType dtype : {kFloat32, kBFloat16})
    for (const Case& c : kRaggedCases)
      for (int64_t pad : {int64_t{0}, int64_t{3}}) {
        auto [e, e_pre] = run_gemm(dtype, c, Activation::None, true, pad, false, false, seed++);
        INFO(dtype, " m=", c.m, " n=", c.n, " k=", c.k, " pad=", pad);
        CHECK(e <= tol(dtype));
      }
}

TEST_CASE(
    "kernels/gemm: our epilogues (bias, ReLU, GELU both forms, pre-activation) match the CPU" *
    doctest::test_suite("cuda")) {
  uint64_t seed = 300;
  for (DType dtype : {kFloat32, kBFloat16})
    for (Activation act :
         {Activation::None, Activation::Relu, Activation::Gelu, Activation::GeluTanh})
      for (bool bias : {false, true})
        for (const Case& c : {Case{127, 129, 65}, Case{7, 4097, 8}, Case{1, 1, 1}}) {
          auto [e, e_pre] = run_gemm(dtype, c, act, bias, 0, false, true, seed++);
          INFO(dtype, " act=", activation_name(act), " bias=", bias, " m=", c.m, " n=", c.n,
               " k=", c.k);
          CHECK(e <= tol(dtype));
          CHECK(e_pre <= tol(dtype));
        }
}

TEST_CASE("kernels/gemm: K = 0 writes the bias (or zeros); empty M or N writes nothing" *
          doctest::test_suite("cuda")) {
  for (DType dtype : {kFloat32, kBFloat16}) {
    auto [e, e_pre] = run_gemm(dtype, Case{5, 9, 0}, Activation::Relu, true, 0, false, true, 7);
    CHECK(e == 0.0);
    CHECK(e_pre == 0.0);
    cuda::launch_linear_gemm(dtype, nullptr, 1, nullptr, 1, nullptr, nullptr, nullptr, 0, 5, 3,
                             Activation::None, nullptr);
  }
}

TEST_CASE("kernels/gemm: cuBLASLt epilogues match the CPU (fp32, TF32, bf16)" *
          doctest::test_suite("cuda")) {
  uint64_t seed = 500;
  for (bool tf32 : {false, true})
    for (DType dtype : {kFloat32, kBFloat16}) {
      if (tf32 && dtype != kFloat32) continue;
      cuda::set_allow_tf32(tf32);
      // exact GELU has no cuBLASLt epilogue: the GEMM + bias, then our kernel
      for (Activation act :
           {Activation::None, Activation::Relu, Activation::Gelu, Activation::GeluTanh})
        for (const Case& c :
             {Case{127, 128, 65}, Case{7, 4096, 8}, Case{1, 8, 1}, Case{4097, 16, 127}}) {
          const bool pre = act == Activation::Gelu || act == Activation::GeluTanh;
          auto [e, e_pre] = run_gemm(dtype, c, act, true, 0, true, pre, seed++);
          INFO(dtype, " tf32=", tf32, " act=", activation_name(act), " m=", c.m, " n=", c.n,
               " k=", c.k);
          if (e < 0) {
            MESSAGE("cuBLASLt offered no algorithm (the dispatcher falls back to ours)");
            continue;
          }
          CHECK(e <= tol(dtype));
          CHECK(e_pre <= tol(dtype));
        }
    }
  cuda::set_allow_tf32(false);
}

// The rule itself reads no device: it runs on every machine (no "cuda" suite).
TEST_CASE("kernels/gemm: EMBER_GEMM forces the backend, and the rule follows the measurements") {
  using cuda::GemmBackend;
  using cuda::LinearProduct;
  struct EnvGuard {
    ~EnvGuard() { unsetenv("EMBER_GEMM"); }
  } restore;
  setenv("EMBER_GEMM", "ours", 1);
  CHECK(cuda::choose_linear_backend(LinearProduct::Forward, kFloat32, 8192, 4096, 4096) ==
        GemmBackend::Ours);
  CHECK(cuda::choose_linear_backend(LinearProduct::WeightGrad, kBFloat16, 4096, 4096, 8192) ==
        GemmBackend::Ours);
  setenv("EMBER_GEMM", "cublas", 1);
  CHECK(cuda::choose_linear_backend(LinearProduct::Forward, kBFloat16, 1, 1, 1) ==
        GemmBackend::Cublas);
  setenv("EMBER_GEMM", "bogus", 1);
  CHECK(contains(
      error_of([] { cuda::choose_linear_backend(LinearProduct::Forward, kFloat32, 1, 1, 1); }),
      "EMBER_GEMM=bogus"));
  // The rule (benchmarks/NOTES.md, "GEMM dispatch"), with EMBER_GEMM=auto as unset.
  setenv("EMBER_GEMM", "auto", 1);
  auto pick = [](LinearProduct p, DType dt, int64_t m, int64_t n, int64_t k) {
    return cuda::choose_linear_backend(p, dt, m, n, k);
  };
  CHECK(pick(LinearProduct::Forward, kBFloat16, 32, 10, 10) == GemmBackend::Ours);  // tiny
  CHECK(pick(LinearProduct::Forward, kBFloat16, 8192, 8192, 8192) == GemmBackend::Cublas);
  CHECK(pick(LinearProduct::Forward, kBFloat16, 4097, 4097, 4096) == GemmBackend::Ours);
  CHECK(pick(LinearProduct::Forward, kBFloat16, 8192, 4096, 4096) == GemmBackend::Cublas);
  CHECK(pick(LinearProduct::InputGrad, kBFloat16, 8192, 4096, 4096) == GemmBackend::Cublas);
  CHECK(pick(LinearProduct::InputGrad, kBFloat16, 256, 256, 256) == GemmBackend::Cublas);
  CHECK(pick(LinearProduct::WeightGrad, kBFloat16, 4096, 4096, 8192) == GemmBackend::Cublas);
  CHECK(pick(LinearProduct::WeightGrad, kBFloat16, 1024, 1024, 1024) == GemmBackend::Cublas);
  CHECK(pick(LinearProduct::WeightGrad, kBFloat16, 1024, 1024, 256) == GemmBackend::Ours);
  CHECK(pick(LinearProduct::WeightGrad, kBFloat16, 128, 128, 64) == GemmBackend::Ours);
  CHECK(pick(LinearProduct::Forward, kFloat32, 2048, 2048, 2048) == GemmBackend::Cublas);
  cuda::set_allow_tf32(true);  // TF32: ours from 1024^3 to 2048^3 and for misaligned rows
  CHECK(pick(LinearProduct::Forward, kFloat32, 8192, 4096, 4096) == GemmBackend::Cublas);
  CHECK(pick(LinearProduct::Forward, kFloat32, 4096, 4096, 4096) == GemmBackend::Cublas);
  CHECK(pick(LinearProduct::Forward, kFloat32, 2048, 2048, 2048) == GemmBackend::Ours);
  CHECK(pick(LinearProduct::Forward, kFloat32, 1024, 1024, 1024) == GemmBackend::Ours);
  CHECK(pick(LinearProduct::Forward, kFloat32, 1024, 1024, 512) == GemmBackend::Cublas);
  CHECK(pick(LinearProduct::Forward, kFloat32, 4097, 4095, 4096) == GemmBackend::Ours);
  CHECK(pick(LinearProduct::Forward, kFloat32, 8192, 8192, 8192) == GemmBackend::Cublas);
  CHECK(pick(LinearProduct::WeightGrad, kFloat32, 128, 128, 64) == GemmBackend::Cublas);
  cuda::set_allow_tf32(false);
}

// d_w with d_b composes (plain GEMM, then a sum) where cuBLASLt would read rows
// that are not 16-byte multiples, above the tiny-product size; reads no device.
TEST_CASE("kernels/gemm: d_w composes where cuBLASLt's BGRADB would read misaligned rows") {
  using cuda::weight_grad_composes;
  // Linear's backward at 4097x4096->4095: d_y's rows of 4095 elements.
  CHECK(weight_grad_composes(kBFloat16, 4097, 4095, 4096, 4096));
  CHECK(weight_grad_composes(kFloat32, 4097, 4095, 4096, 4096));
  // x's rows (its stride) or d_w's rows (in) misaligned.
  CHECK(weight_grad_composes(kBFloat16, 4096, 4096, 4096, 4100));
  CHECK(weight_grad_composes(kBFloat16, 4096, 4096, 4095, 4095));
  // 16-byte rows: 8 bf16 elements, 4 float32 ones.
  CHECK_FALSE(weight_grad_composes(kBFloat16, 4097, 4096, 4096, 4096));
  CHECK_FALSE(weight_grad_composes(kFloat32, 4097, 4092, 4092, 4092));
  CHECK(weight_grad_composes(kBFloat16, 4097, 4092, 4096, 4096));
  // Tiny products keep the one fused call: 2 * 64 * 10 * 64 FLOPs < 2^21.
  CHECK_FALSE(weight_grad_composes(kBFloat16, 64, 10, 64, 64));
  CHECK(weight_grad_composes(kBFloat16, 1024, 10, 128, 128));  // 2^21.3 FLOPs
}
