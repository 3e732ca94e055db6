// The CPU's float32 approximations (cpu_elementwise.h): GELU forward and backward
// in float, the tanh form through cpu_vec.h's exp, the exact form through the C
// library's erfcf and expf; contiguous operands, elements over the thread pool; the registered
// element-wise kernels take them first when cpu::fast_paths(). Each element alone: the same bits at
// every thread count.
#include <cmath>
#include <cstdint>

#include "core/kernels/cpu_elementwise.h"
#include "core/kernels/cpu_parallel.h"
#include "core/kernels/cpu_vec.h"

namespace ember::kernels::cpu {

namespace {

// The contiguous float32 elements of an operand, or null.
const float* floats(const void* base, const StridedLayout& l) {
  return l.contiguous ? static_cast<const float*>(base) + l.offset : nullptr;
}

// a and b (n floats each) are the same or disjoint.
bool same_or_disjoint(const float* a, const float* b, int64_t n) {
  return a == b || a + n <= b || b + n <= a;
}

constexpr float kInvSqrt2 = 0.70710678118654752f;    // 1 / sqrt(2)
constexpr float kInvSqrt2Pi = 0.39894228040143268f;  // 1 / sqrt(2 pi)

EMBER_CPU_CLONES void gelu_range(const float* x, float* y, int64_t lo, int64_t hi) {
  for (int64_t i = lo; i < hi; ++i) {
    float u, s, oms;
    vec::gelu_parts(x[i], u, s, oms);
    y[i] = x[i] * s;
  }
}

EMBER_CPU_CLONES void gelu_backward_range(const float* g, const float* x, float* out, int64_t lo,
                                          int64_t hi) {
  for (int64_t i = lo; i < hi; ++i) {
    const float xv = x[i];
    float u, s, oms;
    vec::gelu_parts(xv, u, s, oms);
    const float du = 0.7978845608f * (1.0f + 3.0f * 0.044715f * xv * xv);
    out[i] = g[i] * (s + xv * 2.0f * s * oms * du);
  }
}

}  // namespace

bool unary_float_approx(const UnaryArgs& a) {
  const bool exact = a.op == UnaryOp::Gelu;
  if ((!exact && a.op != UnaryOp::GeluTanh) || a.dtype != DType::Float32 ||
      a.out_dtype != DType::Float32)
    return false;
  const float* x = floats(a.x, a.xl);
  float* y = const_cast<float*>(floats(a.y, a.yl));
  if (!x || !y || !same_or_disjoint(x, y, a.n)) return false;
  parallel_for(a.n, kElementwiseGrain / 4, [&](int64_t lo, int64_t hi) {
    if (exact) {
      for (int64_t i = lo; i < hi; ++i) y[i] = 0.5f * x[i] * std::erfc(-kInvSqrt2 * x[i]);
      return;
    }
    gelu_range(x, y, lo, hi);
  });
  return true;
}

bool unary_backward_float_approx(const UnaryBackwardArgs& a) {
  const bool exact = a.op == UnaryOp::Gelu;
  if ((!exact && a.op != UnaryOp::GeluTanh) || a.dtype != DType::Float32) return false;
  const float* g = floats(a.g, a.gl);
  const float* x = floats(a.s, a.sl);
  float* out = const_cast<float*>(floats(a.out, a.ol));
  if (!g || !x || !out || !same_or_disjoint(g, out, a.n) || !same_or_disjoint(x, out, a.n))
    return false;
  parallel_for(a.n, kElementwiseGrain / 4, [&](int64_t lo, int64_t hi) {
    if (exact) {  // Phi(x) + x phi(x)
      for (int64_t i = lo; i < hi; ++i) {
        const float xv = x[i];
        const float cdf = 0.5f * std::erfc(-kInvSqrt2 * xv);
        out[i] = g[i] * (cdf + xv * kInvSqrt2Pi * std::exp(-0.5f * xv * xv));
      }
      return;
    }
    gelu_backward_range(g, x, out, lo, hi);
  });
  return true;
}

}  // namespace ember::kernels::cpu
