// Multi-tensor calls (one launch over many tensors, as nn::utils::clip_grad_norm_
// makes): the tensors as raw spans, and the vector norm of all their elements
// taken together, element by element: what each element adds, how partial
// results combine and how the total becomes the norm. Shared by the CPU loop and
// the CUDA kernels (core/kernels/cpu_multi_tensor.cpp, cuda/kernels/multi_tensor.cu),
// in double.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/base/dtype.h"
#include "core/base/hd.h"

namespace ember {

// One contiguous tensor of a multi-tensor call (float32, float64 or bfloat16).
struct TensorSpan {
  void* data = nullptr;
  int64_t numel = 0;
  DType dtype = DType::Float32;
};

enum class NormKind : int { Zero, One, Two, Inf, P };

inline NormKind norm_kind(double p) {
  if (p == 0) return NormKind::Zero;
  if (p == 1) return NormKind::One;
  if (p == 2) return NormKind::Two;
  if (std::isinf(p)) return NormKind::Inf;
  return NormKind::P;
}

// The partial result of no element.
EMBER_HD double norm_identity() {
  return 0.0;
}

// NaN wins, so a NaN gradient gives a NaN norm (as PyTorch's max does).
EMBER_HD double nan_max(double a, double b) {
  if (a != a) return a;
  if (b != b) return b;
  return a > b ? a : b;
}

// What element x adds: |x|^p (x^2, |x|), |x| for the max, 1 if x != 0 for p = 0.
EMBER_HD double norm_term(NormKind k, double p, double x) {
  switch (k) {
    case NormKind::Zero:
      return x != 0.0 ? 1.0 : 0.0;  // NaN != 0: counted
    case NormKind::One:
      return x < 0 ? -x : x;
    case NormKind::Two:
      return x * x;
    case NormKind::Inf:
      return x < 0 ? -x : x;
    case NormKind::P: {
      using std::fabs;
      using std::pow;
      return pow(fabs(x), p);
    }
  }
  return 0.0;
}

// Two partial results as one.
EMBER_HD double norm_combine(NormKind k, double a, double b) {
  return k == NormKind::Inf ? nan_max(a, b) : a + b;
}

// The norm from the combined terms.
EMBER_HD double norm_finish(NormKind k, double p, double total) {
  using std::pow;
  using std::sqrt;
  switch (k) {
    case NormKind::Two:
      return sqrt(total);
    case NormKind::P:
      return pow(total, 1.0 / p);
    default:
      return total;
  }
}

// clip_grad_norm_'s coefficient: the gradients are multiplied by it.
EMBER_HD double clip_coefficient(double max_norm, double total_norm) {
  const double c = max_norm / (total_norm + 1e-6);
  return c < 1.0 || c != c ? c : 1.0;  // NaN stays NaN, as torch.clamp(max=1) keeps it
}

}  // namespace ember
