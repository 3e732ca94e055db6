// Autocast (core/autocast.h): the guard's scoping, that CPU tensors are left
// alone, and on CUDA that Linear runs in bfloat16 while the float32 parameters
// receive float32 gradients equal to those of the explicit cast composition.
#include <doctest/doctest.h>

#include "core/autocast.h"
#include "core/autograd.h"
#include "core/ops.h"
#include "cuda/runtime.h"
#include "error_text.h"
#include "gradcheck.h"

using namespace ember;
using ember::testing::randn64;
using ember::testing::rel_error;

TEST_CASE("autocast: the guard nests, restores and refuses dtypes it cannot run") {
  CHECK_FALSE(is_autocast_enabled());
  {
    AutocastGuard on;
    CHECK(is_autocast_enabled());
    CHECK(autocast_dtype() == kBFloat16);
    {
      AutocastGuard off(kBFloat16, false);
      CHECK_FALSE(is_autocast_enabled());
    }
    CHECK(is_autocast_enabled());
  }
  CHECK_FALSE(is_autocast_enabled());
  const std::string e = ember::testing::error_of([] { AutocastGuard g(kFloat64); });
  CHECK(ember::testing::contains(e, "AutocastGuard: dtype float64 is not supported"));
  CHECK_FALSE(is_autocast_enabled());  // the failed guard changed nothing
}

TEST_CASE("autocast: CPU tensors are computed as without it") {
  Tensor x = randn64({4, 3}, 1).to(kFloat32);
  Tensor w = randn64({2, 3}, 2).to(kFloat32);
  Tensor b = randn64({2}, 3).to(kFloat32);
  Tensor plain = linear(x, w, b);
  AutocastGuard on;
  Tensor y = linear(x, w, b);
  CHECK(y.dtype() == kFloat32);
  CHECK(rel_error(y.to(kFloat64), plain.to(kFloat64)) == 0.0);
  Tensor l = mse_loss(y, plain);
  CHECK(l.dtype() == kFloat32);
}

TEST_CASE("autocast: CUDA Linear runs in bf16, float32 masters get the composition's gradients" *
          doctest::test_suite("cuda")) {
  const TensorOptions f32 = TensorOptions(kFloat32).device(kCUDA);
  auto leaf = [&](const Shape& s, uint64_t seed) {
    return randn64(s, seed).to(kCUDA, kFloat32).set_requires_grad(true);
  };
  Tensor x = randn64({33, 17}, 10).to(kCUDA, kFloat32);
  Tensor target = randn64({33, 8}, 11).to(kCUDA, kFloat32);
  Tensor w1 = leaf({12, 17}, 12), b1 = leaf({12}, 13), w2 = leaf({8, 12}, 14), b2 = leaf({8}, 15);
  Tensor c1 = w1.detach().clone().set_requires_grad(true),
         d1 = b1.detach().clone().set_requires_grad(true);
  Tensor c2 = w2.detach().clone().set_requires_grad(true),
         d2 = b2.detach().clone().set_requires_grad(true);
  (void)f32;

  Tensor loss;
  {
    AutocastGuard on;
    Tensor h = linear(x, w1, b1, Activation::Relu);
    CHECK(h.dtype() == kBFloat16);
    Tensor y = linear(h, w2, b2);  // bf16 input, float32 weight
    CHECK(y.dtype() == kBFloat16);
    loss = mse_loss(y, target);  // mixed: computed in float32
    CHECK(loss.dtype() == kFloat32);
  }
  loss.backward();

  // The same computation with the casts written out.
  auto bf = [](const Tensor& t) { return cast(t, kBFloat16); };
  Tensor h = linear(bf(x), bf(c1), bf(d1), Activation::Relu);
  Tensor y = linear(h, bf(c2), bf(d2));
  Tensor ref = mse_loss(cast(y, kFloat32), target);
  ref.backward();

  CHECK(loss.item() == ref.item());
  for (auto [a, r] : {std::pair{w1, c1}, {b1, d1}, {w2, c2}, {b2, d2}}) {
    REQUIRE(a.grad().defined());
    CHECK(a.grad().dtype() == kFloat32);
    CHECK(rel_error(a.grad().to(kCPU).to(kFloat64), r.grad().to(kCPU).to(kFloat64)) == 0.0);
  }
}
