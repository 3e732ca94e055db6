// softmax and log_softmax on CUDA (cuda/kernels/softmax.cu) against the CPU for
// every kernel layout: short rows (a warp each), long rows (a block each), rows
// of 50000, columns (inner > 1); stability past exp's range, masked (-inf)
// entries and rows of only -inf; cross-entropy of masked logits. The op table
// (tests/core/op_table.cpp) checks small samples and the gradients in every
// dtype. Tolerances: float32 1e-5 (a float reduction per row, GEMM's);
// bfloat16 1e-2. Suite "cuda".
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

TEST_CASE("kernels/softmax: softmax and log_softmax match the CPU for every layout" *
          doctest::test_suite("cuda")) {
  // Short rows (a warp each), long rows (a block each), and columns (inner > 1).
  const std::vector<std::pair<Shape, int64_t>> cases = {
      {{1000, 7}, 1},   {{33, 1024}, 1}, {{9, 1025}, 1},    {{4, 50000}, 1},
      {{7, 300, 5}, 1}, {{100, 3}, 0},   {{2, 3, 4097}, 2}, {{4097}, 0}};
  for (const auto& [shape, dim] : cases)
    for (DType t : {kFloat32, kFloat64, kBFloat16}) {
      INFO("shape=", shape_str(shape), " dim=", dim, " dtype=", t);
      Tensor x = randn64(shape, 50) * 4.0;
      const double tl = t == kFloat32 ? 1e-5 : tol_for(t);
      CHECK(cuda_vs_cpu([d = dim](const Inputs& v) { return softmax(v[0], d); }, {x}, t) <= tl);
      CHECK(cuda_vs_cpu([d = dim](const Inputs& v) { return log_softmax(v[0], d); }, {x}, t) <= tl);
      if (t != kBFloat16) {
        CHECK(grad_cuda_vs_cpu([d = dim](const Inputs& v) { return softmax(v[0], d); }, {x}, t) <=
              tl);
        CHECK(grad_cuda_vs_cpu([d = dim](const Inputs& v) { return log_softmax(v[0], d); }, {x},
                               t) <= tl);
      }
    }
  // Stable past exp's range; a masked (-inf) entry gets 0, a row of only -inf NaN.
  Tensor big = tensor({1000.0, 1001.0, 1002.0}).to(kCUDA);
  CHECK(rel_error(softmax(big, 0).to(kCPU).to(kFloat64),
                  softmax(tensor({0.0, 1.0, 2.0}, kFloat64), 0)) <= 1e-6);
  for (int64_t n : {int64_t{3}, int64_t{3000}}) {  // a warp's row and a block's
    Tensor masked = zeros({2, n});
    masked[0].slice(0, 0, n / 3).fill_(-INFINITY);
    masked[1].fill_(-INFINITY);
    Tensor got = softmax(masked.to(kCUDA), 1).to(kCPU);
    CHECK(rel_error(got[0].to(kFloat64), softmax(masked[0].to(kFloat64), 0)) <= 1e-6);
    CHECK(got[0][0].item() == 0.0);
    CHECK(std::isnan(got[1][0].item()));
  }
  // Cross-entropy with masked logits: finite, as on the CPU.
  Tensor logits = randn64({4, 2000}, 51).to(kFloat32);
  logits.slice(1, 0, 1000).fill_(-INFINITY);
  Tensor t = tensor({1500, 1999, 1000, 1234}, kInt64);
  CHECK(rel_error(cross_entropy(logits.to(kCUDA), t.to(kCUDA)).to(kCPU).to(kFloat64),
                  cross_entropy(logits.to(kFloat64), t)) <= 1e-5);
}
