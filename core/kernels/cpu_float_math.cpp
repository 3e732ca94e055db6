// The CPU's float32 approximations (cpu_elementwise.h): GELU (tanh) forward and
// backward in float through cpu_vec.h's exp, contiguous operands, elements over the
// thread pool; the registered element-wise kernels take them first when
// cpu::fast_paths(). Each element alone: the same bits at every thread count.
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
  if (a.op != UnaryOp::Gelu || a.dtype != DType::Float32 || a.out_dtype != DType::Float32)
    return false;
  const float* x = floats(a.x, a.xl);
  float* y = const_cast<float*>(floats(a.y, a.yl));
  if (!x || !y || !same_or_disjoint(x, y, a.n)) return false;
  parallel_for(a.n, kElementwiseGrain / 4,
               [&](int64_t lo, int64_t hi) { gelu_range(x, y, lo, hi); });
  return true;
}

bool unary_backward_float_approx(const UnaryBackwardArgs& a) {
  if (a.op != UnaryOp::Gelu || a.dtype != DType::Float32) return false;
  const float* g = floats(a.g, a.gl);
  const float* x = floats(a.s, a.sl);
  float* out = const_cast<float*>(floats(a.out, a.ol));
  if (!g || !x || !out || !same_or_disjoint(g, out, a.n) || !same_or_disjoint(x, out, a.n))
    return false;
  parallel_for(a.n, kElementwiseGrain / 4,
               [&](int64_t lo, int64_t hi) { gelu_backward_range(g, x, out, lo, hi); });
  return true;
}

}  // namespace ember::kernels::cpu
