// The reduction kernels (cuda/kernels/reduce.cu) through sum, mean, max, min,
// argmax and argmin on CUDA against the CPU reference, for the kernel paths the
// op table's small samples (tests/core/op_table.cpp) do not reach: short and
// long rows in one and two passes, narrow and wide columns, 2^22 elements;
// bit-identical sums of 2^23 elements; empty reductions; max and argmax exactly
// equal with ties (the first index) and NaN. All in the "cuda" suite.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/ops.h"
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

TEST_CASE("kernels/reduce: sum and mean match the CPU reference for every kernel path" *
          doctest::test_suite("cuda")) {
  // (shape, dim): short rows, long rows in one and two passes, many long rows,
  // narrow and wide columns, a bias-gradient-like (65536, 512) column sum.
  const std::vector<std::pair<Shape, int64_t>> cases = {
      {{1000, 7}, 1},    {{3, 100003}, 1},  {{100, 5000}, 1},  {{2000, 5000}, 1},
      {{100003, 3}, 0},  {{7, 513}, 0},     {{65536, 512}, 0}, {{4, 9, 33}, 1},
      {{5000, 2, 2}, 0}, {{2, 3, 4097}, 2}, {{1}, 0},          {{127, 1, 7}, 1},
      {{4097, 16}, 1},   {{3001, 3}, 1},    {{513, 33}, 1},    {{300, 2}, 1},
  };
  uint64_t seed = 200;
  for (const auto& [shape, dim] : cases)
    for (DType t : kFloatTypes) {
      CAPTURE(shape_str(shape));
      CAPTURE(dim);
      CAPTURE(t);
      Tensor x = randn64(shape, ++seed);
      CHECK(cuda_vs_cpu([d = dim](const Inputs& v) { return sum(v[0], d); }, {x}, t) <= tol_for(t));
      CHECK(cuda_vs_cpu([d = dim](const Inputs& v) { return mean(v[0], d, true); }, {x}, t) <=
            tol_for(t));
    }
  for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{127}, int64_t{4097}, int64_t{(1 << 22) + 5}})
    for (DType t : kFloatTypes) {
      CAPTURE(n);
      CAPTURE(t);
      Tensor x = rand64({n}, ++seed, -1.0, 3.0);  // mean away from 0: relative error is meaningful
      CHECK(cuda_vs_cpu([](const Inputs& v) { return sum(v[0]); }, {x}, t) <= tol_for(t));
      CHECK(cuda_vs_cpu([](const Inputs& v) { return mean(v[0]); }, {x}, t) <= tol_for(t));
    }
  Tensor m = randn64({300, 200}, ++seed);
  CHECK(cuda_vs_cpu([](const Inputs& v) { return sum(v[0].t(), 1); }, {m}, kFloat32) <= 1e-6);
  CHECK(cuda_vs_cpu([](const Inputs& v) { return sum(v[0].slice(1, 1, 200, 3), 0); }, {m},
                    kFloat32) <= 1e-6);
}

TEST_CASE("kernels/reduce: reductions are bit-identical from run to run" *
          doctest::test_suite("cuda")) {
  Tensor x = randn({(1 << 23) + 11}, kCUDA);
  const float first = sum(x).item<float>();
  Tensor cols = randn({65536, 512}, kCUDA);
  const std::vector<float> col_first = sum(cols, 0).to_vector<float>();
  for (int i = 0; i < 5; ++i) {
    CHECK(sum(x).item<float>() == first);
    CHECK(sum(cols, 0).to_vector<float>() == col_first);
  }
}

TEST_CASE("kernels/reduce: empty reductions" * doctest::test_suite("cuda")) {
  CHECK(sum(zeros({0}, kCUDA)).item() == 0.0);
  CHECK(std::isnan(mean(zeros({0}, kCUDA)).item()));
  Tensor s = sum(zeros({2, 0, 3}, kCUDA), 1);
  CHECK(s.is_cuda());
  CHECK(s.to_vector<double>() == V(6, 0.0));
  for (double v : mean(zeros({2, 0, 3}, kCUDA), 1).to_vector<double>()) CHECK(std::isnan(v));
  CHECK(sum(zeros({0, 3}, kCUDA), 0).to_vector<double>() == V(3, 0.0));
  CHECK(max(zeros({0, 3}, kCUDA), 1).values.numel() == 0);
  CHECK_THROWS_WITH_AS(max(zeros({3, 0}, kCUDA), 1),
                       doctest::Contains("max: cannot reduce over dim 1 of size 0"), Error);
}

TEST_CASE("kernels/reduce: max and argmax equal the CPU reference exactly, ties and NaN included" *
          doctest::test_suite("cuda")) {
  const std::vector<std::pair<Shape, int64_t>> cases = {
      {{1000, 7}, 1},   {{3, 100003}, 1}, {{100, 5000}, 1}, {{100003, 3}, 0}, {{7, 513}, 0},
      {{65536, 64}, 0}, {{4, 9, 33}, 1},  {{4097}, 0},      {{4097, 5}, 1},   {{999, 17}, 1},
  };
  uint64_t seed = 300;
  for (const auto& [shape, dim] : cases)
    for (DType t : kFloatTypes) {
      CAPTURE(shape_str(shape));
      CAPTURE(dim);
      CAPTURE(t);
      // Few distinct values: many ties, so "first index" is exercised in every pass.
      Tensor x = mul(rand64(shape, ++seed, 0.0, 8.0).to(kInt64).to(kFloat64), 0.5).to(t);
      Tensor g = x.to(kCUDA);
      CHECK(max(g, dim).values.to_vector<double>() == max(x, dim).values.to_vector<double>());
      CHECK(argmax(g, dim).to_vector<int64_t>() == argmax(x, dim).to_vector<int64_t>());
      CHECK(argmax(g, dim, true).sizes() == argmax(x, dim, true).sizes());
    }
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor with_nan = randn64({4, 5000}, 9);
  with_nan[1][4321].fill_(nan);
  with_nan[2][17].fill_(nan);
  with_nan[2][4000].fill_(nan);
  Tensor g = with_nan.to(kCUDA);
  CHECK(argmax(g, 1).to_vector<int64_t>() == argmax(with_nan, 1).to_vector<int64_t>());
  CHECK(argmax(g, 1).to_vector<int64_t>()[2] == 17);
  CHECK(std::isnan(max(g, 1).values.to_vector<double>()[1]));
  Tensor infs = full({3000}, -std::numeric_limits<double>::infinity(), kCUDA);
  CHECK(argmax(infs, 0).item() == 0.0);
}

TEST_CASE("kernels/reduce: min, max, argmin over dims and of everything match the CPU" *
          doctest::test_suite("cuda")) {
  for (DType t : {kFloat32, kFloat64, kBFloat16})
    for (int64_t dim : {0, 1}) {
      INFO("dtype=", t, " dim=", dim);
      // Few distinct values: ties, so "first index" matters.
      Tensor x = (randn64({300, 77}, 40) * 2.0).to(kInt64).to(t);
      Tensor g = x.to(kCUDA);
      CHECK(min(g, dim).values.to(kCPU).to_vector<double>() ==
            min(x, dim).values.to_vector<double>());
      CHECK(min(g, dim).indices.to(kCPU).to_vector<int64_t>() ==
            min(x, dim).indices.to_vector<int64_t>());
      CHECK(argmin(g, dim).to(kCPU).to_vector<int64_t>() == argmin(x, dim).to_vector<int64_t>());
      CHECK(max(g).item() == max(x).item());
      CHECK(min(g).item() == min(x).item());
    }
  // The gradient of max() is shared by the tied maxima, on CUDA too.
  for (DType t : {kFloat32, kFloat64}) {
    Tensor x = (randn64({50, 9}, 41) * 1.5).to(kInt64).to(kFloat64);  // many ties
    CHECK(grad_cuda_vs_cpu([](const Inputs& v) { return max(v[0]); }, {x}, t) <= tol_for(t));
    CHECK(grad_cuda_vs_cpu([](const Inputs& v) { return min(v[0], 1).values; }, {x}, t) <=
          tol_for(t));
  }
}
