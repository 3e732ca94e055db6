// The op-level fused attention (detail::fused_attention, core/ops/attention_fused.cpp:
// the kernel table's attention families on CUDA, autograd through the fused
// backward) against the composed path in float64 on the CPU (matmul, the causal
// mask as -inf, softmax, matmul; gradients by autograd) on the same bf16-rounded
// inputs: O, dQ, dK, dV by relative error at DESIGN.md's bf16 tolerance 1e-2; head
// dims 64 and 128, causal and not, ragged and unequal lengths, (B, T, H, D) storage
// viewed as (B, H, T, D), a gradient that is not contiguous; both backward modes
// (EMBER_ATTENTION=atomic); the predicate's refusals (dtype, head dim, shapes,
// EMBER_ATTENTION=composed) and the op's error naming them.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/ops.h"
#include "core/ops/split_gradient.h"
#include "cuda/kernels/attention.h"
#include "error_text.h"
#include "gradcheck.h"
#include "switch_guard.h"

using namespace ember;
using ember::testing::contains;
using ember::testing::dropout_mask;
using ember::testing::error_of;
using ember::testing::randn64;
using ember::testing::rel_error;

namespace {

// A (B, H, T, D) float64 tensor of bf16-exact values, stored (B, T, H, D) when bthd.
Tensor make_input(int64_t b, int64_t h, int64_t t, int64_t d, bool bthd, uint64_t seed) {
  const Shape s = bthd ? Shape{b, t, h, d} : Shape{b, h, t, d};
  const Tensor x = randn64(s, seed).to(kBFloat16).to(kFloat64);
  return bthd ? transpose(x, 1, 2) : x;
}

// The dropout and mask cases' inputs: query and value stored (B, H, T, D), key and the
// incoming gradient (B, T, H, D) viewed as (B, H, T, D), from seeds seed .. seed + 3.
struct Inputs64 {
  Tensor q, k, v, g;
};
Inputs64 make_inputs(int64_t b, int64_t h, int64_t tq, int64_t tk, int64_t d, uint64_t seed) {
  return {make_input(b, h, tq, d, false, seed), make_input(b, h, tk, d, true, seed + 1),
          make_input(b, h, tk, d, false, seed + 2), make_input(b, h, tq, d, true, seed + 3)};
}

// A bfloat16 copy on the GPU that requires grad.
Tensor gpu_leaf(const Tensor& t) {
  return t.to(kCUDA, kBFloat16).detach().set_requires_grad(true);
}

// A GPU result against its float64 CPU reference.
double gpu_error(const Tensor& ours, const Tensor& ref) {
  return rel_error(ours.to(kCPU).to(kFloat64), ref);
}

// Dropout's keep mask times 1 / (1 - p) over the (B, H, Tq, Tk) weights, drawn as the
// kernels draw it from (seed, offset).
Tensor dropout_scale(int64_t b, int64_t h, int64_t tq, int64_t tk, double p, uint64_t seed,
                     uint64_t offset) {
  return from_vector(dropout_mask(seed, offset, b * h * tq * tk, p, 1.0 / (1.0 - p)),
                     {b, h, tq, tk}, TensorOptions(kFloat64));
}

// The composed reference in float64 on the CPU.
// matmul takes (B, n, k) x (B, k, m): the (B, H) dims are folded into one.
Tensor bmm4(const Tensor& a, const Tensor& b) {
  const int64_t b0 = a.size(0), h = a.size(1);
  Tensor y = matmul(reshape(a, {b0 * h, a.size(2), a.size(3)}),
                    reshape(b, {b0 * h, b.size(2), b.size(3)}));
  return reshape(y, {b0, h, y.size(1), y.size(2)});
}

// z (optional): the dropout's keep mask times 1 / (1 - p), on the weights.
Tensor composed(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale,
                const Tensor& z = Tensor()) {
  Tensor s = bmm4(q, transpose(k, 2, 3)) * scale;
  if (causal) {
    const int64_t tq = q.size(2), tk = k.size(2);
    std::vector<double> mask(static_cast<size_t>(tq * tk), 0.0);
    for (int64_t i = 0; i < tq; ++i)
      for (int64_t j = i + 1; j < tk; ++j)
        mask[static_cast<size_t>(i * tk + j)] = -std::numeric_limits<double>::infinity();
    s = s + from_vector(mask, {tq, tk}, TensorOptions(kFloat64));
  }
  const Tensor w = softmax(s, 3);
  return bmm4(z.defined() ? w * z : w, v);
}

struct Errors {
  double o, dq, dk, dv;
};

Errors run(int64_t b, int64_t h, int64_t tq, int64_t tk, int64_t d, bool causal, bool bthd,
           uint64_t seed) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  const Tensor q64 = make_input(b, h, tq, d, bthd, seed),
               k64 = make_input(b, h, tk, d, bthd, seed + 1),
               v64 = make_input(b, h, tk, d, bthd, seed + 2);
  // The incoming gradient, non-contiguous on the GPU (a transposed view).
  const Tensor g64 = make_input(b, h, tq, d, true, seed + 3);

  Tensor qc = q64.detach().set_requires_grad(true), kc = k64.detach().set_requires_grad(true),
         vc = v64.detach().set_requires_grad(true);
  Tensor oc = composed(qc, kc, vc, causal, scale);
  oc.backward(g64);

  Tensor q = gpu_leaf(q64), k = gpu_leaf(k64), v = gpu_leaf(v64);
  REQUIRE(detail::fused_attention_supported(q, k, v));
  Tensor o = detail::fused_attention(q, k, v, causal, scale);
  CHECK(o.sizes() == Shape{b, h, tq, d});
  CHECK(o.dtype() == kBFloat16);
  o.backward(g64.to(kCUDA, kBFloat16));
  return {gpu_error(o.detach(), oc.detach()), gpu_error(q.grad(), qc.grad()),
          gpu_error(k.grad(), kc.grad()), gpu_error(v.grad(), vc.grad())};
}

// Sets EMBER_ATTENTION for a scope, restoring it after.
class EnvGuard {
 public:
  explicit EnvGuard(const char* value) {
    if (const char* old = std::getenv("EMBER_ATTENTION")) had_ = true, old_ = old;
    if (value)
      setenv("EMBER_ATTENTION", value, 1);
    else
      unsetenv("EMBER_ATTENTION");
  }
  ~EnvGuard() {
    if (had_)
      setenv("EMBER_ATTENTION", old_.c_str(), 1);
    else
      unsetenv("EMBER_ATTENTION");
  }
  EnvGuard(const EnvGuard&) = delete;
  EnvGuard& operator=(const EnvGuard&) = delete;

 private:
  bool had_ = false;
  std::string old_;
};

}  // namespace

TEST_CASE("ops/fused_attention: forward and backward match the float64 composed path" *
          doctest::test_suite("cuda")) {
  struct Case {
    int64_t b, h, tq, tk, d;
    bool causal, bthd;
  };
  const Case cases[] = {{2, 3, 1, 1, 64, false, false},
                        {2, 3, 77, 77, 64, true, true},
                        {1, 2, 300, 300, 64, false, true},
                        {2, 2, 127, 300, 64, true, false},
                        {2, 2, 300, 127, 128, true, true},
                        {1, 3, 130, 130, 128, false, false},
                        {1, 2, 257, 257, 128, true, false},
                        {2, 1, 64, 200, 128, false, true},
                        // issue 27's lengths 1000 and 4097 (ragged tails past 64-row tiles)
                        {1, 1, 1000, 1000, 64, true, true},
                        {1, 1, 4097, 4097, 128, false, false}};
  uint64_t seed = 3100;
  for (const char* mode : {"fused", "atomic"}) {
    EnvGuard env(mode);
    for (const Case& c : cases) {
      INFO("EMBER_ATTENTION=", mode, " B=", c.b, " H=", c.h, " Tq=", c.tq, " Tk=", c.tk, " D=", c.d,
           " causal=", c.causal, " bthd=", c.bthd);
      const Errors e = run(c.b, c.h, c.tq, c.tk, c.d, c.causal, c.bthd, seed += 4);
      CHECK(e.o <= 1e-2);
      CHECK(e.dq <= 1e-2);
      CHECK(e.dk <= 1e-2);
      CHECK(e.dv <= 1e-2);
    }
  }
}

TEST_CASE("ops/fused_attention: dropout in the kernels drops the composed path's weights" *
          doctest::test_suite("cuda")) {
  // The reference: the float64 composed path on the CPU with the documented mask
  // (dropout_keeps at offset + the weight's row-major index in (B, H, Tq, Tk)), kept
  // weights scaled by 1 / (1 - p); O and every gradient at the bf16 tolerance (with one
  // key, where dQ and dK are zero, within the rounding bound below). A wrong mask
  // (another numbering, or the backward drawing other counters) moves O and the
  // gradients far past it at p = 0.3.
  struct Case {
    int64_t b, h, tq, tk, d;
    bool causal;
  };
  const Case cases[] = {{2, 3, 1, 1, 64, false},      {1, 2, 7, 7, 64, true},
                        {2, 2, 127, 127, 64, true},   {1, 2, 300, 300, 64, false},
                        {2, 2, 127, 300, 128, false}, {1, 3, 257, 257, 128, true},
                        {1, 1, 1000, 1000, 128, true}};
  const double p = 0.3;
  uint64_t seed = 5100;
  // Version 1's kernels and, on compute capability 9.0, the wgmma version 2's (the default
  // there: EMBER_ATTENTION_DROPOUT_WGMMA; its backward in the fused mode).
  ember::testing::SwitchGuard guard(cuda::attention_dropout_wgmma,
                                    cuda::set_attention_dropout_wgmma);
  for (const bool wgmma : {false, true})
    for (const char* mode : {"fused", "atomic"}) {
      cuda::set_attention_dropout_wgmma(wgmma);
      EnvGuard env(mode);
      for (const Case& c : cases) {
        INFO("wgmma=", wgmma, " EMBER_ATTENTION=", mode, " B=", c.b, " H=", c.h, " Tq=", c.tq,
             " Tk=", c.tk, " D=", c.d, " causal=", c.causal);
        seed += 4;
        const double scale = 1.0 / std::sqrt(static_cast<double>(c.d));
        const auto [q64, k64, v64, g64] = make_inputs(c.b, c.h, c.tq, c.tk, c.d, seed);
        const uint64_t gen_seed = 91, offset = 12345;
        const int64_t n = c.b * c.h * c.tq * c.tk;
        const Tensor z = dropout_scale(c.b, c.h, c.tq, c.tk, p, gen_seed, offset);

        Tensor qc = q64.detach().set_requires_grad(true), kc = k64.detach().set_requires_grad(true),
               vc = v64.detach().set_requires_grad(true);
        Tensor oc = composed(qc, kc, vc, c.causal, scale, z);
        oc.backward(g64);

        Tensor q = gpu_leaf(q64), k = gpu_leaf(k64), v = gpu_leaf(v64);
        Generator gen(gen_seed);
        gen.set_offset(offset);
        Tensor o = detail::fused_attention(q, k, v, c.causal, scale, p, &gen);
        CHECK(gen.offset() == offset + static_cast<uint64_t>(n));
        o.backward(g64.to(kCUDA, kBFloat16));
        CHECK(gpu_error(o.detach(), oc.detach()) <= 1e-2);
        CHECK(gpu_error(v.grad(), vc.grad()) <= 1e-2);
        if (c.tk > 1) {
          CHECK(gpu_error(q.grad(), qc.grad()) <= 1e-2);
          CHECK(gpu_error(k.grad(), kc.grad()) <= 1e-2);
        } else {
          // One key: the weight is 1, so dS = P (Z dP - delta) is zero exactly and so
          // are the reference's dQ and dK; a relative error means nothing there. The
          // kernels (as FlashAttention's) take delta = rowsum(dO * O) from the bf16
          // output, so a kept weight (Z = 1 / (1 - p)) leaves a residue of O's rounding:
          // |dS| <= 2^-9 sum_d |dO_d O_d| (plus float32 noise). Each dQ and dK element
          // must be within twice that bound times scale and |K| (|Q|): a wrong mask or
          // a dropped Z gives |Z dP|-sized values, ~100x past it.
          const std::vector<double>
              gv = g64.contiguous().to_vector<double>(),
              ov = oc.detach().contiguous().to_vector<double>(),
              qv = q64.contiguous().to_vector<double>(), kv = k64.contiguous().to_vector<double>(),
              dq = q.grad().to(kCPU).to(kFloat64).contiguous().to_vector<double>(),
              dk = k.grad().to(kCPU).to(kFloat64).contiguous().to_vector<double>();
          int64_t over = 0;
          for (int64_t row = 0; row < c.b * c.h; ++row) {
            double cancelled = 0.0;
            for (int64_t j = 0; j < c.d; ++j)
              cancelled += std::fabs(gv[static_cast<size_t>(row * c.d + j)] *
                                     ov[static_cast<size_t>(row * c.d + j)]);
            const double ds_bound = 2.0 * std::ldexp(cancelled, -9) + 1e-5;
            for (int64_t j = 0; j < c.d; ++j) {
              const size_t i = static_cast<size_t>(row * c.d + j);
              over += std::fabs(dq[i]) > scale * ds_bound * std::fabs(kv[i]) + 1e-6;
              over += std::fabs(dk[i]) > scale * ds_bound * std::fabs(qv[i]) + 1e-6;
            }
          }
          CHECK(over == 0);
        }
      }
    }
}

TEST_CASE("ops/fused_attention: bool and additive masks read by the kernels" *
          doctest::test_suite("cuda")) {
  // Against the float64 composed path on the CPU with the same mask (bool: -inf where
  // false; additive: added to the scaled scores; a row with every key masked gives
  // zeros), broadcast as given, with and without dropout, both backward modes; O and
  // every gradient at the bf16 tolerance.
  struct Case {
    int64_t b, h, tq, tk, d;
    Shape mask;  // the mask's shape, broadcasting to (b, h, tq, tk)
    bool additive;
    double p;
  };
  const Case cases[] = {{2, 3, 33, 40, 64, {33, 40}, false, 0.0},
                        {2, 2, 127, 300, 64, {2, 1, 1, 300}, false, 0.0},
                        {1, 2, 130, 130, 128, {1, 2, 130, 130}, true, 0.0},
                        {2, 2, 77, 200, 128, {2, 1, 77, 200}, true, 0.2},
                        {1, 3, 64, 64, 64, {64, 64}, false, 0.3}};
  uint64_t seed = 7100;
  for (const char* mode : {"fused", "atomic"}) {
    EnvGuard env(mode);
    for (const Case& c : cases) {
      INFO("EMBER_ATTENTION=", mode, " B=", c.b, " H=", c.h, " Tq=", c.tq, " Tk=", c.tk, " D=", c.d,
           " additive=", c.additive, " p=", c.p);
      seed += 5;
      const double scale = 1.0 / std::sqrt(static_cast<double>(c.d));
      const auto [q64, k64, v64, g64] = make_inputs(c.b, c.h, c.tq, c.tk, c.d, seed);
      // The mask: random, with query row 0 of every (b, h) plane masked out entirely
      // (its output and gradients must be zero, as the composed path gives).
      int64_t n = 1;
      for (int64_t s : c.mask) n *= s;
      const int64_t tk_m = c.mask.back(), tq_m = c.mask.size() >= 2 ? c.mask[c.mask.size() - 2] : 1;
      const std::vector<double> u = randn64({n}, seed + 4).to_vector<double>();
      std::vector<double> bits(static_cast<size_t>(n)), add(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) {
        const bool row0 = tq_m > 1 && (i / tk_m) % tq_m == 0;
        bits[static_cast<size_t>(i)] = row0 ? 0.0 : u[static_cast<size_t>(i)] > -0.8 ? 1.0 : 0.0;
        add[static_cast<size_t>(i)] =
            row0 ? -std::numeric_limits<double>::infinity() : u[static_cast<size_t>(i)];
      }
      const Tensor keep64 = from_vector(bits, c.mask, TensorOptions(kFloat64));
      // The additive values rounded to bfloat16 first, as the kernels read them.
      const Tensor add64 =
          from_vector(add, c.mask, TensorOptions(kFloat64)).to(kBFloat16).to(kFloat64);
      const Tensor additive64 =
          c.additive ? add64
                     : where(keep64.gt(0.5), full({}, 0.0, kFloat64),
                             full({}, -std::numeric_limits<double>::infinity(), kFloat64));

      const uint64_t gen_seed = 17, offset = 99;
      // The dropout's keep mask and scale, (B, H, Tq, Tk).
      const Tensor z =
          c.p > 0.0 ? dropout_scale(c.b, c.h, c.tq, c.tk, c.p, gen_seed, offset) : Tensor();
      Tensor qc = q64.detach().set_requires_grad(true), kc = k64.detach().set_requires_grad(true),
             vc = v64.detach().set_requires_grad(true);
      Tensor sc = bmm4(qc, transpose(kc, 2, 3)) * scale + additive64;
      // softmax of a row of -inf is NaN: such rows give zeros (the composed path's rule).
      const Tensor dead = eq(max(sc, -1, true).values, -std::numeric_limits<double>::infinity());
      Tensor w = where(dead, full({}, 0.0, kFloat64),
                       softmax(where(dead, full({}, 0.0, kFloat64), sc), 3));
      if (z.defined()) w = w * z;
      Tensor oc = bmm4(w, vc);
      oc.backward(g64);

      Tensor q = gpu_leaf(q64), k = gpu_leaf(k64), v = gpu_leaf(v64);
      const Tensor mask = c.additive ? add64.to(kCUDA, kBFloat16) : keep64.gt(0.5).to(kCUDA);
      REQUIRE(detail::fused_attention_takes_mask(q, k, mask));
      Generator gen(gen_seed);
      gen.set_offset(offset);
      Tensor o = detail::fused_attention(q, k, v, false, scale, c.p, &gen, mask);
      o.backward(g64.to(kCUDA, kBFloat16));
      CHECK(gpu_error(o.detach(), oc.detach()) <= 1e-2);
      CHECK(gpu_error(q.grad(), qc.grad()) <= 1e-2);
      CHECK(gpu_error(k.grad(), kc.grad()) <= 1e-2);
      CHECK(gpu_error(v.grad(), vc.grad()) <= 1e-2);
      // The fully masked rows (where the mask has its own query rows): zeros; and the
      // gradients finite everywhere.
      if (tq_m > 1) {
        const Tensor row0 = slice(o.detach().to(kCPU).to(kFloat64), 2, 0, 1);
        CHECK(sum(mul(row0, row0)).item() == 0.0);
      }
      for (double g : q.grad().to(kCPU).to(kFloat64).to_vector<double>()) CHECK(std::isfinite(g));
    }
  }
}

TEST_CASE("ops/fused_attention: the deterministic backward gives the same bits twice" *
          doctest::test_suite("cuda")) {
  EnvGuard env(nullptr);
  const Tensor q64 = make_input(1, 2, 200, 64, false, 41),
               k64 = make_input(1, 2, 200, 64, false, 42),
               v64 = make_input(1, 2, 200, 64, false, 43),
               g64 = make_input(1, 2, 200, 64, false, 44);
  std::vector<std::vector<float>> runs;
  for (int i = 0; i < 2; ++i) {
    Tensor q = q64.to(kCUDA, kBFloat16).detach().set_requires_grad(true);
    Tensor k = k64.to(kCUDA, kBFloat16), v = v64.to(kCUDA, kBFloat16);
    Tensor o = detail::fused_attention(q, k, v, true, 0.125);
    o.backward(g64.to(kCUDA, kBFloat16));
    runs.push_back(q.grad().to(kFloat32).to(kCPU).to_vector<float>());
    CHECK_FALSE(k.grad().defined());  // no gradient where none was asked
  }
  CHECK(runs[0] == runs[1]);
}

TEST_CASE("ops/fused_attention: the predicate's refusals and the op's error" *
          doctest::test_suite("cuda")) {
  EnvGuard env(nullptr);
  auto make = [](Shape s, DType t) { return randn64(s, 5).to(kCUDA, t); };
  const Tensor q = make({1, 2, 16, 64}, kBFloat16), k = make({1, 2, 24, 64}, kBFloat16);
  CHECK(detail::fused_attention_supported(q, k, k));
  CHECK_FALSE(detail::fused_attention_supported(make({1, 2, 16, 64}, kFloat32), k, k));
  CHECK_FALSE(detail::fused_attention_supported(make({1, 2, 16, 96}, kBFloat16),
                                                make({1, 2, 24, 96}, kBFloat16),
                                                make({1, 2, 24, 96}, kBFloat16)));
  CHECK_FALSE(detail::fused_attention_supported(q, make({1, 3, 24, 64}, kBFloat16), k));
  CHECK_FALSE(detail::fused_attention_supported(q, k, make({1, 2, 23, 64}, kBFloat16)));
  CHECK_FALSE(detail::fused_attention_supported(q.reshape({2, 16, 64}), k, k));
  CHECK_FALSE(detail::fused_attention_supported(q, k.to(kCPU), k));
  const std::string e = error_of([&] {
    detail::fused_attention(make({1, 2, 16, 64}, kFloat32), k, k, false, 0.125);
  });
  CHECK(contains(e, "fused_attention"));
  CHECK(contains(e, "float32"));
  CHECK(contains(e, "[1, 2, 16, 64]"));
  {
    EnvGuard composed("composed");
    CHECK_FALSE(detail::fused_attention_supported(q, k, k));
  }
  {
    EnvGuard bad("fast");
    CHECK(contains(error_of([&] { detail::fused_attention_supported(q, k, k); }),
                   "EMBER_ATTENTION=fast"));
  }
}

// q, k and v as a GPT makes them, views of one (B, T, 3C) projection split into heads:
// the output and the gradients of q, k and v come out in (B, T, H, D) storage (so
// the head merge and the split's backward are views), with the values of the float64
// composed path: the output, and the projection's gradient, in both backward modes,
// at head dims 64 and 128 and a ragged length.
TEST_CASE("ops/fused_attention: a GPT's head split is read and written in place" *
          doctest::test_suite("cuda")) {
  for (const char* mode : {"fused", "atomic"})
    for (int64_t d : {int64_t{64}, int64_t{128}}) {
      EnvGuard env(mode);
      const int64_t b = 2, t = 77, h = 3, c = h * d;
      INFO("EMBER_ATTENTION=", mode, " D=", d);
      const Tensor qkv64 = randn64({b, t, 3 * c}, 3300 + d).to(kBFloat16).to(kFloat64);
      const Tensor g64 = randn64({b, t, c}, 3301 + d).to(kBFloat16).to(kFloat64);
      auto heads = [&](const Tensor& qkv, int64_t i) {
        return transpose(reshape(slice(qkv, 2, i * c, (i + 1) * c), {b, t, h, d}), 1, 2);
      };
      Tensor ref_qkv = qkv64.detach().set_requires_grad(true);
      Tensor ref = reshape(transpose(composed(heads(ref_qkv, 0), heads(ref_qkv, 1),
                                              heads(ref_qkv, 2), true, 1.0 / std::sqrt(double(d))),
                                     1, 2),
                           {b, t, c});
      ref.backward(g64);

      Tensor qkv = gpu_leaf(qkv64);
      Tensor o = detail::fused_attention(heads(qkv, 0), heads(qkv, 1), heads(qkv, 2), true,
                                         1.0 / std::sqrt(double(d)));
      CHECK(o.strides() == Shape{t * h * d, d, h * d, 1});
      Tensor y = reshape(transpose(o, 1, 2), {b, t, c});
      CHECK(y.storage() == o.storage());
      y.backward(g64.to(kCUDA, kBFloat16));
      CHECK(gpu_error(y.detach(), ref.detach()) <= 1e-2);
      CHECK(gpu_error(qkv.grad(), ref_qkv.grad()) <= 1e-2);
    }
}

// q, k and v split from one (B, T, 3C) projection as a GPT does (split, then heads):
// with detail::set_attention_qkv_grad(true) the backward writes their gradients into
// one buffer laid out as the projection, which split's backward passes on as the
// projection's gradient (no copies). Its bits equal those of three separate gradients
// assembled by split's copies (the switch off), for q, k and v in their order and
// permuted (the buffer follows their places, not the argument order), in both backward
// modes and both head dims.
TEST_CASE("ops/fused_attention: q, k and v split from one projection get one gradient buffer" *
          doctest::test_suite("cuda")) {
  ember::testing::SwitchGuard guard(detail::attention_qkv_grad, detail::set_attention_qkv_grad);
  for (const char* mode : {"fused", "atomic"})
    for (int64_t d : {int64_t{64}, int64_t{128}})
      for (const std::vector<size_t>& order :
           {std::vector<size_t>{0, 1, 2}, std::vector<size_t>{1, 2, 0}}) {
        EnvGuard env(mode);
        INFO("EMBER_ATTENTION=", mode, " D=", d, " order ", order[0], order[1], order[2]);
        const int64_t b = 2, t = 77, h = 3, c = h * d;
        const Tensor qkv64 = randn64({b, t, 3 * c}, 3400 + d).to(kBFloat16).to(kFloat64);
        const Tensor g = randn64({b, t, c}, 3401 + d).to(kCUDA, kBFloat16);
        auto run = [&](bool packed) {
          detail::set_attention_qkv_grad(packed);
          Tensor qkv = gpu_leaf(qkv64);
          // base: qkv itself, its backward noting whether the gradient split's backward
          // passes on is the attention's buffer.
          Tensor base = qkv.detach();
          bool marked = false;
          attach_grad_fn(base, "Probe", {&qkv}, [&marked](const Tensor& gb) {
            marked = detail::is_split_gradient(gb);
            return std::vector<Tensor>{gb};
          });
          const std::vector<Tensor> parts = split(base, c, 2);
          auto heads = [&](size_t i) { return transpose(reshape(parts[i], {b, t, h, d}), 1, 2); };
          Tensor o = detail::fused_attention(heads(order[0]), heads(order[1]), heads(order[2]),
                                             true, 1.0 / std::sqrt(double(d)));
          reshape(transpose(o, 1, 2), {b, t, c}).backward(g);
          CHECK(marked == packed);
          return qkv.grad().to(kCPU);
        };
        const Tensor packed = run(true), separate = run(false);
        CHECK(ember::testing::same_bits(packed, separate));
        // And the values: against the float64 composed path on the same inputs.
        Tensor ref_qkv = qkv64.detach().set_requires_grad(true);
        const std::vector<Tensor> rp = split(ref_qkv, c, 2);
        auto rheads = [&](size_t i) { return transpose(reshape(rp[i], {b, t, h, d}), 1, 2); };
        reshape(transpose(composed(rheads(order[0]), rheads(order[1]), rheads(order[2]), true,
                                   1.0 / std::sqrt(double(d))),
                          1, 2),
                {b, t, c})
            .backward(g.to(kCPU, kFloat64));
        CHECK(rel_error(packed.to(kFloat64), ref_qkv.grad()) <= 1e-2);
      }
}
