// sort, argsort, topk and multinomial on CPU: hand-computed values, stable order
// of ties, NaN as the largest value, gradients scattered through the indices, the
// empirical frequencies of multinomial's draws, and the error messages.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <set>
#include <vector>

#include "core/ops.h"
#include "gradcheck.h"

using namespace ember;
using ember::testing::randn64;

namespace {
using V = std::vector<double>;
using I = std::vector<int64_t>;
const double kNaN = std::numeric_limits<double>::quiet_NaN();

// Pearson's statistic of `counts` against `draws` times the probabilities w / sum(w).
double chi_square(const std::vector<int64_t>& counts, const V& w, int64_t draws) {
  double total = 0.0, chi2 = 0.0;
  for (double p : w) total += p;
  for (size_t i = 0; i < w.size(); ++i) {
    if (w[i] == 0.0) continue;
    const double expected = static_cast<double>(draws) * w[i] / total;
    const double d = static_cast<double>(counts[i]) - expected;
    chi2 += d * d / expected;
  }
  return chi2;
}

std::vector<int64_t> histogram(const std::vector<int64_t>& samples, size_t n) {
  std::vector<int64_t> counts(n, 0);
  for (int64_t s : samples) ++counts.at(static_cast<size_t>(s));
  return counts;
}
}  // namespace

TEST_CASE("ops/sort: values and indices along each dim, ascending and descending") {
  Tensor x = tensor({{3, 1, 2}, {0, 5, -4}});
  auto [v, i] = sort(x);
  CHECK(v.to_vector<double>() == V{1, 2, 3, -4, 0, 5});
  CHECK(i.to_vector<int64_t>() == I{1, 2, 0, 2, 0, 1});
  CHECK(i.dtype() == kInt64);
  auto [vd, id] = sort(x, 1, true);
  CHECK(vd.to_vector<double>() == V{3, 2, 1, 5, 0, -4});
  CHECK(id.to_vector<int64_t>() == I{0, 2, 1, 1, 0, 2});
  auto [v0, i0] = sort(x, 0);
  CHECK(v0.to_vector<double>() == V{0, 1, -4, 3, 5, 2});
  CHECK(i0.to_vector<int64_t>() == I{1, 0, 1, 0, 1, 0});
  // A transposed view sorts by its logical layout.
  Tensor st = sort(x.t(), 0).values;  // x.t() = [[3, 0], [1, 5], [2, -4]]
  CHECK(st.to_vector<double>() == V{1, -4, 2, 0, 3, 5});
  CHECK(argsort(x, 1).to_vector<int64_t>() == I{1, 2, 0, 2, 0, 1});
  CHECK(argsort(x, 1, true).to_vector<int64_t>() == I{0, 2, 1, 1, 0, 2});
}

TEST_CASE("ops/sort: ties keep their order (stable), NaN is the largest, -0.0 equals 0.0") {
  Tensor x = tensor({2, 1, 2, kNaN, 1, -kNaN, 0});
  auto [v, i] = sort(x);
  CHECK(i.to_vector<int64_t>() == I{6, 1, 4, 0, 2, 3, 5});
  const V got = v.to_vector<double>();
  CHECK(got[0] == 0);
  CHECK(got[4] == 2);
  CHECK(std::isnan(got[5]));
  CHECK(std::isnan(got[6]));
  // Descending: NaN first, ties still in their order.
  CHECK(sort(x, 0, true).indices.to_vector<int64_t>() == I{3, 5, 0, 2, 1, 4, 6});
  Tensor z = tensor({0.0, -0.0, 0.0, -1.0});
  CHECK(sort(z).indices.to_vector<int64_t>() == I{3, 0, 1, 2});
  CHECK(sort(z, 0, true).indices.to_vector<int64_t>() == I{0, 1, 2, 3});
  // float32 and bfloat16 order the same way; int64 sorts exactly.
  CHECK(sort(x.to(kFloat32)).indices.to_vector<int64_t>() == I{6, 1, 4, 0, 2, 3, 5});
  CHECK(sort(x.to(kBFloat16)).indices.to_vector<int64_t>() == I{6, 1, 4, 0, 2, 3, 5});
  Tensor ints = tensor({7, 5, -3}, kInt64);
  auto [iv, ii] = sort(ints);
  CHECK(iv.dtype() == kInt64);
  CHECK(ii.to_vector<int64_t>() == I{2, 1, 0});
}

TEST_CASE("ops/sort: the values' gradient is scattered back through the indices") {
  Tensor x = tensor({{3, 1, 2}, {0, 5, -4}}).set_requires_grad(true);
  Tensor w = tensor({{1, 10, 100}, {1000, 10000, 100000}});
  sum(mul(sort(x, 1).values, w)).backward();
  // row 0 sorted from positions (1, 2, 0); row 1 from (2, 0, 1)
  CHECK(x.grad().to_vector<double>() == V{100, 1, 10, 10000, 100000, 1000});
  CHECK_GRADCHECK([](const std::vector<Tensor>& v) { return sort(v[0], 1, true).values; },
                  {randn64({3, 5}, 1)});
  CHECK_GRADCHECK([](const std::vector<Tensor>& v) { return sort(v[0], 0).values; },
                  {randn64({4, 3}, 2)});
  CHECK_GRADCHECK([](const std::vector<Tensor>& v) { return topk(v[0], 2, 1).values; },
                  {randn64({3, 5}, 3)});
  CHECK_FALSE(sort(x, 1).indices.requires_grad());
}

TEST_CASE("ops/topk: the k largest or smallest, in order, with their indices") {
  Tensor x = tensor({{1, 7, 3, 7, -2}, {4, 0, 9, 2, 8}});
  auto [v, i] = topk(x, 3);
  CHECK(v.sizes() == Shape{2, 3});
  CHECK(v.to_vector<double>() == V{7, 7, 3, 9, 8, 4});
  CHECK(i.to_vector<int64_t>() == I{1, 3, 2, 2, 4, 0});  // ties: the lower index first
  auto [vs, is] = topk(x, 2, 1, false);
  CHECK(vs.to_vector<double>() == V{-2, 1, 0, 2});
  CHECK(is.to_vector<int64_t>() == I{4, 0, 1, 3});
  auto [v0, i0] = topk(x, 1, 0);
  CHECK(v0.to_vector<double>() == V{4, 7, 9, 7, 8});
  CHECK(i0.to_vector<int64_t>() == I{1, 0, 1, 0, 1});
  CHECK(topk(x, 0).values.sizes() == Shape{2, 0});
  Tensor n = tensor({1, kNaN, 3});
  CHECK(topk(n, 1).indices.to_vector<int64_t>() == I{1});  // NaN is the largest
}

TEST_CASE("ops/sort: a 0-dim tensor sorts as one element, as torch's") {
  Tensor s = full({}, 2.5, kFloat64).set_requires_grad(true);
  auto [v, i] = sort(s);
  CHECK(v.dim() == 0);
  CHECK(v.item() == 2.5);
  CHECK(i.dim() == 0);
  CHECK(i.item<int64_t>() == 0);
  v.backward();
  CHECK(s.grad().item() == 1.0);
  CHECK(argsort(s, 0).dim() == 0);
  CHECK(topk(s, 1).values.item() == 2.5);
}

TEST_CASE("ops/sort: bad arguments throw naming the op") {
  CHECK_THROWS_WITH_AS(topk(zeros({2, 3}), 4), doctest::Contains("topk: k 4 is out of range"),
                       Error);
  CHECK_THROWS_WITH_AS(topk(zeros({2, 3}), -1), doctest::Contains("topk: k -1"), Error);
  CHECK_THROWS_WITH_AS(sort(zeros({2, 3}), 2), doctest::Contains("sort: dim 2 is out of range"),
                       Error);
  CHECK_THROWS_WITH_AS(sort(full({}, 1.0), 1), doctest::Contains("sort: dim 1 is out of range"),
                       Error);
  CHECK_THROWS_WITH_AS(argsort(Tensor()), doctest::Contains("argsort: input is an undefined"),
                       Error);
}

// 100k draws: Pearson's statistic against the probabilities stays below 30 for 4
// degrees of freedom (a chance of about 5e-6 for a correct sampler; the seed is fixed,
// so the test is deterministic).
TEST_CASE("ops/multinomial: with replacement, frequencies match the probabilities") {
  const V w = {1, 2, 0, 3, 4, 0.5};  // not normalised; category 2 is never drawn
  Generator g(17);
  Tensor s = multinomial(tensor({1, 2, 0, 3, 4, 0.5}), 100000, true, &g);
  CHECK(s.sizes() == Shape{100000});
  CHECK(s.dtype() == kInt64);
  const std::vector<int64_t> counts = histogram(s.to_vector<int64_t>(), w.size());
  CHECK(counts[2] == 0);
  CHECK(chi_square(counts, w, 100000) < 30.0);
  // The same seed gives the same draws; the generator moves on.
  Generator a(5), b(5);
  Tensor p = tensor({{0.2, 0.3, 0.5}, {1, 1, 0}});
  Tensor da = multinomial(p, 20, true, &a), db = multinomial(p, 20, true, &b);
  CHECK(da.sizes() == Shape{2, 20});
  CHECK(da.to_vector<int64_t>() == db.to_vector<int64_t>());
  CHECK(multinomial(p, 20, true, &a).to_vector<int64_t>() != da.to_vector<int64_t>());
  for (int64_t c : slice(da, 0, 1, 2).to_vector<int64_t>()) CHECK(c != 2);
}

TEST_CASE("ops/multinomial: without replacement never repeats; first draws follow p") {
  Generator g(3);
  Tensor p = tensor({{0.1, 0.0, 0.4, 0.2, 0.3}});
  // All four non-zero categories, each exactly once per row.
  for (int rep = 0; rep < 50; ++rep) {
    const std::vector<int64_t> d = multinomial(p, 4, false, &g).to_vector<int64_t>();
    CHECK(std::set<int64_t>(d.begin(), d.end()) == std::set<int64_t>{0, 2, 3, 4});
  }
  // 100k rows: the first draw of each follows p (4 degrees of freedom, bound 30 as
  // above, category 1 never), the second never repeats the first.
  const V w = {1, 0, 4, 2, 3, 5};
  Tensor rows = expand(tensor({1, 0, 4, 2, 3, 5}).unsqueeze(0), {100000, 6});
  Tensor d = multinomial(rows, 2, false, &g);
  CHECK(d.sizes() == Shape{100000, 2});
  const std::vector<int64_t> all = d.to_vector<int64_t>();
  std::vector<int64_t> first;
  for (size_t r = 0; r < 100000; ++r) {
    first.push_back(all[2 * r]);
    CHECK_MESSAGE(all[2 * r] != all[2 * r + 1], "row ", r, " repeats a category");
  }
  const std::vector<int64_t> counts = histogram(first, w.size());
  CHECK(counts[1] == 0);
  CHECK(chi_square(counts, w, 100000) < 30.0);
}

TEST_CASE("ops/multinomial: bad probabilities and sizes throw naming the op") {
  Generator g(1);
  CHECK_THROWS_WITH_AS(multinomial(tensor({{1, 2}, {0, 0}}), 1, true, &g),
                       doctest::Contains("multinomial: row 1 of the probabilities sums to 0"),
                       Error);
  CHECK_THROWS_WITH_AS(multinomial(tensor({1, -2}), 1, true, &g),
                       doctest::Contains("is not a finite non-negative number"), Error);
  CHECK_THROWS_WITH_AS(multinomial(tensor({1, kNaN}), 1, true, &g),
                       doctest::Contains("is not a finite non-negative number"), Error);
  CHECK_THROWS_WITH_AS(multinomial(tensor({1, 0, 1}), 3, false, &g),
                       doctest::Contains("which has 2 categories of non-zero probability"), Error);
  CHECK_THROWS_WITH_AS(multinomial(tensor({1, 1}), 3, false, &g),
                       doctest::Contains("cannot draw 3 samples without replacement from 2"),
                       Error);
  CHECK_THROWS_WITH_AS(multinomial(zeros({2, 2, 2}), 1, true, &g),
                       doctest::Contains("multinomial: probs must be 1-D or 2-D"), Error);
  CHECK_THROWS_WITH_AS(multinomial(tensor({1, 1}), 0, true, &g),
                       doctest::Contains("num_samples must be positive"), Error);
  CHECK_THROWS_WITH_AS(multinomial(tensor({1, 1}, kInt64), 1, true, &g),
                       doctest::Contains("must be floating-point"), Error);
  // A rejected call leaves the generator where it was.
  CHECK(g.offset() == 0);
}
