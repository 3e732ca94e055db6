// nn::utils::clip_grad_norm_ and the multi-tensor ops beneath it: the total norm
// of every gradient together, hand-computed, for each norm type; the scaling;
// the edge cases PyTorch defines; CUDA against the CPU reference.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/autograd.h"
#include "core/ops.h"
#include "error_text.h"
#include "gradcheck.h"
#include "nn/nn.h"

using namespace ember;
using ember::testing::contains;
using ember::testing::error_of;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Two parameters whose gradients are g1 = [3, -4] and g2 = [[0, 12]].
std::vector<Tensor> params_with_grads(DType dtype = kFloat32, Device device = kCPU) {
  Tensor a = zeros({2}, TensorOptions(dtype).device(device).requires_grad());
  Tensor b = zeros({1, 2}, TensorOptions(dtype).device(device).requires_grad());
  a.set_grad(tensor({3.0, -4.0}, TensorOptions(dtype).device(device)));
  b.set_grad(tensor({{0.0, 12.0}}, TensorOptions(dtype).device(device)));
  return {a, b};
}

std::vector<double> grads_of(const std::vector<Tensor>& ps) {
  std::vector<double> out;
  for (const Tensor& p : ps)
    for (double v : p.grad().to_vector<double>()) out.push_back(v);
  return out;
}

}  // namespace

TEST_CASE("nn/clip_grad_norm_: total norm of all gradients, by hand, for each norm type") {
  // |g| = 3, 4, 0, 12: 2-norm 13, 1-norm 19, inf-norm 12, 0-"norm" 3 non-zeros,
  // 3-norm (27 + 64 + 1728)^(1/3).
  const struct {
    double p, norm;
  } cases[] = {{2, 13}, {1, 19}, {kInf, 12}, {0, 3}, {3, std::cbrt(1819.0)}};
  for (const auto& c : cases) {
    CAPTURE(c.p);
    auto ps = params_with_grads(kFloat64);
    const double norm = nn::utils::clip_grad_norm_(ps, 1e9, c.p);  // no clipping
    CHECK(norm == doctest::Approx(c.norm).epsilon(1e-14));
    CHECK(grads_of(ps) == std::vector<double>{3, -4, 0, 12});  // multiplied by exactly 1
  }
}

TEST_CASE("nn/clip_grad_norm_: scales every gradient by max_norm / (norm + 1e-6)") {
  auto ps = params_with_grads(kFloat64);
  const double norm = nn::utils::clip_grad_norm_(ps, 6.5);
  CHECK(norm == 13.0);  // the norm before clipping
  const double coef = 6.5 / (13.0 + 1e-6);
  const std::vector<double> g = grads_of(ps);
  const double want[] = {3 * coef, -4 * coef, 0, 12 * coef};
  for (size_t i = 0; i < g.size(); ++i) CHECK(g[i] == doctest::Approx(want[i]).epsilon(1e-15));
  // After clipping, the norm is max_norm (up to the 1e-6 guard).
  auto ps2 = ps;
  CHECK(nn::utils::clip_grad_norm_(ps2, 1e9) == doctest::Approx(6.5).epsilon(1e-6));
  // float32 gradients: the product is rounded once, to float.
  auto ps32 = params_with_grads(kFloat32);
  nn::utils::clip_grad_norm_(ps32, 6.5);
  CHECK(ps32[1].grad().to_vector<float>()[1] == static_cast<float>(12.0 * coef));
}

TEST_CASE("nn/clip_grad_norm_: parameters without gradients are skipped") {
  Tensor no_grad = zeros({3}, TensorOptions().requires_grad());
  auto ps = params_with_grads(kFloat64);
  ps.push_back(no_grad);
  CHECK(nn::utils::clip_grad_norm_(ps, 1e9) == 13.0);
  CHECK(!no_grad.grad().defined());
  CHECK(nn::utils::clip_grad_norm_({no_grad}, 1.0) == 0.0);  // nothing to clip
  CHECK(nn::utils::clip_grad_norm_(std::vector<Tensor>{}, 1.0) == 0.0);
  // One tensor, and a model's parameters after backward.
  CHECK(nn::utils::clip_grad_norm_(ps[0], 1e9) == 5.0);
  nn::Linear lin(3, 2);
  Tensor x = ones({4, 3});
  lin.forward(x).sum().backward();
  // d weight: every row is the column sums of x (4 each); d bias: 4 each.
  CHECK(nn::utils::clip_grad_norm_(lin.parameters(), 1e9) == doctest::Approx(std::sqrt(8 * 16.0)));
}

TEST_CASE(
    "nn/clip_grad_norm_: a non-finite norm scales by NaN, or throws before changing "
    "anything") {
  auto ps = params_with_grads(kFloat64);
  ps[0].mutable_grad().fill_(std::numeric_limits<double>::quiet_NaN());
  CHECK(contains(error_of([&] { nn::utils::clip_grad_norm_(ps, 1.0, 2.0, true); }),
                 "clip_grad_norm_: the total norm of order 2 of the gradients is nan"));
  CHECK(grads_of(ps)[3] == 12.0);  // untouched
  CHECK(std::isnan(nn::utils::clip_grad_norm_(ps, 1.0)));
  CHECK(std::isnan(grads_of(ps)[3]));
  auto inf = params_with_grads(kFloat64);
  inf[1].mutable_grad().fill_(kInf);
  CHECK(contains(error_of([&] { nn::utils::clip_grad_norm_(inf, 1.0, kInf, true); }),
                 "is inf, so it cannot be clipped"));
  CHECK(std::isinf(nn::utils::clip_grad_norm_(inf, 1.0, kInf)));
}

TEST_CASE("nn/clip_grad_norm_: bad arguments name the problem") {
  auto ps = params_with_grads();
  CHECK(contains(error_of([&] { nn::utils::clip_grad_norm_(ps, 1.0, -1.0); }),
                 "clip_grad_norm_: norm_type must be >= 0 (or inf), got -1"));
  CHECK(contains(error_of([&] { nn::utils::clip_grad_norm_(ps, std::nan("")); }),
                 "clip_grad_norm_: max_norm is NaN"));
  CHECK(contains(error_of([&] { nn::utils::clip_grad_norm_({Tensor()}, 1.0); }),
                 "clip_grad_norm_: parameter 0 is undefined"));
  CHECK(contains(error_of([&] { multi_tensor_norm({}); }), "multi_tensor_norm: expects at least"));
  CHECK(contains(error_of([&] { multi_tensor_norm({zeros({2}, kInt64)}); }),
                 "multi_tensor_norm: tensor 0 is int64"));
  CHECK(contains(error_of([&] {
                   multi_tensor_norm({zeros({2, 3}).t()});
                 }),
                 "multi_tensor_norm: tensor 0 of shape [3, 2] is not contiguous"));
  CHECK(contains(error_of([&] { multi_tensor_mul_({zeros({2})}, ones({1})); }),
                 "multi_tensor_mul_: scale must be a one-element float64 tensor"));
}

TEST_CASE("nn/multi_tensor_norm: many tensors of many sizes and dtypes, against a double sum") {
  std::vector<Tensor> ts;
  double sum_sq = 0, sum_abs = 0, max_abs = 0;
  Generator gen(5);
  for (int i = 0; i < 130; ++i) {  // more than one launch's worth of tensors
    const DType dt = i % 3 == 0 ? kFloat64 : (i % 3 == 1 ? kFloat32 : kBFloat16);
    Tensor t = randn({i % 7 == 0 ? 0 : 1 + (i * 37) % 300}, kFloat32, &gen).to(dt);
    for (double v : t.to_vector<double>()) {
      sum_sq += v * v;
      sum_abs += std::fabs(v);
      max_abs = std::max(max_abs, std::fabs(v));
    }
    ts.push_back(t);
  }
  CHECK(multi_tensor_norm(ts).item() == doctest::Approx(std::sqrt(sum_sq)).epsilon(1e-12));
  CHECK(multi_tensor_norm(ts, 1).item() == doctest::Approx(sum_abs).epsilon(1e-12));
  CHECK(multi_tensor_norm(ts, kInf).item() == max_abs);
}

TEST_CASE("nn/clip_grad_norm_: CUDA matches the CPU reference" * doctest::test_suite("cuda")) {
  for (DType dt : {kFloat32, kFloat64, kBFloat16}) {
    CAPTURE(dt);
    for (double p : {2.0, 1.0, kInf, 0.0, 3.0}) {
      CAPTURE(p);
      // Sizes across the 64K-element chunks and more than one launch of tensors.
      std::vector<Tensor> cpu, gpu;
      Generator gen(11);
      for (int i = 0; i < 100; ++i) {
        const int64_t n = i == 0 ? 300000 : (i == 1 ? 0 : 1 + (i * 7919) % 5000);
        Tensor g = randn({n}, kFloat32, &gen).to(dt);
        Tensor pc = zeros({n}, TensorOptions(dt).requires_grad());
        pc.set_grad(g.clone());
        Tensor pg = zeros({n}, TensorOptions(dt).device(kCUDA).requires_grad());
        pg.set_grad(g.to(kCUDA));
        cpu.push_back(pc);
        gpu.push_back(pg);
      }
      const double ref = nn::utils::clip_grad_norm_(cpu, 0.5, p);
      const double got = nn::utils::clip_grad_norm_(gpu, 0.5, p);
      CHECK(got == doctest::Approx(ref).epsilon(1e-12));
      for (size_t i = 0; i < cpu.size(); ++i)
        CHECK(testing::rel_error(gpu[i].grad().to(kCPU), cpu[i].grad()) <=
              (dt == kBFloat16 ? 1e-2 : 1e-6));
    }
  }
}

TEST_CASE("nn/clip_grad_norm_: the CUDA norm is bit-identical from run to run" *
          doctest::test_suite("cuda")) {
  Generator gen(3);
  std::vector<Tensor> ts;
  for (int i = 0; i < 40; ++i) ts.push_back(randn({1 + i * 20011}, kCUDA, &gen));
  const double first = multi_tensor_norm(ts).item();
  for (int run = 0; run < 5; ++run) CHECK(multi_tensor_norm(ts).item() == first);
}
