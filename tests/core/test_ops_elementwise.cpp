// Element-wise ops on CPU: forward against hand-computed values (broadcasting,
// views, empty tensors, dtypes), backward against finite differences, in-place
// ops and every error path.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "core/autograd.h"
#include "core/ops.h"
#include "gradcheck.h"

using namespace ember;
using ember::testing::rand64;
using ember::testing::randn64;

namespace {
using V = std::vector<double>;
using Inputs = std::vector<Tensor>;

using ember::testing::check_close;
}  // namespace

TEST_CASE("ops/add: same shapes, broadcasting and alpha match hand-computed values") {
  Tensor a = tensor({{1, 2, 3}, {4, 5, 6}});
  Tensor b = tensor({10, 20, 30});
  CHECK((a + b).to_vector<double>() == V{11, 22, 33, 14, 25, 36});
  CHECK((a + b).sizes() == Shape{2, 3});
  CHECK((b + a).to_vector<double>() == V{11, 22, 33, 14, 25, 36});
  CHECK(add(a, b, 2.0).to_vector<double>() == V{21, 42, 63, 24, 45, 66});
  Tensor col = from_vector(V{1, 2}, {2, 1});
  Tensor row = tensor({{10, 20, 30}});
  CHECK((col + row).sizes() == Shape{2, 3});
  CHECK((col + row).to_vector<double>() == V{11, 21, 31, 12, 22, 32});
  CHECK((a + full({}, 1.0)).to_vector<double>() == V{2, 3, 4, 5, 6, 7});
  CHECK((a + a).to_vector<double>() == V{2, 4, 6, 8, 10, 12});
}

TEST_CASE("ops/sub, mul, div: hand-computed values with broadcasting") {
  Tensor a = tensor({{2, 4}, {6, 8}});
  Tensor b = tensor({1, 2});
  CHECK((a - b).to_vector<double>() == V{1, 2, 5, 6});
  CHECK((b - a).to_vector<double>() == V{-1, -2, -5, -6});
  CHECK((a * b).to_vector<double>() == V{2, 8, 6, 16});
  CHECK((a / b).to_vector<double>() == V{2, 2, 6, 4});
  Tensor col = from_vector(V{1, 2}, {2, 1});
  CHECK((col * tensor({{3, 4, 5}})).to_vector<double>() == V{3, 4, 5, 6, 8, 10});
  CHECK((tensor({1.0}) / tensor({0.0})).item() == std::numeric_limits<double>::infinity());
}

TEST_CASE("ops/elementwise: non-contiguous and expanded views are read by their layout") {
  Tensor a = tensor({{1, 2, 3}, {4, 5, 6}});
  Tensor at = a.t();  // (3, 2)
  CHECK((at + tensor({{0, 10}, {0, 10}, {0, 10}})).to_vector<double>() == V{1, 14, 2, 15, 3, 16});
  CHECK(exp(at * 0.0).to_vector<double>() == V(6, 1.0));
  Tensor strided = arange(8, kFloat64).slice(0, 1, 8, 3);  // 1 4 7
  CHECK((strided * strided).to_vector<double>() == V{1, 16, 49});
  Tensor e = tensor({1.0, 2.0}).expand({3, 2});
  CHECK(neg(e).to_vector<double>() == V{-1, -2, -1, -2, -1, -2});
}

TEST_CASE("ops/elementwise: empty tensors broadcast to empty results") {
  Tensor e = zeros({0, 3});
  CHECK((e + tensor({1, 2, 3})).sizes() == Shape{0, 3});
  CHECK(exp(e).sizes() == Shape{0, 3});
  CHECK((zeros({0}) * 2.0).numel() == 0);
  CHECK((zeros({2, 0}) + zeros({1, 0})).sizes() == Shape{2, 0});
}

TEST_CASE("ops/scalar: add, sub, mul, div and their reversed forms") {
  Tensor a = tensor({1, 2, 4});
  CHECK((a + 1.0).to_vector<double>() == V{2, 3, 5});
  CHECK((1.0 + a).to_vector<double>() == V{2, 3, 5});
  CHECK((a - 1.0).to_vector<double>() == V{0, 1, 3});
  CHECK((1.0 - a).to_vector<double>() == V{0, -1, -3});
  CHECK((a * 3.0).to_vector<double>() == V{3, 6, 12});
  CHECK((3.0 * a).to_vector<double>() == V{3, 6, 12});
  CHECK((a / 2.0).to_vector<double>() == V{0.5, 1, 2});
  CHECK((4.0 / a).to_vector<double>() == V{4, 2, 1});
  CHECK((-a).to_vector<double>() == V{-1, -2, -4});
  CHECK(rsub(a, 10.0).to_vector<double>() == V{9, 8, 6});
  CHECK(rdiv(a, 8.0).to_vector<double>() == V{8, 4, 2});
}

TEST_CASE("ops/unary: pow, exp, log, sqrt, abs, relu, sigmoid, tanh, gelu values") {
  Tensor a = tensor({-2, -0.5, 0, 0.5, 2}, kFloat64);
  check_close(pow(a, 2.0), {4, 0.25, 0, 0.25, 4});
  check_close(pow(tensor({4.0, 9.0}, kFloat64), 0.5), {2, 3});
  check_close(exp(a), {std::exp(-2.0), std::exp(-0.5), 1, std::exp(0.5), std::exp(2.0)});
  check_close(log(tensor({1.0, std::exp(1.0), 0.5}, kFloat64)), {0, 1, std::log(0.5)});
  CHECK(log(tensor({0.0})).item() == -std::numeric_limits<double>::infinity());
  CHECK(std::isnan(sqrt(tensor({-1.0})).item()));
  check_close(sqrt(tensor({0.0, 4.0, 2.0}, kFloat64)), {0, 2, std::sqrt(2.0)});
  check_close(abs(a), {2, 0.5, 0, 0.5, 2});
  check_close(relu(a), {0, 0, 0, 0.5, 2});
  check_close(sigmoid(a), {1 / (1 + std::exp(2.0)), 1 / (1 + std::exp(0.5)), 0.5,
                           1 / (1 + std::exp(-0.5)), 1 / (1 + std::exp(-2.0))});
  check_close(tanh(a), {std::tanh(-2.0), std::tanh(-0.5), 0, std::tanh(0.5), std::tanh(2.0)});
  // gelu, exact (PyTorch's default): 0.5 x (1 + erf(x / sqrt(2)))
  auto gelu_ref = [](double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); };
  check_close(gelu(a), {gelu_ref(-2), gelu_ref(-0.5), 0, gelu_ref(0.5), gelu_ref(2)});
  check_close(gelu(a, "none"), {gelu_ref(-2), gelu_ref(-0.5), 0, gelu_ref(0.5), gelu_ref(2)});
  // gelu_tanh (approximate="tanh"): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
  auto gelu_tanh_ref = [](double x) {
    return 0.5 * x * (1 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
  };
  check_close(gelu_tanh(a),
              {gelu_tanh_ref(-2), gelu_tanh_ref(-0.5), 0, gelu_tanh_ref(0.5), gelu_tanh_ref(2)});
  check_close(gelu(a, "tanh"),
              {gelu_tanh_ref(-2), gelu_tanh_ref(-0.5), 0, gelu_tanh_ref(0.5), gelu_tanh_ref(2)});
  check_close(erf(a), {std::erf(-2.0), std::erf(-0.5), 0, std::erf(0.5), std::erf(2.0)});
  CHECK(ge(a, 0.0).to_vector<double>() == V{0, 0, 1, 1, 1});
  CHECK(gt(a, 0.0).to_vector<double>() == V{0, 0, 0, 1, 1});
  CHECK(a.abs().to_vector<double>() == abs(a).to_vector<double>());
  CHECK(a.relu().to_vector<double>() == relu(a).to_vector<double>());
}

TEST_CASE("ops/elementwise: float32 and bfloat16 results are rounded once from double") {
  Tensor a = tensor({1, 2, 3}, kFloat32);
  Tensor r = a / 3.0;
  CHECK(r.dtype() == kFloat32);
  CHECK(r.to_vector<float>() == std::vector<float>{1.0f / 3, 2.0f / 3, 1.0f});
  Tensor b = tensor({1, 2, 3}, kBFloat16);
  Tensor s = b + 0.001;  // below bf16 resolution at these magnitudes
  CHECK(s.dtype() == kBFloat16);
  CHECK(s.to_vector<double>() == V{1, 2, 3});
  CHECK((b * 1.5).to_vector<double>() == V{1.5, 3, 4.5});
}

TEST_CASE("ops/cast: converts between dtypes and is differentiable") {
  Tensor a = tensor({1.25, -2.75, 3.0}, kFloat64);
  Tensor f = cast(a, kFloat32);
  CHECK(f.dtype() == kFloat32);
  CHECK(f.to_vector<double>() == V{1.25, -2.75, 3.0});
  CHECK(cast(a, kFloat64).is_same(a));
  Tensor bf = cast(tensor({1.0 + 1.0 / 512}, kFloat64), kBFloat16);  // ties to even -> 1
  CHECK(bf.item() == 1.0);
  Tensor i = cast(a, kInt64);
  CHECK(i.dtype() == kInt64);
  CHECK(i.to_vector<int64_t>() == std::vector<int64_t>{1, -2, 3});
  CHECK(a.to(kFloat32).dtype() == kFloat32);

  Tensor x = tensor({1.0, 2.0}, kFloat64).set_requires_grad(true);
  Tensor y = cast(x, kFloat32);
  CHECK(y.requires_grad());
  sum(y * 3.0).backward();
  CHECK(x.grad().dtype() == kFloat64);
  CHECK(x.grad().to_vector<double>() == V{3, 3});
  CHECK_FALSE(cast(x, kInt64).requires_grad());
}

TEST_CASE(
    "ops/elementwise: mismatched shapes, bool arithmetic and undefined operands throw naming the "
    "op") {
  Tensor a = zeros({2, 3});
  CHECK_THROWS_WITH_AS(a + zeros({2}),
                       doctest::Contains("add: shapes [2, 3] and [2] cannot be broadcast together"),
                       Error);
  CHECK_THROWS_WITH_AS(a - zeros({3, 3}), doctest::Contains("sub: shapes [2, 3] and [3, 3]"),
                       Error);
  CHECK_THROWS_WITH_AS(add(a, Tensor()),
                       doctest::Contains("add: second operand is an undefined tensor"), Error);
  CHECK_THROWS_WITH_AS(exp(Tensor()), doctest::Contains("exp: input is an undefined tensor"),
                       Error);
  Tensor mask = gt(a, 0.0);
  CHECK_THROWS_WITH_AS(mask + mask,
                       doctest::Contains("add: arithmetic on two bool tensors is not supported"),
                       Error);
  Tensor idx = argmax(zeros({2, 2}), 0);
  CHECK_THROWS_WITH_AS(add(idx, idx, 0.5),
                       doctest::Contains("add: alpha must be an integer for integer operands"),
                       Error);
  CHECK_THROWS_WITH_AS(where(a, a, a),
                       doctest::Contains("where: the condition must be a bool tensor, got float32"),
                       Error);
}

TEST_CASE("ops/in-place: fill_, zero_, copy_, add_, mul_ change values and bump the version") {
  Tensor t = zeros({2, 3});
  const uint64_t v0 = t.version();
  t.fill_(2.5);
  CHECK(t.to_vector<double>() == V(6, 2.5));
  CHECK(t.version() > v0);
  t.zero_();
  CHECK(t.to_vector<double>() == V(6, 0.0));
  t.copy_(tensor({1, 2, 3}));  // broadcast over rows
  CHECK(t.to_vector<double>() == V{1, 2, 3, 1, 2, 3});
  t.add_(tensor({1, 1, 1}), 2.0);
  CHECK(t.to_vector<double>() == V{3, 4, 5, 3, 4, 5});
  t.add_(1.0);
  t.mul_(2.0);
  CHECK(t.to_vector<double>() == V{8, 10, 12, 8, 10, 12});
  t.mul_(from_vector(V{1, 0.5}, {2, 1}));
  CHECK(t.to_vector<double>() == V{8, 10, 12, 4, 5, 6});
  t.sub_(ones({2, 3}));
  t.div_(2.0);
  CHECK(t.to_vector<double>() == V{3.5, 4.5, 5.5, 1.5, 2, 2.5});
  t += ones({3});
  t -= ones({2, 3});
  t *= 2.0;
  t *= full({2, 3}, 0.5);
  CHECK(t.to_vector<double>() == V{3.5, 4.5, 5.5, 1.5, 2, 2.5});

  Tensor d = zeros({3}, kFloat64);
  d.copy_(tensor({1.5, 2.5, 3.5}, kFloat32));  // any dtypes
  CHECK(d.to_vector<double>() == V{1.5, 2.5, 3.5});
}

TEST_CASE("ops/in-place: writes through views reach the base tensor") {
  Tensor base = zeros({3, 3}, kFloat64);
  Tensor col = base.select(1, 1);
  col.fill_(7.0);
  CHECK(base.to_vector<double>() == V{0, 7, 0, 0, 7, 0, 0, 7, 0});
  Tensor tr = base.t();
  tr.copy_(arange(9, kFloat64).reshape({3, 3}));
  CHECK(base.to_vector<double>() == V{0, 3, 6, 1, 4, 7, 2, 5, 8});
  CHECK(col.version() == base.version());  // one counter per storage
}

TEST_CASE("ops/in-place: refused on tensors that require grad, allowed under NoGradGuard") {
  Tensor w = ones({2}).set_requires_grad(true);
  CHECK_THROWS_WITH_AS(w.add_(1.0),
                       doctest::Contains("add_: in-place operation on a tensor that requires grad"),
                       Error);
  CHECK_THROWS_WITH_AS(w.fill_(0.0), doctest::Contains("fill_: in-place operation"), Error);
  CHECK_THROWS_WITH_AS(w.mul_(ones({2})), doctest::Contains("mul_: in-place"), Error);
  CHECK_THROWS_WITH_AS(w.copy_(zeros({2})), doctest::Contains("copy_: in-place"), Error);
  {
    NoGradGuard ng;
    w.add_(1.0);
  }
  CHECK(w.to_vector<double>() == V{2, 2});
}

TEST_CASE("ops/in-place: shapes that do not broadcast to the destination throw") {
  Tensor t = zeros({3});
  CHECK_THROWS_WITH_AS(
      t.add_(zeros({2, 3})),
      doctest::Contains("add_: operand of shape [2, 3] cannot be broadcast to [3]"), Error);
  CHECK_THROWS_WITH_AS(t.mul_(zeros({2, 3})), doctest::Contains("mul_: operand of shape [2, 3]"),
                       Error);
  CHECK_THROWS_WITH_AS(t.copy_(zeros({4})), doctest::Contains("copy_"), Error);
  CHECK_THROWS_WITH_AS(t.add_(zeros({3}, kFloat64)),
                       doctest::Contains("add_: operands have different dtypes"), Error);
}

TEST_CASE("ops/add, sub: broadcasting backward matches finite differences") {
  CHECK_GRADCHECK([](const Inputs& v) { return v[0] + v[1]; },
                  {randn64({2, 3}, 1), randn64({3}, 2)});
  CHECK_GRADCHECK([](const Inputs& v) { return add(v[0], v[1], -2.5); },
                  {randn64({2, 1}, 3), randn64({1, 4}, 4)});
  CHECK_GRADCHECK([](const Inputs& v) { return v[0] - v[1]; },
                  {randn64({3}, 5), randn64({2, 3}, 6)});
  CHECK_GRADCHECK([](const Inputs& v) { return v[0] + v[1]; },
                  {randn64({2, 3}, 7), randn64({}, 8)});
}

TEST_CASE("ops/mul, div: broadcasting backward matches finite differences") {
  CHECK_GRADCHECK([](const Inputs& v) { return v[0] * v[1]; },
                  {randn64({4, 1, 3}, 9), randn64({2, 3}, 10)});
  CHECK_GRADCHECK([](const Inputs& v) { return v[0] * v[0]; }, {randn64({5}, 11)});
  CHECK_GRADCHECK([](const Inputs& v) { return v[0] / v[1]; },
                  {randn64({2, 3}, 12), rand64({3}, 13, 0.5, 2.0)});
  CHECK_GRADCHECK([](const Inputs& v) { return v[0] / v[1]; },
                  {randn64({3}, 14), rand64({2, 1}, 15, -2.0, -0.5)});
}

TEST_CASE("ops/scalar: backward matches finite differences") {
  Tensor x = rand64({2, 3}, 16, 0.5, 2.0);
  CHECK_GRADCHECK([](const Inputs& v) { return v[0] + 3.0; }, {x});
  CHECK_GRADCHECK([](const Inputs& v) { return v[0] * -1.5; }, {x});
  CHECK_GRADCHECK([](const Inputs& v) { return 2.0 - v[0]; }, {x});
  CHECK_GRADCHECK([](const Inputs& v) { return 2.0 / v[0]; }, {x});
  CHECK_GRADCHECK([](const Inputs& v) { return v[0] / 4.0; }, {x});
  CHECK_GRADCHECK([](const Inputs& v) { return -v[0]; }, {x});
}

TEST_CASE("ops/unary: backward of pow, exp, log, sqrt, abs matches finite differences") {
  Tensor pos = rand64({3, 4}, 17, 0.5, 2.0);
  Tensor any = randn64({3, 4}, 18);
  CHECK_GRADCHECK([](const Inputs& v) { return pow(v[0], 3.0); }, {any});
  CHECK_GRADCHECK([](const Inputs& v) { return pow(v[0], 0.5); }, {pos});
  CHECK_GRADCHECK([](const Inputs& v) { return pow(v[0], -1.5); }, {pos});
  CHECK_GRADCHECK([](const Inputs& v) { return exp(v[0]); }, {any});
  CHECK_GRADCHECK([](const Inputs& v) { return log(v[0]); }, {pos});
  CHECK_GRADCHECK([](const Inputs& v) { return sqrt(v[0]); }, {pos});
  // abs and relu are smooth away from 0: keep inputs at least 0.1 from it.
  Tensor away = mul(rand64({3, 4}, 19, 0.1, 2.0), ge(randn64({3, 4}, 20), 0.0) * 2.0 - 1.0);
  CHECK_GRADCHECK([](const Inputs& v) { return abs(v[0]); }, {away});
  CHECK_GRADCHECK([](const Inputs& v) { return relu(v[0]); }, {away});
}

TEST_CASE("ops/unary: backward of sigmoid, tanh, gelu matches finite differences") {
  Tensor x = randn64({4, 5}, 21) * 2.0;
  CHECK_GRADCHECK([](const Inputs& v) { return sigmoid(v[0]); }, {x});
  CHECK_GRADCHECK([](const Inputs& v) { return tanh(v[0]); }, {x});
  CHECK_GRADCHECK([](const Inputs& v) { return gelu(v[0]); }, {x});
  CHECK_GRADCHECK([](const Inputs& v) { return gelu(v[0], "tanh"); }, {x});
  CHECK_GRADCHECK([](const Inputs& v) { return erf(v[0]); }, {x});
  CHECK_GRADCHECK([](const Inputs& v) { return v[0].sigmoid() * v[0].tanh(); }, {x});
}

// PyTorch's values (torch.nn.functional.gelu(torch.tensor(1.0)) and with
// approximate="tanh"), each worked by hand from its definition: Phi(1) =
// 0.5 (1 + erf(1 / sqrt(2))) = 0.841344746..., and 0.5 (1 + tanh(sqrt(2 / pi) 1.044715))
// = 0.841191990...
TEST_CASE("ops/gelu: exact by default, the tanh form by name, as PyTorch") {
  CHECK(gelu(tensor({1.0}, kFloat64)).item() == doctest::Approx(0.8413447460685429).epsilon(1e-15));
  CHECK(gelu(tensor({1.0}, kFloat64), "tanh").item() ==
        doctest::Approx(0.8411919906082768).epsilon(1e-15));
  CHECK(gelu(tensor({1.0})).item() == doctest::Approx(0.8413447).epsilon(1e-7));
  CHECK(gelu(tensor({1.0}), "tanh").item() == doctest::Approx(0.8411920).epsilon(1e-7));
  CHECK(gelu_tanh(tensor({1.0})).item() == doctest::Approx(0.8411920).epsilon(1e-7));
  // Far in the negative tail the exact form does not cancel to 0: x Phi(x) with
  // Phi(-10) = 7.62e-24.
  CHECK(gelu(tensor({-10.0}, kFloat64)).item() ==
        doctest::Approx(-7.619853024160593e-23).epsilon(1e-12));
  CHECK_THROWS_WITH_AS(gelu(tensor({1.0}), "erf"),
                       doctest::Contains("gelu: approximate must be \"none\" or \"tanh\""), Error);
}

TEST_CASE("ops/cast: backward matches finite differences") {
  // A round trip through float32 is the identity up to float rounding: a larger
  // step keeps that rounding small next to the difference.
  CHECK_GRADCHECK([](const Inputs& v) { return cast(cast(v[0], kFloat32), kFloat64) * 2.0; },
                  {randn64({3, 2}, 22)}, 1e-2, 1e-5);
  CHECK_GRADCHECK([](const Inputs& v) { return cast(v[0], kFloat64); }, {randn64({3}, 23)});
}

TEST_CASE("ops/elementwise: a chain of ops backward matches finite differences") {
  CHECK_GRADCHECK(
      [](const Inputs& v) { return tanh(v[0] * v[1] + 1.0) / (exp(v[1]) + 1.0) - sigmoid(v[0]); },
      {randn64({2, 3}, 24), randn64({3}, 25)});
}
