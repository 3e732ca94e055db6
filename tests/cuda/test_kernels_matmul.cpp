// matmul on CUDA (cuBLAS) against the CPU float64 reference at the sizes the op
// table's samples (tests/core/op_table.cpp) do not reach: dims of 1, 127 and
// 4097 in every position with every transposition, batches with a stride-0
// operand and row strides of a column slice, empty sizes, and TF32 at 512^3
// (DESIGN.md: fp32 GEMM <= 1e-5, TF32 <= 1e-3, bf16 <= 1e-2). Suite "cuda".
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/ops.h"
#include "cuda/blas.h"
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

TEST_CASE("kernels/matmul: matmul matches the CPU reference (fp32 1e-5, fp64, bf16 1e-2)" *
          doctest::test_suite("cuda")) {
  struct Dims {
    int64_t n, k, m;
  };
  const std::vector<Dims> dims = {{1, 1, 1},    {7, 127, 1},     {127, 7, 4097}, {4097, 1, 7},
                                  {33, 65, 17}, {256, 256, 256}, {1, 4097, 127}};
  const double tol[] = {1e-5, 1e-12, 1e-2};
  uint64_t seed = 400;
  for (const Dims& d : dims)
    for (int ti = 0; ti < 3; ++ti) {
      const DType t = kFloatTypes[ti];
      CAPTURE(d.n);
      CAPTURE(d.k);
      CAPTURE(d.m);
      CAPTURE(t);
      Tensor a = randn64({d.n, d.k}, ++seed), b = randn64({d.k, d.m}, ++seed);
      Tensor at = randn64({d.k, d.n}, ++seed), bt = randn64({d.m, d.k}, ++seed);
      auto mm = [](const Inputs& v) { return matmul(v[0], v[1]); };
      CHECK(cuda_vs_cpu(mm, {a, b}, t) <= tol[ti]);
      CHECK(cuda_vs_cpu([](const Inputs& v) { return matmul(v[0].t(), v[1]); }, {at, b}, t) <=
            tol[ti]);
      CHECK(cuda_vs_cpu([](const Inputs& v) { return matmul(v[0], v[1].t()); }, {a, bt}, t) <=
            tol[ti]);
      CHECK(cuda_vs_cpu([](const Inputs& v) { return matmul(v[0].t(), v[1].t()); }, {at, bt}, t) <=
            tol[ti]);
    }
}

TEST_CASE("kernels/matmul: batched, shared-operand and strided matmul match the CPU reference" *
          doctest::test_suite("cuda")) {
  uint64_t seed = 500;
  for (DType t : {kFloat32, kFloat64, kBFloat16}) {
    CAPTURE(t);
    const double tl = t == kFloat32 ? 1e-5 : t == kFloat64 ? 1e-12 : 1e-2;
    auto mm = [](const Inputs& v) { return matmul(v[0], v[1]); };
    CHECK(cuda_vs_cpu(mm, {randn64({3, 7, 127}, ++seed), randn64({3, 127, 9}, ++seed)}, t) <= tl);
    CHECK(cuda_vs_cpu(mm, {randn64({5, 33, 17}, ++seed), randn64({17, 65}, ++seed)}, t) <= tl);
    CHECK(cuda_vs_cpu(mm, {randn64({1, 4, 6}, ++seed), randn64({1, 6, 2}, ++seed)}, t) <= tl);
    // transposed batches, a batch-transposed shared operand, stride-0 batches
    CHECK(cuda_vs_cpu(
              [](const Inputs& v) { return matmul(v[0].transpose(1, 2), v[1].transpose(1, 2)); },
              {randn64({4, 31, 8}, ++seed), randn64({4, 5, 31}, ++seed)}, t) <= tl);
    CHECK(cuda_vs_cpu([](const Inputs& v) { return matmul(v[0].transpose(1, 2), v[1]); },
                      {randn64({4, 31, 8}, ++seed), randn64({31, 5}, ++seed)}, t) <= tl);
    CHECK(cuda_vs_cpu(
              [](const Inputs& v) {
                return matmul(v[0], v[1].unsqueeze(0).expand({3, 8, 6}));
              },
              {randn64({3, 5, 8}, ++seed), randn64({8, 6}, ++seed)}, t) <= tl);
    // row stride larger than the row (a column slice), and a copy for stride-2 columns
    CHECK(cuda_vs_cpu([](const Inputs& v) { return matmul(v[0].slice(1, 3, 40), v[1]); },
                      {randn64({20, 50}, ++seed), randn64({37, 11}, ++seed)}, t) <= tl);
    CHECK(cuda_vs_cpu([](const Inputs& v) { return matmul(v[0].slice(1, 0, 50, 2), v[1]); },
                      {randn64({20, 50}, ++seed), randn64({25, 11}, ++seed)}, t) <= tl);
  }
}

TEST_CASE("kernels/matmul: matmul with empty sizes and TF32" * doctest::test_suite("cuda")) {
  CHECK(matmul(zeros({0, 3}, kCUDA), zeros({3, 2}, kCUDA)).sizes() == Shape{0, 2});
  Tensor z = matmul(ones({2, 0}, kCUDA), ones({0, 3}, kCUDA));
  CHECK(z.is_cuda());
  CHECK(z.to_vector<double>() == V(6, 0.0));
  CHECK(matmul(zeros({0, 2, 3}, kCUDA), zeros({0, 3, 4}, kCUDA)).sizes() == Shape{0, 2, 4});

  Tensor a = randn64({512, 512}, 1), b = randn64({512, 512}, 2);
  auto mm = [](const Inputs& v) { return matmul(v[0], v[1]); };
  CHECK_FALSE(cuda::allow_tf32());
  cuda::set_allow_tf32(true);
  const double tf32 = cuda_vs_cpu(mm, {a, b}, kFloat32);
  cuda::set_allow_tf32(false);
  CHECK(tf32 <= 1e-3);
  CHECK(cuda_vs_cpu(mm, {a, b}, kFloat32) <= 1e-5);
}
