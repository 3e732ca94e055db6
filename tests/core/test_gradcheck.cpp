// The harness itself: gradcheck must catch a wrong backward and say where,
// rel_error must never let a NaN pass.
#include <doctest/doctest.h>

#include <limits>

#include "core/autograd.h"
#include "core/ops.h"
#include "gradcheck.h"

using namespace ember;
using ember::testing::gradcheck;
using ember::testing::randn64;
using ember::testing::rel_error;

namespace {
// x^2 whose backward forgets the factor 2 on element 1 only.
Tensor bad_square(const Tensor& x) {
  Tensor out;
  {
    NoGradGuard ng;
    out = mul(x, x);
  }
  if (any_requires_grad({&x}))
    attach_grad_fn(out, "BadSquareBackward", {&x}, [xs = x.detach()](const Tensor& g) {
      Tensor d = mul(mul(g, xs), 2.0);
      d.select(0, 1).copy_(mul(g.select(0, 1), xs.select(0, 1)));
      return std::vector<Tensor>{d};
    });
  return out;
}
}  // namespace

TEST_CASE("gradcheck: a wrong backward is caught, naming the input and element") {
  auto r = gradcheck([](const std::vector<Tensor>& v) { return v[1] + bad_square(v[0]); },
                     {randn64({3}, 1), randn64({3}, 2)});
  CHECK_FALSE(r.ok);
  CHECK(r.message.find("input 0") != std::string::npos);
  CHECK(r.message.find("element [1]") != std::string::npos);
  auto ok =
      gradcheck([](const std::vector<Tensor>& v) { return mul(v[0], v[0]); }, {randn64({3}, 1)});
  CHECK(ok.ok);
  CHECK(ok.max_error < 1e-7);
}

TEST_CASE("gradcheck: refuses inputs that are not float64 CPU tensors") {
  auto r = gradcheck([](const std::vector<Tensor>& v) { return v[0]; }, {ones({2})});
  CHECK_FALSE(r.ok);
  CHECK(r.message.find("float64 CPU") != std::string::npos);
}

TEST_CASE("gradcheck/rel_error: NaN never passes, shapes must agree") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  CHECK(rel_error(tensor({1, 2}), tensor({1, 2})) == 0.0);
  CHECK(rel_error(tensor({3, 4}), tensor({0, 0})) == doctest::Approx(5.0));
  CHECK(rel_error(tensor({1, 2 + 1e-3}), tensor({1, 2})) ==
        doctest::Approx(1e-3 / std::sqrt(5.0)).epsilon(1e-3));
  CHECK(rel_error(tensor({nan}), tensor({1})) == inf);
  CHECK(rel_error(tensor({1}), tensor({nan})) == inf);
  CHECK(rel_error(tensor({nan}), tensor({nan})) == inf);
  CHECK(rel_error(tensor({inf}), tensor({inf})) == 0.0);
  CHECK(rel_error(tensor({1, 2}), tensor({{1, 2}})) == inf);
}
