// Classification and regression losses on CPU: cross_entropy and nll_loss
// (ignore_index, label_smoothing, every reduction, (N, C, d...) and 1-D inputs),
// binary_cross_entropy(_with_logits) and l1_loss, against hand-computed values
// (PyTorch's formulas) and finite differences, with every error path.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "core/autograd.h"
#include "core/ops.h"
#include "gradcheck.h"

using namespace ember;
using ember::testing::rand64;
using ember::testing::randn64;
using ember::testing::rel_error;

namespace {
using V = std::vector<double>;
using Inputs = std::vector<Tensor>;
const double kLse123 = 3.40760596444438;  // log(e + e^2 + e^3)
const double kLog3 = 1.0986122886681098;

Tensor logits23() {
  return tensor({{1, 2, 3}, {0, 0, 0}}, kFloat64);
}
Tensor targets(std::initializer_list<double> v) {
  return tensor(v, kInt64);
}
}  // namespace

TEST_CASE("cross_entropy: hand-computed values for each reduction") {
  const double row0 = kLse123 - 3, row1 = kLog3;
  Tensor x = logits23(), t = targets({2, 1});
  CHECK(cross_entropy(x, t).item() == doctest::Approx((row0 + row1) / 2).epsilon(1e-14));
  CHECK(cross_entropy(x, t, CrossEntropyOptions{Reduction::Sum}).item() ==
        doctest::Approx(row0 + row1).epsilon(1e-14));
  Tensor none = cross_entropy(x, t, CrossEntropyOptions().reduction(Reduction::None));
  CHECK(none.sizes() == Shape{2});
  CHECK(none.to_vector<double>()[0] == doctest::Approx(row0).epsilon(1e-14));
  CHECK(none.to_vector<double>()[1] == doctest::Approx(row1).epsilon(1e-14));
  CHECK(cross_entropy(x, targets({0, 1})).item() ==
        doctest::Approx((kLse123 - 1 + kLog3) / 2).epsilon(1e-14));
  CHECK(cross_entropy(x.to(kFloat32), t).dtype() == kFloat32);
}

TEST_CASE("cross_entropy: ignore_index drops rows from the loss and from Mean's count") {
  Tensor x = logits23();
  CHECK(cross_entropy(x, targets({2, -100})).item() == doctest::Approx(kLse123 - 3).epsilon(1e-14));
  const V none = cross_entropy(x, targets({2, 1}), CrossEntropyOptions(Reduction::None, 1))
                     .to_vector<double>();
  CHECK(none[1] == 0.0);
  CHECK(std::isnan(cross_entropy(x, targets({-100, -100})).item()));  // Mean of nothing
  CHECK(cross_entropy(x, targets({-100, -100}), CrossEntropyOptions{Reduction::Sum}).item() == 0.0);
  // The ignored row gets no gradient.
  Tensor xg = x.clone().set_requires_grad(true);
  cross_entropy(xg, targets({2, -100})).backward();
  const V g = xg.grad().to_vector<double>();
  CHECK(g[3] == 0.0);
  CHECK(g[4] == 0.0);
  CHECK(g[5] == 0.0);
  // Row 0: softmax - onehot, Mean over one row.
  CHECK(g[0] == doctest::Approx(0.09003057317038048).epsilon(1e-12));
  CHECK(g[2] == doctest::Approx(0.665240955774822 - 1).epsilon(1e-12));
}

TEST_CASE("cross_entropy: label smoothing as PyTorch's (1 - ls) nll + ls / C smooth") {
  Tensor x = logits23();
  const auto o = CrossEntropyOptions().label_smoothing(0.1).reduction(Reduction::None);
  const V none = cross_entropy(x, targets({2, 1}), o).to_vector<double>();
  CHECK(none[0] == doctest::Approx(0.5076059644443801).epsilon(1e-14));
  CHECK(none[1] == doctest::Approx(kLog3).epsilon(1e-14));  // uniform logits: no change
  // Mean over the rows not ignored, smoothing term included.
  CHECK(cross_entropy(x, targets({2, -100}), CrossEntropyOptions().label_smoothing(0.1)).item() ==
        doctest::Approx(0.5076059644443801).epsilon(1e-14));
  CHECK(cross_entropy(x, targets({2, 1}), CrossEntropyOptions().label_smoothing(1.0)).item() ==
        doctest::Approx((kLse123 - 2 + kLog3) / 2).epsilon(1e-14));
}

TEST_CASE("cross_entropy: (N, C, d...) logits equal the rows they stand for; 1-D logits") {
  Tensor x = randn64({2, 3, 4}, 50);
  Tensor t = tensor({0, 2, 1, 1, 2, 2, 0, -100}, kInt64).reshape({2, 4});
  Tensor rows = x.transpose(1, 2).reshape({8, 3});  // (N * d, C)
  const auto none = CrossEntropyOptions(Reduction::None);
  Tensor per = cross_entropy(x, t, none);
  CHECK(per.sizes() == Shape{2, 4});
  CHECK(rel_error(per.reshape({8}), cross_entropy(rows, t.reshape({8}), none)) < 1e-14);
  CHECK(cross_entropy(x, t).item() ==
        doctest::Approx(cross_entropy(rows, t.reshape({8})).item()).epsilon(1e-14));
  Tensor one = tensor({1, 2, 3}, kFloat64);
  CHECK(cross_entropy(one, full({}, 2, kInt64)).item() ==
        doctest::Approx(kLse123 - 3).epsilon(1e-14));
}

TEST_CASE("cross_entropy, nll_loss: backward matches finite differences") {
  Tensor t = targets({0, 2, 1, 1, 3});
  for (Reduction r : {Reduction::Mean, Reduction::Sum, Reduction::None})
    for (double ls : {0.0, 0.2}) {
      CAPTURE(static_cast<int>(r));
      CAPTURE(ls);
      const CrossEntropyOptions o(r, 1, ls);  // target 1 ignored
      CHECK_GRADCHECK([t, o](const Inputs& v) { return cross_entropy(v[0], t, o); },
                      {randn64({5, 4}, 51)});
    }
  Tensor t3 = tensor({0, 2, 1, 1, 2, 2}, kInt64).reshape({2, 3});
  CHECK_GRADCHECK(
      [t3](const Inputs& v) {
        return cross_entropy(v[0], t3, CrossEntropyOptions().label_smoothing(0.3));
      },
      {randn64({2, 4, 3}, 52)});
  CHECK_GRADCHECK([t](const Inputs& v) { return nll_loss(log_softmax(v[0], 1), t); },
                  {randn64({5, 4}, 53)});
  CHECK_GRADCHECK(
      [t](const Inputs& v) { return nll_loss(v[0], t, NLLLossOptions(Reduction::Sum, 3)); },
      {randn64({5, 4}, 54)});
}

TEST_CASE("nll_loss: picks -log_probs at the targets") {
  Tensor lp = tensor({{-1, -2, -3}, {-0.5, -0.25, -4}}, kFloat64);
  CHECK(nll_loss(lp, targets({2, 1})).item() == doctest::Approx(1.625).epsilon(1e-15));
  CHECK(nll_loss(lp, targets({2, 1}), NLLLossOptions(Reduction::None)).to_vector<double>() ==
        V{3, 0.25});
  CHECK(nll_loss(lp, targets({0, 7}), NLLLossOptions(Reduction::Sum, 7)).item() == 1.0);
}

// The chunked path (float32 on the CPU, with its fused cross-entropy kernel) against
// linear then cross_entropy in float64, for chunks of 1 row up to more than all.
struct LinearCeCase {
  CrossEntropyOptions o;
  int64_t chunk_rows;
};

// loss and the gradients of x and w: linear_cross_entropy in float32, or (reference)
// cross_entropy(linear(.)) in float64, for an incoming gradient g.
struct LinearCeResult {
  double loss;
  Tensor dx, dw;
};
LinearCeResult linear_ce_run(const Tensor& x64, const Tensor& w64, const Tensor& t,
                             const LinearCeCase& c, bool reference, double g = 1.0) {
  const DType dt = reference ? kFloat64 : kFloat32;
  Tensor x = x64.to(dt).detach().requires_grad_(), w = w64.to(dt).detach().requires_grad_();
  Tensor loss = reference ? cross_entropy(linear(x, w), t, c.o)
                          : linear_cross_entropy(x, w, t, c.o, c.chunk_rows);
  mul(loss, g).backward();
  return {loss.item(), x.grad().to(kFloat64), w.grad().to(kFloat64)};
}

TEST_CASE("linear_cross_entropy: equals linear then cross_entropy, loss and both gradients") {
  const Tensor x64 = randn64({7, 5}, 61), w64 = randn64({6, 5}, 62);
  const Tensor t = targets({0, 2, 5, 1, 2, 3, 4});
  for (const LinearCeCase& c :
       {LinearCeCase{{}, 0}, LinearCeCase{{}, 1}, LinearCeCase{{Reduction::Sum, -100, 0.1}, 3},
        LinearCeCase{{Reduction::Mean, 2}, 2}, LinearCeCase{{Reduction::Mean, 2, 0.2}, 7},
        LinearCeCase{{Reduction::Sum}, 40}}) {
    CAPTURE(c.chunk_rows);
    CAPTURE(static_cast<int>(c.o.reduction()));
    CAPTURE(c.o.ignore_index());
    const LinearCeResult ref = linear_ce_run(x64, w64, t, c, true, 0.5);
    const LinearCeResult ours = linear_ce_run(x64, w64, t, c, false, 0.5);
    CHECK(ours.loss == doctest::Approx(ref.loss).epsilon(1e-5));
    CHECK(rel_error(ours.dx, ref.dx) < 1e-5);
    CHECK(rel_error(ours.dw, ref.dw) < 1e-5);
  }
  // (B, T, C) input with (B, T) targets, as a language model's head sees them.
  const Tensor x3 = randn64({2, 3, 5}, 63);
  const Tensor t3 = targets({0, 5, 1, 1, 4, 2}).reshape({2, 3});
  const Tensor got = linear_cross_entropy(x3.to(kFloat32), w64.to(kFloat32), t3, {}, 4);
  CHECK(got.item() ==
        doctest::Approx(cross_entropy(linear(x3, w64).reshape({6, 6}), t3.reshape({6})).item())
            .epsilon(1e-5));
  // None composes: per-row losses of the targets' shape.
  const Tensor none = linear_cross_entropy(x3, w64, t3, CrossEntropyOptions(Reduction::None));
  CHECK(none.sizes() == Shape{2, 3});
  CHECK(rel_error(none, cross_entropy(linear(x3, w64).reshape({6, 6}), t3.reshape({6}),
                                      CrossEntropyOptions(Reduction::None))
                            .reshape({2, 3})) < 1e-14);
  // Every target ignored: Mean of nothing is NaN, as cross_entropy's.
  CHECK(std::isnan(
      linear_cross_entropy(x64.to(kFloat32), w64.to(kFloat32), full({7}, -100, kInt64)).item()));
}

TEST_CASE("linear_cross_entropy: a retained graph's second backward recomputes the gradients") {
  const Tensor x64 = randn64({9, 4}, 64), w64 = randn64({11, 4}, 65);
  const Tensor t = targets({0, 10, 3, 3, 7, 1, 2, 9, 5});
  const LinearCeCase c{{}, 4};
  const LinearCeResult ref = linear_ce_run(x64, w64, t, c, true);
  Tensor x = x64.to(kFloat32).detach().requires_grad_(),
         w = w64.to(kFloat32).detach().requires_grad_();
  Tensor loss = linear_cross_entropy(x, w, t, c.o, c.chunk_rows);
  loss.backward(Tensor(), /*retain_graph=*/true);
  CHECK(rel_error(x.grad().to(kFloat64), ref.dx) < 1e-5);
  loss.backward();  // the stash is spent: the node runs the chunks again
  CHECK(rel_error(x.grad().to(kFloat64), mul(ref.dx, 2.0)) < 1e-5);
  CHECK(rel_error(w.grad().to(kFloat64), mul(ref.dw, 2.0)) < 1e-5);
  // Only the weight needs a gradient: the input gets none.
  Tensor w2 = w64.to(kFloat32).requires_grad_();
  linear_cross_entropy(x64.to(kFloat32), w2, t, c.o, c.chunk_rows).backward();
  CHECK(rel_error(w2.grad().to(kFloat64), ref.dw) < 1e-5);
}

TEST_CASE("linear_cross_entropy: bad input throws naming the op and the argument") {
  const Tensor x = randn64({3, 4}, 66).to(kFloat32), w = randn64({5, 4}, 67).to(kFloat32);
  const Tensor t = targets({0, 4, 1});
  CHECK_THROWS_WITH_AS(linear_cross_entropy(x, w.reshape({20}), t),
                       doctest::Contains("linear_cross_entropy: weight must be 2-D"), Error);
  CHECK_THROWS_WITH_AS(linear_cross_entropy(x, randn64({5, 3}, 1).to(kFloat32), t),
                       doctest::Contains("linear_cross_entropy: input has 4 features"), Error);
  CHECK_THROWS_WITH_AS(linear_cross_entropy(x, w, targets({0, 1})),
                       doctest::Contains("linear_cross_entropy: target of shape [2] does not "
                                         "match input of shape [3, 4] (expected [3])"),
                       Error);
  CHECK_THROWS_WITH_AS(linear_cross_entropy(x, w, t, {}, -1),
                       doctest::Contains("linear_cross_entropy: chunk_rows must be >= 0"), Error);
  CHECK_THROWS_WITH_AS(linear_cross_entropy(x, w.to(kFloat64), t),
                       doctest::Contains("linear_cross_entropy: input and weight have different "
                                         "dtypes (float32 and float64)"),
                       Error);
  CHECK_THROWS_WITH_AS(linear_cross_entropy(x, w, targets({0, 5, 1})),
                       doctest::Contains("target 5 is out of range [0, 5)"), Error);
  CHECK_THROWS_WITH_AS(linear_cross_entropy(x, w, tensor({0.0, 1.0, 2.0})),
                       doctest::Contains("target must be an int64 tensor"), Error);
  CHECK_THROWS_WITH_AS(
      linear_cross_entropy(x, w, t, CrossEntropyOptions().label_smoothing(1.5)),
      doctest::Contains("linear_cross_entropy: label_smoothing must be in [0, 1], got 1.5"), Error);
}

TEST_CASE("cross_entropy, nll_loss: bad targets and shapes throw naming the op") {
  Tensor x = logits23();
  CHECK_THROWS_WITH_AS(cross_entropy(x, targets({2, 3})),
                       doctest::Contains("cross_entropy: target 3 is out of range [0, 3)"), Error);
  CHECK_THROWS_WITH_AS(cross_entropy(x, targets({-1, 0})),
                       doctest::Contains("cross_entropy: target -1 is out of range [0, 3)"), Error);
  CHECK_THROWS_WITH_AS(cross_entropy(x, tensor({2.0, 1.0})),
                       doctest::Contains("cross_entropy: target must be an int64 tensor of class "
                                         "indices, got float32"),
                       Error);
  CHECK_THROWS_WITH_AS(cross_entropy(x, targets({1, 2, 0})),
                       doctest::Contains("logits of shape [2, 3] and target of shape [3] have "
                                         "different batch sizes (2 and 3)"),
                       Error);
  CHECK_THROWS_WITH_AS(cross_entropy(zeros({2, 3, 4}), zeros({2, 5}, kInt64)),
                       doctest::Contains("target of shape [2, 5] does not match logits of shape "
                                         "[2, 3, 4] (expected [2, 4])"),
                       Error);
  CHECK_THROWS_WITH_AS(cross_entropy(x, targets({0, 0}), CrossEntropyOptions().label_smoothing(2)),
                       doctest::Contains("cross_entropy: label_smoothing must be in [0, 1]"),
                       Error);
  CHECK_THROWS_WITH_AS(cross_entropy(tensor({1, 2}, kInt64), targets({0})),
                       doctest::Contains("cross_entropy: expects a floating-point tensor"), Error);
  CHECK_THROWS_WITH_AS(nll_loss(x, targets({5, 0})),
                       doctest::Contains("nll_loss: target 5 is out of range [0, 3)"), Error);
}

TEST_CASE("binary_cross_entropy: values, clamped logs and PyTorch's gradient") {
  Tensor p = tensor({0.8, 0.3}, kFloat64), t = tensor({1.0, 0.0}, kFloat64);
  const V none = binary_cross_entropy(p, t, Reduction::None).to_vector<double>();
  CHECK(none[0] == doctest::Approx(0.2231435513142097).epsilon(1e-15));
  CHECK(none[1] == doctest::Approx(0.35667494393873245).epsilon(1e-15));
  CHECK(binary_cross_entropy(p, t).item() ==
        doctest::Approx((none[0] + none[1]) / 2).epsilon(1e-15));
  // p = 0 with t = 1: log clamped to -100, a finite loss and gradient.
  Tensor edge = tensor({0.0, 1.0}, kFloat64).set_requires_grad(true);
  Tensor l = binary_cross_entropy(edge, tensor({1.0, 0.0}, kFloat64), Reduction::Sum);
  CHECK(l.item() == 200.0);
  l.backward();
  for (double g : edge.grad().to_vector<double>()) CHECK(std::isfinite(g));
  CHECK_GRADCHECK([](const Inputs& v) { return binary_cross_entropy(v[0], v[1]); },
                  {rand64({3, 4}, 55, 0.1, 0.9), rand64({3, 4}, 56)});
  CHECK_GRADCHECK([](const Inputs& v) { return binary_cross_entropy(v[0], v[1], Reduction::None); },
                  {rand64({5}, 57, 0.1, 0.9), rand64({5}, 58)});
}

TEST_CASE("binary_cross_entropy_with_logits: values, pos_weight, stable for any logit") {
  Tensor x = tensor({0.5, -1.0}, kFloat64), t = tensor({1.0, 0.0}, kFloat64);
  const V none =
      binary_cross_entropy_with_logits(x, t, Tensor(), Reduction::None).to_vector<double>();
  CHECK(none[0] == doctest::Approx(0.4740769841801067).epsilon(1e-15));
  CHECK(none[1] == doctest::Approx(0.31326168751822286).epsilon(1e-15));
  const V weighted =
      binary_cross_entropy_with_logits(x, t, tensor({2.0}, kFloat64), Reduction::None)
          .to_vector<double>();
  CHECK(weighted[0] == doctest::Approx(0.9481539683602134).epsilon(1e-15));
  CHECK(weighted[1] == doctest::Approx(0.31326168751822286).epsilon(1e-15));
  // Logits far beyond exp's range: exact, no inf or NaN.
  const V far =
      binary_cross_entropy_with_logits(tensor({1000.0, -1000.0}, kFloat64),
                                       tensor({0.0, 1.0}, kFloat64), Tensor(), Reduction::None)
          .to_vector<double>();
  CHECK(far == V{1000, 1000});
  Tensor pw = rand64({4}, 59, 0.5, 3.0);
  CHECK_GRADCHECK(
      [pw](const Inputs& v) { return binary_cross_entropy_with_logits(v[0], v[1], pw); },
      {randn64({3, 4}, 60), rand64({3, 4}, 61)});
  CHECK_THROWS_WITH_AS(binary_cross_entropy_with_logits(x, tensor({1.0})),
                       doctest::Contains("binary_cross_entropy_with_logits: input of shape [2] and "
                                         "target of shape [1] differ"),
                       Error);
  CHECK_THROWS_WITH_AS(binary_cross_entropy_with_logits(x, t, zeros({3}, kFloat64)),
                       doctest::Contains("pos_weight"), Error);
}

TEST_CASE("l1_loss: mean absolute error, zero gradient at a tie") {
  Tensor p = tensor({1, 2, 3}, kFloat64), t = tensor({2, 2, 1}, kFloat64);
  CHECK(l1_loss(p, t).item() == 1.0);
  CHECK(l1_loss(p, t, Reduction::Sum).item() == 3.0);
  CHECK(l1_loss(p, t, Reduction::None).to_vector<double>() == V{1, 0, 2});
  Tensor pg = p.clone().set_requires_grad(true);
  l1_loss(pg, t).backward();
  CHECK(pg.grad().to_vector<double>() == V{-1.0 / 3, 0, 1.0 / 3});
  CHECK_GRADCHECK([](const Inputs& v) { return l1_loss(v[0], v[1]); },
                  {randn64({3, 4}, 62), randn64({3, 4}, 63)});
  CHECK_THROWS_WITH_AS(l1_loss(p, zeros({2}, kFloat64)),
                       doctest::Contains("l1_loss: input of shape [3] and target of shape [2]"),
                       Error);
}
