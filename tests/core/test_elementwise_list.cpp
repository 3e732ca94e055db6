// The test table of the element-wise ops, generated from the lists of
// core/base/elementwise_ops.h: every entry, as it is added, gets
//  - its hand-computed value (the entry's `at` and `value`), through the free
//    function and the Tensor method, on the CPU in float64;
//  - gradcheck (float64 finite differences) on inputs drawn from its interval,
//    for differentiable entries, with broadcasting for binary ones;
//  - CUDA against the CPU reference, forward and backward, in float32, float64
//    and bfloat16 at ragged sizes (suite "cuda": skipped, not passed, without a GPU).
// Comparisons (Saves::Bool, Reads::Bool) give bool tensors and have no gradient.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/base/elementwise_ops.h"
#include "core/ops.h"
#include "gradcheck.h"

using namespace ember;
using ember::testing::rand64;
using ember::testing::rel_error;

namespace {

struct UnaryCase {
  const char* name;
  Tensor (*fn)(const Tensor&);
  Tensor (*method)(const Tensor&);
  double lo, hi, a, at, value;
  bool differentiable;
  bool boolean;  // a comparison: its output is bool
};

#define EMBER_UNARY_CASE(name, Enum, act, saves, fwd, bwd, lo, hi, at, value) \
  UnaryCase{#name,                                                            \
            [](const Tensor& t) { return ember::name(t); },                   \
            [](const Tensor& t) { return t.name(); },                         \
            lo,                                                               \
            hi,                                                               \
            0.0,                                                              \
            at,                                                               \
            value,                                                            \
            Saves::saves != Saves::NoGrad && Saves::saves != Saves::Bool,     \
            Saves::saves == Saves::Bool},
#define EMBER_SCALAR_CASE(name, Enum, saves, fwd, bwd, lo, hi, a, at, value) \
  UnaryCase{#name "(a=" #a ")",                                              \
            [](const Tensor& t) { return ember::name(t, a); },               \
            [](const Tensor& t) { return t.name(a); },                       \
            lo,                                                              \
            hi,                                                              \
            a,                                                               \
            at,                                                              \
            value,                                                           \
            Saves::saves != Saves::NoGrad && Saves::saves != Saves::Bool,    \
            Saves::saves == Saves::Bool},
const UnaryCase kUnaryCases[] = {EMBER_UNARY_OPS(EMBER_UNARY_CASE)
                                     EMBER_SCALAR_OPS(EMBER_SCALAR_CASE)};
#undef EMBER_UNARY_CASE
#undef EMBER_SCALAR_CASE

struct BinaryCase {
  const char* name;
  Tensor (*fn)(const Tensor&, const Tensor&);
  Tensor (*method)(const Tensor&, const Tensor&);
  double lo, hi, at_x, at_y, value;
  bool boolean;  // a comparison: bool output, no gradient
};
#define EMBER_BINARY_CASE(name, Enum, fwd, dx, dy, dx_reads, dy_reads, lo, hi, at_x, at_y, value) \
  BinaryCase{#name,                                                                               \
             [](const Tensor& x, const Tensor& y) { return ember::name(x, y); },                  \
             [](const Tensor& x, const Tensor& y) { return x.name(y); },                          \
             lo,                                                                                  \
             hi,                                                                                  \
             at_x,                                                                                \
             at_y,                                                                                \
             value,                                                                               \
             Reads::dx_reads == Reads::Bool},
const BinaryCase kBinaryCases[] = {EMBER_BINARY_OPS(EMBER_BINARY_CASE)};
#undef EMBER_BINARY_CASE

const std::vector<int64_t> kRagged = {1, 7, 127, 4097};
const DType kDTypes[] = {kFloat32, kFloat64, kBFloat16};

// DESIGN.md's thresholds for element-wise results. Gradients in float32 get 1e-5:
// a derivative that reads the saved output (tanh's 1 - y^2, sigmoid's y (1 - y))
// amplifies y's float rounding where the factor is small (|y| near 1), which the
// CPU reference, computing y in double, does not see.
double tol_for(DType t) {
  return t == kFloat64 ? 1e-12 : t == kFloat32 ? 1e-6 : 1e-2;
}
double grad_tol_for(DType t) {
  return t == kFloat32 ? 1e-5 : tol_for(t);
}

// Output and input gradients of f on CUDA in `dtype` against the CPU in float64 on
// the same rounded values; the largest rel_error of all of them.
// Checks f on CUDA in `dtype` against the CPU in float64 on the same rounded values:
// the output at tol_for(dtype), and (with_grad) each input's gradient at
// grad_tol_for(dtype).
void check_cuda_vs_cpu(const ember::testing::TensorFn& f, const std::vector<Tensor>& inputs,
                       DType dtype, bool with_grad, uint64_t seed) {
  std::vector<Tensor> cpu, gpu;
  for (const Tensor& x : inputs) {
    Tensor r = x.detach().to(dtype);
    Tensor c = r.to(kFloat64), g = r.to(kCUDA);
    if (with_grad) {
      c.set_requires_grad(true);
      g.set_requires_grad(true);
    }
    cpu.push_back(c);
    gpu.push_back(g);
  }
  Tensor out_cpu = f(cpu), out_gpu = f(gpu);
  REQUIRE(out_gpu.is_cuda());
  REQUIRE(out_gpu.dtype() == (out_cpu.dtype() == kBool ? kBool : dtype));
  CHECK(rel_error(out_gpu.to(kCPU).to(kFloat64), out_cpu) <= tol_for(dtype));
  if (!with_grad) return;
  Tensor w = ember::testing::randn64(out_cpu.sizes(), seed).to(dtype);
  std::vector<Tensor> g_cpu = grad({out_cpu}, cpu, {w.to(kFloat64)});
  std::vector<Tensor> g_gpu = grad({out_gpu}, gpu, {w.to(kCUDA)});
  for (size_t i = 0; i < cpu.size(); ++i) {
    CAPTURE(i);
    REQUIRE(g_gpu[i].defined());
    CHECK(g_gpu[i].is_cuda());
    CHECK(g_gpu[i].dtype() == dtype);
    CHECK(rel_error(g_gpu[i].to(kCPU).to(kFloat64), g_cpu[i]) <= grad_tol_for(dtype));
  }
}

}  // namespace

TEST_CASE("ops/list: every element-wise op gives its hand-computed value") {
  for (const UnaryCase& c : kUnaryCases) {
    CAPTURE(std::string(c.name));
    const Tensor x = tensor({c.at}, kFloat64);
    CHECK(c.fn(x).item() == doctest::Approx(c.value).epsilon(1e-12));
    CHECK(c.method(x).item() == doctest::Approx(c.value).epsilon(1e-12));
    CHECK(c.fn(x).dtype() == (c.boolean ? kBool : kFloat64));
  }
  for (const BinaryCase& c : kBinaryCases) {
    CAPTURE(std::string(c.name));
    const Tensor x = tensor({c.at_x}, kFloat64), y = tensor({c.at_y}, kFloat64);
    CHECK(c.fn(x, y).item() == doctest::Approx(c.value).epsilon(1e-12));
    CHECK(c.method(x, y).item() == doctest::Approx(c.value).epsilon(1e-12));
    CHECK(c.fn(x, y).dtype() == (c.boolean ? kBool : kFloat64));
  }
}

TEST_CASE("ops/list: every differentiable element-wise op passes gradcheck") {
  uint64_t seed = 1;
  for (const UnaryCase& c : kUnaryCases) {
    CAPTURE(std::string(c.name));
    const Tensor x = rand64({3, 4}, ++seed, c.lo, c.hi);
    if (!c.differentiable) {
      Tensor leaf = x.detach().set_requires_grad(true);
      CHECK_FALSE(c.fn(leaf).requires_grad());  // no graph for a non-differentiable op
      continue;
    }
    CHECK_GRADCHECK([&](const std::vector<Tensor>& v) { return c.fn(v[0]); }, {x});
  }
  for (const BinaryCase& c : kBinaryCases) {
    CAPTURE(std::string(c.name));
    // Same shapes, then each side broadcast (its gradient is summed back).
    const Tensor x = rand64({3, 4}, ++seed, c.lo, c.hi), y = rand64({3, 4}, ++seed, c.lo, c.hi);
    const Tensor row = rand64({4}, ++seed, c.lo, c.hi), col = rand64({3, 1}, ++seed, c.lo, c.hi);
    auto f = [&](const std::vector<Tensor>& v) { return c.fn(v[0], v[1]); };
    if (c.boolean) {
      Tensor leaf = x.detach().set_requires_grad(true);
      CHECK_FALSE(c.fn(leaf, y).requires_grad());
      continue;
    }
    CHECK_GRADCHECK(f, {x, y});
    CHECK_GRADCHECK(f, {x, row});
    CHECK_GRADCHECK(f, {col, y});
  }
}

TEST_CASE(
    "ops/list: every element-wise op on CUDA matches the CPU reference, forward and "
    "backward" *
    doctest::test_suite("cuda")) {
  uint64_t seed = 100;
  for (const UnaryCase& c : kUnaryCases)
    for (int64_t n : kRagged)
      for (DType t : kDTypes) {
        CAPTURE(std::string(c.name));
        CAPTURE(n);
        CAPTURE(t);
        const Tensor x = rand64({n}, ++seed, c.lo, c.hi);
        check_cuda_vs_cpu([&](const std::vector<Tensor>& v) { return c.fn(v[0]); }, {x}, t,
                          c.differentiable, seed);
      }
  for (const BinaryCase& c : kBinaryCases)
    for (int64_t n : kRagged)
      for (DType t : kDTypes) {
        CAPTURE(std::string(c.name));
        CAPTURE(n);
        CAPTURE(t);
        auto f = [&](const std::vector<Tensor>& v) { return c.fn(v[0], v[1]); };
        const Tensor x = rand64({n, 3}, ++seed, c.lo, c.hi), y = rand64({n, 3}, ++seed, c.lo, c.hi);
        const Tensor row = rand64({3}, ++seed, c.lo, c.hi);
        check_cuda_vs_cpu(f, {x, y}, t, !c.boolean, seed);
        check_cuda_vs_cpu(f, {x, row}, t, !c.boolean, seed);
        check_cuda_vs_cpu(f, {x.t(), y.t()}, t, !c.boolean, seed);
      }
}
