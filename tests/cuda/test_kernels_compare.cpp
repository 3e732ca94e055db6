// Comparisons and type promotion on CUDA against the CPU on fresh random inputs
// at ragged sizes: bool outputs of every comparison with ties, in every dtype
// and broadcast; int64 arithmetic and mixed dtypes; maximum's gradient on ties.
// (The op table, tests/core/op_table.cpp, checks every comparison, where,
// masked_fill, clamp, maximum and minimum with their gradients against the CPU;
// min/max over dims are in test_kernels_reduce.cpp, softmax in
// test_kernels_softmax.cpp.) Comparisons and integers are exact; float32 1e-6.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "core/autograd.h"
#include "core/ops.h"
#include "gradcheck.h"

using namespace ember;
using ember::testing::cuda_vs_cpu;
using ember::testing::randn64;
using ember::testing::rel_error;
using ember::testing::TensorFn;

namespace {
using Inputs = std::vector<Tensor>;
const std::vector<int64_t> kRagged = {1, 7, 127, 4097};

}  // namespace

TEST_CASE("kernels/compare: comparisons give the CPU's bools, every dtype and broadcasting" *
          doctest::test_suite("cuda")) {
  uint64_t seed = 1;
  for (int64_t n : kRagged)
    for (DType t : {kFloat32, kBFloat16, kFloat64, kInt64}) {
      INFO("n=", n, " dtype=", t);
      // Few distinct values, so that equal pairs occur.
      Tensor a = (randn64({n, 3}, ++seed) * 2.0).to(kInt64).to(t);
      Tensor b = (randn64({3}, ++seed) * 2.0).to(kInt64).to(t);
      Tensor ag = a.to(kCUDA), bg = b.to(kCUDA);
      auto same = [](const Tensor& g, const Tensor& c) {
        return g.dtype() == kBool && g.to(kCPU).to_vector<bool>() == c.to_vector<bool>();
      };
      CHECK(same(eq(ag, bg), eq(a, b)));
      CHECK(same(ne(ag, bg), ne(a, b)));
      CHECK(same(lt(ag, bg), lt(a, b)));
      CHECK(same(le(ag, bg), le(a, b)));
      CHECK(same(gt(ag, bg), gt(a, b)));
      CHECK(same(ge(ag, bg), ge(a, b)));
      CHECK(same(ge(ag, 0.5), ge(a, 0.5)));
      CHECK(same(eq(ag, 1), eq(a, 1)));
      CHECK(same(lt(ag.t(), 0), lt(a.t(), 0)));
    }
}

TEST_CASE("kernels/compare: int64 arithmetic and mixed dtypes match the CPU" *
          doctest::test_suite("cuda")) {
  for (int64_t n : kRagged) {
    INFO("n=", n);
    Tensor i = (randn64({n}, 20) * 1000.0).to(kInt64), j = (randn64({n}, 21) * 50.0).to(kInt64);
    Tensor ig = i.to(kCUDA), jg = j.to(kCUDA);
    auto ints = [](const Tensor& t) { return t.to(kCPU).to_vector<int64_t>(); };
    CHECK(ints(ig + jg) == ints(i + j));
    CHECK(ints(ig * jg - 3) == ints(i * j - 3));
    CHECK(ints(maximum(ig, jg)) == ints(maximum(i, j)));
    CHECK(ints(abs(-ig)) == ints(abs(-i)));
    CHECK(ints(clamp(ig, -100, 100)) == ints(clamp(i, -100, 100)));
    CHECK(sum(ig).item<int64_t>() == sum(i).item<int64_t>());
    CHECK(sum(gt(ig, 0)).item<int64_t>() == sum(gt(i, 0)).item<int64_t>());
    CHECK((ig / jg).dtype() == kFloat32);
    Tensor f = randn64({n}, 22).to(kFloat32), h = randn64({n}, 23).to(kBFloat16);
    CHECK(rel_error((ig + f.to(kCUDA)).to(kCPU).to(kFloat64), (i + f).to(kFloat64)) <= 1e-6);
    CHECK(rel_error((f.to(kCUDA) * h.to(kCUDA)).to(kCPU).to(kFloat64),
                    (f.to(kFloat64) * h.to(kFloat64))) <= 1e-6);
    CHECK((f.to(kCUDA) * h.to(kCUDA)).dtype() == kFloat32);
  }
}

TEST_CASE("kernels/compare: maximum's gradient is split on ties, on CUDA as on the CPU" *
          doctest::test_suite("cuda")) {
  Tensor x = tensor({1.0, 2.0, 3.0}).to(kCUDA).detach().set_requires_grad(true);
  maximum(x, full({3}, 2.0, kCUDA)).sum().backward();
  CHECK(x.grad().to(kCPU).to_vector<double>() == std::vector<double>{0, 0.5, 1});
}
