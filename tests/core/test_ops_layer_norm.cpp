// layer_norm on CPU (the composed reference): hand-computed values, weight and
// bias, several trailing dims, the gradient with a large eps, and shape errors
// (gradcheck of every form, and CUDA against the CPU: the op table,
// tests/core/op_table.cpp).
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "core/autograd.h"
#include "core/ops.h"
#include "gradcheck.h"
#include "switch_guard.h"

using namespace ember;
using ember::testing::randn64;
using ember::testing::rel_error;

namespace {
using V = std::vector<double>;
using Inputs = std::vector<Tensor>;

// A leaf of v's values in dtype dt that requires grad.
Tensor leaf(const Tensor& v, DType dt = kFloat32) {
  return v.to(dt).detach().set_requires_grad(true);
}

// The fused path's tensors against the composed path's: the same dtypes, the same bits.
void check_same_bits(const std::vector<Tensor>& one, const std::vector<Tensor>& two) {
  for (size_t i = 0; i < one.size(); ++i) {
    CAPTURE(i);
    CHECK(one[i].dtype() == two[i].dtype());
    CHECK(one[i].to(kFloat32).to_vector<float>() == two[i].to(kFloat32).to_vector<float>());
  }
}
}  // namespace

TEST_CASE("layer_norm: hand-computed values, biased variance, eps inside the root") {
  Tensor x = tensor({{1, 2, 3, 4}, {2, 2, 2, 2}}, kFloat64);
  const V y = layer_norm(x, {4}).to_vector<double>();
  const V want = {
      -1.3416354199689269, -0.447211806656309, 0.447211806656309, 1.3416354199689269, 0, 0, 0, 0};
  for (size_t i = 0; i < want.size(); ++i) {
    CAPTURE(i);
    CHECK(y[i] == doctest::Approx(want[i]).epsilon(1e-14));
  }
  Tensor w = tensor({1, 2, 3, 4}, kFloat64), b = tensor({0, 0, 0, 1}, kFloat64);
  const V yw = layer_norm(x, {4}, w, b).to_vector<double>();
  CHECK(yw[1] == doctest::Approx(2 * want[1]).epsilon(1e-14));
  CHECK(yw[3] == doctest::Approx(4 * want[3] + 1).epsilon(1e-14));
  CHECK(yw[7] == 1.0);
  CHECK(layer_norm(x.to(kFloat32), {4}).dtype() == kFloat32);
}

TEST_CASE("layer_norm: several trailing dims normalise together") {
  Tensor x = randn64({3, 2, 5}, 70);
  Tensor y = layer_norm(x, {2, 5});
  Tensor rows = y.reshape({3, 10});
  CHECK(rel_error(mean(rows, 1), zeros({3}, kFloat64)) < 1e-14);
  Tensor var = mean(mul(rows, rows), 1);
  CHECK(rel_error(var, full({3}, 1.0, kFloat64)) < 1e-4);  // 1 - eps / (var + eps)
  CHECK(rel_error(y, layer_norm(x.reshape({3, 10}), {10}).reshape({3, 2, 5})) < 1e-15);
}

// Gradients with weight and bias, several normalised dims and without affine:
// the op table (tests/core/op_table.cpp). Here: a large eps.
TEST_CASE("layer_norm: the gradient with a large eps matches finite differences") {
  CHECK_GRADCHECK([](const Inputs& v) { return layer_norm(v[0], {6}, Tensor(), Tensor(), 0.1); },
                  {randn64({3, 6}, 76)});
}

TEST_CASE("layer_norm: a shape that does not match the input throws naming both") {
  Tensor x = zeros({2, 3});
  CHECK_THROWS_WITH_AS(layer_norm(x, {4}),
                       doctest::Contains("layer_norm: normalized_shape [4] does not match the "
                                         "trailing dims of the input of shape [2, 3]"),
                       Error);
  CHECK_THROWS_WITH_AS(layer_norm(x, {1, 2, 3}), doctest::Contains("does not match"), Error);
  CHECK_THROWS_WITH_AS(layer_norm(x, {3}, zeros({4})),
                       doctest::Contains("layer_norm: weight of shape [4] does not match "
                                         "normalized_shape [3]"),
                       Error);
  CHECK_THROWS_WITH_AS(layer_norm(x, {3}, zeros({3}), zeros({2})),
                       doctest::Contains("layer_norm: bias of shape [2]"), Error);
  CHECK_THROWS_WITH_AS(layer_norm(x, {}), doctest::Contains("normalized_shape is empty"), Error);
  CHECK_THROWS_WITH_AS(layer_norm(x, {3}, Tensor(), Tensor(), -1.0),
                       doctest::Contains("layer_norm: eps must be >= 0"), Error);
  CHECK_THROWS_WITH_AS(layer_norm(zeros({2}, kInt64), {2}),
                       doctest::Contains("layer_norm: expects a floating-point tensor"), Error);
}

// The CPU's fused float32 kernel folding d_x into the gradient the engine sums for x
// (a residual stream: x feeds the norm and an add), against float64 (composed, no
// fold): in place (x * 2's gradient, the engine's alone, arrives first) and into a
// new tensor (the add's pass-through gradient, shared, is the sum). A fold that
// dropped the sum, or added it twice, is off by O(1).
TEST_CASE("layer_norm: d_x folded into the residual stream's gradient (float32, fused)") {
  for (bool shared : {false, true}) {
    INFO("shared=", shared);
    const int64_t rows = 9, cols = 40;
    const Tensor x64 = randn64({rows, cols}, 71), w64 = randn64({cols}, 72);
    const Tensor gy = randn64({rows, cols}, 73);
    auto x_grad = [&](DType dt) {
      Tensor x = x64.to(dt).detach().set_requires_grad(true);
      Tensor n = layer_norm(x, {cols}, w64.to(dt));
      Tensor other = shared ? x : mul(x, 2.0);  // made after the norm: its backward runs first
      add(other, n).backward(gy.to(dt));
      return x.grad().to(kFloat64);
    };
    CHECK(rel_error(x_grad(kFloat32), x_grad(kFloat64)) <= 1e-5);
  }
}

// A bfloat16 result from float32 input (detail::layer_norm_into_dtype, the CPU's fused
// kernel writing it and reading its bfloat16 gradient): the same bits as casting the
// float32 result, forward and x's, w's and b's gradients, with and without a fold into
// a residual sum; elsewhere (float64) the cast itself.
TEST_CASE("layer_norm: a bfloat16 result from float32 input equals casting the float32 one") {
  const int64_t rows = 7, cols = 24;
  Generator gen(91);
  const Tensor x0 = randn({rows, cols}, kFloat32, &gen), w0 = randn({cols}, kFloat32, &gen),
               b0 = randn({cols}, kFloat32, &gen);
  const Tensor gy = randn({rows, cols}, kFloat32, &gen).to(kBFloat16);
  for (bool residual : {false, true}) {
    INFO("residual=", residual);
    auto run = [&](bool direct) {
      Tensor x = x0.detach().set_requires_grad(true), w = w0.detach().set_requires_grad(true),
             b = b0.detach().set_requires_grad(true);
      Tensor y = direct ? detail::layer_norm_into_dtype(x, {cols}, w, b, 1e-5, kBFloat16)
                        : layer_norm(x, {cols}, w, b).to(kBFloat16);
      CHECK(y.dtype() == kBFloat16);
      Tensor out = residual ? add(x, y) : y;  // float32 + bfloat16: a sum to fold into
      out.backward(residual ? gy.to(kFloat32) : gy);
      return std::vector<Tensor>{y.detach(), x.grad(), w.grad(), b.grad()};
    };
    const std::vector<Tensor> direct = run(true), cast = run(false);
    for (size_t i = 0; i < direct.size(); ++i) {
      CAPTURE(i);
      CHECK(direct[i].to_vector<float>() == cast[i].to_vector<float>());
    }
  }
  // float64 composes: the cast of the float64 result.
  const Tensor x64 = x0.to(kFloat64);
  CHECK(detail::layer_norm_into_dtype(x64, {cols}, Tensor(), Tensor(), 1e-5, kBFloat16)
            .to_vector<float>() == layer_norm(x64, {cols}).to(kBFloat16).to_vector<float>());
  CHECK_THROWS_WITH_AS(detail::layer_norm_into_dtype(x0, {cols}, Tensor(), Tensor(), 1e-5, kInt64),
                       doctest::Contains("layer_norm: the result's dtype must be floating"), Error);
}

// add_layer_norm's one pass (the CPU's fused float32 kernel given the residual) against
// add then layer_norm (the switch off): the same bits for the sum, the norm's result
// (float32, and bfloat16 from float32 as autocast's) and the gradients of x, the
// residual (float32, and bfloat16 as a transformer's branch), weight and bias, through
// two norms in a row as a block chains them (the second's x is the first's sum, so the
// first sum's gradient has the fold's two parts). Then against float64.
TEST_CASE("add_layer_norm: one pass equals add then layer_norm, bit for bit, with gradients") {
  ember::testing::SwitchGuard guard(detail::add_layer_norm_fused, detail::set_add_layer_norm_fused);
  const int64_t rows = 11, cols = 48;
  Generator gen(120);
  const Tensor x0 = randn({rows, cols}, kFloat32, &gen), w0 = randn({cols}, kFloat32, &gen),
               b0 = randn({cols}, kFloat32, &gen), r0 = randn({rows, cols}, kFloat32, &gen),
               r1 = randn({rows, cols}, kFloat32, &gen), gy = randn({rows, cols}, kFloat32, &gen);
  for (DType rdt : {kFloat32, kBFloat16})
    for (bool bf16_out : {false, true}) {
      INFO("residual ", rdt, ", bfloat16 result ", bf16_out);
      auto run = [&](bool fused) {
        detail::set_add_layer_norm_fused(fused);
        Tensor x = leaf(x0), w = leaf(w0), b = leaf(b0), ra = leaf(r0, rdt), rb = leaf(r1, rdt);
        auto norm = [&](const Tensor& s, const Tensor& r) {
          return bf16_out ? detail::add_layer_norm_into_dtype(s, r, {cols}, w, b, 1e-5, kBFloat16)
                          : add_layer_norm(s, r, {cols}, w, b);
        };
        const auto [s1, y1] = norm(x, ra);
        const auto [s2, y2] = norm(s1, add(rb, y1));
        CHECK(s1.dtype() == kFloat32);
        CHECK(y1.dtype() == (bf16_out ? kBFloat16 : kFloat32));
        add(s2, mul(y2, 3.0)).backward(gy);
        return std::vector<Tensor>{s1.detach(), y1.detach(), s2.detach(), y2.detach(), x.grad(),
                                   ra.grad(),   rb.grad(),   w.grad(),    b.grad()};
      };
      const std::vector<Tensor> one = run(true), two = run(false);
      check_same_bits(one, two);
      CHECK(one[5].dtype() == rdt);  // the residual's gradient in its own dtype
      // The values themselves: the first norm against float64 on the same inputs.
      const Tensor s64 = add(x0.to(kFloat64), r0.to(rdt).to(kFloat64));
      CHECK(rel_error(one[0].to(kFloat64), s64) <= 1e-7);
      CHECK(rel_error(one[1].to(kFloat64),
                      layer_norm(s64, {cols}, w0.to(kFloat64), b0.to(kFloat64))) <=
            (bf16_out ? 1e-2 : 1e-5));
    }
}

TEST_CASE("add_layer_norm: float64 composes; shapes, dtypes and devices are checked") {
  const Tensor x = randn64({3, 5}, 130), r = randn64({3, 5}, 131);
  const auto [s, y] = add_layer_norm(x, r, {5});
  CHECK(s.to_vector<double>() == add(x, r).to_vector<double>());
  CHECK(y.to_vector<double>() == layer_norm(add(x, r), {5}).to_vector<double>());
  // float32 beside a float64 residual: add's promotion, the norm in float64.
  CHECK(add_layer_norm(x.to(kFloat32), r, {5}).second.dtype() == kFloat64);
  CHECK_THROWS_WITH_AS(add_layer_norm(x, randn64({1, 5}, 132), {5}),
                       doctest::Contains("add_layer_norm: the residual of shape [1, 5] does not "
                                         "match the input of shape [3, 5]"),
                       Error);
  CHECK_THROWS_WITH_AS(add_layer_norm(x, r, {4}),
                       doctest::Contains("add_layer_norm: normalized_shape [4] does not match"),
                       Error);
  CHECK_THROWS_WITH_AS(add_layer_norm(x, Tensor(), {5}), doctest::Contains("add_layer_norm"),
                       Error);
  CHECK_THROWS_WITH_AS(add_layer_norm(x, zeros({3, 5}, kInt64), {5}),
                       doctest::Contains("add_layer_norm: expects a floating-point tensor"), Error);
  CHECK_THROWS_WITH_AS(
      detail::add_layer_norm_into_dtype(x, r, {5}, Tensor(), Tensor(), 1e-5, kInt64),
      doctest::Contains("add_layer_norm: the result's dtype must be floating"), Error);
}

// dropout_add_layer_norm with its mask drawn inside the pass (the CPU's fused float32
// kernel, and the gradient's one pass from float32 to a bfloat16 residual) against
// dropout then add_layer_norm (the switch off): the same bits for the sums, the results
// and every gradient, through two norms in a row as a block chains them, and the
// generator left at the same counter. The first sum against the documented mask
// (dropout_mask) in float64, and the residual's gradient against the mask too, so a
// mask drawn wrongly on both paths would still fail.
TEST_CASE("dropout_add_layer_norm: the mask inside the pass equals dropout then the norm") {
  ember::testing::SwitchGuard guard(detail::dropout_add_layer_norm_fused,
                                    detail::set_dropout_add_layer_norm_fused);
  const int64_t rows = 13, cols = 40;
  const double p = 0.3;
  Generator gen(140);
  const Tensor x0 = randn({rows, cols}, kFloat32, &gen), w0 = randn({cols}, kFloat32, &gen),
               b0 = randn({cols}, kFloat32, &gen), r0 = randn({rows, cols}, kFloat32, &gen),
               r1 = randn({rows, cols}, kFloat32, &gen), gy = randn({rows, cols}, kFloat32, &gen);
  for (DType rdt : {kFloat32, kBFloat16})
    for (bool bf16_out : {false, true}) {
      INFO("residual ", rdt, ", bfloat16 result ", bf16_out);
      auto run = [&](bool fused) {
        detail::set_dropout_add_layer_norm_fused(fused);
        Generator g(77);
        g.set_offset(500);
        Tensor x = leaf(x0), w = leaf(w0), b = leaf(b0), ra = leaf(r0, rdt), rb = leaf(r1, rdt);
        auto norm = [&](const Tensor& s, const Tensor& r) {
          return bf16_out ? detail::dropout_add_layer_norm_into_dtype(s, r, p, true, {cols}, w, b,
                                                                      1e-5, kBFloat16, &g)
                          : dropout_add_layer_norm(s, r, p, true, {cols}, w, b, 1e-5, &g);
        };
        const auto [s1, y1] = norm(x, ra);
        const auto [s2, y2] = norm(s1, add(rb, y1).to(rdt));
        CHECK(std::string(s1.grad_fn()->name()) == (fused ? "DropoutAddBackward" : "AddBackward"));
        CHECK(g.offset() == 500 + 2 * rows * cols);
        add(s2, mul(y2, 3.0)).backward(gy);
        return std::vector<Tensor>{s1.detach(), y1.detach(), s2.detach(), y2.detach(), x.grad(),
                                   ra.grad(),   rb.grad(),   w.grad(),    b.grad()};
      };
      const std::vector<Tensor> one = run(true), two = run(false);
      check_same_bits(one, two);
      CHECK(one[5].dtype() == rdt);
      // The documented mask: the first norm drew counters 500.., the second 500 + n..
      const std::vector<double> m = ember::testing::dropout_mask(77, 500, rows * cols, p);
      const std::vector<double> xv = x0.to_vector<double>(), rv = r0.to(rdt).to_vector<double>(),
                                sv = one[0].to_vector<double>();
      const std::vector<double> gr = one[5].to(kFloat64).to_vector<double>();
      int kept = 0;
      for (size_t i = 0; i < m.size(); ++i) {
        const double dropped = m[i] != 0.0 ? rv[i] / (1.0 - p) : 0.0;
        CHECK(std::abs(sv[i] - (xv[i] + dropped)) <=
              1e-6 * (1.0 + std::abs(xv[i]) + std::abs(dropped)) +
                  (rdt == kBFloat16 ? 1e-2 * std::abs(dropped) : 0.0));
        if (m[i] == 0.0) CHECK(gr[i] == 0.0);  // the gradient dropped where the value was
        kept += m[i] != 0.0;
      }
      CHECK(kept > 0);
      CHECK(kept < rows * cols);
    }
}

TEST_CASE("dropout_add_layer_norm: eval, p 0 and p 1; bad probabilities are named") {
  const Tensor x = randn64({4, 6}, 150).to(kFloat32), r = randn64({4, 6}, 151).to(kFloat32);
  Generator g(3);
  // Not training, or p 0: add_layer_norm's values, and nothing drawn.
  for (auto [p, train] : {std::pair{0.4, false}, std::pair{0.0, true}}) {
    const auto [s, y] = dropout_add_layer_norm(x, r, p, train, {6}, Tensor(), Tensor(), 1e-5, &g);
    CHECK(s.to_vector<float>() == add(x, r).to_vector<float>());
    CHECK(y.to_vector<float>() == add_layer_norm(x, r, {6}).second.to_vector<float>());
  }
  CHECK(g.offset() == 0);
  // p 1: the residual dropped entirely (dropout's multiply by zero).
  const auto [s1, y1] = dropout_add_layer_norm(x, r, 1.0, true, {6});
  CHECK(s1.to_vector<float>() == x.to_vector<float>());
  CHECK(y1.to_vector<float>() == layer_norm(x, {6}).to_vector<float>());
  CHECK_THROWS_WITH_AS(
      (void)dropout_add_layer_norm(x, r, 1.5, true, {6}),
      doctest::Contains("dropout_add_layer_norm: dropout probability must be in [0, 1], got 1.5"),
      Error);
  CHECK_THROWS_WITH_AS((void)dropout_add_layer_norm(x, randn64({2, 6}, 152), 0.1, true, {6}),
                       doctest::Contains("dropout_add_layer_norm: the residual of shape [2, 6]"),
                       Error);
  CHECK(g.offset() == 0);  // refused calls draw nothing
}
