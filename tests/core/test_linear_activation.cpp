// linear with a fused activation (core/ops/linear.cpp) on the CPU: forward equals
// the composition act(linear(x, w, b)) (exact GELU composed from erf, so the
// reference does not share the fused formula), backward passes finite
// differences in float64, and the 3-argument form is unchanged.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "core/autograd.h"
#include "core/ops.h"
#include "gradcheck.h"

using namespace ember;
using ember::testing::randn64;
using ember::testing::rel_error;

namespace {
Tensor composed(const Tensor& x, const Tensor& w, const Tensor& b, Activation act) {
  Tensor y = linear(x, w, b);
  switch (act) {
    case Activation::Relu:
      return relu(y);
    case Activation::Gelu:
      return 0.5 * y * (1.0 + erf(y * (1.0 / std::sqrt(2.0))));  // exact, from erf
    case Activation::GeluTanh:
      return gelu(y, "tanh");
    case Activation::Silu:
      return silu(y);
    case Activation::None:
      return y;
  }
  return y;
}
}  // namespace

TEST_CASE("core/linear activation: forward equals act(linear(x, w, b)) on the CPU") {
  Tensor x = randn64({5, 4}, 1), w = randn64({3, 4}, 2), b = randn64({3}, 3);
  for (Activation act : {Activation::None, Activation::Relu, Activation::Gelu, Activation::GeluTanh,
                         Activation::Silu}) {
    INFO("act=", activation_name(act));
    // The erf composition rounds differently from the fused erfc formula.
    const double tol = act == Activation::Gelu ? 1e-14 : 1e-15;
    CHECK(rel_error(linear(x, w, b, act), composed(x, w, b, act)) <= tol);
    CHECK(rel_error(linear(x, w, Tensor(), act), composed(x, w, Tensor(), act)) <= tol);
  }
  CHECK(rel_error(linear(x, w, b), linear(x, w, b, Activation::None)) == 0.0);
  SUBCASE("leading dims are kept") {
    CHECK(linear(randn64({2, 3, 4}, 4), w, b, Activation::Gelu).sizes() == Shape{2, 3, 3});
  }
}

TEST_CASE("core/linear activation: backward matches finite differences (ReLU, GELU, SiLU)") {
  for (Activation act :
       {Activation::Relu, Activation::Gelu, Activation::GeluTanh, Activation::Silu}) {
    INFO("act=", activation_name(act));
    // Shifted away from 0 so ReLU's kink stays outside the finite-difference step.
    Tensor x = randn64({4, 3}, 10), w = randn64({5, 3}, 11), b = add(randn64({5}, 12), 0.05);
    CHECK_GRADCHECK(
        [act](const std::vector<Tensor>& in) { return linear(in[0], in[1], in[2], act); },
        {x, w, b});
    CHECK_GRADCHECK(
        [act](const std::vector<Tensor>& in) { return linear(in[0], in[1], Tensor(), act); },
        {x, w});
  }
}

TEST_CASE("core/linear activation: gradients equal the unfused composition's") {
  for (Activation act :
       {Activation::Relu, Activation::Gelu, Activation::GeluTanh, Activation::Silu}) {
    INFO("act=", activation_name(act));
    std::vector<Tensor> a = {randn64({6, 4}, 20), randn64({3, 4}, 21), randn64({3}, 22)};
    std::vector<Tensor> c;
    for (Tensor& t : a) {
      t.set_requires_grad(true);
      c.push_back(t.detach().clone().set_requires_grad(true));
    }
    Tensor wy = randn64({6, 3}, 23);
    std::vector<Tensor> ga = grad({mul(linear(a[0], a[1], a[2], act), wy).sum()}, a);
    std::vector<Tensor> gc = grad({mul(composed(c[0], c[1], c[2], act), wy).sum()}, c);
    for (size_t i = 0; i < ga.size(); ++i) CHECK(rel_error(ga[i], gc[i]) <= 1e-14);
  }
}

TEST_CASE("core/linear activation: empty batch and zero features on the CPU") {
  Tensor b = tensor({-1.0, 2.0}, kFloat64);
  Tensor y = linear(zeros({3, 0}, kFloat64), zeros({2, 0}, kFloat64), b, Activation::Relu);
  CHECK(y.sizes() == Shape{3, 2});
  CHECK(y.to_vector<double>() == std::vector<double>{0, 2, 0, 2, 0, 2});
  Tensor x = zeros({0, 4}, kFloat64).set_requires_grad(true);
  Tensor w = randn64({2, 4}, 5).set_requires_grad(true);
  Tensor bb = b.detach().clone().set_requires_grad(true);
  Tensor e = linear(x, w, bb, Activation::Gelu);
  CHECK(e.sizes() == Shape{0, 2});
  CHECK(linear(x.detach(), w.detach(), b, Activation::GeluTanh).sizes() == Shape{0, 2});
  e.sum().backward();
  CHECK(w.grad().sizes() == w.sizes());
  CHECK(bb.grad().to_vector<double>() == std::vector<double>{0, 0});
}
