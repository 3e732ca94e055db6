// Autocast (core/autocast.h): the guard's scoping, that CPU tensors are left
// alone, and on CUDA that Linear runs in bfloat16 while the float32 parameters
// receive float32 gradients equal to those of the explicit cast composition.
#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#include "core/autocast.h"
#include "core/autograd.h"
#include "core/base/multi_tensor.h"
#include "core/kernel_table.h"
#include "core/meta.h"
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

// AutocastGuard::cast_parameters on the meta device mirroring CUDA (so it runs without a
// GPU): the parameters autocast lowers cast in one multi-tensor launch (a repeated one
// once, a float64 one not at all), the ops then casting only their other float32
// operands; each cached cast recorded (the parameters get float32 gradients); a
// parameter changed in place after it cast again (by the op, or by a second call, which
// casts it alone); nothing cached after the guard.
TEST_CASE("autocast: cast_parameters casts in one launch and the ops take its casts") {
  struct Seen final : MetaKernelObserver {
    int casts = 0, multi = 0;
    int64_t multi_tensors = 0;
    void cast(const kernels::CastArgs&) override { ++casts; }
    void multi_tensor_cast(const kernels::MultiTensorCastArgs& a) override {
      ++multi;
      multi_tensors += a.count;
    }
  };
  Seen seen;
  MetaDeviceScope scope(MetaDeviceOptions().mirror_device(DeviceType::CUDA).observe(&seen));
  const TensorOptions leaf = TensorOptions().device(kMeta).requires_grad();
  Tensor x = zeros({8, 16}, kMeta);
  Tensor w1 = zeros({32, 16}, leaf), b1 = zeros({32}, leaf), w2 = zeros({4, 32}, leaf),
         b2 = zeros({4}, leaf), other = zeros({4}, TensorOptions(kFloat64).device(kMeta));
  {
    AutocastGuard bf16;
    bf16.cast_parameters({w1, b1, w2, b2, w1, other});
    CHECK(seen.multi == 1);
    CHECK(seen.multi_tensors == 4);
    CHECK(seen.casts == 0);
    Tensor y = linear(relu(linear(x, w1, b1)), w2, b2);
    CHECK(y.dtype() == kBFloat16);
    CHECK(seen.casts == 1);  // x alone; the hidden layer's output is bfloat16 already
    sum(y).backward();
    for (const Tensor* p : {&w1, &b1, &w2, &b2}) {
      REQUIRE(p->grad().defined());
      CHECK(p->grad().dtype() == kFloat32);
    }
    const int before = seen.casts;
    {
      NoGradGuard no_grad;
      w2.mul_(2.0);  // a new version: its cached cast no longer stands for it
    }
    (void)linear(zeros({8, 32}, TensorOptions(kBFloat16).device(kMeta)), w2, b2);
    CHECK(seen.casts == before + 1);         // w2 again; b2 from the cache
    bf16.cast_parameters({w1, b1, w2, b2});  // w2 alone is cast again, in one launch
    CHECK(seen.multi == 2);
    CHECK(seen.multi_tensors == 5);
    (void)linear(zeros({8, 32}, TensorOptions(kBFloat16).device(kMeta)), w2, b2);
    CHECK(seen.casts == before + 1);  // both from the cache now
  }
  const int before = seen.casts;
  {
    AutocastGuard again;  // a new guard: nothing cached
    (void)linear(x, w1, b1);
    CHECK(seen.casts == before + 3);
    CHECK(seen.multi == 2);
  }
  {
    AutocastGuard off(kBFloat16, false);  // disabled: casts nothing
    off.cast_parameters({w1});
    CHECK(seen.multi == 2);
  }
}

// multi_tensor_cast's CPU kernel (every device registers the family; autocast lowers
// nothing on the CPU, so cast_parameters never reaches it): halfway values rounded to
// even by hand, then every tensor of a batch (an empty one and odd lengths among them)
// equal to cast's result, and a float64 source refused by name.
TEST_CASE("autocast: multi_tensor_cast on the CPU rounds each tensor as cast does") {
  auto run = [](const std::vector<Tensor>& src) {
    std::vector<Tensor> dst;
    std::vector<TensorSpan> spans;
    std::vector<void*> out;
    for (const Tensor& s : src) {
      dst.push_back(empty(s.sizes(), kBFloat16));
      spans.push_back(TensorSpan{s.raw_data(), s.numel(), s.dtype()});
      out.push_back(dst.back().raw_data());
    }
    kernels::kernels_for(kCPU).multi_tensor_cast(
        {kCPU, spans.data(), out.data(), static_cast<int64_t>(spans.size())});
    return dst;
  };
  // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: even is 1. 1 + 3 * 2^-8 halfway
  // between 1 + 2^-7 and 1 + 2^-6: even is 1 + 2^-6.
  const std::vector<float> halfway{1.00390625f, 1.01171875f, -1.00390625f};
  CHECK(run({from_vector(halfway, {3})})[0].to(kFloat32).to_vector<float>() ==
        std::vector<float>{1.0f, 1.015625f, -1.0f});
  std::vector<Tensor> src{empty({0}, kFloat32)};
  uint64_t seed = 31;
  for (int64_t n : {1, 7, 1000}) src.push_back(randn64({n}, seed++).to(kCPU, kFloat32));
  const std::vector<Tensor> dst = run(src);
  for (size_t i = 0; i < src.size(); ++i) {
    CAPTURE(i);
    CHECK(dst[i].to(kFloat32).to_vector<float>() ==
          cast(src[i], kBFloat16).to(kFloat32).to_vector<float>());
  }
  CHECK(ember::testing::contains(ember::testing::error_of([&] { run({zeros({2}, kFloat64)}); }),
                                 "multi_tensor_cast: tensor 0 is float64; float32 expected"));
}

// On the GPU: a two-layer step with cast_parameters gives the loss and every gradient
// of the same step without it, bit for bit (the one launch rounds as cast does).
TEST_CASE("autocast: cast_parameters on CUDA gives the per-op casts' values and gradients" *
          doctest::test_suite("cuda")) {
  Tensor x = randn64({33, 17}, 20).to(kCUDA, kFloat32);
  std::vector<std::vector<float>> out[2];
  for (int cached : {0, 1}) {
    std::vector<Tensor> params;
    uint64_t seed = 21;
    for (const Shape& s : {Shape{12, 17}, Shape{12}, Shape{8, 12}, Shape{8}})
      params.push_back(randn64(s, seed++).to(kCUDA, kFloat32).set_requires_grad(true));
    AutocastGuard bf16;
    if (cached) bf16.cast_parameters(params);
    Tensor y = linear(gelu(linear(x, params[0], params[1])), params[2], params[3]);
    Tensor loss = sum(mul(y, y));
    loss.backward();
    out[cached].push_back(loss.to(kCPU, kFloat32).to_vector<float>());
    for (const Tensor& p : params) out[cached].push_back(p.grad().to(kCPU).to_vector<float>());
  }
  for (size_t i = 0; i < out[0].size(); ++i) {
    CAPTURE(i);
    CHECK(out[0][i] == out[1][i]);
  }
}
