// The test harness every ember test binary shares (header-only):
//  - gradcheck: autograd's gradients against central finite differences, in
//    float64 on CPU, naming the input and element that disagree;
//  - rel_error: ||out - ref|| / ||ref|| in double, +inf for any NaN;
//  - same_bits: the same dtype, shape and bytes (bit-for-bit results, NaNs included);
//  - cuda_vs_cpu, grad_cuda_vs_cpu: an op (and its gradients) on CUDA against the
//    CPU reference on the same values;
//  - check_close: a tensor's elements against hand-computed values, each to `tol`;
//  - strided_layout: a kernel's StridedLayout over given sizes and strides (the copy
//    plans' tests);
//  - dropout_mask: the documented dropout mask, the reference of every dropout test.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/base/layout.h"
#include "core/base/random.h"
#include "core/ops.h"
#include "core/tensor.h"

namespace ember::testing {

using TensorFn = std::function<Tensor(const std::vector<Tensor>&)>;

// ||out - ref||_2 / ||ref||_2 computed in double. +inf when the shapes differ or
// either side holds a NaN (a NaN never passes); equal infinities count as equal.
// When ref is all zeros, the absolute norm ||out - ref|| is returned.
inline double rel_error(const Tensor& out, const Tensor& ref) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  if (!out.defined() || !ref.defined() || out.sizes() != ref.sizes()) return kInf;
  const std::vector<double> o = out.to_vector<double>();
  const std::vector<double> r = ref.to_vector<double>();
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < o.size(); ++i) {
    if (std::isnan(o[i]) || std::isnan(r[i])) return kInf;
    if (o[i] == r[i]) {
      if (std::isfinite(r[i])) den += r[i] * r[i];
      continue;
    }
    const double d = o[i] - r[i];
    num += d * d;
    den += r[i] * r[i];
  }
  if (num == 0.0) return 0.0;
  return den == 0.0 ? std::sqrt(num) : std::sqrt(num) / std::sqrt(den);
}

// Whether a and b have the same dtype, shape and bytes, on whatever device (both
// undefined counts as the same).
inline bool same_bits(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined()) return a.defined() == b.defined();
  if (a.dtype() != b.dtype() || a.sizes() != b.sizes()) return false;
  const Tensor ca = a.to(kCPU).contiguous(), cb = b.to(kCPU).contiguous();
  return ca.nbytes() == 0 || std::memcmp(ca.raw_data(), cb.raw_data(), ca.nbytes()) == 0;
}

// Row-major multi-index of element `linear` in `sizes`, as "[i, j, ...]".
inline std::string index_str(const Shape& sizes, int64_t linear) {
  Shape idx(sizes.size());
  for (size_t d = sizes.size(); d-- > 0;) {
    idx[d] = sizes[d] ? linear % sizes[d] : 0;
    linear = sizes[d] ? linear / sizes[d] : 0;
  }
  return shape_str(idx);
}

struct GradcheckResult {
  bool ok = true;
  double max_error = 0.0;  // max over elements of |auto - numeric| / max(1, |auto|, |numeric|)
  std::string message;     // what failed, naming the input and element
};

// Checks d/dx_i of sum(f(x) * w), w fixed random weights, for every element of
// every input. Inputs must be float64 CPU tensors; f receives fresh contiguous
// leaves that require grad (it may take views of them). Autograd's gradient comes
// from ember::grad with w as the output gradient; the numeric one from central
// differences with step eps.
inline GradcheckResult gradcheck(const TensorFn& f, const std::vector<Tensor>& inputs,
                                 double eps = 1e-6, double tol = 1e-6, uint64_t seed = 7) {
  GradcheckResult res;
  auto fail = [&res](const std::string& msg) {
    res.ok = false;
    res.message = msg;
    return res;
  };
  std::vector<Tensor> leaves;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& x = inputs[i];
    if (x.dtype() != kFloat64 || !x.is_cpu())
      return fail("gradcheck: input " + std::to_string(i) + " must be a float64 CPU tensor");
    Tensor leaf = x.detach().clone();
    leaf.set_requires_grad(true);
    leaves.push_back(leaf);
  }
  Tensor out = f(leaves);
  if (!out.defined() || out.dtype() != kFloat64 || !out.is_cpu())
    return fail("gradcheck: f must return a float64 CPU tensor");
  if (!out.requires_grad()) return fail("gradcheck: the output does not require grad");

  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(0.5, 1.5);
  std::vector<double> w(static_cast<size_t>(out.numel()));
  for (double& v : w) v = (rng() & 1 ? 1.0 : -1.0) * dist(rng);
  const Tensor weights = from_vector(w, out.sizes(), kFloat64);
  const Shape out_sizes = out.sizes();

  const std::vector<Tensor> grads = grad({out}, leaves, {weights});
  out = Tensor();

  auto weighted_sum = [&]() {
    NoGradGuard ng;
    Tensor o = f(leaves);
    if (o.sizes() != out_sizes) return std::numeric_limits<double>::quiet_NaN();
    const std::vector<double> v = o.to_vector<double>();
    double s = 0.0;
    for (size_t j = 0; j < v.size(); ++j) s += v[j] * w[j];
    return s;
  };

  for (size_t i = 0; i < leaves.size(); ++i) {
    const Tensor& x = leaves[i];
    const Tensor& g = grads[i];
    if (!g.defined() || g.sizes() != x.sizes() || g.dtype() != kFloat64)
      return fail("gradcheck: autograd gave input " + std::to_string(i) +
                  " a gradient of the wrong shape or dtype (shape " +
                  (g.defined() ? shape_str(g.sizes()) : std::string("undefined")) + ", input " +
                  shape_str(x.sizes()) + ")");
    const std::vector<double> analytic = g.to_vector<double>();
    double* data = x.data_ptr<double>();
    for (int64_t j = 0; j < x.numel(); ++j) {
      const double orig = data[j];
      data[j] = orig + eps;
      const double plus = weighted_sum();
      data[j] = orig - eps;
      const double minus = weighted_sum();
      data[j] = orig;
      const double numeric = (plus - minus) / (2 * eps);
      const double a = analytic[static_cast<size_t>(j)];
      const double err = std::abs(a - numeric) / std::max({1.0, std::abs(a), std::abs(numeric)});
      if (!(err <= tol) || std::isnan(a) || std::isnan(numeric)) {
        std::ostringstream os;
        os << "gradcheck: input " << i << " (shape " << shape_str(x.sizes()) << ") element "
           << index_str(x.sizes(), j) << ": autograd " << a << " vs finite difference " << numeric
           << " (error " << err << ", tolerance " << tol << ")";
        res.max_error = std::isnan(err) ? err : std::max(res.max_error, err);
        return fail(os.str());
      }
      res.max_error = std::max(res.max_error, err);
    }
  }
  return res;
}

// Float64 CPU tensor of standard normals (or uniform in [lo, hi)), seeded.
inline Tensor randn64(const Shape& sizes, uint64_t seed) {
  Generator gen(seed);
  return randn(sizes, kFloat64, &gen);
}
// Dropout's documented mask (core/base/random.h) over n elements: element i is kept
// iff dropout_keeps(seed, offset + i, dropout_threshold(p)), and holds `kept` (1, or the
// 1 / (1 - p) scale), else 0.
inline std::vector<double> dropout_mask(uint64_t seed, uint64_t offset, int64_t n, double p,
                                        double kept = 1.0) {
  std::vector<double> m;
  m.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    m.push_back(dropout_keeps(seed, offset + static_cast<uint64_t>(i), dropout_threshold(p)) ? kept
                                                                                             : 0.0);
  return m;
}

inline Tensor rand64(const Shape& sizes, uint64_t seed, double lo = 0.0, double hi = 1.0) {
  Generator gen(seed);
  Tensor t = empty(sizes, kFloat64);
  uniform_(t, lo, hi, &gen);
  return t;
}

// Runs f on CUDA copies of `inputs` converted to `dtype`, and on CPU float64
// copies of the same (already rounded to `dtype`) values, and returns
// rel_error(cuda result, cpu reference): only the CUDA arithmetic is measured.
inline double cuda_vs_cpu(const TensorFn& f, const std::vector<Tensor>& inputs, DType dtype,
                          int device = 0) {
  std::vector<Tensor> on_cpu, on_cuda;
  for (const Tensor& x : inputs) {
    Tensor rounded = x.detach().to(dtype);
    on_cpu.push_back(rounded.to(kFloat64));
    on_cuda.push_back(rounded.to(Device::cuda(device)));
  }
  Tensor ref = f(on_cpu);
  Tensor out = f(on_cuda);
  if (!out.defined() || !out.is_cuda()) return std::numeric_limits<double>::infinity();
  return rel_error(out.to(kCPU).to(kFloat64), ref);
}

// Gradients of sum(f(x) * w) on CUDA (in dtype) against CPU float64 on the same
// rounded values: the largest rel_error over the output and every input's
// gradient (+inf when a gradient is not a CUDA tensor of dtype).
inline double grad_cuda_vs_cpu(const TensorFn& f, const std::vector<Tensor>& inputs, DType dtype,
                               uint64_t seed = 99) {
  std::vector<Tensor> cpu, gpu;
  for (const Tensor& x : inputs) {
    Tensor r = x.detach().to(dtype);
    cpu.push_back(r.to(kFloat64).detach().set_requires_grad(true));
    gpu.push_back(r.to(kCUDA).detach().set_requires_grad(true));
  }
  Tensor out_cpu = f(cpu);
  Tensor out_gpu = f(gpu);
  Tensor w = randn64(out_cpu.sizes(), seed).to(dtype);
  std::vector<Tensor> g_cpu = grad({out_cpu}, cpu, {w.to(kFloat64)});
  std::vector<Tensor> g_gpu = grad({out_gpu}, gpu, {w.to(kCUDA)});
  double worst = rel_error(out_gpu.to(kCPU).to(kFloat64), out_cpu);
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!g_gpu[i].defined() || !g_gpu[i].is_cuda() || g_gpu[i].dtype() != dtype)
      return std::numeric_limits<double>::infinity();
    worst = std::max(worst, rel_error(g_gpu[i].to(kCPU).to(kFloat64), g_cpu[i]));
  }
  return worst;
}

// Every element of t against the hand-computed `want`, each to relative `tol`.
inline void check_close(const Tensor& t, const std::vector<double>& want, double tol = 1e-12) {
  const std::vector<double> got = t.to_vector<double>();
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    CHECK(got[i] == doctest::Approx(want[i]).epsilon(tol));
  }
}

// A StridedLayout over sizes with the given strides (in the tensor's logical order),
// marked contiguous where every dimension of size above 1 has its dense stride.
inline StridedLayout strided_layout(const Shape& sizes, const Shape& strides, int64_t offset = 0) {
  StridedLayout l{};
  l.ndim = static_cast<int>(sizes.size());
  const Shape dense = contiguous_strides(sizes);
  l.contiguous = true;
  for (int d = 0; d < l.ndim; ++d) {
    l.sizes[d] = sizes[d];
    l.strides[d] = strides[d];
    if (sizes[d] != 1 && strides[d] != dense[d]) l.contiguous = false;
  }
  l.offset = offset;
  return l;
}

}  // namespace ember::testing

// CHECKs that gradcheck passes, printing which input and element failed.
#define CHECK_GRADCHECK(...)                                         \
  do {                                                               \
    const auto ember_gc_ = ::ember::testing::gradcheck(__VA_ARGS__); \
    CHECK_MESSAGE(ember_gc_.ok, ember_gc_.message);                  \
  } while (0)
