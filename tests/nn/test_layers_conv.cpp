// Convolutional layers: Conv1d/Conv2d/ConvTranspose2d shapes, PyTorch's default
// initialisation bounds, "same" padding and padding modes; BatchNorm's buffers,
// train/eval and momentum=None; GroupNorm; the pooling modules; Dropout2d's whole
// channels; the functional forms against the ops they call.
#include <doctest/doctest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "core/autograd.h"
#include "core/ops.h"
#include "gradcheck.h"
#include "nn/nn.h"

using namespace ember;
using ember::testing::randn64;
using ember::testing::rel_error;
namespace F = ember::nn::functional;

TEST_CASE("nn/conv2d: shapes, parameters and PyTorch's default initialisation bounds") {
  manual_seed(1);
  nn::Conv2d conv(nn::Conv2dOptions(4, 8, {3, 5}).stride(2).padding({1, 2}).groups(2));
  CHECK(conv.weight.sizes() == Shape{8, 2, 3, 5});
  CHECK(conv.bias.sizes() == Shape{8});
  CHECK(conv.parameters().size() == 2);
  // kaiming_uniform_(a = sqrt(5)) on fan_in = 2 * 3 * 5 = 30 gives bound 1 / sqrt(30).
  const double bound = 1.0 / std::sqrt(30.0);
  CHECK(max(abs(conv.weight)).item() <= bound);
  CHECK(max(abs(conv.bias)).item() <= bound);
  CHECK(max(abs(conv.weight)).item() > 0.5 * bound);
  Tensor y = conv.forward(randn({2, 4, 9, 10}));
  CHECK(y.sizes() == Shape{2, 8, 5, 5});
  nn::Conv2d same(nn::Conv2dOptions(3, 2, 3).padding(nn::kSame).dilation(2).bias(false));
  CHECK(!same.bias.defined());
  CHECK(same.forward(randn({1, 3, 7, 6})).sizes() == Shape{1, 2, 7, 6});
  CHECK_THROWS_WITH_AS(nn::Conv2d(nn::Conv2dOptions(3, 2, 2).padding(nn::kSame)),
                       doctest::Contains("asymmetric"), Error);
  CHECK_THROWS_WITH_AS(nn::Conv2d(nn::Conv2dOptions(3, 4, 3).groups(2)),
                       doctest::Contains("divisible by groups"), Error);
}

TEST_CASE("nn/conv2d: padding modes equal padding the input first") {
  manual_seed(2);
  nn::Conv2d reflect(nn::Conv2dOptions(2, 3, 3).padding(1).padding_mode(nn::PaddingMode::Reflect));
  Tensor x = randn({1, 2, 5, 4});
  Tensor want = conv2d(pad(x, {1, 1, 1, 1}, PadMode::Reflect), reflect.weight, reflect.bias);
  CHECK(rel_error(reflect.forward(x), want) < 1e-7);
  CHECK(reflect.forward(x).sizes() == Shape{1, 3, 5, 4});
}

TEST_CASE("nn/conv1d and nn/conv_transpose2d: shapes and the ops they call") {
  manual_seed(3);
  nn::Conv1d c1(nn::Conv1dOptions(3, 5, 3).padding(nn::kSame));
  Tensor x = randn({2, 3, 11});
  CHECK(c1.forward(x).sizes() == Shape{2, 5, 11});
  CHECK(rel_error(c1.forward(x), conv1d(x, c1.weight, c1.bias, 1, 1)) == 0.0);
  nn::ConvTranspose2d up(nn::ConvTranspose2dOptions(4, 2, 2).stride(2));
  CHECK(up.weight.sizes() == Shape{4, 2, 2, 2});
  CHECK(up.forward(randn({1, 4, 5, 3})).sizes() == Shape{1, 2, 10, 6});
}

TEST_CASE("nn/batchnorm2d: buffers in the state dict, training updates them, eval reads them") {
  nn::BatchNorm2d bn(3);
  auto names = [&] {
    std::vector<std::string> n;
    for (const auto& [name, t] : bn.named_buffers()) n.push_back(name);
    return n;
  }();
  CHECK(names == std::vector<std::string>{"running_mean", "running_var", "num_batches_tracked"});
  Tensor x = add(mul(randn({8, 3, 4, 4}), 2.0), 5.0);
  bn.train();
  Tensor y = bn.forward(x);
  // Normalised per channel by the batch: mean 0, biased variance 1 (before the affine).
  Tensor yc = y.transpose(0, 1).reshape({3, -1});
  CHECK(max(abs(mean(yc, 1))).item() < 1e-5);
  CHECK(bn.num_batches_tracked.item<int64_t>() == 1);
  const double rm = bn.running_mean.to_vector<double>()[0];
  const double batch_mean = mean(x.transpose(0, 1).reshape({3, -1}), 1).to_vector<double>()[0];
  CHECK(rm == doctest::Approx(0.1 * batch_mean).epsilon(1e-5));
  bn.eval();
  Tensor e = bn.forward(x);
  Tensor want = batch_norm(x, bn.running_mean, bn.running_var, bn.weight, bn.bias, false);
  CHECK(rel_error(e, want) == 0.0);
  CHECK(bn.num_batches_tracked.item<int64_t>() == 1);  // eval counts nothing
  CHECK_THROWS_WITH_AS(bn.forward(randn({2, 4, 3, 3})), doctest::Contains("expected 3 channels"),
                       Error);
  CHECK_THROWS_WITH_AS(bn.forward(randn({2, 3})), doctest::Contains("4-D input"), Error);
}

TEST_CASE("nn/batchnorm1d: momentum None is the cumulative average of the batches") {
  nn::BatchNorm1d bn(nn::BatchNormOptions(2).momentum(std::nullopt).affine(false));
  Tensor a = tensor({{1, 10}, {3, 30}}), b = tensor({{5, 50}, {7, 70}});
  bn.forward(a);
  bn.forward(b);
  // Means 2 and 6 of column 0: their average 4.
  CHECK(bn.running_mean.to_vector<double>()[0] == doctest::Approx(4.0));
  CHECK(bn.parameters().empty());
}

TEST_CASE("nn/groupnorm, pooling modules and Dropout2d") {
  nn::GroupNorm gn(nn::GroupNormOptions(2, 4));
  Tensor x = randn({2, 4, 3, 3});
  CHECK(rel_error(gn.forward(x), group_norm(x, 2, gn.weight, gn.bias)) == 0.0);
  nn::MaxPool2d mp(nn::MaxPool2dOptions(2));
  CHECK(mp.forward(x).sizes() == Shape{2, 4, 1, 1});
  CHECK(mp.forward_with_indices(x).indices.dtype() == kInt64);
  nn::AvgPool2d ap(nn::AvgPool2dOptions(3).stride(1).padding(1));
  CHECK(ap.forward(x).sizes() == x.sizes());
  nn::AdaptiveAvgPool2d gap(nn::AdaptiveAvgPool2dOptions(1));
  CHECK(rel_error(gap.forward(x).reshape({2, 4}), mean(x.reshape({2, 4, 9}), 2)) < 1e-6);
  nn::Dropout2d drop(0.5);
  manual_seed(4);
  Tensor ones4 = ones({4, 16, 3, 3});
  Tensor d = drop.forward(ones4);
  // Each channel is all 0 or all 2: its 9 values agree.
  Tensor per_channel = d.reshape({64, 9});
  Tensor lo = min(per_channel, 1).values, hi = max(per_channel, 1).values;
  CHECK(rel_error(lo, hi) == 0.0);
  const double kept = mean(ne(lo, 0.0).to(kFloat32)).item();
  CHECK(kept > 0.25);
  CHECK(kept < 0.75);
  drop.eval();
  CHECK(rel_error(drop.forward(ones4), ones4) == 0.0);
}

TEST_CASE("nn/functional: conv and pooling forms call the ops with the options' values") {
  Tensor x = randn64({1, 2, 6, 6}, 5), w = randn64({4, 2, 3, 3}, 6), b = randn64({4}, 7);
  CHECK(rel_error(F::conv2d(x, w, F::Conv2dFuncOptions().bias(b).stride(2).padding(1)),
                  conv2d(x, w, b, {2, 2}, {1, 1})) == 0.0);
  CHECK(F::conv2d(x, w, F::Conv2dFuncOptions().padding(nn::kSame)).sizes() == Shape{1, 4, 6, 6});
  CHECK(rel_error(F::max_pool2d(x, F::MaxPool2dFuncOptions(2).stride(1)),
                  max_pool2d(x, {2, 2}, {1, 1})) == 0.0);
  CHECK(rel_error(F::avg_pool2d(x, F::AvgPool2dFuncOptions(2)), avg_pool2d(x, {2, 2})) == 0.0);
  CHECK(F::pad(x, F::PadFuncOptions({1, 1, 2, 2}).mode(PadMode::Replicate)).sizes() ==
        Shape{1, 2, 10, 8});
  CHECK(F::unfold(x, F::UnfoldFuncOptions(3).padding(1)).sizes() == Shape{1, 18, 36});
  Tensor cols = F::unfold(x, F::UnfoldFuncOptions(2).stride(2));
  CHECK(rel_error(F::fold(cols, F::FoldFuncOptions(6, 2).stride(2)), x) < 1e-15);
}
