// Indexing on CPU: index_select, gather, embedding, one_hot, stack, randint and
// randperm, against hand-computed values and finite differences, with repeated
// indices (whose gradients add) and every error path.
#include <doctest/doctest.h>

#include <algorithm>
#include <numeric>

#include "core/autograd.h"
#include "core/ops.h"
#include "gradcheck.h"

using namespace ember;
using ember::testing::randn64;

namespace {
using V = std::vector<double>;
using I = std::vector<int64_t>;
using Inputs = std::vector<Tensor>;
Tensor idx(std::initializer_list<double> v) {
  return tensor(v, kInt64);
}
}  // namespace

TEST_CASE("index_select: rows, columns and inner dims, repeated indices") {
  Tensor x = arange(12, kFloat64).reshape({3, 4});
  CHECK(index_select(x, 0, idx({2, 0, 2})).to_vector<double>() ==
        V{8, 9, 10, 11, 0, 1, 2, 3, 8, 9, 10, 11});
  CHECK(index_select(x, 1, idx({3, 1})).to_vector<double>() == V{3, 1, 7, 5, 11, 9});
  CHECK(index_select(x, -1, idx({3, 1})).sizes() == Shape{3, 2});
  CHECK(x.index_select(0, tensor({1}, kInt64)).to_vector<double>() == V{4, 5, 6, 7});
  CHECK(index_select(x, 0, full({}, 1, kInt64)).sizes() == Shape{1, 4});  // 0-dim index
  Tensor y = arange(24, kFloat64).reshape({2, 3, 4});
  CHECK(index_select(y, 1, idx({2})).to_vector<double>() == V{8, 9, 10, 11, 20, 21, 22, 23});
  CHECK(index_select(tensor({5, 6}, kInt64), 0, idx({1, 1})).to_vector<int64_t>() == I{6, 6});
  CHECK(index_select(x, 0, zeros({0}, kInt64)).sizes() == Shape{0, 4});
}

TEST_CASE("index_select: backward adds repeated rows back, matching finite differences") {
  Tensor x = tensor({{1, 2}, {3, 4}, {5, 6}}, kFloat64).set_requires_grad(true);
  index_select(x, 0, idx({2, 0, 2})).sum().backward();
  CHECK(x.grad().to_vector<double>() == V{1, 1, 0, 0, 2, 2});
  for (int64_t d : {0, 1, 2})
    CHECK_GRADCHECK(
        [d](const Inputs& v) {
          return index_select(v[0], d, idx({1, 0, 1, 1}));
        },
        {randn64({2, 3, 2}, 30)});
}

TEST_CASE("gather: picks along a dim, index smaller than the input elsewhere") {
  Tensor x = tensor({{1, 2, 3}, {4, 5, 6}});
  CHECK(gather(x, 1, tensor({{2, 0}, {1, 1}}, kInt64)).to_vector<double>() == V{3, 1, 5, 5});
  CHECK(gather(x, 0, tensor({{1, 0, 1}}, kInt64)).to_vector<double>() == V{4, 2, 6});
  CHECK(gather(x, 1, zeros({1, 1}, kInt64)).sizes() == Shape{1, 1});  // smaller in dim 0
  CHECK(x.gather(-1, tensor({2, 0}, kInt64).reshape({2, 1})).to_vector<double>() == V{3, 4});
  Tensor y = arange(24, kFloat64).reshape({2, 3, 4});
  Tensor i3 = tensor({2, 0, 1, 1, 0, 2, 2, 2}, kInt64).reshape({2, 1, 4});
  CHECK(gather(y, 1, i3).to_vector<double>() == V{8, 1, 6, 7, 12, 21, 22, 23});
}

TEST_CASE("gather: backward scatters back (repeats add), matching finite differences") {
  Tensor x = tensor({{1, 2, 3}, {4, 5, 6}}, kFloat64).set_requires_grad(true);
  gather(x, 1, tensor({{2, 2}, {0, 1}}, kInt64)).sum().backward();
  CHECK(x.grad().to_vector<double>() == V{0, 0, 2, 1, 1, 0});
  Tensor index = tensor({2, 0, 1, 1, 0, 2, 2, 2}, kInt64).reshape({2, 1, 4});
  CHECK_GRADCHECK([index](const Inputs& v) { return gather(v[0], 1, index); },
                  {randn64({2, 3, 4}, 31)});
}

TEST_CASE("embedding: rows of the weight, shape indices + (dim), padding row learns nothing") {
  Tensor w = tensor({{0, 0.5}, {1, 1.5}, {2, 2.5}, {3, 3.5}}, kFloat64);
  Tensor e = embedding(w, tensor({{1, 3}, {1, 0}}, kInt64));
  CHECK(e.sizes() == Shape{2, 2, 2});
  CHECK(e.to_vector<double>() == V{1, 1.5, 3, 3.5, 1, 1.5, 0, 0.5});
  CHECK(embedding(w, full({}, 2, kInt64)).to_vector<double>() == V{2, 2.5});

  Tensor wg = w.clone().set_requires_grad(true);
  embedding(wg, tensor({{1, 3}, {1, 0}}, kInt64)).sum().backward();
  CHECK(wg.grad().to_vector<double>() == V{1, 1, 2, 2, 0, 0, 1, 1});
  Tensor wp = w.clone().set_requires_grad(true);
  embedding(wp, tensor({1, 3, 1}, kInt64), /*padding_idx=*/1).sum().backward();
  CHECK(wp.grad().to_vector<double>() == V{0, 0, 0, 0, 0, 0, 1, 1});
  Tensor ind = tensor({{3, 0, 3}, {2, 3, 1}}, kInt64);
  CHECK_GRADCHECK([ind](const Inputs& v) { return embedding(v[0], ind); }, {randn64({4, 3}, 32)});
}

TEST_CASE("indexing: out-of-range indices, wrong dtypes and shapes throw naming the op") {
  Tensor x = zeros({3, 4});
  CHECK_THROWS_WITH_AS(index_select(x, 0, idx({0, 3})),
                       doctest::Contains("index_select: index 3 is out of range [0, 3)"), Error);
  CHECK_THROWS_WITH_AS(index_select(x, 1, idx({-1})),
                       doctest::Contains("index_select: index -1 is out of range [0, 4)"), Error);
  CHECK_THROWS_WITH_AS(
      index_select(x, 0, tensor({0.0})),
      doctest::Contains("index_select: index must be an int64 tensor, got float32"), Error);
  CHECK_THROWS_WITH_AS(index_select(x, 0, zeros({1, 1}, kInt64)),
                       doctest::Contains("index_select: index must be 0-D or 1-D"), Error);
  CHECK_THROWS_WITH_AS(gather(x, 1, full({1, 1}, 4, kInt64)),
                       doctest::Contains("gather: index 4 is out of range [0, 4)"), Error);
  CHECK_THROWS_WITH_AS(gather(x, 1, zeros({4}, kInt64)),
                       doctest::Contains("gather: index of shape [4] must have as many dims"),
                       Error);
  CHECK_THROWS_WITH_AS(gather(x, 1, zeros({4, 1}, kInt64)),
                       doctest::Contains("is larger than the input of shape [3, 4] in dim 0"),
                       Error);
  CHECK_THROWS_WITH_AS(embedding(x, idx({1, 7})),
                       doctest::Contains("embedding: index 7 is out of range [0, 3)"), Error);
  CHECK_THROWS_WITH_AS(embedding(zeros({3}), idx({1})),
                       doctest::Contains("embedding: weight must be 2-D"), Error);
  CHECK_THROWS_WITH_AS(embedding(x, tensor({1.0})),
                       doctest::Contains("embedding: indices must be an int64 tensor"), Error);
  CHECK_THROWS_WITH_AS(embedding(x, idx({1}), 3),
                       doctest::Contains("embedding: padding_idx 3 is out of range"), Error);
}

TEST_CASE("one_hot: int64 rows, num_classes given or inferred, range checked") {
  Tensor o = one_hot(tensor({2, 0, 1}, kInt64), 4);
  CHECK(o.dtype() == kInt64);
  CHECK(o.sizes() == Shape{3, 4});
  CHECK(o.to_vector<int64_t>() == I{0, 0, 1, 0, 1, 0, 0, 0, 0, 1, 0, 0});
  CHECK(one_hot(tensor({1, 3}, kInt64).reshape({2, 1})).sizes() == Shape{2, 1, 4});  // inferred: 4
  CHECK_THROWS_WITH_AS(one_hot(tensor({0, 4}, kInt64), 4),
                       doctest::Contains("one_hot: index 4 is out of range [0, 4)"), Error);
  CHECK_THROWS_WITH_AS(one_hot(tensor({0.0})),
                       doctest::Contains("one_hot: indices must be an "
                                         "int64 tensor"),
                       Error);
}

TEST_CASE("stack: a new dim, any position, gradients split back") {
  Tensor a = tensor({1, 2}), b = tensor({3, 4});
  CHECK(stack({a, b}).sizes() == Shape{2, 2});
  CHECK(stack({a, b}).to_vector<double>() == V{1, 2, 3, 4});
  CHECK(stack({a, b}, 1).to_vector<double>() == V{1, 3, 2, 4});
  CHECK(stack({a, b}, -1).sizes() == Shape{2, 2});
  CHECK_GRADCHECK(
      [](const Inputs& v) {
        return stack({v[0], v[1] * 2.0}, 1);
      },
      {randn64({2, 3}, 33), randn64({2, 3}, 34)});
  CHECK_THROWS_WITH_AS(stack({a, tensor({1, 2, 3})}),
                       doctest::Contains("stack: tensor 1 has shape [3], tensor 0 has shape [2]"),
                       Error);
  CHECK_THROWS_WITH_AS(stack({}), doctest::Contains("stack: expects a non-empty list"), Error);
}

TEST_CASE("randint, randperm: ranges, seeding and the permutation property") {
  Generator g(11);
  Tensor r = randint(-3, 5, {4000}, kInt64, &g);
  CHECK(r.dtype() == kInt64);
  const I rv = r.to_vector<int64_t>();
  CHECK(*std::min_element(rv.begin(), rv.end()) == -3);  // 4000 draws reach both ends
  CHECK(*std::max_element(rv.begin(), rv.end()) == 4);
  Generator g2(11);
  CHECK(randint(-3, 5, {4000}, kInt64, &g2).to_vector<int64_t>() == rv);
  CHECK(randint(10, {3}).sizes() == Shape{3});
  CHECK(randint(0, 2, {5}, kFloat32).dtype() == kFloat32);
  CHECK_THROWS_WITH_AS(randint(3, 3, {1}), doctest::Contains("randint: low (3) must be below"),
                       Error);

  Generator h(5);
  const I p = randperm(1000, kInt64, &h).to_vector<int64_t>();
  I sorted = p;
  std::sort(sorted.begin(), sorted.end());
  I iota(1000);
  std::iota(iota.begin(), iota.end(), 0);
  CHECK(sorted == iota);
  CHECK(p != iota);
  Generator h2(5);
  CHECK(randperm(1000, kInt64, &h2).to_vector<int64_t>() == p);
  CHECK(randperm(0).numel() == 0);
  CHECK_THROWS_WITH_AS(randperm(-1), doctest::Contains("randperm: n must be >= 0"), Error);
}
