// min and max on CPU: full reductions (gradient shared evenly by equal maxima, as
// PyTorch's), values and indices over a dim (structured bindings, .values and
// .indices, conversion to the values), argmin, against hand-computed values and
// finite differences.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "core/autograd.h"
#include "core/ops.h"
#include "gradcheck.h"

using namespace ember;
using ember::testing::randn64;

namespace {
using V = std::vector<double>;
using I = std::vector<int64_t>;
using Inputs = std::vector<Tensor>;
const double kNaN = std::numeric_limits<double>::quiet_NaN();
}  // namespace

TEST_CASE("ops/max, min over a dim: values and indices, libtorch's and Python's ways") {
  Tensor x = tensor({{1, 7, 7, 2}, {-1, -5, -0.5, -3}});
  auto [values, indices] = max(x, 1);
  CHECK(values.to_vector<double>() == V{7, -0.5});
  CHECK(indices.to_vector<int64_t>() == I{1, 2});  // the first on ties
  CHECK(indices.dtype() == kInt64);
  const ValuesAndIndices m = min(x, 1);
  CHECK(m.values.to_vector<double>() == V{1, -5});
  CHECK(m.indices.to_vector<int64_t>() == I{0, 1});
  Tensor as_values = max(x, 0);  // converts to its values
  CHECK(as_values.to_vector<double>() == V{1, 7, 7, 2});
  CHECK(x.min(0, true).values.sizes() == Shape{1, 4});
  CHECK(argmin(x, 1).to_vector<int64_t>() == I{0, 1});
  CHECK(x.argmin(0).to_vector<int64_t>() == I{1, 1, 1, 1});
  CHECK(argmin(tensor({3, 3, 3}), 0).item<int64_t>() == 0);
  // NaN is the extreme value for min as well as max.
  Tensor n = tensor({1, kNaN, -5});
  CHECK(std::isnan(min(n, 0).values.item()));
  CHECK(min(n, 0).indices.item<int64_t>() == 1);
  CHECK_THROWS_WITH_AS(min(zeros({2, 0}), 1),
                       doctest::Contains("min: cannot reduce over dim 1 of size 0"), Error);
}

TEST_CASE("ops/min over a dim: backward routes the gradient to the first argmin") {
  Tensor x = tensor({{3, 1, 1}, {0, 5, 2}}).set_requires_grad(true);
  min(x, 1).values.sum().backward();
  CHECK(x.grad().to_vector<double>() == V{0, 1, 0, 1, 0, 0});
  for (int64_t d : {0, 1, -1})
    CHECK_GRADCHECK([d](const Inputs& v) { return min(v[0], d).values; }, {randn64({3, 4}, 20)});
}

TEST_CASE("ops/max(), min(): the extreme of all elements, 0-dim, NaN wins") {
  Tensor x = tensor({{1, 7}, {-3, 2}});
  CHECK(max(x).dim() == 0);
  CHECK(max(x).item() == 7);
  CHECK(min(x).item() == -3);
  CHECK(x.max().item() == 7);
  CHECK(std::isnan(max(tensor({1, kNaN})).item()));
  CHECK(min(tensor({4, 2}, kInt64)).item<int64_t>() == 2);
  CHECK(max(tensor({4, 2}, kInt64)).dtype() == kInt64);
  CHECK_THROWS_WITH_AS(max(zeros({0})), doctest::Contains("max: the input of shape [0] is empty"),
                       Error);
}

TEST_CASE("ops/max(), min(): the gradient is shared evenly by equal extremes") {
  Tensor x = tensor({1, 5, 5, 2}, kFloat64).set_requires_grad(true);
  (max(x) * 4.0).backward();
  CHECK(x.grad().to_vector<double>() == V{0, 2, 2, 0});
  Tensor y = tensor({-1, 3, -1, -1}, kFloat64).set_requires_grad(true);
  min(y).backward();
  const V g = y.grad().to_vector<double>();
  CHECK(g[0] == doctest::Approx(1.0 / 3));
  CHECK(g[1] == 0);
  CHECK(g[2] == doctest::Approx(1.0 / 3));
  CHECK_GRADCHECK([](const Inputs& v) { return max(v[0]); }, {randn64({3, 4}, 21)});
  CHECK_GRADCHECK([](const Inputs& v) { return min(v[0]); }, {randn64({5}, 22)});
}
