// matmul on CPU: 2-D, batched and shared-right-operand products against
// hand-computed values, transposed and strided views, empty sizes, backward
// against finite differences, and the error paths.
#include <doctest/doctest.h>

#include "core/ops.h"
#include "gradcheck.h"

using namespace ember;
using ember::testing::randn64;
using ember::testing::rel_error;

namespace {
using V = std::vector<double>;

// out[t] = a[t] @ b[t] by the definition, one output element at a time.
Tensor naive_matmul(const Tensor& a, const Tensor& b) {
  const bool batched = a.dim() == 3;
  const int64_t B = batched ? a.size(0) : 1, n = a.size(-2), k = a.size(-1), m = b.size(-1);
  std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>(), out;
  for (int64_t t = 0; t < B; ++t)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < m; ++j) {
        double s = 0;
        for (int64_t p = 0; p < k; ++p)
          s += av[(t * n + i) * k + p] * bv[(b.dim() == 3 ? t * k * m : 0) + p * m + j];
        out.push_back(s);
      }
  return from_vector(out, batched ? Shape{B, n, m} : Shape{n, m}, kFloat64);
}
}  // namespace

TEST_CASE("ops/matmul: 2-D products match hand-computed values") {
  Tensor a = tensor({{1, 2}, {3, 4}});
  Tensor b = tensor({{5, 6}, {7, 8}});
  Tensor c = matmul(a, b);
  CHECK(c.sizes() == Shape{2, 2});
  CHECK(c.to_vector<double>() == V{19, 22, 43, 50});
  CHECK(a.matmul(b).to_vector<double>() == V{19, 22, 43, 50});
  Tensor r = matmul(tensor({{1, 2, 3}, {4, 5, 6}}), from_vector(V{1, 0, -1}, {3, 1}));
  CHECK(r.sizes() == Shape{2, 1});
  CHECK(r.to_vector<double>() == V{-2, -2});
  CHECK(matmul(tensor({{1, 2, 3}}), ones({3, 1})).item() == 6.0);
}

TEST_CASE("ops/matmul: batched and shared right operand match the definition") {
  Tensor a = randn64({3, 4, 5}, 11);
  Tensor b = randn64({3, 5, 2}, 12);
  Tensor c = matmul(a, b);
  CHECK(c.sizes() == Shape{3, 4, 2});
  CHECK(rel_error(c, naive_matmul(a, b)) < 1e-14);
  for (int64_t t = 0; t < 3; ++t)
    CHECK(rel_error(c.select(0, t), matmul(a.select(0, t), b.select(0, t))) < 1e-14);

  Tensor w = randn64({5, 6}, 13);
  Tensor s = matmul(a, w);
  CHECK(s.sizes() == Shape{3, 4, 6});
  CHECK(rel_error(s, naive_matmul(a, w)) < 1e-14);
}

TEST_CASE("ops/matmul: transposed, sliced and expanded views give the same product") {
  Tensor a = randn64({4, 3}, 14);
  Tensor b = randn64({4, 5}, 15);
  Tensor ref = naive_matmul(a.t().contiguous(), b);
  CHECK(rel_error(matmul(a.t(), b), ref) < 1e-14);
  Tensor bt = randn64({5, 4}, 16);
  CHECK(rel_error(matmul(a.t(), bt.t()), naive_matmul(a.t().contiguous(), bt.t().contiguous())) <
        1e-14);
  Tensor wide = randn64({4, 10}, 17);
  Tensor cols = wide.slice(1, 2, 7);  // (4, 5) with row stride 10
  CHECK(rel_error(matmul(a.t(), cols), naive_matmul(a.t().contiguous(), cols.contiguous())) <
        1e-14);
  Tensor every_other = wide.slice(1, 0, 10, 2);  // column stride 2
  CHECK(rel_error(matmul(a.t(), every_other),
                  naive_matmul(a.t().contiguous(), every_other.contiguous())) < 1e-14);
  Tensor x = randn64({2, 3, 4}, 18);
  Tensor shared = randn64({4, 2}, 19);
  Tensor expanded = shared.unsqueeze(0).expand({2, 4, 2});  // batch stride 0
  CHECK(rel_error(matmul(x, expanded), matmul(x, shared)) < 1e-14);
  CHECK(rel_error(matmul(x.transpose(1, 2).contiguous().transpose(1, 2), shared),
                  matmul(x, shared)) < 1e-14);
}

TEST_CASE("ops/matmul: float32 and bfloat16 on CPU round the double result once") {
  Tensor a = tensor({{1, 2}, {3, 4}}, kFloat32);
  Tensor b = tensor({{0.5, 0.25}, {0.125, 1}}, kFloat32);
  Tensor c = matmul(a, b);
  CHECK(c.dtype() == kFloat32);
  CHECK(c.to_vector<double>() == V{0.75, 2.25, 2.0, 4.75});
  Tensor cb = matmul(a.to(kBFloat16), b.to(kBFloat16));
  CHECK(cb.dtype() == kBFloat16);
  CHECK(cb.to_vector<double>() == V{0.75, 2.25, 2.0, 4.75});
}

TEST_CASE("ops/matmul: empty operands give empty or zero results") {
  CHECK(matmul(zeros({0, 3}), zeros({3, 2})).sizes() == Shape{0, 2});
  CHECK(matmul(zeros({2, 3}), zeros({3, 0})).sizes() == Shape{2, 0});
  Tensor z = matmul(ones({2, 0}), ones({0, 3}));
  CHECK(z.sizes() == Shape{2, 3});
  CHECK(z.to_vector<double>() == V(6, 0.0));
  CHECK(matmul(zeros({0, 2, 3}), zeros({0, 3, 4})).sizes() == Shape{0, 2, 4});
  Tensor zb = matmul(ones({2, 2, 0}), ones({0, 3}));
  CHECK(zb.to_vector<double>() == V(12, 0.0));
}

TEST_CASE("ops/matmul: wrong shapes and dtypes throw naming both operands") {
  CHECK_THROWS_WITH_AS(matmul(zeros({2, 3}), zeros({2, 3})),
                       doctest::Contains("matmul: shapes [2, 3] and [2, 3] cannot be multiplied"),
                       Error);
  CHECK_THROWS_WITH_AS(matmul(zeros({3}), zeros({3, 2})),
                       doctest::Contains("matmul: unsupported operand shapes [3] and [3, 2]"),
                       Error);
  CHECK_THROWS_WITH_AS(matmul(zeros({2, 3}), zeros({2, 3, 4})),
                       doctest::Contains("matmul: unsupported operand shapes [2, 3] and [2, 3, 4]"),
                       Error);
  CHECK_THROWS_WITH_AS(matmul(zeros({2, 3, 4}), zeros({3, 4, 5})),
                       doctest::Contains("different batch sizes (2 vs 3)"), Error);
  CHECK_THROWS_WITH_AS(
      matmul(zeros({2, 3}), zeros({3, 2}, kFloat64)),
      doctest::Contains("matmul: operands have different dtypes (float32 and float64)"), Error);
  Tensor i = argmax(zeros({2, 2, 2}), 0);
  CHECK_THROWS_WITH_AS(matmul(i, i), doctest::Contains("matmul: expects a floating-point tensor"),
                       Error);
}

TEST_CASE("ops/matmul: 2-D backward matches finite differences") {
  auto f = [](const std::vector<Tensor>& v) { return matmul(v[0], v[1]); };
  CHECK_GRADCHECK(f, {randn64({3, 4}, 21), randn64({4, 2}, 22)});
  CHECK_GRADCHECK(f, {randn64({1, 5}, 23), randn64({5, 1}, 24)});
  CHECK_GRADCHECK([](const std::vector<Tensor>& v) { return matmul(v[0].t(), v[1].t()); },
                  {randn64({4, 3}, 25), randn64({2, 4}, 26)});
}

TEST_CASE("ops/matmul: batched and shared-operand backward match finite differences") {
  auto f = [](const std::vector<Tensor>& v) { return matmul(v[0], v[1]); };
  CHECK_GRADCHECK(f, {randn64({2, 3, 4}, 27), randn64({2, 4, 5}, 28)});
  CHECK_GRADCHECK(f, {randn64({3, 2, 4}, 29), randn64({4, 3}, 30)});
  CHECK_GRADCHECK(
      [](const std::vector<Tensor>& v) {
        return matmul(v[0].transpose(1, 2), v[1].transpose(1, 2));
      },
      {randn64({2, 4, 3}, 31), randn64({2, 5, 4}, 32)});
}

TEST_CASE("ops/matmul: only the operand that needs a gradient gets one") {
  Tensor a = randn64({2, 3}, 33).set_requires_grad(true);
  Tensor b = randn64({3, 2}, 34);
  matmul(a, b).sum().backward();
  CHECK(a.grad().defined());
  CHECK_FALSE(b.grad().defined());
  // d(sum(a @ b))/da = ones @ b^T
  CHECK(rel_error(a.grad(), matmul(ones({2, 2}, kFloat64), b.t())) < 1e-15);
}
