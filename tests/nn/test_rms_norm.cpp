// nn::RMSNorm: libtorch's options (normalized_shape, eps unset by default,
// elementwise_affine), a weight of ones at first, forward equal to the op,
// gradients reaching the weight (hand-computed), printing as PyTorch, bad options.
#include <doctest/doctest.h>

#include <cmath>
#include <sstream>

#include "core/autograd.h"
#include "core/ops.h"
#include "error_text.h"
#include "gradcheck.h"
#include "nn/nn.h"

using namespace ember;
using ember::testing::contains;
using ember::testing::error_of;
using ember::testing::randn64;
using ember::testing::rel_error;

namespace {
std::string repr(const nn::Module& m) {
  std::ostringstream os;
  os << m;
  return os.str();
}
}  // namespace

TEST_CASE("nn/rms_norm: a weight of ones, matches the op, the weight's gradient by hand") {
  nn::RMSNorm rn(nn::RMSNormOptions({4}));
  CHECK_FALSE(rn.options.eps().has_value());
  CHECK(rn.options.elementwise_affine());
  CHECK(rn.weight.to_vector<double>() == std::vector<double>{1, 1, 1, 1});
  CHECK(rn.parameters().size() == 1);
  Tensor x = randn64({3, 4}, 90).to(kFloat32);
  CHECK(rel_error(rn.forward(x), rms_norm(x, {4})) == 0.0);
  CHECK(repr(rn) == "RMSNorm((4,), eps=None, elementwise_affine=True)");

  // d sum(y) / d w_j = sum over rows of x_j / rms(row): one row (1, 2, 3, 4),
  // rms sqrt(7.5), eps 0.
  nn::RMSNorm exact(nn::RMSNormOptions({4}).eps(0.0));
  exact.forward(tensor({{1, 2, 3, 4}}, kFloat32)).sum().backward();
  const std::vector<float> dw = exact.weight.grad().to_vector<float>();
  for (int j = 0; j < 4; ++j) {
    CAPTURE(j);
    CHECK(dw[j] == doctest::Approx((j + 1) / std::sqrt(7.5)).epsilon(1e-6));
  }
  CHECK(repr(exact) == "RMSNorm((4,), eps=0, elementwise_affine=True)");

  nn::RMSNorm plain(nn::RMSNormOptions({2, 3}).eps(1e-6).elementwise_affine(false));
  CHECK(plain.parameters().empty());
  CHECK_FALSE(plain.weight.defined());
  CHECK(repr(plain) == "RMSNorm((2, 3), eps=1e-06, elementwise_affine=False)");
  Tensor x3 = randn64({5, 2, 3}, 91);
  CHECK(rel_error(plain.forward(x3), rms_norm(x3, {2, 3}, Tensor(), 1e-6)) == 0.0);
}

TEST_CASE("nn/rms_norm: bad options and inputs are errors naming the module or op") {
  CHECK(contains(error_of([] { nn::RMSNorm(nn::RMSNormOptions({0})); }),
                 "RMSNorm: normalized_shape [0] must have positive sizes"));
  CHECK(contains(error_of([] { nn::RMSNorm(nn::RMSNormOptions({})); }),
                 "RMSNorm: normalized_shape must name at least one dim"));
  CHECK(contains(error_of([] { nn::RMSNorm(nn::RMSNormOptions({3}).eps(-1.0)); }),
                 "RMSNorm: eps must be >= 0"));
  nn::RMSNorm rn(nn::RMSNormOptions({4}));
  CHECK(contains(error_of([&] {
                   rn.forward(zeros({2, 5}));
                 }),
                 "rms_norm: normalized_shape [4] does not match the trailing dims of the input "
                 "of shape [2, 5]"));
}
