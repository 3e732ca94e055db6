// Convolution, pooling, batch statistics and padding (core/ops/conv.cpp,
// batch_norm.cpp): hand-computed values, a naive direct-loop reference for
// conv2d/conv_transpose2d/pools over strides, padding, dilation and groups,
// gradients against finite differences (float64), the meta device's shapes, and
// CUDA against the CPU (suite "cuda": skipped, not passed, without a GPU).
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/autograd.h"
#include "core/meta.h"
#include "core/ops.h"
#include "gradcheck.h"

using namespace ember;
using ember::testing::check_close;
using ember::testing::cuda_vs_cpu;
using ember::testing::rand64;
using ember::testing::randn64;
using ember::testing::rel_error;

namespace {

// One conv2d: input (n, c, h, w), o kernels of (kh, kw), stride, padding, dilation.
struct ConvCase {
  int64_t n, c, h, w, o, kh, kw;
  Int2 s, p, d;
  int64_t groups;
};
using V = std::vector<double>;
using Inputs = std::vector<Tensor>;

// The textbook definition: y[n][o][i][j] = b[o] + sum over c in o's group, ki, kj
// of x[n][c][i*s - p + ki*d][j*s - p + kj*d] w[o][c - group start][ki][kj].
Tensor naive_conv2d(const Tensor& x, const Tensor& w, const Tensor& b, Int2 s, Int2 p, Int2 d,
                    int64_t groups) {
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), wd = x.size(3);
  const int64_t o = w.size(0), cg = w.size(1), kh = w.size(2), kw = w.size(3), og = o / groups;
  const int64_t oh = (h + 2 * p[0] - d[0] * (kh - 1) - 1) / s[0] + 1;
  const int64_t ow = (wd + 2 * p[1] - d[1] * (kw - 1) - 1) / s[1] + 1;
  const V xv = x.to_vector<double>(), wv = w.to_vector<double>();
  const V bv = b.defined() ? b.to_vector<double>() : V(static_cast<size_t>(o), 0.0);
  V y(static_cast<size_t>(n * o * oh * ow));
  for (int64_t in = 0; in < n; ++in)
    for (int64_t io = 0; io < o; ++io)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          double acc = bv[static_cast<size_t>(io)];
          const int64_t g = io / og;
          for (int64_t ic = 0; ic < cg; ++ic)
            for (int64_t ki = 0; ki < kh; ++ki)
              for (int64_t kj = 0; kj < kw; ++kj) {
                const int64_t r = i * s[0] - p[0] + ki * d[0], q = j * s[1] - p[1] + kj * d[1];
                if (r < 0 || r >= h || q < 0 || q >= wd) continue;
                const int64_t cc = g * cg + ic;
                acc += xv[static_cast<size_t>(((in * c + cc) * h + r) * wd + q)] *
                       wv[static_cast<size_t>(((io * cg + ic) * kh + ki) * kw + kj)];
              }
          y[static_cast<size_t>(((in * o + io) * oh + i) * ow + j)] = acc;
        }
  return from_vector(y, {n, o, oh, ow}, kFloat64);
}

double dot(const Tensor& a, const Tensor& b) {
  return sum(mul(a, b)).item();
}

}  // namespace

TEST_CASE("conv2d: hand-computed 3x3 image and 2x2 kernel, with padding and stride") {
  Tensor x = arange(1, 10, 1, kFloat64).reshape({1, 1, 3, 3});
  Tensor w = ones({1, 1, 2, 2}, kFloat64);
  check_close(conv2d(x, w), {12, 16, 24, 28});
  // padding 1, stride 2: the windows at (-1,-1), (-1,1), (1,-1), (1,1).
  check_close(conv2d(x, w, Tensor(), {2, 2}, {1, 1}), {1, 5, 11, 28});
  check_close(conv2d(x, w, tensor({0.5}, kFloat64)), {12.5, 16.5, 24.5, 28.5});
  // dilation 2 with a 2x2 kernel reads the four corners.
  check_close(conv2d(x, w, Tensor(), {1, 1}, {0, 0}, {2, 2}), {1 + 3 + 7 + 9});
  // One image (C, H, W) gives (O, H', W').
  CHECK(conv2d(x.squeeze(0), w).sizes() == Shape{1, 2, 2});
}

TEST_CASE("conv2d: equals the direct definition over strides, padding, dilation and groups") {
  const std::vector<ConvCase> cases = {
      {2, 3, 7, 6, 4, 3, 3, {1, 1}, {1, 1}, {1, 1}, 1},
      {1, 4, 9, 8, 6, 3, 2, {2, 3}, {1, 0}, {1, 2}, 2},
      {2, 6, 5, 5, 6, 3, 3, {1, 1}, {2, 2}, {2, 2}, 6},  // depthwise
      {1, 2, 4, 11, 3, 1, 5, {1, 2}, {0, 2}, {1, 1}, 1},
  };
  uint64_t seed = 1;
  for (const ConvCase& k : cases) {
    CAPTURE(k.groups);
    Tensor x = randn64({k.n, k.c, k.h, k.w}, seed++);
    Tensor w = randn64({k.o, k.c / k.groups, k.kh, k.kw}, seed++);
    Tensor b = randn64({k.o}, seed++);
    Tensor y = conv2d(x, w, b, k.s, k.p, k.d, k.groups);
    Tensor ref = naive_conv2d(x, w, b, k.s, k.p, k.d, k.groups);
    CHECK(y.sizes() == ref.sizes());
    CHECK(rel_error(y, ref) < 1e-13);
  }
}

namespace {

// conv2d's column layout for the scope, restored after.
struct ColumnLayout {
  explicit ColumnLayout(detail::ConvColumns c) : before_(detail::conv_columns()) {
    detail::set_conv_columns(c);
  }
  ~ColumnLayout() { detail::set_conv_columns(before_); }
  detail::ConvColumns before_;
};

}  // namespace

TEST_CASE("conv2d: both column layouts give the direct definition and the same gradients") {
  // Per image (N, C kk, L) and as one (C kk, N L) matrix: the forward against the
  // textbook loops, and every gradient against each other (float64: one product each
  // way against N summed, so equal to rounding).
  const std::vector<ConvCase> cases = {
      {2, 3, 7, 6, 4, 3, 3, {1, 1}, {1, 1}, {1, 1}, 1},
      {3, 4, 9, 8, 6, 3, 2, {2, 3}, {1, 0}, {1, 2}, 2},
      {2, 6, 5, 5, 6, 3, 3, {1, 1}, {2, 2}, {2, 2}, 6},  // depthwise
      {4, 8, 4, 4, 4, 3, 3, {2, 2}, {1, 1}, {1, 1}, 1},  // C kk 72 > L 4: automatic picks matrix
  };
  uint64_t seed = 41;
  for (const ConvCase& k : cases) {
    CAPTURE(k.groups);
    CAPTURE(k.n);
    const Tensor x0 = randn64({k.n, k.c, k.h, k.w}, seed++);
    const Tensor w0 = randn64({k.o, k.c / k.groups, k.kh, k.kw}, seed++);
    const Tensor b0 = randn64({k.o}, seed++);
    const Tensor ref = naive_conv2d(x0, w0, b0, k.s, k.p, k.d, k.groups);
    std::vector<std::vector<Tensor>> runs;
    for (auto layout : {detail::ConvColumns::per_image, detail::ConvColumns::matrix,
                        detail::ConvColumns::automatic}) {
      ColumnLayout scope(layout);
      Tensor x = x0.detach(), w = w0.detach(), b = b0.detach();
      x.set_requires_grad(true);
      w.set_requires_grad(true);
      b.set_requires_grad(true);
      Tensor y = conv2d(x, w, b, k.s, k.p, k.d, k.groups);
      REQUIRE(y.sizes() == ref.sizes());
      CHECK(rel_error(y, ref) < 1e-13);
      sum(mul(y, y)).backward();
      runs.push_back({x.grad(), w.grad(), b.grad()});
    }
    for (size_t r = 1; r < runs.size(); ++r)
      for (size_t i = 0; i < 3; ++i) CHECK(rel_error(runs[r][i], runs[0][i]) < 1e-13);
  }
  // Gradients of the matrix layout against finite differences, groups and strides.
  ColumnLayout scope(detail::ConvColumns::matrix);
  Tensor x = randn64({3, 4, 5, 4}, 51), w = randn64({4, 2, 3, 2}, 52), b = randn64({4}, 53);
  CHECK_GRADCHECK(
      [](const Inputs& in) {
        return conv2d(in[0], in[1], in[2], {2, 1}, {1, 1}, {1, 2}, 2);
      },
      {x, w, b});
}

TEST_CASE("conv2d: gradients of input, weight and bias against finite differences") {
  Tensor x = randn64({2, 4, 5, 4}, 11), w = randn64({4, 2, 3, 2}, 12), b = randn64({4}, 13);
  CHECK_GRADCHECK(
      [](const Inputs& in) {
        return conv2d(in[0], in[1], in[2], {2, 1}, {1, 1}, {1, 2}, 2);
      },
      {x, w, b});
  Tensor x1 = randn64({2, 3, 9}, 14), w1 = randn64({2, 3, 3}, 15);
  CHECK_GRADCHECK([](const Inputs& in) { return conv1d(in[0], in[1], Tensor(), 2, 1); }, {x1, w1});
}

TEST_CASE("conv1d: a 2-D conv over a plane of height 1, hand-computed") {
  Tensor x = tensor({1, 2, 3, 4, 5}, kFloat64).reshape({1, 1, 5});
  Tensor w = tensor({1, 0, -1}, kFloat64).reshape({1, 1, 3});
  check_close(conv1d(x, w), {-2, -2, -2});
  check_close(conv1d(x, w, Tensor(), 1, 1), {-2, -2, -2, -2, 4});
}

TEST_CASE("conv_transpose2d: the adjoint of conv2d, and its gradients") {
  // <conv2d(x, w), y> == <x, conv_transpose2d(y, w)> for the same geometry.
  Tensor x = randn64({2, 4, 7, 6}, 21), w = randn64({6, 2, 3, 3}, 22);
  Tensor y = conv2d(x, w, Tensor(), {2, 2}, {1, 1}, {1, 1}, 2);
  Tensor g = randn64(y.sizes(), 23);
  Tensor xt = conv_transpose2d(g, w, Tensor(), {2, 2}, {1, 1}, {0, 1}, 2);
  REQUIRE(xt.sizes() == x.sizes());  // output_padding (0, 1) recovers width 6
  CHECK(std::abs(dot(y, g) - dot(x, xt)) < 1e-10 * std::abs(dot(y, g)));
  Tensor b = randn64({4}, 24);
  check_close(sub(conv_transpose2d(g, w, b, {2, 2}, {1, 1}, {0, 1}, 2), xt).select(1, 3).mean(),
              {b.to_vector<double>()[3]});
  CHECK_GRADCHECK(
      [](const Inputs& in) {
        return conv_transpose2d(in[0], in[1], in[2], {2, 1}, {1, 0}, {1, 0}, 1, {1, 2});
      },
      {randn64({1, 2, 3, 3}, 25), randn64({2, 3, 2, 2}, 26), randn64({3}, 27)});
}

TEST_CASE("unfold/fold: columns by hand, fold the adjoint of unfold") {
  Tensor x = arange(1, 10, 1, kFloat64).reshape({1, 1, 3, 3});
  // 2x2 windows: each column one window, rows the kernel offsets.
  check_close(unfold(x, {2, 2}), {1, 2, 4, 5, 2, 3, 5, 6, 4, 5, 7, 8, 5, 6, 8, 9});
  Tensor a = randn64({2, 3, 6, 5}, 31);
  Tensor cols = unfold(a, {3, 2}, {1, 2}, {1, 1}, {2, 1});
  Tensor c = randn64(cols.sizes(), 32);
  Tensor back = fold(c, {6, 5}, {3, 2}, {1, 2}, {1, 1}, {2, 1});
  CHECK(std::abs(dot(cols, c) - dot(a, back)) < 1e-10 * std::abs(dot(cols, c)));
  // fold(unfold(ones)) counts how many windows cover each pixel.
  check_close(fold(unfold(ones({1, 1, 3, 3}, kFloat64), {2, 2}), {3, 3}, {2, 2}),
              {1, 2, 1, 2, 4, 2, 1, 2, 1});
  CHECK_GRADCHECK(
      [](const Inputs& in) {
        return fold(in[0], {4, 4}, {2, 2});
      },
      {randn64({1, 8, 9}, 33)});
}

TEST_CASE("max_pool2d: values, indices, ceil_mode, padding and gradients") {
  Tensor x =
      tensor({1, 5, 2, 0, 3, 4, 8, 1, 9, 2, 7, 6, 0, 1, 3, 2}, kFloat64).reshape({1, 1, 4, 4});
  check_close(max_pool2d(x, {2, 2}), {5, 8, 9, 7});
  auto [v, idx] = max_pool2d_with_indices(x, {2, 2});
  CHECK(idx.dtype() == kInt64);
  CHECK(idx.to_vector<int64_t>() == std::vector<int64_t>{1, 6, 8, 10});
  // 5 wide, kernel 2 stride 2: 2 windows, 3 with ceil_mode (the last a 1-wide window).
  Tensor y = arange(0, 25, 1, kFloat64).reshape({1, 1, 5, 5});
  CHECK(max_pool2d(y, {2, 2}).sizes() == Shape{1, 1, 2, 2});
  Tensor yc = max_pool2d(y, {2, 2}, {2, 2}, {0, 0}, {1, 1}, true);
  CHECK(yc.sizes() == Shape{1, 1, 3, 3});
  check_close(yc, {6, 8, 9, 16, 18, 19, 21, 23, 24});
  // Padding is -inf: an all-negative plane keeps its own values.
  Tensor neg = mul(ones({1, 1, 2, 2}, kFloat64), -3.0);
  check_close(max_pool2d(neg, {2, 2}, {1, 1}, {1, 1}), V(9, -3.0));
  CHECK_THROWS_WITH_AS(max_pool2d(x, {2, 2}, {2, 2}, {2, 2}),
                       doctest::Contains("at most half the kernel size"), Error);
  CHECK_GRADCHECK(
      [](const Inputs& in) {
        return max_pool2d(in[0], {3, 2}, {2, 1}, {1, 1}, {1, 1}, true);
      },
      {randn64({2, 2, 5, 4}, 41)});
}

TEST_CASE("avg_pool2d and adaptive_avg_pool2d: divisors as PyTorch counts them") {
  Tensor x = arange(1, 10, 1, kFloat64).reshape({1, 1, 3, 3});
  check_close(avg_pool2d(x, {2, 2}, {1, 1}), {3, 4, 6, 7});
  // padding 1, stride 2, count_include_pad: every window divides by 4.
  check_close(avg_pool2d(x, {2, 2}, {2, 2}, {1, 1}), {0.25, 1.25, 2.75, 7});
  check_close(avg_pool2d(x, {2, 2}, {2, 2}, {1, 1}, false, false), {1, 2.5, 5.5, 7});
  check_close(avg_pool2d(x, {2, 2}, {2, 2}, {1, 1}, false, true, 2), {0.5, 2.5, 5.5, 14});
  // 5 -> 3 adaptive cells: rows [0,2), [1,4), [3,5).
  Tensor y = arange(0, 25, 1, kFloat64).reshape({1, 1, 5, 5});
  Tensor a = adaptive_avg_pool2d(y, {3, 3});
  CHECK(a.sizes() == Shape{1, 1, 3, 3});
  check_close(a, {3, 4.5, 6, 10.5, 12, 13.5, 18, 19.5, 21});
  check_close(adaptive_avg_pool2d(y, {1, 1}), {12});
  // Equal cells (4 x 6 -> 2 x 3: 2 x 2 blocks) reduce a view: the block means by hand,
  // and avg_pool2d's with the block as kernel and stride.
  Tensor e = arange(0, 24, 1, kFloat64).reshape({1, 1, 4, 6});
  check_close(adaptive_avg_pool2d(e, {2, 3}), {3.5, 5.5, 7.5, 15.5, 17.5, 19.5});
  Tensor r = randn64({2, 3, 8, 6}, 53);
  CHECK(rel_error(adaptive_avg_pool2d(r, {4, 2}), avg_pool2d(r, {2, 3})) < 1e-15);
  CHECK_GRADCHECK(
      [](const Inputs& in) {
        return adaptive_avg_pool2d(in[0], {2, 2});
      },
      {randn64({2, 1, 4, 6}, 54)});
  CHECK_GRADCHECK(
      [](const Inputs& in) {
        return avg_pool2d(in[0], {3, 3}, {2, 2}, {1, 1}, true);
      },
      {randn64({1, 2, 5, 5}, 51)});
  CHECK_GRADCHECK(
      [](const Inputs& in) {
        return adaptive_avg_pool2d(in[0], {2, 3});
      },
      {randn64({2, 1, 5, 7}, 52)});
}

TEST_CASE("batch_norm: batch statistics, running statistics (unbiased), eval, gradients") {
  Tensor x = tensor({1, 2, 3, 4, 10, 20, 30, 40}, kFloat64).reshape({2, 2, 2});  // (N, C, L)
  // Channel 0: 1, 2, 10, 20 (mean 8.25); channel 1: 3, 4, 30, 40 (mean 19.25).
  Tensor rm = zeros({2}, kFloat64), rv = ones({2}, kFloat64);
  Tensor y = batch_norm(x, rm, rv, Tensor(), Tensor(), true, 0.1, 0.0);
  const V c0 = {1, 2, 10, 20};
  double m = 8.25, var = 0;
  for (double v : c0) var += (v - m) * (v - m);
  const double biased = var / 4, unbiased = var / 3;
  const V yv = y.to_vector<double>();
  CHECK(yv[0] == doctest::Approx((1 - m) / std::sqrt(biased)).epsilon(1e-12));
  CHECK(yv[5] == doctest::Approx((20 - m) / std::sqrt(biased)).epsilon(1e-12));
  CHECK(rm.to_vector<double>()[0] == doctest::Approx(0.1 * m).epsilon(1e-12));
  CHECK(rv.to_vector<double>()[0] == doctest::Approx(0.9 + 0.1 * unbiased).epsilon(1e-12));
  // Eval normalises by the running statistics.
  Tensor e = batch_norm(x, rm, rv, Tensor(), Tensor(), false, 0.1, 1e-5);
  const double rm0 = rm.to_vector<double>()[0], rv0 = rv.to_vector<double>()[0];
  CHECK(e.to_vector<double>()[0] ==
        doctest::Approx((1 - rm0) / std::sqrt(rv0 + 1e-5)).epsilon(1e-12));
  CHECK_THROWS_WITH_AS(batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), false),
                       doctest::Contains("needs running_mean"), Error);
  CHECK_GRADCHECK(
      [](const Inputs& in) {
        return batch_norm(in[0], Tensor(), Tensor(), in[1], in[2], true, 0.1, 1e-3);
      },
      {randn64({3, 2, 2, 3}, 61), randn64({2}, 62), randn64({2}, 63)});
}

TEST_CASE("group_norm: per sample and group, with the affine per channel") {
  Tensor x = randn64({2, 6, 3, 2}, 71);
  Tensor y = group_norm(x, 3, Tensor(), Tensor(), 0.0);
  Tensor groups = y.reshape({2, 3, 12});
  CHECK(rel_error(mean(groups, 2), zeros({2, 3}, kFloat64)) < 1e-13);
  Tensor var = mean(mul(groups, groups), 2);
  CHECK(rel_error(var, ones({2, 3}, kFloat64)) < 1e-12);
  CHECK_GRADCHECK([](const Inputs& in) { return group_norm(in[0], 2, in[1], in[2], 1e-3); },
                  {randn64({2, 4, 3}, 72), randn64({4}, 73), randn64({4}, 74)});
}

TEST_CASE("pad: constant, reflect, replicate and cropping") {
  Tensor x = tensor({1, 2, 3}, kFloat64).reshape({1, 1, 3});
  check_close(pad(x, {2, 1}), {0, 0, 1, 2, 3, 0});
  check_close(pad(x, {1, 1}, PadMode::Constant, 7), {7, 1, 2, 3, 7});
  check_close(pad(x, {2, 2}, PadMode::Reflect), {3, 2, 1, 2, 3, 2, 1});
  check_close(pad(x, {2, 1}, PadMode::Replicate), {1, 1, 1, 2, 3, 3});
  check_close(pad(x, {-1, 0}), {2, 3});
  Tensor img = arange(1, 5, 1, kFloat64).reshape({1, 1, 2, 2});
  check_close(pad(img, {1, 0, 0, 1}, PadMode::Replicate), {1, 1, 2, 3, 3, 4, 3, 3, 4});
  CHECK_THROWS_WITH_AS(pad(x, {3, 0}, PadMode::Reflect), doctest::Contains("smaller than"), Error);
  CHECK_THROWS_WITH_AS(pad(x, {1}), doctest::Contains("even number"), Error);
  CHECK_GRADCHECK(
      [](const Inputs& in) {
        return pad(in[0], {1, 2, 2, 1}, PadMode::Reflect);
      },
      {randn64({1, 2, 3, 4}, 81)});
}

TEST_CASE("conv ops: bad input names the op and the shapes") {
  Tensor x = randn64({1, 3, 5, 5}, 91);
  CHECK_THROWS_WITH_AS(conv2d(x, randn64({2, 2, 3, 3}, 92)),
                       doctest::Contains("expects 2 input channels"), Error);
  CHECK_THROWS_WITH_AS(conv2d(x, randn64({2, 3, 7, 7}, 93)),
                       doctest::Contains("smaller than the dilated kernel"), Error);
  CHECK_THROWS_WITH_AS(conv2d(x, randn64({4, 1, 3, 3}, 94), Tensor(), {1, 1}, {0, 0}, {1, 1}, 2),
                       doctest::Contains("divisible by groups"), Error);
  CHECK_THROWS_WITH_AS(conv2d(x.reshape({3, 25}), randn64({2, 3, 3, 3}, 95)),
                       doctest::Contains("3-D (C, H, W) or 4-D"), Error);
  CHECK_THROWS_WITH_AS(conv2d(x, randn64({2, 3, 3, 3}, 96), Tensor(), {0, 1}),
                       doctest::Contains("stride must be >= 1"), Error);
  CHECK_THROWS_WITH_AS(batch_norm(x, zeros({2}, kFloat64), ones({2}, kFloat64)),
                       doctest::Contains("running_mean must be (3)"), Error);
}

TEST_CASE("conv ops: the meta device gives the CPU's shapes and dtypes") {
  Tensor x = randn64({2, 4, 9, 7}, 101), w = randn64({6, 2, 3, 3}, 102);
  const Tensor mx = empty(x.sizes(), TensorOptions(kFloat32).device(kMeta));
  const Tensor mw = empty(w.sizes(), TensorOptions(kFloat32).device(kMeta));
  CHECK(conv2d(mx, mw, Tensor(), {2, 1}, {1, 1}, {1, 1}, 2).sizes() ==
        conv2d(x, w, Tensor(), {2, 1}, {1, 1}, {1, 1}, 2).sizes());
  CHECK(max_pool2d(mx, {2, 2}, {2, 2}, {0, 0}, {1, 1}, true).sizes() == Shape{2, 4, 5, 4});
  CHECK(avg_pool2d(mx, {3, 3}).dtype() == kFloat32);
  CHECK(adaptive_avg_pool2d(mx, {1, 1}).sizes() == Shape{2, 4, 1, 1});
  CHECK(batch_norm(mx, Tensor(), Tensor()).sizes() == x.sizes());
}

TEST_CASE("conv ops on CUDA match the CPU reference" * doctest::test_suite("cuda")) {
  Tensor x = randn64({4, 6, 13, 11}, 111), w = randn64({8, 3, 3, 3}, 112), b = randn64({8}, 113);
  for (DType dt : {kFloat32, kBFloat16}) {
    CAPTURE(dt);
    const double tol = dt == kFloat32 ? 1e-5 : 1e-2;
    CHECK(cuda_vs_cpu(
              [](const Inputs& in) {
                return conv2d(in[0], in[1], in[2], {2, 1}, {1, 1}, {1, 1}, 2);
              },
              {x, w, b}, dt) < tol);
    CHECK(cuda_vs_cpu(
              [](const Inputs& in) {
                return max_pool2d(in[0], {3, 3}, {2, 2}, {1, 1});
              },
              {x}, dt) < tol);
    CHECK(cuda_vs_cpu([](const Inputs& in) { return avg_pool2d(in[0], {2, 2}); }, {x}, dt) < tol);
    CHECK(cuda_vs_cpu(
              [](const Inputs& in) {
                return adaptive_avg_pool2d(in[0], {3, 2});
              },
              {x}, dt) < tol);
    CHECK(cuda_vs_cpu(
              [](const Inputs& in) {
                return batch_norm(in[0], Tensor(), Tensor(), in[1], in[2], true);
              },
              {x, randn64({6}, 114), randn64({6}, 115)}, dt) < 10 * tol);
  }
  // Backward of conv2d on CUDA (float32) against the CPU's.
  auto grads_of = [&](Device d) {
    Tensor xd = x.to(d).to(kFloat32).detach(), wd = w.to(d).to(kFloat32).detach();
    xd.set_requires_grad(true);
    wd.set_requires_grad(true);
    Tensor y = conv2d(xd, wd, Tensor(), {1, 1}, {1, 1}, {1, 1}, 2);
    sum(mul(y, y)).backward();
    return std::pair<Tensor, Tensor>{xd.grad().to(kCPU).to(kFloat64),
                                     wd.grad().to(kCPU).to(kFloat64)};
  };
  auto [gx_cpu, gw_cpu] = grads_of(kCPU);
  auto [gx_cuda, gw_cuda] = grads_of(kCUDA);
  CHECK(rel_error(gx_cuda, gx_cpu) < 1e-5);
  CHECK(rel_error(gw_cuda, gw_cpu) < 1e-5);
}

// ---------------------------------------------------------------- the column kernels

namespace {

// The composed columns (index_select / index_add) for the scope, restored after.
struct ComposedColumns {
  explicit ComposedColumns(bool on) : before_(detail::conv_composed()) {
    detail::set_conv_composed(on);
  }
  ~ComposedColumns() { detail::set_conv_composed(before_); }
  bool before_;
};

struct ColumnCase {
  int64_t n, c, h, w, kh, kw;
  Int2 s, p, d;
};
const std::vector<ColumnCase> kColumnCases = {
    {2, 3, 7, 6, 3, 3, {1, 1}, {1, 1}, {1, 1}},
    {1, 4, 9, 8, 3, 2, {2, 3}, {1, 0}, {1, 2}},
    {2, 2, 5, 5, 3, 3, {1, 1}, {2, 2}, {2, 2}},
    {1, 2, 4, 11, 1, 5, {1, 2}, {0, 2}, {1, 1}},
    {3, 1, 6, 6, 2, 2, {2, 2}, {0, 0}, {1, 1}},
    // Strides 4 and 2 with a dilation: col2im's shift path past stride 2 (the case of
    // strides 2 and 3 above takes its division path).
    {1, 2, 11, 9, 3, 2, {4, 2}, {1, 0}, {2, 1}},
};

// unfold, fold, conv2d's three gradients and max_pool2d's gradient (padding,
// ceil_mode) on `device` in `dt`, by the kernels or composed: every output in float64.
std::vector<Tensor> column_outputs(const ColumnCase& k, Device device, DType dt, bool composed,
                                   uint64_t seed,
                                   detail::ConvColumns layout = detail::ConvColumns::automatic) {
  ComposedColumns scope(composed);
  ColumnLayout columns(layout);
  std::vector<Tensor> out;
  const Tensor x0 = randn64({k.n, k.c, k.h, k.w}, seed).to(device).to(dt);
  const Tensor cols = unfold(x0, {k.kh, k.kw}, k.d, k.p, k.s);
  out.push_back(cols);
  out.push_back(fold(mul(cols, cols), {k.h, k.w}, {k.kh, k.kw}, k.d, k.p, k.s));
  Tensor x = x0.detach(), w = randn64({4, k.c, k.kh, k.kw}, seed + 1).to(device).to(dt),
         b = randn64({4}, seed + 2).to(device).to(dt);
  x.set_requires_grad(true);
  w.set_requires_grad(true);
  b.set_requires_grad(true);
  Tensor y = conv2d(x, w, b, k.s, k.p, k.d);
  out.push_back(y);
  sum(mul(y, y)).backward();
  out.push_back(x.grad());
  out.push_back(w.grad());
  out.push_back(b.grad());
  Tensor xp = x0.detach();
  xp.set_requires_grad(true);
  Tensor m = max_pool2d(xp, {3, 3}, {2, 2}, {1, 1}, {1, 1}, true);
  out.push_back(m);
  sum(mul(m, m)).backward();
  out.push_back(xp.grad());
  for (Tensor& t : out) t = t.to(kCPU).to(kFloat64);
  return out;
}

void check_columns_match(Device device) {
  const char* names[] = {"unfold",     "fold",       "conv2d",     "conv2d d_x",
                         "conv2d d_w", "conv2d d_b", "max_pool2d", "max_pool2d d_x"};
  uint64_t seed = 300;
  for (const ColumnCase& k : kColumnCases) {
    for (DType dt : {kFloat64, kFloat32, kBFloat16}) {
      CAPTURE(dt);
      CAPTURE(k.h);
      CAPTURE(k.kw);
      const auto ref = column_outputs(k, device, dt, true, seed);
      for (auto layout : {detail::ConvColumns::per_image, detail::ConvColumns::matrix}) {
        CAPTURE(static_cast<int>(layout));
        const auto ours = column_outputs(k, device, dt, false, seed, layout);
        for (size_t i = 0; i < ours.size(); ++i) {
          CAPTURE(names[i]);
          REQUIRE(ours[i].sizes() == ref[i].sizes());
          // unfold and max_pool2d's values are gathers: equal bit for bit. The sums
          // (fold, the gradients through col2im) differ by rounding in bfloat16 only
          // (col2im sums in float32, index_add rounds each addition); the matrix
          // layout's products sum over the batch in another order.
          const bool gather = i == 0 || i == 6;
          const double tol = gather ? 0.0 : dt == kFloat64 ? 1e-12 : dt == kFloat32 ? 1e-5 : 2e-2;
          CHECK(rel_error(ours[i], ref[i]) <= tol);
        }
      }
      seed += 3;
    }
  }
}

}  // namespace

TEST_CASE("im2col/col2im kernels: equal to the composed columns (CPU), forward and backward") {
  check_columns_match(kCPU);
}

TEST_CASE("im2col/col2im kernels: fold by col2im equals the composition bit for bit (CPU, float)") {
  // In float32 and float64 col2im adds each pixel's columns in the order index_add
  // does, in the dtype's own arithmetic: the same bits.
  for (DType dt : {kFloat32, kFloat64}) {
    CAPTURE(dt);
    const Tensor cols = randn64({2, 3 * 3 * 3, 6 * 5}, 77).to(dt);
    Tensor a, b;
    {
      ComposedColumns scope(false);
      a = fold(cols, {6, 5}, {3, 3}, {1, 1}, {1, 1}, {1, 1});
    }
    {
      ComposedColumns scope(true);
      b = fold(cols, {6, 5}, {3, 3}, {1, 1}, {1, 1}, {1, 1});
    }
    CHECK(rel_error(a.to(kFloat64), b.to(kFloat64)) == 0.0);
  }
}

TEST_CASE("im2col/col2im kernels: equal to the composed columns (CUDA), and to the CPU's" *
          doctest::test_suite("cuda")) {
  check_columns_match(kCUDA);
  uint64_t seed = 500;
  for (const ColumnCase& k : kColumnCases) {
    for (auto layout : {detail::ConvColumns::per_image, detail::ConvColumns::matrix}) {
      const auto gpu = column_outputs(k, kCUDA, kFloat64, false, seed, layout);
      const auto cpu = column_outputs(k, kCPU, kFloat64, false, seed, layout);
      for (size_t i = 0; i < gpu.size(); ++i) CHECK(rel_error(gpu[i], cpu[i]) < 1e-12);
    }
    seed += 3;
  }
}

TEST_CASE("im2col/col2im kernels: conv2d forward and backward run on the meta device") {
  // The meta device registers the column kernels as computing nothing: conv2d's
  // forward and backward run there through the kernels' path, with the CPU's shapes.
  for (auto layout : {detail::ConvColumns::per_image, detail::ConvColumns::matrix}) {
    ColumnLayout scope(layout);
    const Tensor mx = empty({2, 4, 9, 7}, TensorOptions(kFloat32).device(kMeta));
    Tensor mw = empty({6, 4, 3, 3}, TensorOptions(kFloat32).device(kMeta));
    Tensor x = mx.detach();
    x.set_requires_grad(true);
    mw.set_requires_grad(true);
    Tensor y = conv2d(x, mw, Tensor(), {1, 1}, {1, 1});
    CHECK(y.sizes() == Shape{2, 6, 9, 7});
    sum(y).backward();
    CHECK(x.grad().sizes() == mx.sizes());
    CHECK(mw.grad().sizes() == mw.sizes());
  }
}
