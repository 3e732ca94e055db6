// scaled_dot_product_attention: a hand-computed case; random cases (batch
// broadcasting, bool, additive and causal masks, L != S, a given scale) against a
// plain double loop written from PyTorch's math-backend definition; fully masked
// rows; dropout against the composition with the same keep mask; gradcheck in
// float64; the errors; the meta device; CUDA against the CPU (suite "cuda").
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>

#include "core/autograd.h"
#include "core/ops.h"
#include "error_text.h"
#include "gradcheck.h"

using namespace ember;
using ember::testing::check_close;
using ember::testing::rand64;
using ember::testing::randn64;
using ember::testing::rel_error;

namespace {

using V = std::vector<double>;
constexpr double kInf = std::numeric_limits<double>::infinity();

// The reference: for each of n batches, out = softmax(q k^T * scale + add) v in
// double, add (n, L, S) an additive mask (-inf where a bool mask is false; a row
// of all -inf gives zeros). q (n, L, E), k (n, S, E), v (n, S, Ev), row-major.
V reference(const V& q, const V& k, const V& v, const V& add, int64_t n, int64_t L, int64_t S,
            int64_t E, int64_t Ev, double scale) {
  V out(static_cast<size_t>(n * L * Ev), 0.0);
  for (int64_t b = 0; b < n; ++b)
    for (int64_t i = 0; i < L; ++i) {
      V w(static_cast<size_t>(S));
      double mx = -kInf;
      for (int64_t j = 0; j < S; ++j) {
        double d = 0;
        for (int64_t e = 0; e < E; ++e) d += q[(b * L + i) * E + e] * k[(b * S + j) * E + e];
        w[j] = d * scale + (add.empty() ? 0.0 : add[(b * L + i) * S + j]);
        mx = std::max(mx, w[j]);
      }
      if (mx == -kInf) continue;  // no key left: zeros
      double z = 0;
      for (double& x : w) z += (x = std::exp(x - mx));
      for (int64_t j = 0; j < S; ++j)
        for (int64_t e = 0; e < Ev; ++e)
          out[(b * L + i) * Ev + e] += w[j] / z * v[(b * S + j) * Ev + e];
    }
  return out;
}

// t broadcast to `sizes`, as row-major doubles.
V full_values(const Tensor& t, const Shape& sizes) {
  return contiguous(expand(t, sizes)).to_vector<double>();
}

// An additive mask from a bool one: 0 where true, -inf where false.
Tensor additive(const Tensor& bool_mask) {
  return where(bool_mask, full({}, 0.0, kFloat64), full({}, -kInf, kFloat64));
}

Tensor sdpa(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask = Tensor(),
            double p = 0.0, bool causal = false, std::optional<double> scale = std::nullopt,
            Generator* gen = nullptr) {
  return scaled_dot_product_attention(q, k, v, mask, p, causal, scale, gen);
}

}  // namespace

TEST_CASE("attention/sdpa: a hand-computed case (one query, two keys)") {
  Tensor q = tensor({{1, 0}}, kFloat64);
  Tensor k = tensor({{1, 0}, {0, 1}}, kFloat64);
  Tensor v = tensor({{1, 2}, {3, 4}}, kFloat64);
  // scores (1/sqrt(2), 0); weights e^s / sum; out = w0 (1, 2) + w1 (3, 4)
  check_close(sdpa(q, k, v), {1.6604769013466862, 2.6604769013466862});
  CHECK(sdpa(q, k, v).sizes() == Shape{1, 2});
  // scale 0: uniform weights, the mean of the values
  check_close(sdpa(q, k, v, Tensor(), 0.0, false, 0.0), {2.0, 3.0});
  // a bool mask hiding the second key: the first value exactly
  check_close(sdpa(q, k, v, tensor({{1, 0}}, kFloat64).gt(0.5)), {1.0, 2.0});
}

TEST_CASE("attention/sdpa: random cases against the double reference") {
  const int64_t B = 2, H = 3, L = 4, S = 6, E = 5, Ev = 3;
  Tensor q = randn64({B, H, L, E}, 1);
  Tensor k = randn64({1, H, S, E}, 2);  // broadcast over the batch
  Tensor v = randn64({H, S, Ev}, 3);    // one fewer dim: broadcast too
  const Shape wshape{B, H, L, S};
  const V qv = full_values(q, {B, H, L, E}), kv = full_values(k, {B, H, S, E}),
          vv = full_values(v, {B, H, S, Ev});
  const double dflt = 1.0 / std::sqrt(static_cast<double>(E));
  auto ref = [&](const V& add, double scale) {
    return from_vector(reference(qv, kv, vv, add, B * H, L, S, E, Ev, scale), {B, H, L, Ev},
                       kFloat64);
  };
  SUBCASE("no mask, default and given scale") {
    CHECK(rel_error(sdpa(q, k, v), ref({}, dflt)) < 1e-13);
    CHECK(rel_error(sdpa(q, k, v, Tensor(), 0.0, false, 0.7), ref({}, 0.7)) < 1e-13);
    CHECK(sdpa(q, k, v).sizes() == Shape{B, H, L, Ev});
  }
  SUBCASE("bool mask broadcast over batch and heads") {
    Tensor m = rand64({L, S}, 4).gt(0.3);
    CHECK(rel_error(sdpa(q, k, v, m), ref(full_values(additive(m), wshape), dflt)) < 1e-13);
  }
  SUBCASE("additive mask per batch, broadcast over heads") {
    Tensor m = randn64({B, 1, L, S}, 5);
    CHECK(rel_error(sdpa(q, k, v, m), ref(full_values(m, wshape), dflt)) < 1e-13);
  }
  SUBCASE("causal, upper-left aligned (L < S)") {
    V add(static_cast<size_t>(B * H * L * S));
    for (int64_t b = 0; b < B * H; ++b)
      for (int64_t i = 0; i < L; ++i)
        for (int64_t j = 0; j < S; ++j) add[(b * L + i) * S + j] = j <= i ? 0.0 : -kInf;
    CHECK(rel_error(sdpa(q, k, v, Tensor(), 0.0, true), ref(add, dflt)) < 1e-13);
  }
  SUBCASE("float32 within 1e-5 of the double reference") {
    Tensor m = randn64({B, 1, L, S}, 6);
    Tensor got = sdpa(q.to(kFloat32), k.to(kFloat32), v.to(kFloat32), m.to(kFloat32));
    CHECK(got.dtype() == kFloat32);
    CHECK(rel_error(got.to(kFloat64), ref(full_values(m, wshape), dflt)) < 1e-5);
    Tensor gc = sdpa(q.to(kFloat32), k.to(kFloat32), v.to(kFloat32), Tensor(), 0.0, true);
    CHECK(rel_error(gc.to(kFloat64), sdpa(q, k, v, Tensor(), 0.0, true)) < 1e-5);
  }
  SUBCASE("2-D operands (no batch) and transposed views") {
    Tensor q2 = randn64({E, L}, 7), k2 = randn64({S, E}, 8), v2 = randn64({S, Ev}, 9);
    Tensor qt = transpose(q2, 0, 1);  // (L, E), a strided view
    const V r = reference(contiguous(qt).to_vector<double>(), k2.to_vector<double>(),
                          v2.to_vector<double>(), {}, 1, L, S, E, Ev, dflt);
    CHECK(rel_error(sdpa(qt, k2, v2), from_vector(r, {L, Ev}, kFloat64)) < 1e-13);
  }
}

TEST_CASE("attention/sdpa: a fully masked row gives zeros, and its gradient is finite") {
  Tensor q = randn64({2, 3}, 10).set_requires_grad(true);
  Tensor k = randn64({4, 3}, 11), v = randn64({4, 2}, 12);
  Tensor m = tensor({{1, 0, 1, 0}, {0, 0, 0, 0}}, kFloat64).gt(0.5);
  Tensor out = sdpa(q, k, v, m);
  const V o = out.to_vector<double>();
  CHECK(o[2] == 0.0);
  CHECK(o[3] == 0.0);
  CHECK(std::isfinite(o[0]));
  Tensor add = additive(m);
  CHECK(rel_error(sdpa(q, k, v, add), out) < 1e-15);
  sum(sdpa(q, k, v, add)).backward();
  for (double g : q.grad().to_vector<double>()) CHECK(std::isfinite(g));
}

TEST_CASE("attention/sdpa: dropout keeps weights by the documented counters") {
  const int64_t B = 2, L = 3, S = 5, E = 4;
  Tensor q = randn64({B, L, E}, 13), k = randn64({B, S, E}, 14), v = randn64({B, S, 2}, 15);
  const double p = 0.4;
  Generator g1(77);
  g1.set_offset(1000);
  Tensor got = sdpa(q, k, v, Tensor(), p, true, std::nullopt, &g1);
  CHECK(g1.offset() == 1000 + static_cast<uint64_t>(B * L * S));
  // The composition with the documented mask: dropout_keeps at (seed, offset + i).
  Tensor keep =
      from_vector(ember::testing::dropout_mask(77, 1000, B * L * S, p), {B, L, S}, kFloat64);
  Tensor causal = tensor({{1, 0, 0, 0, 0}, {1, 1, 0, 0, 0}, {1, 1, 1, 0, 0}}, kFloat64).gt(0.5);
  Tensor w = softmax(where(causal, matmul(q, transpose(k, 1, 2)) * (1.0 / std::sqrt(4.0)),
                           full({}, -kInf, kFloat64)),
                     -1);
  Tensor want = matmul(w * keep * (1.0 / (1.0 - p)), v);
  CHECK(rel_error(got, want) < 1e-14);
  CHECK(sum(keep).item() < B * L * S);  // something was dropped: the test can fail
  // p = 0 draws nothing
  Generator g3(77);
  (void)sdpa(q, k, v, Tensor(), 0.0, false, std::nullopt, &g3);
  CHECK(g3.offset() == 0);
}

TEST_CASE("attention/sdpa: gradients against finite differences (float64)") {
  Tensor q = randn64({2, 3, 4}, 20), k = randn64({2, 5, 4}, 21), v = randn64({2, 5, 3}, 22);
  Tensor fm = randn64({3, 5}, 23);
  Tensor bm = rand64({2, 1, 5}, 24).gt(0.3);
  using Inputs = std::vector<Tensor>;
  CHECK_GRADCHECK([](const Inputs& x) { return sdpa(x[0], x[1], x[2]); }, {q, k, v});
  CHECK_GRADCHECK([](const Inputs& x) { return sdpa(x[0], x[1], x[2], Tensor(), 0.0, true); },
                  {q, k, v});
  CHECK_GRADCHECK([&](const Inputs& x) { return sdpa(x[0], x[1], x[2], bm, 0.0, false, 0.3); },
                  {q, k, v});
  CHECK_GRADCHECK([](const Inputs& x) { return sdpa(x[0], x[1], x[2], x[3]); }, {q, k, v, fm});
  CHECK_GRADCHECK(
      [](const Inputs& x) {
        Generator g(5);
        return sdpa(x[0], x[1], x[2], Tensor(), 0.3, false, std::nullopt, &g);
      },
      {q, k, v});
  // broadcast key and value: their gradients sum over the batch
  CHECK_GRADCHECK([](const Inputs& x) { return sdpa(x[0], x[1], x[2], Tensor(), 0.0, true); },
                  {q, randn64({5, 4}, 25), randn64({1, 5, 3}, 26)});
}

TEST_CASE("attention/sdpa: bad arguments name the op and the shapes") {
  using ember::testing::error_of;
  Tensor q = randn64({2, 3, 4}, 30), k = randn64({2, 5, 4}, 31), v = randn64({2, 5, 3}, 32);
  auto has = [](const std::string& s, const std::string& want) {
    return s.find(want) != std::string::npos;
  };
  const std::string both = error_of([&] { (void)sdpa(q, k, v, ones({3, 5}), 0.0, true); });
  CHECK(has(both, "scaled_dot_product_attention: give either attn_mask or is_causal"));
  CHECK(has(error_of([&] { (void)sdpa(q, randn64({2, 5, 3}, 1), v); }), "last dim (E)"));
  CHECK(has(error_of([&] { (void)sdpa(q, k, randn64({2, 4, 3}, 1)); }), "sequence dim (S)"));
  CHECK(has(error_of([&] {
              (void)sdpa(q, k, v, ones({3, 5}, kFloat32));
            }),
            "attn_mask must be bool or the query's dtype (float64), got float32"));
  CHECK(has(error_of([&] {
              (void)sdpa(q, k, v, ones({4, 5}, kFloat64));
            }),
            "attn_mask [4, 5] does not broadcast to the attention weights' shape [2, 3, 5]"));
  CHECK(has(error_of([&] { (void)sdpa(q, k, v, Tensor(), 1.0); }), "dropout_p must be in [0, 1)"));
  CHECK(has(error_of([&] { (void)sdpa(q, k.to(kFloat32), v); }), "one dtype"));
  CHECK(has(error_of([&] { (void)sdpa(randn64({4}, 1), k, v); }), "at least 2 dims"));
  CHECK(has(error_of([&] { (void)sdpa(randn64({3, 3, 4}, 1), k, v); }), "broadcast"));
}

TEST_CASE("attention/sdpa: shapes on the meta device, with a backward") {
  Tensor q = empty({2, 6, 16, 8}, TensorOptions().device(kMeta)).set_requires_grad(true);
  Tensor k = empty({2, 6, 16, 8}, TensorOptions().device(kMeta));
  Tensor v = empty({2, 6, 16, 8}, TensorOptions().device(kMeta));
  Tensor out = sdpa(q, k, v, Tensor(), 0.2, true);
  CHECK(out.sizes() == Shape{2, 6, 16, 8});
  CHECK(out.device() == kMeta);
  sum(out).backward();
  CHECK(q.grad().sizes() == q.sizes());
}

TEST_CASE("attention/cuda: sdpa on CUDA matches the CPU, forward and backward" *
          doctest::test_suite("cuda")) {
  using ember::testing::cuda_vs_cpu;
  Tensor q = randn64({2, 3, 33, 16}, 40), k = randn64({2, 3, 47, 16}, 41),
         v = randn64({2, 3, 47, 8}, 42);
  Tensor fm = randn64({33, 47}, 43);
  Tensor bm = rand64({2, 1, 33, 47}, 44).gt(0.2);
  using Inputs = std::vector<Tensor>;
  CHECK(cuda_vs_cpu([](const Inputs& x) { return sdpa(x[0], x[1], x[2]); }, {q, k, v}, kFloat32) <
        1e-5);
  CHECK(cuda_vs_cpu([](const Inputs& x) { return sdpa(x[0], x[1], x[2], Tensor(), 0.0, true); },
                    {q, k, v}, kFloat32) < 1e-5);
  CHECK(cuda_vs_cpu([](const Inputs& x) { return sdpa(x[0], x[1], x[2], x[3]); }, {q, k, v, fm},
                    kFloat32) < 1e-5);
  CHECK(cuda_vs_cpu([&](const Inputs& x) { return sdpa(x[0], x[1], x[2], bm.to(x[0].device())); },
                    {q, k, v}, kFloat32) < 1e-5);
  // dropout: the same counters on both devices
  CHECK(cuda_vs_cpu(
            [](const Inputs& x) {
              Generator g(9);
              return sdpa(x[0], x[1], x[2], Tensor(), 0.25, true, std::nullopt, &g);
            },
            {q, k, v}, kFloat32) < 1e-5);
  // backward: the gradient of q, k and v of a weighted sum
  auto grads = [](const Inputs& x) {
    std::vector<Tensor> leaves;
    for (const Tensor& t : x) leaves.push_back(t.detach().set_requires_grad(true));
    Generator g(9);
    Tensor out = sdpa(leaves[0], leaves[1], leaves[2], Tensor(), 0.1, true, std::nullopt, &g);
    Tensor w = cos(arange(static_cast<double>(out.numel()),
                          TensorOptions().dtype(out.dtype()).device(out.device())))
                   .reshape(out.sizes());
    sum(out * w).backward();
    return cat(
        {leaves[0].grad().flatten(), leaves[1].grad().flatten(), leaves[2].grad().flatten()});
  };
  CHECK(cuda_vs_cpu(grads, {q, k, v}, kFloat32) < 1e-5);
}
