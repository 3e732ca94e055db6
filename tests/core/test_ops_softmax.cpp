// softmax and log_softmax on CPU: hand-computed values, stability for large
// logits, every dim, bfloat16 in (float accumulation, bfloat16 out), and
// gradients against finite differences.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "core/autograd.h"
#include "core/ops.h"
#include "gradcheck.h"

using namespace ember;
using ember::testing::randn64;
using ember::testing::rel_error;

namespace {
using V = std::vector<double>;
using Inputs = std::vector<Tensor>;

using ember::testing::check_close;
}  // namespace

TEST_CASE("softmax, log_softmax: hand-computed values along the last dim") {
  Tensor x = tensor({{1, 2, 3}, {0, 0, 0}}, kFloat64);
  check_close(softmax(x, 1), {0.09003057317038048, 0.2447284710547977, 0.665240955774822, 1.0 / 3,
                              1.0 / 3, 1.0 / 3});
  check_close(log_softmax(x, -1), {-2.40760596444438, -1.4076059644443801, -0.40760596444438013,
                                   -std::log(3.0), -std::log(3.0), -std::log(3.0)});
  check_close(x.softmax(0), {0.7310585786300049, 0.8807970779778824, 0.9525741268224333,
                             0.2689414213699951, 0.11920292202211755, 0.04742587317756678});
  CHECK(softmax(x, 1).dtype() == kFloat64);
}

TEST_CASE("softmax: stable for logits far beyond exp's range; NaN and -inf as PyTorch") {
  Tensor big = tensor({1000, 1001, 1002}, kFloat32);
  check_close(softmax(big, 0), {0.09003057317038048, 0.2447284710547977, 0.665240955774822}, 1e-6);
  check_close(log_softmax(tensor({-1000.0, 0.0}, kFloat64), 0), {-1000, 0});
  const V masked = softmax(tensor({-INFINITY, 0.0, 0.0}, kFloat64), 0).to_vector<double>();
  CHECK(masked == V{0, 0.5, 0.5});
  const V nan = softmax(tensor({std::nan(""), 1.0}, kFloat64), 0).to_vector<double>();
  CHECK((std::isnan(nan[0]) && std::isnan(nan[1])));
  CHECK(softmax(zeros({0, 3}), 1).sizes() == Shape{0, 3});
  CHECK(softmax(full({}, 5.0), 0).item() == 1.0);  // a 0-dim tensor is one row of one
}

TEST_CASE("softmax: every dim of a 3-D tensor sums to one along that dim") {
  Tensor x = randn64({3, 4, 5}, 40);
  for (int64_t d = 0; d < 3; ++d) {
    CAPTURE(d);
    Tensor s = sum(softmax(x, d), d);
    CHECK(rel_error(s, ones(s.sizes(), kFloat64)) < 1e-14);
    CHECK(rel_error(exp(log_softmax(x, d)), softmax(x, d)) < 1e-14);
  }
}

TEST_CASE("softmax: bfloat16 in, float accumulation, bfloat16 out") {
  Tensor x = randn64({4, 300}, 41);
  Tensor ref = softmax(x.to(kBFloat16).to(kFloat64), 1);  // the same rounded inputs, in double
  Tensor got = softmax(x.to(kBFloat16), 1);
  CHECK(got.dtype() == kBFloat16);
  CHECK(rel_error(got.to(kFloat64), ref) < 1e-2);
  CHECK(rel_error(log_softmax(x.to(kBFloat16), 1).to(kFloat64),
                  log_softmax(x.to(kBFloat16).to(kFloat64), 1)) < 1e-2);
}

TEST_CASE("softmax, log_softmax: backward matches finite differences on every dim") {
  for (int64_t d : {0, 1, -1}) {
    CAPTURE(d);
    CHECK_GRADCHECK([d](const Inputs& v) { return softmax(v[0], d); }, {randn64({3, 5}, 42)});
    CHECK_GRADCHECK([d](const Inputs& v) { return log_softmax(v[0], d); }, {randn64({3, 5}, 43)});
  }
  CHECK_GRADCHECK([](const Inputs& v) { return log_softmax(v[0], 1); }, {randn64({2, 3, 4}, 44)});
  CHECK_THROWS_WITH_AS(softmax(zeros({2}, kInt64), 0),
                       doctest::Contains("softmax: expects a floating-point tensor"), Error);
  CHECK_THROWS_WITH_AS(log_softmax(zeros({2}), 1),
                       doctest::Contains("log_softmax: dim 1 is out of range"), Error);
}
