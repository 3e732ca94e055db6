// Shape ops on CPU: views that share storage, copies where the layout needs one,
// hand-computed values, backward against finite differences and error paths.
#include <doctest/doctest.h>

#include "core/autograd.h"
#include "core/ops.h"
#include "gradcheck.h"

using namespace ember;
using ember::testing::randn64;

namespace {
using V = std::vector<double>;
using Inputs = std::vector<Tensor>;
}  // namespace

TEST_CASE("ops/view: reinterprets contiguous data without copying") {
  Tensor a = arange(6, kFloat64);
  Tensor v = a.view({2, 3});
  CHECK(v.sizes() == Shape{2, 3});
  CHECK(v.strides() == Shape{3, 1});
  CHECK(v.storage() == a.storage());
  CHECK(a.view({3, -1}).sizes() == Shape{3, 2});
  CHECK(a.view({-1}).sizes() == Shape{6});
  CHECK(a.view({1, 6, 1}).sizes() == Shape{1, 6, 1});
  v.select(0, 1).fill_(9.0);
  CHECK(a.to_vector<double>() == V{0, 1, 2, 9, 9, 9});
  CHECK(zeros({0, 3}).view({3, 0}).sizes() == Shape{3, 0});
}

TEST_CASE("ops/view: bad sizes and non-contiguous inputs throw naming the problem") {
  Tensor a = zeros({2, 3});
  CHECK_THROWS_WITH_AS(a.view({4, 2}),
                       doctest::Contains("view: shape [4, 2] is invalid for input of shape [2, 3]"),
                       Error);
  CHECK_THROWS_WITH_AS(a.view({-1, -1}), doctest::Contains("view: only one dimension can be -1"),
                       Error);
  CHECK_THROWS_WITH_AS(a.view({-2, 3}), doctest::Contains("view: invalid size -2"), Error);
  CHECK_THROWS_WITH_AS(a.view({-1, 4}), doctest::Contains("view: shape [-1, 4] is invalid"), Error);
  CHECK_THROWS_WITH_AS(
      a.t().view({6}),
      doctest::Contains("view: input of shape [3, 2] and strides [1, 3] is not contiguous"), Error);
}

TEST_CASE("ops/reshape: views contiguous inputs and copies the rest") {
  Tensor a = arange(6, kFloat64).view({2, 3});
  Tensor r = a.reshape({3, 2});
  CHECK(r.storage() == a.storage());
  Tensor t = a.t();  // (3, 2): 0 3 / 1 4 / 2 5
  Tensor rt = t.reshape({6});
  CHECK(rt.storage() != a.storage());
  CHECK(rt.to_vector<double>() == V{0, 3, 1, 4, 2, 5});
  CHECK(t.flatten().to_vector<double>() == V{0, 3, 1, 4, 2, 5});
  CHECK_THROWS_WITH_AS(t.reshape({4}),
                       doctest::Contains("reshape: shape [4] is invalid for input of shape [3, 2]"),
                       Error);
}

TEST_CASE("ops/view: non-contiguous inputs view where their layout allows, as torch.view") {
  // (2, 3, 12) sliced to its middle 4 of the last dim: strides (36, 12, 1), not
  // contiguous; the last dim splits (2 x 2) and the first two merge nowhere.
  Tensor a = arange(72, kFloat64).view({2, 3, 12});
  Tensor s = a.slice(2, 4, 8);
  REQUIRE_FALSE(s.is_contiguous());
  Tensor v = s.view({2, 3, 2, 2});
  CHECK(v.storage() == a.storage());
  CHECK(v.strides() == Shape{36, 12, 2, 1});
  CHECK(v.to_vector<double>() == s.contiguous().view({2, 3, 2, 2}).to_vector<double>());
  // Size-1 dims anywhere take no part.
  Tensor v1 = s.view({1, 2, 1, 3, 4, 1});
  CHECK(v1.storage() == a.storage());
  CHECK(v1.to_vector<double>() == s.contiguous().to_vector<double>());
  // Merging dims 0 and 1 would need stride 36 == 3 * 12: it is, so (6, 4) views.
  Tensor m = s.view({6, 4});
  CHECK(m.storage() == a.storage());
  CHECK(m.strides() == Shape{12, 1});
  CHECK(m.to_vector<double>() == s.contiguous().view({6, 4}).to_vector<double>());
  // But the last dim cannot merge with the one before it (4 of 12 per row).
  CHECK_THROWS_WITH_AS(s.view({2, 12}),
                       doctest::Contains("view: input of shape [2, 3, 4] and strides [36, 12, 1] "
                                         "is not contiguous and cannot be viewed as [2, 12]"),
                       Error);
  // A transposed matrix splits either dim but merges neither.
  Tensor t = arange(24, kFloat64).view({4, 6}).t();  // (6, 4), strides (1, 6)
  Tensor ts = t.view({2, 3, 2, 2});
  CHECK(ts.strides() == Shape{3, 1, 12, 6});
  CHECK(ts.to_vector<double>() == t.contiguous().view({2, 3, 2, 2}).to_vector<double>());
  CHECK_THROWS_AS(t.view({24}), Error);
  CHECK_THROWS_AS(t.view({3, 8}), Error);
  // An expanded dim (stride 0) splits but does not merge with its neighbour.
  Tensor e = arange(4, kFloat64).view({1, 4}).expand({6, 4});
  Tensor es = e.view({2, 3, 4});
  CHECK(es.strides() == Shape{0, 0, 1});
  CHECK(es.to_vector<double>() == e.contiguous().view({2, 3, 4}).to_vector<double>());
  CHECK_THROWS_AS(e.view({24}), Error);
  // No elements: any shape of the same count.
  CHECK(zeros({4, 0}).t().view({0, 2, 2}).sizes() == Shape{0, 2, 2});
}

TEST_CASE("ops/reshape: a strided input views when it can (q, k and v of one projection)") {
  // The GPT's heads: (B, T, 3C) -> slice of C -> (B, T, H, D) shares storage.
  const int64_t B = 2, T = 3, H = 2, D = 4, C = H * D;
  Tensor qkv = randn64({B, T, 3 * C}, 11);
  for (int64_t i = 0; i < 3; ++i) {
    Tensor part = qkv.slice(2, i * C, (i + 1) * C);
    Tensor heads = part.reshape({B, T, H, D});
    CHECK(heads.storage() == qkv.storage());
    CHECK(heads.to_vector<double>() == part.contiguous().reshape({B, T, H, D}).to_vector<double>());
  }
  // Writes through the view reach the source, as torch.reshape's view does.
  Tensor z = zeros({2, 6}, kFloat64);
  z.slice(1, 0, 4).reshape({2, 2, 2}).select(2, 1).fill_(1.0);
  CHECK(z.to_vector<double>() == V{0, 1, 0, 1, 0, 0, 0, 1, 0, 1, 0, 0});
  // Where no view exists it still copies.
  Tensor t = arange(6, kFloat64).view({2, 3}).t();
  CHECK(t.reshape({6}).storage() != t.storage());
  // Gradients through a strided view, against finite differences.
  auto r = ember::testing::gradcheck(
      [&](const std::vector<Tensor>& v) {
        return mul(v[0].slice(2, C, 2 * C).reshape({B, T, H, D}).transpose(1, 2), 2.0);
      },
      {randn64({B, T, 3 * C}, 12)});
  CHECK_MESSAGE(r.ok, r.message);
}

TEST_CASE("ops/transpose: swaps sizes and strides, sharing storage") {
  Tensor a = arange(24, kFloat64).view({2, 3, 4});
  Tensor t = a.transpose(0, 2);
  CHECK(t.sizes() == Shape{4, 3, 2});
  CHECK(t.strides() == Shape{1, 4, 12});
  CHECK(t.storage() == a.storage());
  CHECK_FALSE(t.is_contiguous());
  CHECK(t.contiguous().to_vector<double>()[1] == 12.0);  // t[0][0][1] = a[1][0][0]
  CHECK(a.transpose(-1, 1).sizes() == Shape{2, 4, 3});
  Tensor m = tensor({{1, 2, 3}, {4, 5, 6}});
  CHECK(m.t().to_vector<double>() == V{1, 4, 2, 5, 3, 6});
  CHECK(m.t().t().is_contiguous());
  CHECK_THROWS_WITH_AS(a.transpose(0, 3), doctest::Contains("transpose: dim 3 is out of range"),
                       Error);
  CHECK_THROWS_WITH_AS(a.t(), doctest::Contains("t: expects a 2-D tensor, got shape [2, 3, 4]"),
                       Error);
}

TEST_CASE("ops/slice: start, end, step, negative and clamped bounds") {
  Tensor a = arange(10, kFloat64);
  CHECK(a.slice(0, 2, 5).to_vector<double>() == V{2, 3, 4});
  CHECK(a.slice(0, 1, 10, 3).to_vector<double>() == V{1, 4, 7});
  CHECK(a.slice(0, -3, 10).to_vector<double>() == V{7, 8, 9});
  CHECK(a.slice(0, 0, -8).to_vector<double>() == V{0, 1});
  CHECK(a.slice(0, 8, 100).to_vector<double>() == V{8, 9});
  CHECK(a.slice(0, 5, 2).numel() == 0);
  Tensor m = arange(12, kFloat64).view({3, 4});
  Tensor s = m.slice(1, 1, 3);
  CHECK(s.sizes() == Shape{3, 2});
  CHECK(s.to_vector<double>() == V{1, 2, 5, 6, 9, 10});
  CHECK(s.storage() == m.storage());
  CHECK(s.storage_offset() == 1);
  CHECK_THROWS_WITH_AS(a.slice(0, 0, 5, 0),
                       doctest::Contains("slice: step must be positive, got 0"), Error);
  CHECK_THROWS_WITH_AS(a.slice(1, 0, 5), doctest::Contains("slice: dim 1 is out of range"), Error);
}

TEST_CASE("ops/select: picks one index and drops the dim") {
  Tensor m = arange(12, kFloat64).view({3, 4});
  CHECK(m.select(0, 1).to_vector<double>() == V{4, 5, 6, 7});
  CHECK(m.select(1, -1).to_vector<double>() == V{3, 7, 11});
  CHECK(m[2].to_vector<double>() == V{8, 9, 10, 11});
  CHECK(m[1][2].item() == 6.0);
  CHECK(m.select(1, 0).sizes() == Shape{3});
  CHECK_THROWS_WITH_AS(m.select(0, 3),
                       doctest::Contains("select: index 3 is out of range for dim 0 of size 3"),
                       Error);
  CHECK_THROWS_WITH_AS(m.select(1, -5), doctest::Contains("select: index -5 is out of range"),
                       Error);
}

TEST_CASE("ops/unsqueeze, squeeze: add and remove size-1 dims") {
  Tensor a = arange(6, kFloat64).view({2, 3});
  CHECK(a.unsqueeze(0).sizes() == Shape{1, 2, 3});
  CHECK(a.unsqueeze(1).sizes() == Shape{2, 1, 3});
  CHECK(a.unsqueeze(-1).sizes() == Shape{2, 3, 1});
  CHECK(a.unsqueeze(2).is_contiguous());
  CHECK(a.unsqueeze(1).squeeze(1).sizes() == Shape{2, 3});
  CHECK(a.squeeze(0).is_same(a));  // size 2: nothing to squeeze
  CHECK(full({1}, 3.0).squeeze(0).dim() == 0);
  CHECK(a.t().unsqueeze(1).contiguous().to_vector<double>() == V{0, 3, 1, 4, 2, 5});
  CHECK_THROWS_WITH_AS(a.unsqueeze(3), doctest::Contains("unsqueeze: dim 3 is out of range"),
                       Error);
  CHECK_THROWS_WITH_AS(a.squeeze(2), doctest::Contains("squeeze: dim 2 is out of range"), Error);
}

TEST_CASE("ops/expand: broadcasts size-1 and new leading dims with stride 0") {
  Tensor col = from_vector(V{1, 2}, {2, 1});
  Tensor e = col.expand({2, 3});
  CHECK(e.strides()[1] == 0);
  CHECK(e.to_vector<double>() == V{1, 1, 1, 2, 2, 2});
  CHECK(col.expand({4, -1, 3}).sizes() == Shape{4, 2, 3});
  CHECK(tensor({5.0}).expand({0}).numel() == 0);
  CHECK_THROWS_WITH_AS(col.expand({3, 3}),
                       doctest::Contains("expand: size 2 at dim 0 cannot be expanded to 3"), Error);
  CHECK_THROWS_WITH_AS(col.expand({2}),
                       doctest::Contains("expand: cannot expand shape [2, 1] to fewer dims [2]"),
                       Error);
  CHECK_THROWS_WITH_AS(col.expand({-2, 2, 1}), doctest::Contains("expand: invalid size -2"), Error);
}

TEST_CASE("ops/cat: joins along a dim, checking the other dims") {
  Tensor a = tensor({{1, 2}, {3, 4}});
  Tensor b = tensor({{5, 6}});
  CHECK(cat({a, b}).to_vector<double>() == V{1, 2, 3, 4, 5, 6});
  CHECK(cat({a, b}, 0).sizes() == Shape{3, 2});
  CHECK(cat({a, a}, 1).to_vector<double>() == V{1, 2, 1, 2, 3, 4, 3, 4});
  CHECK(cat({a, a}, -1).sizes() == Shape{2, 4});
  CHECK(cat({a, zeros({0, 2}), b}).sizes() == Shape{3, 2});
  CHECK(cat({a.t(), a}, 0).to_vector<double>() == V{1, 3, 2, 4, 1, 2, 3, 4});
  CHECK_THROWS_WITH_AS(cat({}), doctest::Contains("cat: expects a non-empty list"), Error);
  CHECK_THROWS_WITH_AS(
      cat({a, b}, 1),
      doctest::Contains(
          "cat: tensor 1 has shape [1, 2], which does not match [2, 2] except in dim 1"),
      Error);
  CHECK_THROWS_WITH_AS(cat({a, zeros({2, 2}, kFloat64)}),
                       doctest::Contains("cat: tensor 1 is float64"), Error);
  CHECK_THROWS_WITH_AS(cat({a, zeros({4})}),
                       doctest::Contains("cat: tensor 1 has 1 dims, tensor 0 has 2"), Error);
  CHECK_THROWS_WITH_AS(cat({a, Tensor()}), doctest::Contains("cat: tensor 1 is undefined"), Error);
}

TEST_CASE("ops/contiguous, clone: copy only when needed, clone always") {
  Tensor a = arange(6, kFloat64).view({2, 3});
  CHECK(a.contiguous().is_same(a));
  Tensor c = a.t().contiguous();
  CHECK(c.is_contiguous());
  CHECK(c.storage() != a.storage());
  CHECK(c.to_vector<double>() == V{0, 3, 1, 4, 2, 5});
  Tensor k = a.clone();
  CHECK(k.storage() != a.storage());
  k.fill_(1.0);
  CHECK(a.to_vector<double>() == V{0, 1, 2, 3, 4, 5});
}

TEST_CASE("ops/reshape, view, flatten: backward matches finite differences") {
  Tensor x = randn64({2, 3, 4}, 1);
  CHECK_GRADCHECK([](const Inputs& v) { return v[0].view({4, 6}) * v[0].view({4, 6}); }, {x});
  CHECK_GRADCHECK([](const Inputs& v) { return v[0].transpose(0, 2).reshape({-1, 2}); }, {x});
  CHECK_GRADCHECK([](const Inputs& v) { return v[0].flatten(); }, {x});
}

TEST_CASE("ops/transpose, t: backward matches finite differences") {
  CHECK_GRADCHECK([](const Inputs& v) { return v[0].transpose(0, 2) * 2.0; },
                  {randn64({2, 3, 4}, 2)});
  CHECK_GRADCHECK([](const Inputs& v) { return matmul(v[0].t(), v[0]); }, {randn64({3, 2}, 3)});
}

TEST_CASE("ops/slice, select: backward matches finite differences") {
  Tensor x = randn64({4, 5}, 4);
  CHECK_GRADCHECK([](const Inputs& v) { return v[0].slice(1, 1, 5, 2); }, {x});
  CHECK_GRADCHECK([](const Inputs& v) { return v[0].slice(0, 1, 3) * v[0].slice(0, 2, 4); }, {x});
  CHECK_GRADCHECK([](const Inputs& v) { return v[0].select(1, 3); }, {x});
  CHECK_GRADCHECK([](const Inputs& v) { return v[0][0] + v[0][3]; }, {x});
}

TEST_CASE("ops/unsqueeze, squeeze, expand: backward matches finite differences") {
  Tensor x = randn64({3, 1}, 5);
  CHECK_GRADCHECK([](const Inputs& v) { return v[0].unsqueeze(0) * 3.0; }, {x});
  CHECK_GRADCHECK([](const Inputs& v) { return v[0].squeeze(1); }, {x});
  CHECK_GRADCHECK([](const Inputs& v) { return v[0].expand({2, 3, 4}); }, {x});
  CHECK_GRADCHECK(
      [](const Inputs& v) {
        return v[0].expand({3, 4}) * v[1];
      },
      {x, randn64({3, 4}, 6)});
}

TEST_CASE("ops/cat: backward matches finite differences") {
  CHECK_GRADCHECK(
      [](const Inputs& v) {
        return cat({v[0], v[1], v[0]}, 1);
      },
      {randn64({2, 3}, 7), randn64({2, 1}, 8)});
  CHECK_GRADCHECK(
      [](const Inputs& v) {
        return cat({v[0].t(), v[1]}, 0);
      },
      {randn64({2, 3}, 9), randn64({1, 2}, 10)});
}

TEST_CASE("ops/clone, contiguous, to(cpu): backward matches finite differences") {
  Tensor x = randn64({3, 2}, 11);
  CHECK_GRADCHECK([](const Inputs& v) { return v[0].clone() * v[0]; }, {x});
  CHECK_GRADCHECK([](const Inputs& v) { return v[0].t().contiguous(); }, {x});
  CHECK_GRADCHECK([](const Inputs& v) { return v[0].to(kCPU) * 2.0; }, {x});
}

TEST_CASE("ops/tril, triu: the triangles of the last two dims, any diagonal, any batch") {
  Tensor x = arange(1, 13, 1, kFloat64).reshape({3, 4});  // [[1..4], [5..8], [9..12]]
  CHECK(tril(x).to_vector<double>() == V{1, 0, 0, 0, 5, 6, 0, 0, 9, 10, 11, 0});
  CHECK(triu(x).to_vector<double>() == V{1, 2, 3, 4, 0, 6, 7, 8, 0, 0, 11, 12});
  CHECK(tril(x, 1).to_vector<double>() == V{1, 2, 0, 0, 5, 6, 7, 0, 9, 10, 11, 12});
  CHECK(tril(x, -1).to_vector<double>() == V{0, 0, 0, 0, 5, 0, 0, 0, 9, 10, 0, 0});
  CHECK(triu(x, 2).to_vector<double>() == V{0, 0, 3, 4, 0, 0, 0, 8, 0, 0, 0, 0});
  CHECK(triu(x, -1).to_vector<double>() == V{1, 2, 3, 4, 5, 6, 7, 8, 0, 10, 11, 12});
  CHECK(tril(x, -5).to_vector<double>() == V(12, 0.0));
  // A batch of two, transposed: each matrix on its own.
  Tensor b = stack({x, mul(x, -1.0)}).transpose(1, 2);  // (2, 4, 3)
  Tensor lb = tril(b);
  CHECK(lb.sizes() == Shape{2, 4, 3});
  CHECK(lb.to_vector<double>() ==
        V{1, 0, 0, 2, 6, 0, 3, 7, 11, 4, 8, 12, -1, 0, 0, -2, -6, 0, -3, -7, -11, -4, -8, -12});
  CHECK(tril(tensor({{1, 2}, {3, 4}}, kInt64)).dtype() == kInt64);
  // The gradient passes where the triangle keeps the input.
  Tensor g = randn64({3, 3}, 5).set_requires_grad(true);
  sum(triu(g, 1)).backward();
  CHECK(g.grad().to_vector<double>() == V{0, 1, 1, 0, 0, 1, 0, 0, 0});
  CHECK_GRADCHECK([](const Inputs& v) { return tril(v[0], -1); }, {randn64({2, 3, 4}, 6)});
  CHECK_THROWS_WITH_AS(tril(tensor({1, 2})),
                       doctest::Contains("tril: expects a tensor of at least 2 dims"), Error);
  CHECK_THROWS_WITH_AS(triu(Tensor()), doctest::Contains("triu: input is an undefined tensor"),
                       Error);
}

TEST_CASE("ops/split, chunk, unbind: views of the pieces, torch's rules for uneven sizes") {
  Tensor x = arange(14, kFloat64).reshape({7, 2});
  std::vector<Tensor> s = split(x, 3);
  REQUIRE(s.size() == 3);
  CHECK(s[0].sizes() == Shape{3, 2});
  CHECK(s[2].sizes() == Shape{1, 2});
  CHECK(s[2].to_vector<double>() == V{12, 13});
  CHECK(s[1].storage() == x.storage());  // a view
  std::vector<Tensor> l = split(x, std::vector<int64_t>{2, 0, 5});
  REQUIRE(l.size() == 3);
  CHECK(l[1].sizes() == Shape{0, 2});
  CHECK(l[2].to_vector<double>() == V{4, 5, 6, 7, 8, 9, 10, 11, 12, 13});
  std::vector<Tensor> c1 = split(x, 1, 1);
  REQUIRE(c1.size() == 2);
  CHECK(c1[1].to_vector<double>() == V{1, 3, 5, 7, 9, 11, 13});
  // torch.chunk: pieces of ceil(n / chunks), so 7 in 4 chunks is 2, 2, 2, 1; 6 in 4
  // is 2, 2, 2 (three pieces); 2 in 3 is 1, 1.
  std::vector<Tensor> c = chunk(x, 4);
  REQUIRE(c.size() == 4);
  CHECK(c[3].sizes() == Shape{1, 2});
  CHECK(chunk(arange(6, kFloat64), 4).size() == 3);
  CHECK(chunk(arange(2, kFloat64), 3).size() == 2);
  CHECK(chunk(zeros({0, 2}), 3).size() == 1);
  std::vector<Tensor> u = unbind(x, 1);
  REQUIRE(u.size() == 2);
  CHECK(u[0].sizes() == Shape{7});
  CHECK(u[0].to_vector<double>() == V{0, 2, 4, 6, 8, 10, 12});
  CHECK(unbind(x).size() == 7);
  // Gradients flow back into each piece's place.
  Tensor g = randn64({5, 2}, 7).set_requires_grad(true);
  std::vector<Tensor> gp = chunk(g, 2);
  add(sum(gp[0]), mul(sum(gp[1]), 10.0)).backward();
  CHECK(g.grad().to_vector<double>() == V{1, 1, 1, 1, 1, 1, 10, 10, 10, 10});
  CHECK_THROWS_WITH_AS(split(x, std::vector<int64_t>{2, 3}),
                       doctest::Contains("split: split sizes [2, 3] sum to 5"), Error);
  CHECK_THROWS_WITH_AS(split(x, 0), doctest::Contains("split: split_size 0 cannot split"), Error);
  CHECK_THROWS_WITH_AS(chunk(x, 0), doctest::Contains("chunk: chunks must be positive"), Error);
  CHECK_THROWS_WITH_AS(unbind(x, 2), doctest::Contains("unbind: dim 2 is out of range"), Error);
  CHECK_THROWS_WITH_AS(split(full({}, 1.0), 1),
                       doctest::Contains("split: expects a tensor of at least 1 dim"), Error);
}
