// Tensors on CUDA beyond single ops (the op table, tests/core/op_table.cpp,
// checks each op against the CPU): copies between devices and dtypes (strided
// destinations), printing, a training step of composed ops, the same random
// numbers as the CPU from the same seed, and the errors for operands on
// different devices. Suite "cuda".
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/ops.h"
#include "cuda/runtime.h"
#include "gradcheck.h"

using namespace ember;
using ember::testing::cuda_vs_cpu;
using ember::testing::grad_cuda_vs_cpu;
using ember::testing::rand64;
using ember::testing::randn64;
using ember::testing::rel_error;
using ember::testing::TensorFn;

namespace {
using V = std::vector<double>;
using Inputs = std::vector<Tensor>;
const DType kFloatTypes[] = {kFloat32, kFloat64, kBFloat16};
// DESIGN.md's budgets for element-wise and reduction results in each dtype.
[[maybe_unused]] double tol_for(DType t) {
  return t == kFloat64 ? 1e-12 : t == kFloat32 ? 1e-6 : 1e-2;
}
}  // namespace

TEST_CASE("kernels/tensor: empty tensors, cast and copies across devices" *
          doctest::test_suite("cuda")) {
  Tensor e = zeros({0, 3}, kCUDA);
  CHECK((e + ones({3}, kCUDA)).sizes() == Shape{0, 3});
  CHECK(exp(e).numel() == 0);
  CHECK(e.to(kCPU).numel() == 0);

  Tensor x = randn64({5, 7}, 3);
  Tensor g = x.to(kCUDA);
  CHECK(g.is_cuda());
  CHECK(g.to(kCPU).to_vector<double>() == x.to_vector<double>());
  CHECK(g.to(kFloat32).to(kBFloat16).to(kFloat64).to_vector<double>() ==
        x.to(kFloat32).to(kBFloat16).to(kFloat64).to_vector<double>());
  CHECK(cast(g, kInt64).to_vector<int64_t>() == cast(x, kInt64).to_vector<int64_t>());

  Tensor dst = zeros({7, 5}, TensorOptions(kFloat32).device(kCUDA));
  dst.t().copy_(x);  // CPU float64 -> strided CUDA float32
  CHECK(dst.t().to_vector<double>() == x.to(kFloat32).to_vector<double>());
  Tensor filled = full({3, 4}, 2.5, TensorOptions(kBFloat16).device(kCUDA));
  CHECK(filled.to_vector<double>() == V(12, 2.5));
  CHECK(sum(g).item() == doctest::Approx(sum(x).item()).epsilon(1e-12));
  CHECK(full({1}, 3.0, kCUDA).str() == "tensor([3.0000], device=cuda:0)");

  CHECK(rel_error(cat({g, g.slice(0, 1, 3)}, 0), cat({x, x.slice(0, 1, 3)}, 0)) == 0.0);
  CHECK(rel_error(g.t().contiguous(), x.t().contiguous()) == 0.0);
  CHECK(rel_error(g.select(1, 3), x.select(1, 3)) == 0.0);
}

TEST_CASE("kernels/tensor: a small training step agrees with the CPU" *
          doctest::test_suite("cuda")) {
  TensorFn mlp = [](const Inputs& v) {
    Tensor h = relu(matmul(v[0], v[1].t()) + v[2]);  // x (64, 10), w1 (32, 10), b1 (32)
    Tensor y = matmul(h, v[3].t());                  // w2 (1, 32)
    return mean(pow(y - v[4], 2.0));
  };
  Inputs in = {randn64({64, 10}, 1), randn64({32, 10}, 2) * 0.3, randn64({32}, 3) * 0.1,
               randn64({1, 32}, 4) * 0.3, randn64({64, 1}, 5)};
  CHECK(grad_cuda_vs_cpu(mlp, in, kFloat32) <= 1e-5);
  CHECK(grad_cuda_vs_cpu(mlp, in, kFloat64) <= 1e-12);
}

TEST_CASE("kernels/tensor: the same seed gives the same random numbers on CPU and CUDA" *
          doctest::test_suite("cuda")) {
  for (DType t : {kFloat32, kFloat64}) {
    CAPTURE(t);
    Generator c1(77), g1(77);
    Tensor uc = rand({4097}, t, &c1);
    Tensor ug = rand({4097}, TensorOptions(t).device(kCUDA), &g1);
    CHECK(ug.to_vector<double>() == uc.to_vector<double>());
    Tensor nc = randn({4097}, t, &c1);
    Tensor ng = randn({4097}, TensorOptions(t).device(kCUDA), &g1);
    // Box-Muller's log and cos may differ in the last bit between libm and CUDA.
    CHECK(rel_error(ng, nc) <= (t == kFloat32 ? 1e-7 : 1e-14));
  }
}

TEST_CASE("kernels/tensor: operands on different devices throw naming both devices" *
          doctest::test_suite("cuda")) {
  Tensor c = ones({2, 2});
  Tensor g = ones({2, 2}, kCUDA);
  CHECK_THROWS_WITH_AS(
      c + g, doctest::Contains("add: operands are on different devices (cpu and cuda:0)"), Error);
  CHECK_THROWS_WITH_AS(
      g * c, doctest::Contains("mul: operands are on different devices (cuda:0 and cpu)"), Error);
  CHECK_THROWS_WITH_AS(matmul(c, g), doctest::Contains("matmul: operands are on different devices"),
                       Error);
  CHECK_THROWS_WITH_AS(cat({c, g}), doctest::Contains("cat: tensor 1 is float32 on cuda:0"), Error);
  CHECK_THROWS_WITH_AS(g.add_(c), doctest::Contains("add_: operands are on different devices"),
                       Error);
  CHECK_THROWS_WITH_AS(c.to(Device::cuda(cuda::device_count())),
                       doctest::Contains("is not available"), Error);
}
