// Reductions on CPU: sum, mean, max, argmax and sum_to against hand-computed
// values, their backward against finite differences, and their error paths.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "core/ops.h"
#include "gradcheck.h"

using namespace ember;
using ember::testing::check_close;
using ember::testing::gradcheck;
using ember::testing::randn64;

namespace {
using V = std::vector<double>;
const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();
}  // namespace

TEST_CASE("ops/sum: whole tensor and along each dim match hand-computed values") {
  Tensor x = tensor({{1, 2, 3}, {4, 5, 6}});
  Tensor all = sum(x);
  CHECK(all.dim() == 0);
  CHECK(all.item() == 21.0);
  CHECK(sum(x, 0).to_vector<double>() == V{5, 7, 9});
  CHECK(sum(x, 1).to_vector<double>() == V{6, 15});
  CHECK(sum(x, -1).to_vector<double>() == V{6, 15});
  CHECK(sum(x, 0, true).sizes() == Shape{1, 3});
  CHECK(sum(x, 1, true).sizes() == Shape{2, 1});
  CHECK(sum(x, 1).sizes() == Shape{2});
  CHECK(x.sum(1, true).to_vector<double>() == V{6, 15});
}

TEST_CASE("ops/sum: the middle dim of a 3-D tensor (outer, n, inner)") {
  Tensor x = arange(24, kFloat64).reshape({2, 3, 4});
  Tensor s = sum(x, 1);
  REQUIRE(s.sizes() == Shape{2, 4});
  // element (o, i) = sum_k (12 o + 4 k + i) = 36 o + 12 + 3 i
  V want;
  for (int o = 0; o < 2; ++o)
    for (int i = 0; i < 4; ++i) want.push_back(36.0 * o + 12 + 3 * i);
  CHECK(s.to_vector<double>() == want);
  CHECK(sum(x, 0).to_vector<double>() == sum(x.transpose(0, 2), 2).t().to_vector<double>());
  CHECK(sum(x, 2).to_vector<double>() == V{6, 22, 38, 54, 70, 86});
}

TEST_CASE("ops/sum: non-contiguous views are reduced by their logical layout") {
  Tensor x = tensor({{1, 2, 3}, {4, 5, 6}});
  Tensor xt = x.t();  // (3, 2), column-major view
  CHECK_FALSE(xt.is_contiguous());
  CHECK(sum(xt, 0).to_vector<double>() == V{6, 15});
  CHECK(sum(xt, 1).to_vector<double>() == V{5, 7, 9});
  Tensor every_other = arange(10, kFloat64).slice(0, 1, 10, 2);  // 1 3 5 7 9
  CHECK(sum(every_other).item() == 25.0);
  Tensor broadcast = tensor({1.0, 2.0}).expand({3, 2});
  CHECK(sum(broadcast, 0).to_vector<double>() == V{3, 6});
}

TEST_CASE("ops/sum: empty reductions give 0, mean of nothing is NaN") {
  Tensor e = zeros({0});
  CHECK(sum(e).item() == 0.0);
  CHECK(std::isnan(mean(e).item()));
  Tensor e2 = zeros({2, 0, 3});
  Tensor s = sum(e2, 1);
  CHECK(s.sizes() == Shape{2, 3});
  CHECK(s.to_vector<double>() == V(6, 0.0));
  Tensor m = mean(e2, 1);
  for (double v : m.to_vector<double>()) CHECK(std::isnan(v));
  CHECK(sum(e2, 0).sizes() == Shape{0, 3});  // empty output, nothing to compute
  CHECK(sum(e2, 0).numel() == 0);
}

TEST_CASE("ops/sum: 0-dim tensors reduce to themselves") {
  Tensor s = full({}, 4.0);
  CHECK(sum(s).item() == 4.0);
  CHECK(sum(s, 0).dim() == 0);
  CHECK(sum(s, -1, true).item() == 4.0);
  CHECK(mean(s).item() == 4.0);
  CHECK(max(s, 0).values.item() == 4.0);
  CHECK(argmax(s, 0).item() == 0.0);
}

TEST_CASE("ops/sum: float32 and bfloat16 accumulate in double on CPU") {
  Tensor x = full({1000000}, 0.1, kFloat32);
  // float32(0.1) * 1e6 summed in double, rounded to float once.
  CHECK(sum(x).item() == doctest::Approx(static_cast<double>(0.1f) * 1e6).epsilon(1e-7));
  CHECK(sum(x).dtype() == kFloat32);
  Tensor b = ones({4096}, kBFloat16);
  CHECK(sum(b).item() == 4096.0);  // a bf16 accumulator would stall at 256
  CHECK(sum(b).dtype() == kBFloat16);
}

TEST_CASE("ops/mean: whole tensor and along dims") {
  Tensor x = tensor({{1, 2, 3}, {4, 5, 6}});
  CHECK(mean(x).item() == 3.5);
  CHECK(mean(x, 0).to_vector<double>() == V{2.5, 3.5, 4.5});
  CHECK(mean(x, 1, true).to_vector<double>() == V{2, 5});
  CHECK(mean(x, 1, true).sizes() == Shape{2, 1});
  CHECK(x.mean().item() == 3.5);
}

TEST_CASE("ops/max: values and argmax, first index on ties, NaN wins") {
  Tensor x = tensor({{1, 7, 7, 2}, {-1, -5, -0.5, -3}});
  CHECK(max(x, 1).values.to_vector<double>() == V{7, -0.5});
  CHECK(argmax(x, 1).to_vector<int64_t>() == std::vector<int64_t>{1, 2});
  CHECK(argmax(x, 1).dtype() == kInt64);
  CHECK(max(x, 0).values.to_vector<double>() == V{1, 7, 7, 2});
  CHECK(argmax(x, 0).to_vector<int64_t>() == std::vector<int64_t>{0, 0, 0, 0});
  CHECK(max(x, 1, true).values.sizes() == Shape{2, 1});
  CHECK(argmax(x, -1, true).sizes() == Shape{2, 1});

  Tensor ties = tensor({3, 3, 3});
  CHECK(argmax(ties, 0).item() == 0.0);
  Tensor infs = tensor({-kInf, -kInf});
  CHECK(argmax(infs, 0).item() == 0.0);
  CHECK(max(infs, 0).values.item() == -kInf);
  Tensor nan = tensor({1, kNaN, 5, kNaN});
  CHECK(std::isnan(max(nan, 0).values.item()));
  CHECK(argmax(nan, 0).item() == 1.0);

  Tensor y = arange(24, kFloat64).reshape({2, 3, 4});
  CHECK(argmax(y, 1).to_vector<int64_t>() == std::vector<int64_t>(8, 2));
  CHECK(max(y, 1).values.to_vector<double>() == V{8, 9, 10, 11, 20, 21, 22, 23});
  CHECK(max(y.transpose(1, 2), 2).values.to_vector<double>() == V{8, 9, 10, 11, 20, 21, 22, 23});
}

TEST_CASE("ops/max: backward routes the gradient to the first argmax") {
  Tensor x = tensor({{1, 3, 3}, {5, 0, 2}}).set_requires_grad(true);
  max(x, 1).values.sum().backward();
  CHECK(x.grad().to_vector<double>() == V{0, 1, 0, 1, 0, 0});
  Tensor y = tensor({{1, 3, 3}, {5, 0, 2}}).set_requires_grad(true);
  Tensor m = max(y, 0, true);  // (1, 3)
  mul(m, tensor({{1, 2, 3}})).sum().backward();
  CHECK(y.grad().to_vector<double>() == V{0, 2, 3, 1, 0, 0});
}

TEST_CASE("ops/max: empty dims and bad dims throw naming the op; integers reduce as PyTorch") {
  CHECK_THROWS_WITH_AS(max(zeros({2, 0}), 1),
                       doctest::Contains("max: cannot reduce over dim 1 of size 0"), Error);
  CHECK_THROWS_WITH_AS(argmax(zeros({0}), 0), doctest::Contains("argmax: cannot reduce"), Error);
  CHECK(max(zeros({0, 3}), 1).values.sizes() == Shape{0});  // non-empty dim, empty output
  CHECK_THROWS_WITH_AS(max(zeros({2, 3}), 2), doctest::Contains("max: dim 2 is out of range"),
                       Error);
  CHECK_THROWS_WITH_AS(sum(zeros({2, 3}), -3), doctest::Contains("sum: dim -3 is out of range"),
                       Error);
  CHECK_THROWS_WITH_AS(mean(zeros({2}), 1), doctest::Contains("mean: dim 1"), Error);
  // Integers reduce as in PyTorch: sum and max give int64, mean refuses.
  Tensor ints = tensor({3, -1, 7}, kInt64);
  CHECK(sum(ints).dtype() == kInt64);
  CHECK(sum(ints).item<int64_t>() == 9);
  CHECK(max(ints, 0).values.dtype() == kInt64);
  CHECK(max(ints, 0).values.item<int64_t>() == 7);
  CHECK(max(ints, 0).indices.item<int64_t>() == 2);
  CHECK_THROWS_WITH_AS(
      mean(ints), doctest::Contains("mean: expects a floating-point tensor, got int64"), Error);
  CHECK_THROWS_WITH_AS(sum(Tensor()), doctest::Contains("sum: input is an undefined tensor"),
                       Error);
}

TEST_CASE("ops/sum: backward matches finite differences (all, dim, keepdim)") {
  Tensor x = randn64({3, 4, 5}, 1);
  CHECK_GRADCHECK([](const std::vector<Tensor>& v) { return sum(v[0]); }, {x});
  for (int64_t d = -3; d < 3; ++d) {
    CAPTURE(d);
    CHECK_GRADCHECK([d](const std::vector<Tensor>& v) { return sum(v[0], d); }, {x});
    CHECK_GRADCHECK([d](const std::vector<Tensor>& v) { return sum(v[0], d, true); }, {x});
  }
  CHECK_GRADCHECK([](const std::vector<Tensor>& v) { return sum(v[0].t(), 1); },
                  {randn64({4, 6}, 2)});
  CHECK_GRADCHECK([](const std::vector<Tensor>& v) { return sum(v[0], 0); },
                  {full({}, 2.0, kFloat64)});
}

TEST_CASE("ops/mean: backward matches finite differences (all, dim, keepdim)") {
  Tensor x = randn64({3, 4, 5}, 3);
  CHECK_GRADCHECK([](const std::vector<Tensor>& v) { return mean(v[0]); }, {x});
  for (int64_t d = 0; d < 3; ++d) {
    CAPTURE(d);
    CHECK_GRADCHECK([d](const std::vector<Tensor>& v) { return mean(v[0], d); }, {x});
    CHECK_GRADCHECK([d](const std::vector<Tensor>& v) { return mean(v[0], d, true); }, {x});
  }
}

TEST_CASE("ops/max: backward matches finite differences") {
  Tensor x = randn64({3, 4, 5}, 4);  // distinct values almost surely: max is smooth there
  for (int64_t d = 0; d < 3; ++d) {
    CAPTURE(d);
    CHECK_GRADCHECK([d](const std::vector<Tensor>& v) { return max(v[0], d); }, {x});
    CHECK_GRADCHECK([d](const std::vector<Tensor>& v) { return max(v[0], d, true); }, {x});
  }
}

TEST_CASE("ops/sum_to: sums broadcast dims back to the original shape") {
  Tensor g = tensor({{1, 2, 3}, {4, 5, 6}});
  CHECK(sum_to(g, {3}).to_vector<double>() == V{5, 7, 9});
  CHECK(sum_to(g, {1, 3}).to_vector<double>() == V{5, 7, 9});
  CHECK(sum_to(g, {1, 3}).sizes() == Shape{1, 3});
  CHECK(sum_to(g, {2, 1}).to_vector<double>() == V{6, 15});
  CHECK(sum_to(g, {}).item() == 21.0);
  CHECK(sum_to(g, {1, 1}).sizes() == Shape{1, 1});
  CHECK(sum_to(g, {2, 3}).is_same(g));  // nothing to do: the same tensor back

  Tensor h = arange(24, kFloat64).reshape({2, 3, 4});
  Tensor r = sum_to(h, {3, 1});  // sum over dims 0 and 2
  CHECK(r.sizes() == Shape{3, 1});
  CHECK(r.to_vector<double>() == sum(sum(h, 2), 0).to_vector<double>());
  Tensor r2 = sum_to(h, {2, 1, 4});
  CHECK(r2.to_vector<double>() == sum(h, 1, true).to_vector<double>());
  CHECK(sum_to(zeros({0, 3}), {1, 3}).to_vector<double>() == V{0, 0, 0});
  CHECK(sum_to(ones({1, 3}), {3}).to_vector<double>() == V{1, 1, 1});

  CHECK_THROWS_WITH_AS(
      sum_to(g, {4}),
      doctest::Contains("sum_to: a gradient of shape [2, 3] cannot be summed to shape [4]"), Error);
  CHECK_THROWS_WITH_AS(sum_to(g, {1, 2, 3}), doctest::Contains("sum_to"), Error);
}

TEST_CASE("ops/sum_to: backward matches finite differences") {
  CHECK_GRADCHECK(
      [](const std::vector<Tensor>& v) {
        return sum_to(v[0], {3, 1});
      },
      {randn64({2, 3, 4}, 5)});
}

TEST_CASE("ops/sum, mean: over a list of dims, negative dims, keepdim, empty list = all") {
  Tensor x = arange(24, kFloat64).reshape({2, 3, 4});  // x[o][k][i] = 12 o + 4 k + i
  Tensor s = sum(x, {0, 2});
  CHECK(s.sizes() == Shape{3});
  CHECK(s.to_vector<double>() == V{60, 92, 124});  // sum over o and i: 60 + 32 k
  CHECK(sum(x, {2, 0}, true).sizes() == Shape{1, 3, 1});
  CHECK(sum(x, {-1, -3}).to_vector<double>() == V{60, 92, 124});
  CHECK(sum(x, std::vector<int64_t>{}).item() == 276.0);
  CHECK(sum(x, std::vector<int64_t>{}, true).sizes() == Shape{1, 1, 1});
  CHECK(mean(x, {0, 2}).to_vector<double>() == V{7.5, 11.5, 15.5});
  CHECK(mean(x, {1}, true).sizes() == Shape{2, 1, 4});
  CHECK(mean(x, std::vector<int64_t>{}).item() == 11.5);
  CHECK(std::isnan(mean(zeros({0, 3}), {0, 1}).item()));
  CHECK(sum(zeros({0, 3}), {0}).to_vector<double>() == V{0, 0, 0});
  CHECK(sum(tensor({1, 2, 3}, kInt64), {0}).dtype() == kInt64);
  CHECK_THROWS_WITH_AS(sum(x, {0, -3}),
                       doctest::Contains("sum: dim 0 appears more than once in the list of dims"),
                       Error);
  CHECK_THROWS_WITH_AS(mean(x, {3}), doctest::Contains("mean: dim 3 is out of range"), Error);
  CHECK_GRADCHECK(
      [](const std::vector<Tensor>& v) {
        return sum(v[0], {0, 2});
      },
      {randn64({2, 3, 4}, 11)});
  CHECK_GRADCHECK(
      [](const std::vector<Tensor>& v) {
        return mean(v[0], {-1, 1}, true);
      },
      {randn64({2, 3, 4}, 12)});
}

TEST_CASE("ops/amax, amin: over dims, NaN wins, the gradient shared evenly on ties") {
  Tensor x = tensor({{1, 5, 5}, {2, 0, 3}});
  CHECK(amax(x).item() == 5.0);
  CHECK(amax(x, {1}).to_vector<double>() == V{5, 3});
  CHECK(amin(x, {0}).to_vector<double>() == V{1, 0, 3});
  CHECK(amax(x, {0, 1}, true).sizes() == Shape{1, 1});
  CHECK(std::isnan(amax(tensor({1, kNaN, 2})).item()));
  CHECK(amin(tensor({3, 1}, kInt64), {0}).item<int64_t>() == 1);
  Tensor t = tensor({{1, 5, 5}, {2, 0, 3}}).set_requires_grad(true);
  mul(amax(t, {1}), tensor({10, 100})).sum().backward();
  CHECK(t.grad().to_vector<double>() == V{0, 5, 5, 0, 0, 100});
  Tensor a = tensor({{4, 1}, {4, 4}}, kFloat64).set_requires_grad(true);
  amax(a).backward();  // three elements tie for the maximum
  check_close(a.grad(), V{1.0 / 3, 0, 1.0 / 3, 1.0 / 3});
  CHECK_GRADCHECK(
      [](const std::vector<Tensor>& v) {
        return amin(v[0], {0, 2});
      },
      {randn64({2, 3, 4}, 13)});
  CHECK_THROWS_WITH_AS(amax(zeros({2, 0}), {1}),
                       doctest::Contains("amax: cannot reduce over dim 1 of size 0"), Error);
  CHECK_THROWS_WITH_AS(amin(x, {1, 1}), doctest::Contains("amin: dim 1 appears more than once"),
                       Error);
}

TEST_CASE("ops/var, std: correction, dims, keepdim; correction >= N gives inf or nan") {
  Tensor x = tensor({{1, 2, 3, 4}, {2, 2, 2, 2}}, kFloat64);
  // row 0: mean 2.5, squared deviations sum to 5
  check_close(var(x, 1), V{5.0 / 3, 0});
  check_close(var(x, 1, 0.0), V{5.0 / 4, 0});
  check_close(ember::std(x, 1), V{std::sqrt(5.0 / 3), 0});
  check_close(var(x, 0), V{0.5, 0, 0.5, 2});
  CHECK(var(x, 1, 1.0, true).sizes() == Shape{2, 1});
  // All 8: mean 2.25, squared deviations 1.5625 + .0625 + .5625 + 3.0625 + 4 * .0625 = 5.5
  check_close(var(x), V{5.5 / 7});
  check_close(var(x, {0, 1}, 0.0), V{5.5 / 8});
  check_close(ember::std(x, {-1, 0}, 2.0), V{std::sqrt(5.5 / 6)});
  const V one = var(x, 1, 4.0).to_vector<double>();  // N - correction = 0
  CHECK(std::isinf(one[0]));
  CHECK(std::isnan(one[1]));  // 0 / 0
  CHECK(std::isinf(var(x, 1, 7.0).to_vector<double>()[0]));
  CHECK(std::isnan(var(tensor({3.0}), 0).item()));
  CHECK_GRADCHECK(
      [](const std::vector<Tensor>& v) {
        return var(v[0], {0, 2});
      },
      {randn64({2, 3, 4}, 14)});
  CHECK_GRADCHECK([](const std::vector<Tensor>& v) { return ember::std(v[0], 1, 0.0, true); },
                  {randn64({3, 5}, 15)});
  CHECK_THROWS_WITH_AS(var(tensor({1, 2}, kInt64)),
                       doctest::Contains("var: expects a floating-point tensor, got int64"), Error);
  CHECK_THROWS_WITH_AS(ember::std(x, {0, 0}), doctest::Contains("std: dim 0 appears more"), Error);
}

TEST_CASE("ops/cumsum: running sums along each dim; gradient the reversed running sum") {
  Tensor x = tensor({{1, 2, 3}, {4, 5, 6}});
  CHECK(cumsum(x, 1).to_vector<double>() == V{1, 3, 6, 4, 9, 15});
  CHECK(cumsum(x, 0).to_vector<double>() == V{1, 2, 3, 5, 7, 9});
  CHECK(cumsum(x, -1).to_vector<double>() == V{1, 3, 6, 4, 9, 15});
  CHECK(cumsum(x.t(), 1).to_vector<double>() == V{1, 5, 2, 7, 3, 9});
  CHECK(cumsum(zeros({0, 3}), 1).sizes() == Shape{0, 3});
  Tensor ints = cumsum(tensor({1, 2, 3}, kInt64), 0);
  CHECK(ints.dtype() == kInt64);
  CHECK(ints.to_vector<int64_t>() == std::vector<int64_t>{1, 3, 6});
  CHECK(cumsum(full({}, 2.0), 0).item() == 2.0);
  Tensor t = tensor({1, 2, 3}).set_requires_grad(true);
  mul(cumsum(t, 0), tensor({1, 10, 100})).sum().backward();
  CHECK(t.grad().to_vector<double>() == V{111, 110, 100});
  CHECK_GRADCHECK([](const std::vector<Tensor>& v) { return cumsum(v[0], 1); },
                  {randn64({2, 3, 4}, 16)});
  CHECK_THROWS_WITH_AS(cumsum(x, 2), doctest::Contains("cumsum: dim 2 is out of range"), Error);
}
