// Types and selection on CPU: the bool dtype, comparisons, PyTorch's type
// promotion (int64 arithmetic, true division, scalars, 0-dim tensors), where,
// masked_fill, clamp, maximum/minimum (values, NaN, the tie rule of the
// gradient), against hand-computed values and finite differences.
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
using I = std::vector<int64_t>;
using B = std::vector<bool>;
using Inputs = std::vector<Tensor>;
const double kNaN = std::numeric_limits<double>::quiet_NaN();
}  // namespace

TEST_CASE("dtype/bool: one byte, not floating, prints True/False, converts like PyTorch") {
  CHECK(element_size(kBool) == 1);
  CHECK(!is_floating(kBool));
  CHECK(dtype_name(kBool) == "bool");
  Tensor b = tensor({1, 0, 2, -0.5}, kBool);  // any non-zero is true
  CHECK(b.dtype() == kBool);
  CHECK(b.to_vector<bool>() == B{true, false, true, true});
  CHECK(b.str() == "tensor([True, False, True, True])");
  CHECK(cast(b, kFloat32).to_vector<double>() == V{1, 0, 1, 1});
  CHECK(cast(tensor({kNaN, 0.0}), kBool).to_vector<bool>() == B{true, false});
  CHECK(zeros({2}, kBool).to_vector<bool>() == B{false, false});
  CHECK_THROWS_WITH_AS(b.set_requires_grad(true), doctest::Contains("only floating-point"), Error);
}

TEST_CASE("compare: tensor-tensor comparisons broadcast and give bool") {
  Tensor a = tensor({{1, 2, 3}, {4, 5, 6}});
  Tensor r = tensor({2, 5, 3});
  CHECK(eq(a, r).dtype() == kBool);
  CHECK(eq(a, r).to_vector<bool>() == B{false, false, true, false, true, false});
  CHECK(ne(a, r).to_vector<bool>() == B{true, true, false, true, false, true});
  CHECK(lt(a, r).to_vector<bool>() == B{true, true, false, false, false, false});
  CHECK(le(a, r).to_vector<bool>() == B{true, true, true, false, true, false});
  CHECK(gt(a, r).to_vector<bool>() == B{false, false, false, true, false, true});
  CHECK(ge(a, r).to_vector<bool>() == B{false, false, true, true, true, true});
  CHECK((a == r).to_vector<bool>() == eq(a, r).to_vector<bool>());
  CHECK((a < r).to_vector<bool>() == lt(a, r).to_vector<bool>());
  CHECK(a.ge(r).to_vector<bool>() == ge(a, r).to_vector<bool>());
  CHECK(eq(a, r).sizes() == Shape{2, 3});
  // NaN compares unequal to everything, itself included.
  Tensor n = tensor({kNaN, 1.0});
  CHECK(eq(n, n).to_vector<bool>() == B{false, true});
  CHECK(ne(n, n).to_vector<bool>() == B{true, false});
  // Mixed dtypes compare after promotion: int64 3 == float 3.0.
  CHECK(eq(tensor({3, 4}, kInt64), tensor({3.0, 4.5})).to_vector<bool>() == B{true, false});
  // Comparisons carry no gradient.
  Tensor x = tensor({1.0, 2.0}).set_requires_grad(true);
  CHECK(!lt(x, x * 2.0).requires_grad());
}

TEST_CASE("compare: scalar comparisons give bool, both sides of the operator") {
  Tensor a = tensor({-1, 0, 0.5, 2});
  CHECK(gt(a, 0.0).to_vector<bool>() == B{false, false, true, true});
  CHECK(ge(a, 0.0).to_vector<bool>() == B{false, true, true, true});
  CHECK(lt(a, 0.5).to_vector<bool>() == B{true, true, false, false});
  CHECK(le(a, 0.5).to_vector<bool>() == B{true, true, true, false});
  CHECK(eq(a, 2).to_vector<bool>() == B{false, false, false, true});
  CHECK(ne(a, 2).to_vector<bool>() == B{true, true, true, false});
  CHECK((a > 0).to_vector<bool>() == B{false, false, true, true});
  CHECK((0 < a).to_vector<bool>() == B{false, false, true, true});
  CHECK((1 >= a).to_vector<bool>() == B{true, true, true, false});
  CHECK((a != 0).dtype() == kBool);
  // An int64 tensor against a fractional scalar compares exactly.
  CHECK(lt(tensor({0, 1, 2}, kInt64), 1.5).to_vector<bool>() == B{true, true, false});
}

TEST_CASE("promotion: result_type follows torch.result_type") {
  auto t = [](DType d) { return zeros({2}, d); };
  auto z = [](DType d) { return zeros({}, d); };
  CHECK(promote_types(kInt64, kFloat32) == kFloat32);
  CHECK(promote_types(kBFloat16, kFloat32) == kFloat32);
  CHECK(promote_types(kBFloat16, kFloat64) == kFloat64);
  CHECK(promote_types(kBool, kInt64) == kInt64);
  CHECK(promote_types(kBool, kBFloat16) == kBFloat16);
  CHECK(result_type(t(kFloat32), t(kFloat64)) == kFloat64);
  // A 0-dim operand counts only when of a higher category.
  CHECK(result_type(t(kFloat32), z(kFloat64)) == kFloat32);
  CHECK(result_type(t(kBFloat16), z(kFloat32)) == kBFloat16);
  CHECK(result_type(t(kInt64), z(kFloat64)) == kFloat64);
  CHECK(result_type(t(kBool), z(kInt64)) == kInt64);
  CHECK(result_type(z(kFloat32), z(kFloat64)) == kFloat64);
}

TEST_CASE("promotion: int64 arithmetic, true division and mixed dtypes") {
  Tensor i = tensor({7, -2, 3}, kInt64);
  Tensor j = tensor({2, 2, -4}, kInt64);
  CHECK((i + j).dtype() == kInt64);
  CHECK((i + j).to_vector<int64_t>() == I{9, 0, -1});
  CHECK((i - j).to_vector<int64_t>() == I{5, -4, 7});
  CHECK((i * j).to_vector<int64_t>() == I{14, -4, -12});
  CHECK(add(i, j, 3).to_vector<int64_t>() == I{13, 4, -9});
  CHECK((i / j).dtype() == kFloat32);  // true division, as PyTorch's /
  CHECK((i / j).to_vector<double>() == V{3.5, -1, -0.75});
  CHECK((-i).to_vector<int64_t>() == I{-7, 2, -3});
  CHECK(abs(i).to_vector<int64_t>() == I{7, 2, 3});
  CHECK(maximum(i, j).to_vector<int64_t>() == I{7, 2, 3});
  CHECK(exp(tensor({0}, kInt64)).dtype() == kFloat32);
  CHECK(sum(i).dtype() == kInt64);
  CHECK(sum(i).item<int64_t>() == 8);
  CHECK(sum(tensor({1, 0, 1, 1}, kBool)).item<int64_t>() == 3);  // counting a mask
  CHECK(sum(tensor({1, 0, 1, 1}, kBool)).dtype() == kInt64);
  // Large int64 values stay exact, past 2^53 too (int64 computes in int64;
  // tests/core/test_int64_exact.cpp sends 2^53 + 1 through every path).
  const int64_t big = (int64_t{1} << 53) + 1;
  CHECK((tensor({big}) + tensor({1}, kInt64)).item<int64_t>() == big + 1);

  // int64 + float32 -> float32; float32 + bfloat16 -> float32; float32 + float64 -> float64.
  Tensor f = tensor({0.5, 0.25, 1.0});
  CHECK((i + f).dtype() == kFloat32);
  CHECK((i + f).to_vector<double>() == V{7.5, -1.75, 4});
  CHECK((f + tensor({1, 2, 3}, kBFloat16)).dtype() == kFloat32);
  CHECK((f * tensor({1, 2, 3}, kFloat64)).dtype() == kFloat64);
  CHECK((f * tensor({1, 2, 3}, kFloat64)).to_vector<double>() == V{0.5, 0.5, 3});
  // bool counts as 0/1 next to a number.
  CHECK((tensor({1, 0}, kBool) + tensor({2.5, 2.5})).to_vector<double>() == V{3.5, 2.5});
}

TEST_CASE("promotion: scalars never widen a tensor of their own category") {
  Tensor f = tensor({1, 2}, kFloat32);
  Tensor b = tensor({1, 2}, kBFloat16);
  Tensor i = tensor({1, 2}, kInt64);
  CHECK((f * 0.5).dtype() == kFloat32);
  CHECK((b * 0.5).dtype() == kBFloat16);
  CHECK((b + 1).dtype() == kBFloat16);
  CHECK((i + 1).dtype() == kInt64);
  CHECK((i + 1).to_vector<int64_t>() == I{2, 3});
  CHECK((i * 3).to_vector<int64_t>() == I{3, 6});
  CHECK((10 - i).to_vector<int64_t>() == I{9, 8});
  CHECK((i - 1).to_vector<int64_t>() == I{0, 1});
  CHECK(pow(i, 2).dtype() == kInt64);
  CHECK(pow(i, 2).to_vector<int64_t>() == I{1, 4});
  // A floating-point scalar makes an integer tensor float32 (and / is true division).
  CHECK((i * 0.5).dtype() == kFloat32);
  CHECK((i * 0.5).to_vector<double>() == V{0.5, 1});
  CHECK((i + 1.0).dtype() == kFloat32);
  CHECK((i / 2).dtype() == kFloat32);
  CHECK((i / 2).to_vector<double>() == V{0.5, 1});
  CHECK(pow(i, -1).dtype() == kFloat32);
  CHECK(clamp(i, 0, 1).dtype() == kInt64);
  CHECK(clamp(i, 0.5, 1.5).dtype() == kFloat32);
}

TEST_CASE("promotion: mixed-dtype backward returns each input's own dtype") {
  Tensor a = tensor({1.0, 2.0}, kFloat32).set_requires_grad(true);
  Tensor b = tensor({3.0, 4.0}, kFloat64).set_requires_grad(true);
  Tensor y = a * b;
  CHECK(y.dtype() == kFloat64);
  y.sum().backward();
  CHECK(a.grad().dtype() == kFloat32);
  CHECK(a.grad().to_vector<double>() == V{3, 4});
  CHECK(b.grad().dtype() == kFloat64);
  CHECK(b.grad().to_vector<double>() == V{1, 2});
  // An int64 operand takes no gradient.
  Tensor c = tensor({1.0, 2.0}).set_requires_grad(true);
  (c * tensor({2, 3}, kInt64)).sum().backward();
  CHECK(c.grad().to_vector<double>() == V{2, 3});
}

TEST_CASE("promotion: float32 with a bfloat16 operand reads it as it is, with the cast's bits") {
  // add and sub (whose backward reads no operand) and the comparisons read the bfloat16
  // operand in the kernel, widened, instead of through a cast op: the same values, so the
  // same bits as casting first, in either order, broadcasting, with alpha.
  Generator gen(5);
  const Tensor f = randn({3, 4, 5}, kFloat32, &gen);
  const Tensor h = randn({4, 5}, kFloat32, &gen).to(kBFloat16);
  const Tensor hw = h.to(kFloat32);
  CHECK(add(f, h).to_vector<float>() == add(f, hw).to_vector<float>());
  CHECK(add(h, f).to_vector<float>() == add(hw, f).to_vector<float>());
  CHECK(add(f, h, -0.375).to_vector<float>() == add(f, hw, -0.375).to_vector<float>());
  CHECK(add(h, f, 3.0).to_vector<float>() == add(hw, f, 3.0).to_vector<float>());
  CHECK(sub(h, f).to_vector<float>() == sub(hw, f).to_vector<float>());
  CHECK(lt(f, h).to_vector<bool>() == lt(f, hw).to_vector<bool>());
  CHECK(ge(h, f).to_vector<bool>() == ge(hw, f).to_vector<bool>());
  CHECK(add(f, h).dtype() == kFloat32);
  CHECK(add(f.slice(2, 1, 4), h.slice(1, 1, 4)).to_vector<float>() ==
        add(f.slice(2, 1, 4), hw.slice(1, 1, 4)).to_vector<float>());
  // mul reads its operands in backward: still through a cast, same values.
  CHECK(mul(f, h).to_vector<float>() == mul(f, hw).to_vector<float>());

  // Gradients: each input's own dtype, the bfloat16 one the float32 gradient summed
  // to its shape and rounded once (as CastBackward did), with no cast node between.
  Tensor x = f.detach().set_requires_grad(true);
  Tensor y = h.detach().set_requires_grad(true);
  Tensor z = add(x, y, 0.5);
  REQUIRE(z.grad_fn() != nullptr);
  CHECK(z.grad_fn()->name() == std::string("AddBackward"));
  // Both inputs' edges lead straight to their leaves: no CastBackward in between.
  REQUIRE(z.grad_fn()->next_edges.size() == 2);
  CHECK(z.grad_fn()->next_edges[1].node->name() == std::string("AccumulateGrad"));
  // mul still casts (its backward reads the operands).
  CHECK(mul(x, y).grad_fn()->next_edges[1].node->name() == std::string("CastBackward"));
  const Tensor w = randn({3, 4, 5}, kFloat32, &gen);
  (z * w).sum().backward();
  CHECK(x.grad().dtype() == kFloat32);
  CHECK(x.grad().to_vector<float>() == w.to_vector<float>());
  CHECK(y.grad().dtype() == kBFloat16);
  CHECK(y.grad().to_vector<float>() == mul(sum(w, 0), 0.5).to(kBFloat16).to_vector<float>());
  Tensor y2 = h.detach().set_requires_grad(true);
  sub(f, y2).sum().backward();
  CHECK(y2.grad().dtype() == kBFloat16);
  CHECK(y2.grad().to_vector<double>() == V(20, -3.0));

  // In place: float32 += bfloat16 reads it as it is; the bits of adding the cast.
  Tensor t = f.clone(), t2 = f.clone();
  t.add_(h, 2.0);
  t2.add_(hw, 2.0);
  CHECK(t.to_vector<float>() == t2.to_vector<float>());
}

TEST_CASE("promotion: in-place ops accept other dtypes whose result fits") {
  Tensor t = tensor({1.0, 2.0}, kFloat32);
  t.add_(tensor({1, 1}, kInt64));
  CHECK(t.to_vector<double>() == V{2, 3});
  t.mul_(tensor({2, 2}, kBFloat16));
  CHECK(t.to_vector<double>() == V{4, 6});
  Tensor i = tensor({1, 2}, kInt64);
  i.add_(3);
  CHECK(i.to_vector<int64_t>() == I{4, 5});
  i += tensor({1, 1}, kInt64);
  CHECK(i.to_vector<int64_t>() == I{5, 6});
  CHECK_THROWS_WITH_AS(
      i.add_(tensor({0.5, 0.5})),
      doctest::Contains("add_: operands have different dtypes (int64 and float32)"), Error);
  CHECK_THROWS_WITH_AS(i.mul_(0.5),
                       doctest::Contains("mul_: cannot multiply a int64 tensor by a "
                                         "floating-point scalar"),
                       Error);
  Tensor m = zeros({2}, kBool);
  CHECK_THROWS_WITH_AS(m.add_(m), doctest::Contains("add_: in-place arithmetic on a bool tensor"),
                       Error);
}

TEST_CASE("where: picks by a bool condition with broadcasting and promotion") {
  Tensor c = tensor({1, 0, 1}, kBool);
  Tensor a = tensor({{1, 2, 3}, {4, 5, 6}});
  Tensor b = tensor({-1.0});
  Tensor w = where(c, a, b);
  CHECK(w.sizes() == Shape{2, 3});
  CHECK(w.to_vector<double>() == V{1, -1, 3, 4, -1, 6});
  CHECK(where(c, tensor({1, 2, 3}, kInt64), tensor({0.5})).dtype() == kFloat32);
  CHECK(where(c, tensor({1, 2, 3}, kInt64), tensor({0}, kInt64)).to_vector<int64_t>() ==
        I{1, 0, 3});
  CHECK(where(c, c, tensor({1, 1, 1}, kBool)).to_vector<bool>() == B{true, true, true});
  CHECK_THROWS_WITH_AS(where(tensor({1, 0}), a, b),
                       doctest::Contains("where: the condition must "
                                         "be a bool tensor"),
                       Error);
  CHECK_THROWS_WITH_AS(where(c, a, zeros({4})), doctest::Contains("where: shapes"), Error);
}

TEST_CASE("where: gradients flow to the chosen side, summed over broadcast dims") {
  Tensor cond = gt(randn64({3, 4}, 3), 0.0);
  CHECK_GRADCHECK([cond](const Inputs& v) { return where(cond, v[0], v[1]); },
                  {randn64({3, 4}, 1), randn64({4}, 2)});
  Tensor a = tensor({1.0, 2.0}).set_requires_grad(true);
  Tensor b = tensor({5.0}).set_requires_grad(true);
  where(tensor({1, 0}, kBool), a, b).sum().backward();
  CHECK(a.grad().to_vector<double>() == V{1, 0});
  CHECK(b.grad().to_vector<double>() == V{1});
}

TEST_CASE("masked_fill: fills where the mask is true, keeps x's dtype and shape") {
  Tensor x = tensor({{1, 2}, {3, 4}});
  Tensor m = tensor({1, 0}, kBool);  // broadcast over rows
  CHECK(masked_fill(x, m, -9).to_vector<double>() == V{-9, 2, -9, 4});
  CHECK(x.masked_fill(m, 0.5).dtype() == kFloat32);
  CHECK(masked_fill(tensor({1, 2}, kInt64), m, 7).to_vector<int64_t>() == I{7, 2});
  // The filled places get no gradient.
  CHECK_GRADCHECK([m](const Inputs& v) { return masked_fill(v[0], m, 3.0); }, {randn64({2, 2}, 4)});
  CHECK_THROWS_WITH_AS(masked_fill(x, tensor({1, 0}), 0),
                       doctest::Contains("masked_fill: the "
                                         "mask must be a bool"),
                       Error);
  CHECK_THROWS_WITH_AS(masked_fill(x, zeros({3}, kBool), 0),
                       doctest::Contains("masked_fill: shapes [2, 2] and [3]"), Error);
  CHECK_THROWS_WITH_AS(masked_fill(tensor({1}, kInt64), tensor({1}, kBool), 0.5),
                       doctest::Contains("masked_fill: cannot fill a int64 tensor"), Error);
}

TEST_CASE("clamp: values, NaN kept, gradient where min <= x <= max") {
  Tensor x = tensor({-2, -1, 0, 1, 2, kNaN}, kFloat64);
  CHECK(clamp(x, -1, 1).to_vector<double>()[0] == -1);
  const V c = clamp(x, -1, 1).to_vector<double>();
  CHECK(V(c.begin(), c.end() - 1) == V{-1, -1, 0, 1, 1});
  CHECK(std::isnan(c.back()));
  CHECK(clamp_min(x, 0.5).to_vector<double>()[3] == 1);
  CHECK(clamp_max(x, 0.5).to_vector<double>()[3] == 0.5);
  CHECK(clamp(tensor({0, 5}), 3, 1).to_vector<double>() == V{1, 1});  // min > max gives max
  Tensor g = tensor({-2, -1, 0, 1, 2}, kFloat64).set_requires_grad(true);
  clamp(g, -1, 1).sum().backward();
  CHECK(g.grad().to_vector<double>() == V{0, 1, 1, 1, 0});  // the bounds themselves pass
  CHECK_GRADCHECK([](const Inputs& v) { return clamp(v[0], -0.5, 0.7); }, {randn64({3, 5}, 8)});
}

TEST_CASE("maximum, minimum: NaN wins, ties split the gradient evenly") {
  Tensor a = tensor({1, 5, 3, kNaN}, kFloat64);
  Tensor b = tensor({2, 4, 3, 0}, kFloat64);
  const V mx = maximum(a, b).to_vector<double>();
  CHECK(V(mx.begin(), mx.end() - 1) == V{2, 5, 3});
  CHECK(std::isnan(mx.back()));
  CHECK(std::isnan(minimum(b, a).to_vector<double>().back()));
  CHECK(minimum(a, b).to_vector<double>()[1] == 4);
  Tensor x = tensor({1, 5, 3}, kFloat64).set_requires_grad(true);
  Tensor y = tensor({2, 4, 3}, kFloat64).set_requires_grad(true);
  maximum(x, y).sum().backward();
  CHECK(x.grad().to_vector<double>() == V{0, 1, 0.5});
  CHECK(y.grad().to_vector<double>() == V{1, 0, 0.5});
  CHECK_GRADCHECK([](const Inputs& v) { return maximum(v[0], v[1]); },
                  {randn64({4, 3}, 5), randn64({3}, 6)});
  CHECK_GRADCHECK([](const Inputs& v) { return minimum(v[0], v[1]); },
                  {randn64({4, 3}, 7), randn64({4, 1}, 8)});
}

TEST_CASE("softplus: stable for large inputs, derivative sigmoid") {
  Tensor x = tensor({-1000, -1, 0, 1, 1000}, kFloat64);
  const V s = softplus(x).to_vector<double>();
  CHECK(s[0] == 0.0);
  CHECK(s[1] == doctest::Approx(std::log1p(std::exp(-1.0))).epsilon(1e-15));
  CHECK(s[2] == doctest::Approx(std::log(2.0)).epsilon(1e-15));
  CHECK(s[4] == 1000.0);
  CHECK_GRADCHECK([](const Inputs& v) { return softplus(v[0]); }, {randn64({6}, 9) * 3.0});
}
