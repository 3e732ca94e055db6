// ember's Hopper GEMMs (cuda/kernels/gemm_sm90.h: wgmma + TMA) launched directly,
// each against the CPU float64 reference by relative error: bf16 operands with a
// bf16 output at DESIGN.md's 1e-2, TF32 at 1e-3; an fp32 output of bf16 operands
// (exact in bf16, so only the fp32 accumulation order differs) at 1e-4, tighter
// than bf16's budget so that a wrong element cannot hide in it. Every operand
// layout Linear needs (K/K forward, K/N for d_x, M/N for d_w with the row sums
// for d_b), sizes 1, 7, 127 and 4097 in every position (rows padded to TMA's
// 16-byte strides, the padding NaN so that a read past a row shows), both tiles,
// one block walking many tiles, every epilogue, K = 0 and empty outputs, and the
// refusals. Outputs are NaN-poisoned first, so an element never written fails.
// Suite "cuda_sm90": skipped unless device 0 has compute capability 9.0.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/ops.h"
#include "cuda/kernels/gemm_sm90.h"
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

int64_t round_up(int64_t v, int64_t to) {
  return (v + to - 1) / to * to;
}

// Values exact in the operand dtype: bf16 rounding, or TF32 (the tensor cores
// drop an fp32 operand's low 13 mantissa bits, so the reference sees what they see).
Tensor exact_in(const Tensor& t64, DType dtype) {
  if (dtype == kBFloat16) return t64.to(kBFloat16).to(kFloat64);
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

// One operand on the GPU: the logical (rows, k) matrix `v` stored K-major (row r
// at r * ld) or M/N-major (column kk at kk * ld), ld rounded up to 16 bytes plus
// `pad` elements, the gaps NaN.
struct DeviceOperand {
  Tensor storage;
  cuda::Sm90Operand op;
};
DeviceOperand upload(const Tensor& v, DType dtype, bool k_major, int64_t pad) {
  const int64_t rows = v.size(0), k = v.size(1);
  const int64_t align = 16 / static_cast<int64_t>(element_size(dtype));
  const int64_t inner = k_major ? k : rows, outer = k_major ? rows : k;
  const int64_t ld = round_up(std::max<int64_t>(inner, 1), align) + pad;
  std::vector<double> s(static_cast<size_t>(std::max<int64_t>(outer, 1) * ld), kNaN);
  const std::vector<double> x = v.to_vector<double>();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t kk = 0; kk < k; ++kk)
      s[static_cast<size_t>(k_major ? r * ld + kk : kk * ld + r)] =
          x[static_cast<size_t>(r * k + kk)];
  DeviceOperand d;
  d.storage =
      from_vector(s, {std::max<int64_t>(outer, 1), ld}, TensorOptions(kFloat64)).to(kCUDA, dtype);
  d.op = {d.storage.raw_data(), ld, k_major};
  return d;
}

struct Problem {
  DType dtype = kBFloat16;
  int64_t m = 0, n = 0, k = 0;
  bool a_k = true, b_k = true;  // operands K-major
  int64_t pad = 0;              // extra elements per stored row
  bool bias = false, pre = false, bias_grad = false;
  Activation act = Activation::None;
  DType out = kBFloat16;
  cuda::Sm90Tuning tuning;
};

struct Errors {
  double d = 0, pre = 0, bias_grad = 0;
};

std::string describe(const Problem& p) {
  std::string s = std::string(p.dtype == kBFloat16 ? "bf16 " : "tf32 ") + (p.a_k ? "K" : "M") +
                  (p.b_k ? "K" : "N") + " m=" + std::to_string(p.m) + " n=" + std::to_string(p.n) +
                  " k=" + std::to_string(p.k) + " act=" + activation_name(p.act) +
                  (p.bias ? " +bias" : "") + (p.pre ? " +pre" : "") +
                  (p.bias_grad ? " +bias_grad" : "") +
                  (p.out == kFloat32 ? " out=f32" : " out=bf16") + " pad=" + std::to_string(p.pad);
  if (p.tuning.tile == cuda::Sm90Tile::k128x128) s += " tile=128x128";
  if (p.tuning.tile == cuda::Sm90Tile::k128x256) s += " tile=128x256";
  if (p.tuning.schedule == cuda::Sm90Schedule::Pingpong) s += " ping-pong";
  if (p.tuning.max_ctas > 0) s += " ctas=" + std::to_string(p.tuning.max_ctas);
  return s;
}

// Runs p on fresh random operands and returns the relative errors against float64.
Errors run(const Problem& p, uint64_t seed) {
  const Tensor a = exact_in(randn64({p.m, p.k}, seed), p.dtype);
  const Tensor b = exact_in(randn64({p.n, p.k}, seed + 1), p.dtype);
  const Tensor bias = p.bias ? exact_in(randn64({p.n}, seed + 2), p.dtype) : Tensor();
  const DeviceOperand da = upload(a, p.dtype, p.a_k, p.pad), db = upload(b, p.dtype, p.b_k, p.pad);
  const TensorOptions out_opts = TensorOptions(p.out).device(kCUDA);
  Tensor d = full({p.m, p.n}, kNaN, out_opts);
  Tensor pre = p.pre ? full({p.m, p.n}, kNaN, out_opts) : Tensor();
  Tensor bias_grad = p.bias_grad ? full({p.m}, kNaN, out_opts) : Tensor();
  Tensor bias_dev = p.bias ? bias.to(kCUDA, p.dtype) : Tensor();
  cuda::GemmEpilogue epi;
  epi.bias = p.bias ? bias_dev.raw_data() : nullptr;
  epi.pre = p.pre ? pre.raw_data() : nullptr;
  epi.bias_grad = p.bias_grad ? bias_grad.raw_data() : nullptr;
  epi.act = p.act;
  epi.out = p.out;
  cuda::launch_sm90_gemm(p.dtype, p.m, p.n, p.k, da.op, db.op, d.raw_data(), p.n, epi,
                         cuda::current_stream(0), p.tuning);
  Errors e;
  const Tensor pre_ref = linear(a, b, bias);  // a b^T + bias, float64 on the CPU
  e.d = rel_error(d.to(kCPU).to(kFloat64), linear(a, b, bias, p.act));
  if (p.pre) e.pre = rel_error(pre.to(kCPU).to(kFloat64), pre_ref);
  if (p.bias_grad) e.bias_grad = rel_error(bias_grad.to(kCPU).to(kFloat64), sum(a, 1));
  return e;
}

double tol(const Problem& p) {
  if (p.dtype == kFloat32) return 1e-3;
  return p.out == kBFloat16 ? 1e-2 : 1e-4;
}

void check(const Problem& p, uint64_t seed) {
  INFO(describe(p));
  const Errors e = run(p, seed);
  CHECK(e.d <= tol(p));
  CHECK(e.pre <= tol(p));
  CHECK(e.bias_grad <= tol(p));
}

struct Size {
  int64_t m, n, k;
};
// 1, 7, 127, 4097 in every position, plus exact tiles, a ring that wraps (more K
// steps than stages) and several tiles per block; each under ~70 M multiply-adds
// for the CPU reference.
const std::vector<Size> kRagged = {{1, 1, 1},        {7, 127, 1},    {127, 7, 4097}, {4097, 127, 7},
                                   {127, 4097, 127}, {7, 1, 4097},   {4097, 7, 127}, {1, 4097, 7},
                                   {129, 257, 72},   {256, 512, 520}};

// The choices a launch can take: the default (Auto), each tile forced, one
// block walking every tile (the persistent scheduler and the ring's phases
// across tiles), the ping-pong schedule, also with 3 blocks (an odd count of
// tiles per block: one warpgroup has a tile less).
std::vector<cuda::Sm90Tuning> tunings() {
  std::vector<cuda::Sm90Tuning> v(6);
  v[1].tile = cuda::Sm90Tile::k128x256;
  v[2].tile = cuda::Sm90Tile::k128x128;
  v[3].max_ctas = 1;
  v[4].schedule = cuda::Sm90Schedule::Pingpong;
  v[5].schedule = cuda::Sm90Schedule::Pingpong;
  v[5].max_ctas = 3;
  return v;
}

}  // namespace

TEST_CASE("kernels/gemm_sm90: bf16 K/K (Linear's forward) matches the CPU at ragged sizes" *
          doctest::test_suite("cuda_sm90")) {
  uint64_t seed = 10;
  for (const Size& s : kRagged)
    for (DType out : {kBFloat16, kFloat32}) {
      Problem p;
      p.m = s.m, p.n = s.n, p.k = s.k, p.out = out, p.bias = true;
      check(p, seed++);
    }
  for (const cuda::Sm90Tuning& t : tunings())
    for (int64_t pad : {int64_t{0}, int64_t{8}}) {
      Problem p;
      p.m = 300, p.n = 520, p.k = 200, p.pad = pad, p.tuning = t, p.out = kFloat32;
      check(p, seed++);
    }
}

TEST_CASE("kernels/gemm_sm90: bf16 K/N (d_x = d_y w) matches the CPU at ragged sizes" *
          doctest::test_suite("cuda_sm90")) {
  uint64_t seed = 200;
  for (const Size& s : kRagged)
    for (DType out : {kBFloat16, kFloat32}) {
      Problem p;
      p.m = s.m, p.n = s.n, p.k = s.k, p.b_k = false, p.out = out;
      check(p, seed++);
    }
  for (const cuda::Sm90Tuning& t : tunings()) {
    Problem p;
    p.m = 300, p.n = 520, p.k = 200, p.b_k = false, p.pad = 8, p.tuning = t, p.out = kFloat32;
    check(p, seed++);
  }
}

TEST_CASE("kernels/gemm_sm90: bf16 M/N (d_w = d_y^T x) with the row sums for d_b matches the CPU" *
          doctest::test_suite("cuda_sm90")) {
  uint64_t seed = 400;
  for (const Size& s : kRagged)
    for (DType out : {kBFloat16, kFloat32})
      for (bool sums : {false, true}) {
        Problem p;
        p.m = s.m, p.n = s.n, p.k = s.k, p.a_k = false, p.b_k = false, p.out = out;
        p.bias_grad = sums;
        check(p, seed++);
      }
  for (const cuda::Sm90Tuning& t : tunings()) {
    Problem p;
    p.m = 300, p.n = 520, p.k = 600, p.a_k = false, p.b_k = false, p.pad = 8, p.tuning = t;
    p.out = kFloat32, p.bias_grad = true;
    check(p, seed++);
  }
}

TEST_CASE("kernels/gemm_sm90: TF32 K/K matches the CPU at ragged sizes" *
          doctest::test_suite("cuda_sm90")) {
  uint64_t seed = 600;
  for (const Size& s : kRagged) {
    Problem p;
    p.dtype = kFloat32, p.out = kFloat32, p.m = s.m, p.n = s.n, p.k = s.k, p.bias = true;
    check(p, seed++);
  }
  for (const cuda::Sm90Tuning& t : tunings()) {
    Problem p;
    p.dtype = kFloat32, p.out = kFloat32, p.m = 300, p.n = 520, p.k = 200, p.pad = 4;
    p.tuning = t;
    check(p, seed++);
  }
}

TEST_CASE("kernels/gemm_sm90: every epilogue (bias, activation, pre-activation, output dtype)" *
          doctest::test_suite("cuda_sm90")) {
  uint64_t seed = 800;
  // Both schedules: ping-pong is Auto's for large bf16 forwards, which the CPU
  // reference is too slow to check at that size.
  for (cuda::Sm90Schedule schedule : {cuda::Sm90Schedule::Auto, cuda::Sm90Schedule::Pingpong})
    for (Activation act : {Activation::None, Activation::Relu, Activation::Gelu,
                           Activation::GeluTanh, Activation::Silu})
      for (bool bias : {false, true})
        for (bool pre : {false, true})
          for (DType out : {kBFloat16, kFloat32}) {
            Problem p;
            p.m = 133, p.n = 301, p.k = 72, p.act = act, p.bias = bias, p.pre = pre, p.out = out;
            p.tuning.schedule = schedule;
            check(p, seed++);
          }
  // The epilogue is the same code for every layout and dtype: once each of the others.
  for (int layout : {1, 2, 3}) {  // K/N, M/N with row sums, TF32 K/K
    Problem p;
    p.m = 133, p.n = 301, p.k = 72, p.act = Activation::Gelu, p.bias = true, p.pre = true;
    if (layout == 1) p.b_k = false;
    if (layout == 2) p.a_k = false, p.b_k = false, p.bias_grad = true;
    if (layout == 3) p.dtype = kFloat32, p.out = kFloat32;
    check(p, seed++);
  }
}

TEST_CASE(
    "kernels/gemm_sm90: K = 0 writes act(bias), pre = bias and zero row sums; empty outputs "
    "write nothing" *
    doctest::test_suite("cuda_sm90")) {
  for (DType out : {kBFloat16, kFloat32}) {
    Problem p;
    p.m = 5, p.n = 9, p.k = 0, p.bias = true, p.pre = true, p.act = Activation::Silu, p.out = out;
    check(p, 1);
    p.bias = false, p.pre = false, p.act = Activation::None, p.a_k = false, p.b_k = false;
    p.bias_grad = true;
    check(p, 2);
  }
  // m or n = 0: nothing to write; no pointer is touched.
  const cuda::Sm90Operand none{nullptr, 8, true};
  for (auto [m, n] : {std::pair<int64_t, int64_t>{0, 4}, {4, 0}, {0, 0}}) {
    CHECK_NOTHROW(cuda::launch_sm90_gemm(kBFloat16, m, n, 16, none, none, nullptr,
                                         std::max<int64_t>(n, 1), cuda::GemmEpilogue{},
                                         cuda::current_stream(0)));
  }
  cuda::synchronize(0);
}

TEST_CASE("kernels/gemm_sm90: operands TMA cannot address are refused, naming why" *
          doctest::test_suite("cuda_sm90")) {
  Tensor a = full({8, 16}, 1.0, TensorOptions(kBFloat16).device(kCUDA));
  Tensor d = empty({8, 8}, TensorOptions(kBFloat16).device(kCUDA));
  const cuda::Sm90Operand ok{a.raw_data(), 16, true};
  const cuda::Sm90Operand odd_ld{a.raw_data(), 15, true};  // 30-byte rows
  const cuda::Sm90Operand shifted{static_cast<const char*>(a.raw_data()) + 2, 8, true};
  const cuda::GemmEpilogue epi;
  auto launch = [&](const cuda::Sm90Operand& x, int64_t k) {
    cuda::launch_sm90_gemm(kBFloat16, 8, 8, k, x, ok, d.raw_data(), 8, epi,
                           cuda::current_stream(0));
  };
  CHECK(contains(error_of([&] { launch(odd_ld, 15); }), "multiple of 16 bytes"));
  CHECK(contains(error_of([&] { launch(shifted, 8); }), "16-byte aligned"));
  CHECK(contains(error_of([&] {
                   cuda::launch_sm90_gemm(kBFloat16, 8, 8, 8, ok, ok, d.raw_data(), 4, epi,
                                          cuda::current_stream(0));
                 }),
                 "row stride 4 below n = 8"));
  // Layouts and dtypes that are not built are named.
  cuda::GemmEpilogue sums;
  sums.bias_grad = d.raw_data();
  CHECK(
      contains(cuda::sm90_gemm_unsupported(kBFloat16, 8, 8, 8, ok, ok, sums, 0), "bias gradient"));
  cuda::GemmEpilogue f32;
  f32.out = kFloat32;
  const cuda::Sm90Operand m_major{a.raw_data(), 8, false};
  CHECK(contains(cuda::sm90_gemm_unsupported(kFloat32, 8, 8, 8, m_major, ok, f32, 0), "K-major"));
  CHECK(contains(cuda::sm90_gemm_unsupported(kFloat32, 8, 8, 8, ok, ok, epi, 0), "fp32 only"));
}
