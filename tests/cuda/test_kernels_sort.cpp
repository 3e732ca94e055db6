// The scan and sort kernels (cuda/kernels/sort.cu) through cumsum, sort, argsort
// and topk on CUDA against the CPU reference, for what the op table's small
// samples (tests/core/op_table.cpp) do not reach: many ties (the stable order must
// be the CPU's, index for index), NaN and -0.0, long rows, many rows, one long
// line for cumsum; and multinomial's frequencies on a CUDA input (drawn on the
// host: the same samples as the CPU's). All in the "cuda" suite.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/ops.h"
#include "cuda/kernels/sort.h"
#include "gradcheck.h"

using namespace ember;
using ember::testing::rand64;
using ember::testing::randn64;

namespace {
const DType kFloatTypes[] = {kFloat32, kFloat64, kBFloat16};

// sort, argsort and topk's indices on CUDA equal the CPU's stable order over
// integer-valued keys in [-8, 8) (ties everywhere), with NaN, -0.0 and 0.0 among them,
// for every float type, both directions and both dimensions. One case per shape, so
// that tools/gpu_sanitize.sh runs them side by side (as one case they took over 417 s
// under racecheck on the H200, past a device call's deadline).
void check_stable_order(const Shape& s) {
  std::vector<double> v = rand64(s, 21, -8, 8).to_vector<double>();
  for (double& e : v) e = std::floor(e);
  for (size_t i = 0; i < v.size(); i += 13) v[i] = std::numeric_limits<double>::quiet_NaN();
  for (size_t i = 5; i < v.size(); i += 11) v[i] = -0.0;
  const Tensor x = from_vector(v, s, kFloat64);
  for (DType t : kFloatTypes)
    for (bool desc : {false, true})
      for (int64_t dim : {int64_t{-1}, int64_t{0}}) {
        CAPTURE(shape_str(s));
        CAPTURE(t);
        CAPTURE(desc);
        CAPTURE(dim);
        Tensor xc = x.to(t);
        auto [vc, ic] = sort(xc, dim, desc);
        auto [vg, ig] = sort(xc.to(kCUDA), dim, desc);
        CHECK(ig.to(kCPU).to_vector<int64_t>() == ic.to_vector<int64_t>());
        CHECK(argsort(xc.to(kCUDA), dim, desc).to(kCPU).to_vector<int64_t>() ==
              ic.to_vector<int64_t>());
        const int64_t k = std::min<int64_t>(5, x.size(dim));
        CHECK(topk(xc.to(kCUDA), k, dim, !desc).indices.to(kCPU).to_vector<int64_t>() ==
              topk(xc, k, dim, !desc).indices.to_vector<int64_t>());
      }
}

}  // namespace

TEST_CASE("kernels/sort: indices equal the CPU's stable order: small shapes" *
          doctest::test_suite("cuda")) {
  check_stable_order({1, 1});
  check_stable_order({3, 17});
}

TEST_CASE("kernels/sort: indices equal the CPU's stable order: one line of 100000" *
          doctest::test_suite("cuda")) {
  check_stable_order({1, 100000});
}

TEST_CASE("kernels/sort: indices equal the CPU's stable order: 2000 lines of 33" *
          doctest::test_suite("cuda")) {
  check_stable_order({2000, 33});
}

TEST_CASE("kernels/sort: indices equal the CPU's stable order: 7 lines of 4099" *
          doctest::test_suite("cuda")) {
  check_stable_order({7, 4099});
}

TEST_CASE("kernels/sort: values and their gradient match the CPU" * doctest::test_suite("cuda")) {
  Tensor x = randn64({300, 257}, 22);
  for (DType t : kFloatTypes) {
    CAPTURE(t);
    CHECK(ember::testing::grad_cuda_vs_cpu(
              [](const std::vector<Tensor>& v) { return sort(v[0], 1, true).values; }, {x}, t) ==
          0.0);
    CHECK(ember::testing::grad_cuda_vs_cpu(
              [](const std::vector<Tensor>& v) { return topk(v[0], 9, 0).values; }, {x}, t) == 0.0);
  }
}

TEST_CASE("kernels/cumsum: long lines, many lines, both directions of the gradient" *
          doctest::test_suite("cuda")) {
  const std::vector<std::pair<Shape, int64_t>> cases = {
      {{1, 1000000}, 1}, {{100000, 3}, 1}, {{3, 100000}, 0}, {{64, 65, 66}, 1}};
  for (const auto& [s, d] : cases) {
    CAPTURE(shape_str(s));
    Tensor x = rand64(s, 23, -1, 3);
    const int64_t dim = d;
    auto f = [dim](const std::vector<Tensor>& v) { return cumsum(v[0], dim); };
    CHECK(ember::testing::cuda_vs_cpu(f, {x}, kFloat64) < 1e-12);
    CHECK(ember::testing::cuda_vs_cpu(f, {x}, kFloat32) < 1e-6);
    CHECK(ember::testing::grad_cuda_vs_cpu(f, {x}, kFloat32) < 1e-5);
  }
}

// Pearson's statistic below 30 for 4 degrees of freedom (a chance of about 5e-6 for a
// correct sampler), as the CPU test; the draws are the CPU's for the same seed.
TEST_CASE("kernels/multinomial: a CUDA input gives the CPU's draws and their frequencies" *
          doctest::test_suite("cuda")) {
  const std::vector<double> w = {1, 2, 0, 3, 4, 0.5};
  Tensor p = from_vector(w, {6}, kFloat64);
  for (bool replacement : {true, false}) {
    CAPTURE(replacement);
    Generator gc(41), gg(41);
    Tensor rows = expand(p.unsqueeze(0), {100000, 6});
    const int64_t k = replacement ? 3 : 2;
    Tensor dc = multinomial(rows, k, replacement, &gc);
    Tensor dg = multinomial(rows.to(kCUDA), k, replacement, &gg);
    CHECK(dg.is_cuda());
    CHECK(dg.dtype() == kInt64);
    const std::vector<int64_t> got = dg.to(kCPU).to_vector<int64_t>();
    CHECK(got == dc.to_vector<int64_t>());
    std::vector<double> counts(6, 0.0);
    for (size_t r = 0; r < 100000; ++r) counts[static_cast<size_t>(got[r * k])] += 1;
    CHECK(counts[2] == 0);
    double chi2 = 0;
    for (size_t i = 0; i < 6; ++i) {
      if (w[i] == 0) continue;
      const double e = 100000 * w[i] / 10.5;
      chi2 += (counts[i] - e) * (counts[i] - e) / e;
    }
    CHECK(chi2 < 30.0);
  }
}

// The sort and scatter workspaces come from a formula of CUB's radix-sort scratch
// (cuda/kernels/radix_sort_bytes.cuh), so that the meta device predicts them without
// a GPU. It must be CUB's answer exactly: smaller and the sorts would fail, larger
// and predict_memory would still agree with CUDA but waste bytes the formula claims
// CUB needs. Counts around the single-tile limit, the one-sweep tile and portion
// (2^28 elements), and every end bit the kernels use (the query allocates nothing).
TEST_CASE("kernels/sort: the radix-sort scratch formula equals CUB's query" *
          doctest::test_suite("cuda")) {
  // 2304 and 4608: the single tile and the one-sweep tile of 64-bit pairs on sm_90;
  // 268434432: a portion (the largest multiple of the tile below 2^28).
  std::vector<int64_t> counts = {1,    2,    100,  2303,   2304,    2305,
                                 4863, 4864, 4865, 100000, 1000000, 12345678};
  for (int64_t p : {int64_t{268434432}, int64_t{1} << 28, int64_t{3} << 28})
    for (int64_t d : {-4609, -1, 0, 1, 4609}) counts.push_back(p + d);
  for (int64_t tile : {int64_t{4608}, int64_t{6144}, int64_t{9216}})
    for (int64_t m : {1, 2, 3, 64})
      for (int64_t d : {-1, 0, 1}) counts.push_back(tile * m + d);
  int checked = 0;
  for (int64_t n : counts)
    for (int end_bit : {1, 2, 7, 8, 9, 16, 17, 24, 33, 63, 64}) {
      CAPTURE(n);
      CAPTURE(end_bit);
      CHECK(cuda::radix_scratch_formula_bytes(n, end_bit) ==
            cuda::radix_scratch_cub_bytes(n, end_bit));
      ++checked;
    }
  MESSAGE("radix-sort scratch: ", checked, " (count, end bit) pairs checked against CUB");
}
