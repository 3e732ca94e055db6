// Comparisons, type promotion, selection, min/max and softmax on CUDA against the
// CPU on fresh random inputs at ragged sizes: bool outputs, int64 arithmetic,
// mixed dtypes, where/masked_fill/clamp, maximum/minimum with their gradients,
// min/max over dims and of everything, softmax/log_softmax for short rows, long
// rows and columns (float32, bfloat16, float64) with their gradients.
//
// Tolerances (DESIGN.md): float32 element-wise 1e-6; softmax's row sums 1e-5 (a
// float reduction, GEMM's); bfloat16 1e-2; comparisons and integers exact.
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

double tol(DType t) {
  return t == kFloat64 ? 1e-12 : t == kFloat32 ? 1e-6 : 1e-2;
}

// Gradients of sum(f(x) * w) on CUDA (in dtype) against CPU float64 on the same
// rounded values; the largest rel_error over output and inputs.
double grad_vs_cpu(const TensorFn& f, const Inputs& inputs, DType dtype, uint64_t seed = 9) {
  Inputs cpu, gpu;
  for (const Tensor& x : inputs) {
    Tensor r = x.detach().to(dtype);
    cpu.push_back(r.to(kFloat64).detach().set_requires_grad(true));
    gpu.push_back(r.to(kCUDA).detach().set_requires_grad(true));
  }
  Tensor oc = f(cpu), og = f(gpu);
  Tensor w = randn64(oc.sizes(), seed).to(dtype);
  Inputs gc = grad({oc}, cpu, {w.to(kFloat64)});
  Inputs gg = grad({og}, gpu, {w.to(kCUDA)});
  double worst = rel_error(og.to(kCPU).to(kFloat64), oc);
  for (size_t i = 0; i < gc.size(); ++i)
    worst = std::max(worst, rel_error(gg[i].to(kCPU).to(kFloat64), gc[i]));
  return worst;
}
}  // namespace

TEST_CASE("kernels/select: comparisons give the CPU's bools, every dtype and broadcasting" *
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

TEST_CASE("kernels/select: int64 arithmetic and mixed dtypes match the CPU" *
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

TEST_CASE("kernels/select: where, masked_fill, clamp, maximum, minimum and their gradients" *
          doctest::test_suite("cuda")) {
  for (int64_t n : {int64_t{1}, int64_t{127}, int64_t{4097}})
    for (DType t : {kFloat32, kFloat64, kBFloat16}) {
      INFO("n=", n, " dtype=", t);
      Tensor cond = gt(randn64({n, 3}, 30), 0.0);
      Tensor condg = cond.to(kCUDA);
      TensorFn f_where = [cond, condg](const Inputs& v) {
        return where(v[0].is_cuda() ? condg : cond, v[0], v[1]);
      };
      TensorFn f_fill = [cond, condg](const Inputs& v) {
        return masked_fill(v[0], v[0].is_cuda() ? condg : cond, -2.5);
      };
      TensorFn f_clamp = [](const Inputs& v) { return clamp(v[0], -0.5, 0.75); };
      TensorFn f_max = [](const Inputs& v) { return maximum(v[0], v[1]); };
      TensorFn f_min = [](const Inputs& v) { return minimum(v[0], v[1].t()); };
      Tensor a = randn64({n, 3}, 31), b = randn64({3}, 32), c = randn64({3, n}, 33);
      CHECK(grad_vs_cpu(f_where, {a, b}, t) <= tol(t));
      CHECK(grad_vs_cpu(f_fill, {a}, t) <= tol(t));
      CHECK(grad_vs_cpu(f_clamp, {a}, t) <= tol(t));
      CHECK(grad_vs_cpu(f_max, {a, b}, t) <= tol(t));
      CHECK(grad_vs_cpu(f_min, {a, c}, t) <= tol(t));
    }
  // Ties split the gradient on CUDA as on the CPU.
  Tensor x = tensor({1.0, 2.0, 3.0}).to(kCUDA).detach().set_requires_grad(true);
  maximum(x, full({3}, 2.0, kCUDA)).sum().backward();
  CHECK(x.grad().to(kCPU).to_vector<double>() == std::vector<double>{0, 0.5, 1});
}

TEST_CASE("kernels/select: min, max, argmin over dims and of everything match the CPU" *
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
    CHECK(grad_vs_cpu([](const Inputs& v) { return max(v[0]); }, {x}, t) <= tol(t));
    CHECK(grad_vs_cpu([](const Inputs& v) { return min(v[0], 1).values; }, {x}, t) <= tol(t));
  }
}

TEST_CASE("kernels/select: softmax and log_softmax match the CPU for every layout" *
          doctest::test_suite("cuda")) {
  // Short rows (a warp each), long rows (a block each), and columns (inner > 1).
  const std::vector<std::pair<Shape, int64_t>> cases = {
      {{1000, 7}, 1},   {{33, 1024}, 1}, {{9, 1025}, 1},    {{4, 50000}, 1},
      {{7, 300, 5}, 1}, {{100, 3}, 0},   {{2, 3, 4097}, 2}, {{4097}, 0}};
  for (const auto& [shape, dim] : cases)
    for (DType t : {kFloat32, kFloat64, kBFloat16}) {
      INFO("shape=", shape_str(shape), " dim=", dim, " dtype=", t);
      Tensor x = randn64(shape, 50) * 4.0;
      const double tl = t == kFloat32 ? 1e-5 : tol(t);
      CHECK(cuda_vs_cpu([d = dim](const Inputs& v) { return softmax(v[0], d); }, {x}, t) <= tl);
      CHECK(cuda_vs_cpu([d = dim](const Inputs& v) { return log_softmax(v[0], d); }, {x}, t) <= tl);
      if (t != kBFloat16) {
        CHECK(grad_vs_cpu([d = dim](const Inputs& v) { return softmax(v[0], d); }, {x}, t) <= tl);
        CHECK(grad_vs_cpu([d = dim](const Inputs& v) { return log_softmax(v[0], d); }, {x}, t) <=
              tl);
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
