// CPU softmax and log_softmax over the middle axis of (outer, n, inner): the
// reference in double (the oracle for cuda/kernels/softmax.cu and for the fast
// path), and, when cpu::fast_paths(), float32 rows (inner 1) in float with
// vectorised loops (cpu_vec.h), rows spread over the thread pool. The fused layer
// norm: float32 only and only on the fast path (the composed op is the reference);
// rows in float with sums over fixed lanes, d_w and d_b summed per chunk of rows in
// double and the chunks combined in order. The fused cross-entropy: float32 only
// and only on the fast path (the composed log_softmax + nll_loss is the
// reference): rows over the pool, each row's log-sum-exp in float with sums over
// fixed lanes, its loss in double, the losses reduced in row order on the calling
// thread (the same bits at every thread count).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/base/error.h"
#include "core/base/random.h"
#include "core/kernels/cpu_loops.h"
#include "core/kernels/cpu_parallel.h"
#include "core/kernels/cpu_vec.h"
#include "core/kernels/registration.h"

namespace ember::kernels {

namespace {

using detail::dispatch_cpu;
using detail::load_as_double;
using detail::store_from_double;

// Rows of `cols` elements per chunk of the pool: about kElementwiseGrain elements.
int64_t row_grain(int64_t cols) {
  return std::max<int64_t>(1, cpu::kElementwiseGrain / 4 / std::max<int64_t>(1, cols));
}

EMBER_CPU_CLONES void softmax_rows(const SoftmaxArgs& a, int64_t lo, int64_t hi) {
  const float* x = static_cast<const float*>(a.x);
  float* y = static_cast<float*>(a.y);
  const int64_t n = a.n;
  {
    for (int64_t r = lo; r < hi; ++r) {
      const float* xr = x + r * n;
      float* yr = y + r * n;
      bool nan = false;
      const float m = cpu::vec::max(xr, n, nan);
      if (nan || !std::isfinite(m)) {  // as the reference: x - m is NaN somewhere
        std::fill(yr, yr + n, std::numeric_limits<float>::quiet_NaN());
        continue;
      }
      for (int64_t k = 0; k < n; ++k) yr[k] = cpu::vec::exp_nonpositive(xr[k] - m);
      const double s = cpu::vec::sum(yr, n);
      if (a.log) {
        const float log_s = static_cast<float>(std::log(s));
        for (int64_t k = 0; k < n; ++k) yr[k] = (xr[k] - m) - log_s;
      } else {
        const float inv = static_cast<float>(1.0 / s);
        for (int64_t k = 0; k < n; ++k) yr[k] *= inv;
      }
    }
  }
}

void softmax_fast(const SoftmaxArgs& a) {  // float32, inner == 1, n >= 1
  cpu::parallel_for(a.outer, row_grain(a.n),
                    [&](int64_t lo, int64_t hi) { softmax_rows(a, lo, hi); });
}

void softmax_reference(const SoftmaxArgs& a) {
  dispatch_cpu(a.dtype, [&](auto tag) {
    using S = decltype(tag);
    const S* x = static_cast<const S*>(a.x);
    S* y = static_cast<S*>(a.y);
    for (int64_t o = 0; o < a.outer; ++o)
      for (int64_t i = 0; i < a.inner; ++i) {
        auto at = [&](int64_t k) { return (o * a.n + k) * a.inner + i; };
        double m = -INFINITY;
        for (int64_t k = 0; k < a.n; ++k) m = std::fmax(m, load_as_double(x + at(k)));
        bool nan = false;
        for (int64_t k = 0; k < a.n; ++k) nan = nan || std::isnan(load_as_double(x + at(k)));
        if (nan) m = NAN;  // fmax skips NaN; a NaN anywhere makes the row NaN
        double s = 0.0;
        for (int64_t k = 0; k < a.n; ++k) s += std::exp(load_as_double(x + at(k)) - m);
        const double log_s = std::log(s);
        for (int64_t k = 0; k < a.n; ++k) {
          const double v = load_as_double(x + at(k)) - m;
          store_from_double(y + at(k), a.log ? v - log_s : std::exp(v) / s);
        }
      }
  });
}

void softmax(const SoftmaxArgs& a) {
  if (cpu::fast_paths() && a.dtype == DType::Float32 && a.inner == 1 && a.n >= 1)
    softmax_fast(a);
  else
    softmax_reference(a);
}

// float32, inner == 1: rows whose y holds a NaN take the reference's formula.
EMBER_CPU_CLONES void softmax_backward_rows(const SoftmaxBackwardArgs& a, int64_t lo, int64_t hi) {
  const float* y = static_cast<const float*>(a.y);
  const float* dy = static_cast<const float*>(a.d_y);
  float* dx = static_cast<float*>(a.d_x);
  const int64_t n = a.n;
  {
    for (int64_t r = lo; r < hi; ++r) {
      const float *yr = y + r * n, *gr = dy + r * n;
      float* out = dx + r * n;
      if (a.log) {
        bool nan = false;
        const float m = cpu::vec::max(yr, n, nan);
        const float dot = static_cast<float>(cpu::vec::sum(gr, n));
        if (nan || m > 0.0f) {
          for (int64_t k = 0; k < n; ++k) out[k] = gr[k] - std::exp(yr[k]) * dot;
        } else {
          for (int64_t k = 0; k < n; ++k) out[k] = gr[k] - cpu::vec::exp_nonpositive(yr[k]) * dot;
        }
      } else {
        const float dot = static_cast<float>(cpu::vec::dot(gr, yr, n));
        for (int64_t k = 0; k < n; ++k) out[k] = yr[k] * (gr[k] - dot);
      }
    }
  }
}

bool softmax_backward_fast(const SoftmaxBackwardArgs& a) {
  cpu::parallel_for(a.outer, row_grain(a.n),
                    [&](int64_t lo, int64_t hi) { softmax_backward_rows(a, lo, hi); });
  return true;
}

void softmax_backward(const SoftmaxBackwardArgs& a) {
  if (cpu::fast_paths() && a.dtype == DType::Float32 && a.inner == 1 && a.n >= 1 &&
      softmax_backward_fast(a))
    return;
  dispatch_cpu(a.dtype, [&](auto tag) {
    using S = decltype(tag);
    const S* y = static_cast<const S*>(a.y);
    const S* dy = static_cast<const S*>(a.d_y);
    S* dx = static_cast<S*>(a.d_x);
    for (int64_t o = 0; o < a.outer; ++o)
      for (int64_t i = 0; i < a.inner; ++i) {
        auto at = [&](int64_t k) { return (o * a.n + k) * a.inner + i; };
        double dot = 0.0;  // sum(d_y y) for softmax, sum(d_y) for log_softmax
        for (int64_t k = 0; k < a.n; ++k)
          dot += a.log ? load_as_double(dy + at(k))
                       : load_as_double(dy + at(k)) * load_as_double(y + at(k));
        for (int64_t k = 0; k < a.n; ++k) {
          const double yv = load_as_double(y + at(k)), g = load_as_double(dy + at(k));
          store_from_double(dx + at(k), a.log ? g - std::exp(yv) * dot : yv * (g - dot));
        }
      }
  });
}

bool layer_norm_supported(const LayerNormQuery& q) {
  return cpu::fast_paths() && q.dtype == DType::Float32 && q.cols >= 1;
}

EMBER_CPU_CLONES void layer_norm_rows(const LayerNormArgs& a, int64_t lo, int64_t hi) {
  const float* x = static_cast<const float*>(a.x);
  const float* w = static_cast<const float*>(a.w);
  const float* b = static_cast<const float*>(a.b);
  // y_bf16: each row computed into a float32 scratch row, then rounded once.
  float* y = a.y_bf16 ? nullptr : static_cast<float*>(a.y);
  BFloat16* y16 = a.y_bf16 ? static_cast<BFloat16*>(a.y) : nullptr;
  float* mean = static_cast<float*>(a.mean);
  float* rstd = static_cast<float*>(a.rstd);
  const int64_t n = a.cols;
  std::vector<float> scratch(a.y_bf16 ? static_cast<size_t>(n) : 0);
  // residual: the row normalised is x + residual (float32, or bfloat16 widened), stored
  // to sum first.
  const float* res = a.residual_bf16 ? nullptr : static_cast<const float*>(a.residual);
  const BFloat16* res16 = a.residual_bf16 ? static_cast<const BFloat16*>(a.residual) : nullptr;
  float* sum = static_cast<float*>(a.sum);
  const OperandDropout& drop = a.residual_dropout;
  std::vector<float> dropped(drop.threshold != 0 ? static_cast<size_t>(n) : 0);
  {
    for (int64_t r = lo; r < hi; ++r) {
      const float* xr = x + r * n;
      if (sum != nullptr) {
        float* sr = sum + r * n;
        if (drop.threshold != 0) {
          // The residual through its dropout into a scratch row first, then the add: the
          // product is rounded on its own, as dropout's kernel stores it (one expression
          // would let the compiler fuse the multiply into the add).
          const uint64_t first = drop.offset + static_cast<uint64_t>(r * n);
          for (int64_t k = 0; k < n; ++k) {
            const bool keep =
                dropout_bits_keyed(drop.key, first + static_cast<uint64_t>(k)) >= drop.threshold;
            dropped[static_cast<size_t>(k)] =
                !keep              ? 0.f
                : res16 != nullptr ? float(BFloat16(float(res16[r * n + k]) * drop.scale))
                                   : res[r * n + k] * drop.scale;
          }
          for (int64_t k = 0; k < n; ++k) sr[k] = xr[k] + dropped[static_cast<size_t>(k)];
        } else if (res16 != nullptr) {
          for (int64_t k = 0; k < n; ++k) sr[k] = xr[k] + float(res16[r * n + k]);
        } else {
          for (int64_t k = 0; k < n; ++k) sr[k] = xr[k] + res[r * n + k];
        }
        xr = sr;
      }
      float* yr = a.y_bf16 ? scratch.data() : y + r * n;
      const double mu = cpu::vec::sum(xr, n) / static_cast<double>(n);
      const float c = static_cast<float>(mu);
      double var = cpu::vec::sum_sq_dev(xr, n, c) / static_cast<double>(n) -
                   (mu - c) * (mu - c);  // about c, moved to mu
      var = std::max(var, 0.0);
      const float rs = static_cast<float>(1.0 / std::sqrt(var + a.eps));
      mean[r] = c;
      rstd[r] = rs;
      if (w && b)
        for (int64_t k = 0; k < n; ++k) yr[k] = (xr[k] - c) * rs * w[k] + b[k];
      else if (w)
        for (int64_t k = 0; k < n; ++k) yr[k] = (xr[k] - c) * rs * w[k];
      else if (b)
        for (int64_t k = 0; k < n; ++k) yr[k] = (xr[k] - c) * rs + b[k];
      else
        for (int64_t k = 0; k < n; ++k) yr[k] = (xr[k] - c) * rs;
      if (y16 != nullptr)
        for (int64_t k = 0; k < n; ++k) y16[r * n + k] = BFloat16(yr[k]);
    }
  }
}

void layer_norm_forward(const LayerNormArgs& a) {
  EMBER_CHECK(a.residual_dropout.offset_base == nullptr,
              "layer_norm: the CPU draws no counters from device memory");
  cpu::parallel_for(a.rows, row_grain(a.cols),
                    [&](int64_t lo, int64_t hi) { layer_norm_rows(a, lo, hi); });
}

// Rows [lo, hi) of the layer norm's backward: d_x (plus d_x_add's row, when given:
// it may be d_x itself, each element read before it is written), and the column sums
// of d_y xhat and d_y added into cw and cb (either may be null).
EMBER_CPU_CLONES void layer_norm_backward_rows(const LayerNormBackwardArgs& a, double* cw,
                                               double* cb, int64_t lo, int64_t hi) {
  // d_y_bf16: each row widened into a float32 scratch row first.
  const float* dy = a.d_y_bf16 ? nullptr : static_cast<const float*>(a.d_y);
  const BFloat16* dy16 = a.d_y_bf16 ? static_cast<const BFloat16*>(a.d_y) : nullptr;
  std::vector<float> dy_row(a.d_y_bf16 ? static_cast<size_t>(a.cols) : 0);
  const float* x = static_cast<const float*>(a.x);
  const float* w = static_cast<const float*>(a.w);
  const float* mean = static_cast<const float*>(a.mean);
  const float* rstd = static_cast<const float*>(a.rstd);
  float* dx = static_cast<float*>(a.d_x);
  const float* dx_add = static_cast<const float*>(a.d_x_add);
  const int64_t n = a.cols;
  std::vector<float> xhat(static_cast<size_t>(n)), wdy(static_cast<size_t>(n));
  for (int64_t r = lo; r < hi; ++r) {
    const float* xr = x + r * n;
    const float* gr = dy16 == nullptr ? dy + r * n : dy_row.data();
    if (dy16 != nullptr)
      for (int64_t k = 0; k < n; ++k) dy_row[static_cast<size_t>(k)] = float(dy16[r * n + k]);
    const float mu = mean[r], rs = rstd[r];
    for (int64_t k = 0; k < n; ++k) xhat[k] = (xr[k] - mu) * rs;
    if (cw)
      for (int64_t k = 0; k < n; ++k) cw[k] += static_cast<double>(gr[k]) * xhat[k];
    if (cb)
      for (int64_t k = 0; k < n; ++k) cb[k] += gr[k];
    if (!dx) continue;
    if (w)
      for (int64_t k = 0; k < n; ++k) wdy[k] = gr[k] * w[k];
    else
      std::copy(gr, gr + n, wdy.begin());
    const float c1 = static_cast<float>(cpu::vec::sum(wdy.data(), n) / static_cast<double>(n));
    const float c2 =
        static_cast<float>(cpu::vec::dot(wdy.data(), xhat.data(), n) / static_cast<double>(n));
    float* out = dx + r * n;
    if (dx_add != nullptr) {
      const float* add = dx_add + r * n;
      for (int64_t k = 0; k < n; ++k) out[k] = add[k] + rs * (wdy[k] - c1 - xhat[k] * c2);
    } else {
      for (int64_t k = 0; k < n; ++k) out[k] = rs * (wdy[k] - c1 - xhat[k] * c2);
    }
  }
}

void layer_norm_backward(const LayerNormBackwardArgs& a) {
  const int64_t n = a.cols;
  const int64_t chunks = cpu::chunk_count(a.rows, row_grain(n));
  // Column sums per chunk of rows, in double, combined in chunk order below.
  std::vector<double> pw(a.d_w ? static_cast<size_t>(std::max<int64_t>(chunks, 1) * n) : 0, 0.0);
  std::vector<double> pb(a.d_b ? static_cast<size_t>(std::max<int64_t>(chunks, 1) * n) : 0, 0.0);
  cpu::parallel_chunks(a.rows, chunks, [&](int64_t c, int64_t lo, int64_t hi) {
    layer_norm_backward_rows(a, a.d_w ? pw.data() + c * n : nullptr,
                             a.d_b ? pb.data() + c * n : nullptr, lo, hi);
  });
  auto combine = [&](const std::vector<double>& parts, void* dst) {
    if (!dst) return;
    float* d = static_cast<float*>(dst);
    for (int64_t k = 0; k < n; ++k) {
      double s = 0;
      for (int64_t c = 0; c < std::max<int64_t>(chunks, 1); ++c) s += parts[c * n + k];
      d[k] = static_cast<float>(s);
    }
  };
  combine(pw, a.d_w);
  combine(pb, a.d_b);
}

size_t layer_norm_workspace(const LayerNormQuery&) {
  return 0;
}

bool cross_entropy_supported(const CrossEntropyQuery& q) {
  return cpu::fast_paths() && q.dtype == DType::Float32 && q.classes >= 1;
}

// Rows [lo, hi) of the fused cross-entropy: per[r] their losses (double), the
// gradient rows scaled by `scale` when d_logits is not null.
EMBER_CPU_CLONES void cross_entropy_rows(const CrossEntropyArgs& a, double scale, double* per,
                                         int64_t lo, int64_t hi) {
  const float* x = static_cast<const float*>(a.logits);
  float* d = static_cast<float*>(a.d_logits);
  const int64_t n = a.classes;
  const double ls = a.label_smoothing;
  std::vector<float> scratch(d ? 0 : static_cast<size_t>(n));
  {
    for (int64_t r = lo; r < hi; ++r) {
      const float* xr = x + r * n;
      float* e = d ? d + r * n : scratch.data();  // exp(x - max), then the gradient
      const int64_t t = a.target[r];
      if (t == a.ignore_index) {
        per[r] = 0.0;
        if (d) std::fill(e, e + n, 0.0f);
        continue;
      }
      bool nan = false;
      const float m = cpu::vec::max(xr, n, nan);
      if (nan || !std::isfinite(m)) {  // as log_softmax: the row is NaN
        per[r] = NAN;
        if (d) std::fill(e, e + n, std::numeric_limits<float>::quiet_NaN());
        continue;
      }
      for (int64_t k = 0; k < n; ++k) e[k] = cpu::vec::exp_nonpositive(xr[k] - m);
      const double s = cpu::vec::sum(e, n);
      const double lse = static_cast<double>(m) + std::log(s);
      double l = lse - static_cast<double>(xr[t]);
      if (ls > 0.0) l = (1.0 - ls) * l + ls * (lse - cpu::vec::sum(xr, n) / static_cast<double>(n));
      per[r] = l;
      if (!d) continue;
      const float mul = static_cast<float>(scale / s);
      const float off = static_cast<float>(scale * ls / static_cast<double>(n));
      for (int64_t k = 0; k < n; ++k) e[k] = e[k] * mul - off;
      e[t] = static_cast<float>(static_cast<double>(e[t]) - scale * (1.0 - ls));
    }
  }
}

// CrossEntropyArgs' contract (core/base/kernel_families.h), float32.
void cross_entropy_forward(const CrossEntropyArgs& a) {
  float* loss = static_cast<float*>(a.loss);
  const int64_t n = a.classes, rows = a.rows;
  int64_t valid = 0;
  for (int64_t r = 0; r < rows; ++r) {  // every target checked before anything is written
    const int64_t t = a.target[r];
    if (t == a.ignore_index) continue;
    EMBER_CHECK(t >= 0 && t < n, a.op, ": target ", t, " is out of range [0, ", n, ")");
    ++valid;
  }
  const double scale = a.reduction == Reduction::Mean ? 1.0 / static_cast<double>(valid) : 1.0;
  std::vector<double> per(static_cast<size_t>(rows));
  cpu::parallel_for(rows, row_grain(n), [&](int64_t lo, int64_t hi) {
    cross_entropy_rows(a, scale, per.data(), lo, hi);
  });
  if (a.reduction == Reduction::None) {
    for (int64_t r = 0; r < rows; ++r) loss[r] = static_cast<float>(per[static_cast<size_t>(r)]);
    return;
  }
  double total = 0.0;
  for (double v : per) total += v;  // row order: the same bits at every thread count
  loss[0] = static_cast<float>(a.reduction == Reduction::Mean
                                   ? total / static_cast<double>(valid)  // 0 / 0: NaN
                                   : total);
}

size_t cross_entropy_workspace(const CrossEntropyQuery&) {
  return 0;
}

// d *= g[0], skipped when g[0] is 1 (the usual loss.backward()).
void scale_by_scalar(const ScaleByScalarArgs& a) {
  dispatch_cpu(a.dtype, [&](auto tag) {
    using S = decltype(tag);
    const double g = load_as_double(static_cast<const S*>(a.g));
    if (g == 1.0) return;
    S* d = static_cast<S*>(a.d);
    cpu::parallel_for(a.n, cpu::kElementwiseGrain, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) store_from_double(d + i, load_as_double(d + i) * g);
    });
  });
}

}  // namespace

void register_cpu_softmax(KernelFamilies& t) {
  t.cross_entropy_fused_supported = &cross_entropy_supported;
  t.cross_entropy_fused = &cross_entropy_forward;
  t.cross_entropy_workspace_bytes = &cross_entropy_workspace;
  t.scale_by_device_scalar = &scale_by_scalar;
  t.softmax = &softmax;
  t.softmax_backward = &softmax_backward;
  t.layer_norm_fused_supported = &layer_norm_supported;
  t.layer_norm_fused = &layer_norm_forward;
  t.layer_norm_backward_fused = &layer_norm_backward;
  t.layer_norm_workspace_bytes = &layer_norm_workspace;
}

}  // namespace ember::kernels
