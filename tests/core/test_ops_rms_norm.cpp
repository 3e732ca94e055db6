// rms_norm on CPU (the composed reference): hand-computed values, the default eps
// (the compute type's machine epsilon, as torch), several trailing dims, gradients
// of input and weight against finite differences (float64), shape errors, and
// shapes on the meta device (the fused path's when it mirrors CUDA, the composed
// one's when it mirrors the CPU).
#include <doctest/doctest.h>

#include <limits>

#include "core/autograd.h"
#include "core/kernel_table.h"
#include "core/meta.h"
#include "core/ops.h"
#include "gradcheck.h"

using namespace ember;
using ember::testing::randn64;
using ember::testing::rel_error;

namespace {
using V = std::vector<double>;
using Inputs = std::vector<Tensor>;
}  // namespace

TEST_CASE("rms_norm: hand-computed values, eps inside the root, the weight") {
  Tensor x = tensor({{1, 2, 3, 4}, {2, 2, 2, 2}}, kFloat64);
  // rms of the first row: sqrt(30 / 4); with eps 0.5: sqrt(8).
  const V y = rms_norm(x, {4}, Tensor(), 0.0).to_vector<double>();
  const V want = {
      0.3651483716701107, 0.7302967433402214, 1.0954451150103321, 1.4605934866804429, 1, 1, 1, 1};
  for (size_t i = 0; i < want.size(); ++i) {
    CAPTURE(i);
    CHECK(y[i] == doctest::Approx(want[i]).epsilon(1e-15));
  }
  const V ye = rms_norm(x, {4}, Tensor(), 0.5).to_vector<double>();
  CHECK(ye[0] == doctest::Approx(0.35355339059327373).epsilon(1e-15));
  CHECK(ye[3] == doctest::Approx(1.414213562373095).epsilon(1e-15));
  Tensor w = tensor({1, 2, 3, -4}, kFloat64);
  const V yw = rms_norm(x, {4}, w, 0.0).to_vector<double>();
  CHECK(yw[1] == doctest::Approx(2 * want[1]).epsilon(1e-15));
  CHECK(yw[3] == doctest::Approx(-4 * want[3]).epsilon(1e-15));
  CHECK(yw[7] == doctest::Approx(-4.0).epsilon(1e-15));
  CHECK(rms_norm(x.to(kFloat32), {4}).dtype() == kFloat32);
  CHECK(rms_norm(x.to(kBFloat16), {4}, w.to(kFloat32)).dtype() == kFloat32);  // promoted
}

TEST_CASE("rms_norm: the default eps is the compute type's machine epsilon") {
  // x = 1e-4: mean(x^2) = 1e-8, so float32's epsilon (1.19e-7) dominates the root:
  // 1e-4 / sqrt(1e-8 + 2^-23) = 0.27819744094289034.
  Tensor x32 = full({2}, 1e-4, kFloat32);
  CHECK(rms_norm(x32, {2}).to_vector<float>()[0] ==
        doctest::Approx(0.27819744094289034).epsilon(1e-6));
  Tensor x64 = full({2}, 1e-4, kFloat64);
  const double e64 = std::numeric_limits<double>::epsilon();
  CHECK(rms_norm(x64, {2}).to_vector<double>()[0] ==
        rms_norm(x64, {2}, Tensor(), e64).to_vector<double>()[0]);
  CHECK(rms_norm(x64, {2}).to_vector<double>()[0] == doctest::Approx(1.0).epsilon(1e-7));
}

TEST_CASE("rms_norm: several trailing dims normalise together") {
  Tensor x = randn64({3, 2, 5}, 80);
  Tensor y = rms_norm(x, {2, 5}, Tensor(), 0.0);
  Tensor rows = y.reshape({3, 10});
  CHECK(rel_error(mean(mul(rows, rows), 1), full({3}, 1.0, kFloat64)) < 1e-14);
  CHECK(rel_error(y, rms_norm(x.reshape({3, 10}), {10}, Tensor(), 0.0).reshape({3, 2, 5})) < 1e-15);
}

TEST_CASE("rms_norm: gradients of input and weight match finite differences") {
  CHECK_GRADCHECK([](const Inputs& v) { return rms_norm(v[0], {5}, v[1]); },
                  {randn64({4, 5}, 81), randn64({5}, 82)});
  CHECK_GRADCHECK(
      [](const Inputs& v) {
        return rms_norm(v[0], {3, 2}, v[1], 1e-3);
      },
      {randn64({2, 3, 2}, 83), randn64({3, 2}, 84)});
  CHECK_GRADCHECK([](const Inputs& v) { return rms_norm(v[0], {6}, Tensor(), 0.1); },
                  {randn64({3, 6}, 85)});
}

TEST_CASE("rms_norm: bad shapes, eps and dtypes throw naming the op") {
  Tensor x = zeros({2, 3});
  CHECK_THROWS_WITH_AS(rms_norm(x, {4}),
                       doctest::Contains("rms_norm: normalized_shape [4] does not match the "
                                         "trailing dims of the input of shape [2, 3]"),
                       Error);
  CHECK_THROWS_WITH_AS(rms_norm(x, {3}, zeros({4})),
                       doctest::Contains("rms_norm: weight of shape [4] does not match "
                                         "normalized_shape [3]"),
                       Error);
  CHECK_THROWS_WITH_AS(rms_norm(x, {}), doctest::Contains("rms_norm: normalized_shape is empty"),
                       Error);
  CHECK_THROWS_WITH_AS(rms_norm(x, {3}, Tensor(), -1.0),
                       doctest::Contains("rms_norm: eps must be >= 0"), Error);
  CHECK_THROWS_WITH_AS(rms_norm(zeros({2}, kInt64), {2}),
                       doctest::Contains("rms_norm: expects a floating-point tensor"), Error);
  CHECK_THROWS_WITH_AS(rms_norm(Tensor(), {2}), doctest::Contains("rms_norm"), Error);
}

TEST_CASE("rms_norm: the CPU has no fused kernel; meta gives the shapes of either path") {
  CHECK_FALSE(kernels::kernels_for(kCPU).rms_norm_fused_supported({kCPU, kFloat32, 4, 8}));
  // Mirroring CUDA the predicate answers as CUDA does (no GPU needed: it depends
  // on the dtype and the row length alone).
  {
    MetaDeviceScope scope(MetaDeviceOptions().mirror_device(DeviceType::CUDA));
    // (CUDA's predicate is off when EMBER_RMS_NORM_FUSED=0: cuda/kernels/layer_norm.cu.)
    const bool cuda_fuses =
        kernels::kernels_for(kCUDA).rms_norm_fused_supported({kCUDA, kFloat32, 4, 8});
    CHECK(kernels::kernels_for(kMeta).rms_norm_fused_supported({kMeta, kFloat32, 4, 8}) ==
          cuda_fuses);
    CHECK_FALSE(kernels::kernels_for(kMeta).rms_norm_fused_supported({kMeta, kFloat64, 4, 8}));
    Tensor x = zeros({4, 3, 8}, TensorOptions(kBFloat16).device(kMeta));
    Tensor y = rms_norm(x, {8}, ones({8}, TensorOptions(kBFloat16).device(kMeta)));
    CHECK(y.device() == kMeta);
    CHECK(y.sizes() == Shape{4, 3, 8});
    CHECK(y.dtype() == kBFloat16);
  }
  MetaDeviceScope scope(MetaDeviceOptions().mirror_device(DeviceType::CPU));
  Tensor x = zeros({4, 3, 8}, TensorOptions(kFloat32).device(kMeta).requires_grad());
  Tensor w = ones({3, 8}, TensorOptions(kFloat32).device(kMeta).requires_grad());
  Tensor y = rms_norm(x, {3, 8}, w);
  CHECK(y.sizes() == Shape{4, 3, 8});
  y.sum().backward();
  CHECK(x.grad().sizes() == Shape{4, 3, 8});
  CHECK(w.grad().sizes() == Shape{3, 8});
  CHECK(w.grad().device() == kMeta);
}
