// The CPU's fused batch norm (kernel families batch_norm_fused*, kernel_families.h):
// float32 only and only on the fast path (cpu::fast_paths()); elsewhere batch_norm
// composes (core/ops/batch_norm.cpp), and that composition is the reference the tests
// compare this with. Channels are spread over the thread pool, each channel computed
// whole by one thread in a fixed order, so the bits do not depend on the thread count.
// Per channel of a (n, c, m) input: the sum and the sum of squared deviations (about
// the float mean) over its n blocks of m values, each block in float over fixed lanes
// (cpu_vec.h) and the blocks in double; then one pass writing y. Backward: one pass
// for the channel's sums of d_y and d_y (x - mean) (the same way), one writing d_x.
// Nothing is kept between calls and no workspace is needed.
#include <algorithm>
#include <cmath>

#include "core/base/error.h"
#include "core/kernels/cpu_parallel.h"
#include "core/kernels/cpu_vec.h"
#include "core/kernels/registration.h"

namespace ember::kernels {

namespace {

bool batch_norm_supported(const BatchNormQuery& q) {
  // (A fused ReLU composes on the CPU: batch_norm_relu's fallback.)
  return cpu::fast_paths() && q.dtype == DType::Float32 && !q.params_f32 && !q.relu && q.n >= 1 &&
         q.c >= 1 && q.m >= 1;
}

size_t batch_norm_workspace(const BatchNormQuery&) {
  return 0;
}

// Channels per chunk of the pool: about kElementwiseGrain elements.
int64_t channel_grain(int64_t n, int64_t m) {
  return std::max<int64_t>(1, cpu::kElementwiseGrain / std::max<int64_t>(1, n * m));
}

EMBER_CPU_CLONES void forward_channels(const BatchNormArgs& a, int64_t lo, int64_t hi) {
  const float* x = static_cast<const float*>(a.x);
  const float* w = static_cast<const float*>(a.w);
  const float* b = static_cast<const float*>(a.b);
  float* rm = static_cast<float*>(a.running_mean);
  float* rv = static_cast<float*>(a.running_var);
  float* y = static_cast<float*>(a.y);
  float* mean = static_cast<float*>(a.mean);
  float* invstd = static_cast<float*>(a.invstd);
  const int64_t n = a.n, c = a.c, m = a.m;
  const double count = static_cast<double>(n * m);
  for (int64_t ch = lo; ch < hi; ++ch) {
    float mu, rs;
    if (a.training) {
      double s = 0;
      for (int64_t i = 0; i < n; ++i) s += cpu::vec::sum(x + (i * c + ch) * m, m);
      const double mu_d = s / count;
      mu = static_cast<float>(mu_d);
      double q = 0;
      for (int64_t i = 0; i < n; ++i) q += cpu::vec::sum_sq_dev(x + (i * c + ch) * m, m, mu);
      // About the float mean, moved to the exact one.
      const double var = std::max(q / count - (mu_d - mu) * (mu_d - mu), 0.0);
      rs = static_cast<float>(1.0 / std::sqrt(var + a.eps));
      if (rm != nullptr) {  // towards the batch mean and the unbiased variance
        const double unbiased = count > 1 ? var * count / (count - 1.0) : var;
        rm[ch] = static_cast<float>((1.0 - a.momentum) * rm[ch] + a.momentum * mu_d);
        rv[ch] = static_cast<float>((1.0 - a.momentum) * rv[ch] + a.momentum * unbiased);
      }
    } else {
      mu = rm[ch];
      rs = static_cast<float>(1.0 / std::sqrt(static_cast<double>(rv[ch]) + a.eps));
    }
    mean[ch] = mu;
    invstd[ch] = rs;
    const float wc = w != nullptr ? w[ch] : 1.0f, bc = b != nullptr ? b[ch] : 0.0f;
    for (int64_t i = 0; i < n; ++i) {
      const float* xr = x + (i * c + ch) * m;
      float* yr = y + (i * c + ch) * m;
      for (int64_t j = 0; j < m; ++j) yr[j] = (xr[j] - mu) * rs * wc + bc;
    }
  }
}

void batch_norm_forward(const BatchNormArgs& a) {
  EMBER_CHECK(batch_norm_supported({a.device, a.dtype, a.n, a.c, a.m}),
              "batch_norm: the CPU's fused kernel does not take (", a.n, ", ", a.c, ", ", a.m,
              ") of ", a.dtype);
  EMBER_CHECK(a.training || (a.running_mean != nullptr && a.running_var != nullptr),
              "batch_norm: eval mode needs running_mean and running_var");
  cpu::parallel_for(a.c, channel_grain(a.n, a.m),
                    [&](int64_t lo, int64_t hi) { forward_channels(a, lo, hi); });
}

EMBER_CPU_CLONES void backward_channels(const BatchNormBackwardArgs& a, int64_t lo, int64_t hi) {
  const float* dy = static_cast<const float*>(a.d_y);
  const float* x = static_cast<const float*>(a.x);
  const float* w = static_cast<const float*>(a.w);
  const float* mean = static_cast<const float*>(a.mean);
  const float* invstd = static_cast<const float*>(a.invstd);
  float* dx = static_cast<float*>(a.d_x);
  float* dw = static_cast<float*>(a.d_w);
  float* db = static_cast<float*>(a.d_b);
  const int64_t n = a.n, c = a.c, m = a.m;
  const double count = static_cast<double>(n * m);
  const bool sums = dw != nullptr || db != nullptr || (a.training && dx != nullptr);
  for (int64_t ch = lo; ch < hi; ++ch) {
    const float mu = mean[ch], rs = invstd[ch];
    const float wc = w != nullptr ? w[ch] : 1.0f;
    double s_dy = 0, s_dyx = 0;  // sums of d_y and of d_y xhat
    if (sums) {
      for (int64_t i = 0; i < n; ++i) {
        const int64_t at = (i * c + ch) * m;
        s_dy += cpu::vec::sum(dy + at, m);
        s_dyx += cpu::vec::dot_dev(dy + at, x + at, m, mu);
      }
      s_dyx *= rs;
    }
    if (db != nullptr) db[ch] = static_cast<float>(s_dy);
    if (dw != nullptr) dw[ch] = static_cast<float>(s_dyx);
    if (dx == nullptr) continue;
    const float scale = wc * rs;
    if (a.training) {
      const float k1 = static_cast<float>(s_dy / count), k2 = static_cast<float>(s_dyx / count);
      for (int64_t i = 0; i < n; ++i) {
        const int64_t at = (i * c + ch) * m;
        const float *g = dy + at, *xr = x + at;
        float* out = dx + at;
        for (int64_t j = 0; j < m; ++j) out[j] = scale * (g[j] - k1 - (xr[j] - mu) * rs * k2);
      }
    } else {
      for (int64_t i = 0; i < n; ++i) {
        const int64_t at = (i * c + ch) * m;
        for (int64_t j = 0; j < m; ++j) dx[at + j] = dy[at + j] * scale;
      }
    }
  }
}

void batch_norm_backward(const BatchNormBackwardArgs& a) {
  EMBER_CHECK(batch_norm_supported({a.device, a.dtype, a.n, a.c, a.m}),
              "batch_norm backward: the CPU's fused kernel does not take (", a.n, ", ", a.c, ", ",
              a.m, ") of ", a.dtype);
  cpu::parallel_for(a.c, channel_grain(a.n, a.m),
                    [&](int64_t lo, int64_t hi) { backward_channels(a, lo, hi); });
}

}  // namespace

void register_cpu_batch_norm(KernelFamilies& t) {
  t.batch_norm_fused_supported = &batch_norm_supported;
  t.batch_norm_fused = &batch_norm_forward;
  t.batch_norm_backward_fused = &batch_norm_backward;
  t.batch_norm_workspace_bytes = &batch_norm_workspace;
}

}  // namespace ember::kernels
