// Internal to the CPU kernels: float loops written for the vectoriser (plain loops
// over arrays, fixed lanes for sums, no library calls), for the fast paths of
// softmax and layer norm. Each result depends only on its inputs and the lane
// count, never on threads: the same bits at every thread count.
#pragma once

#include <bit>
#include <cstdint>

// The row loops of the fast paths that use these are compiled three times by GCC on
// x86-64 (function multi-versioning: AVX-512, AVX2 + FMA, the baseline SSE2), the
// loader picking the widest the CPU has, once. A clone may contract a * b + c into
// an FMA, so results can differ in the last bits between CPUs, never between runs
// or thread counts on one CPU. Off under ThreadSanitizer (its runtime is not yet
// up when the loader resolves the clones in a static executable, which crashes) and
// with other compilers.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(__SANITIZE_THREAD__)
#define EMBER_CPU_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define EMBER_CPU_CLONES
#endif

namespace ember::kernels::cpu::vec {

inline constexpr int kLanes = 16;

// Before each loop over the kLanes partial results: keep it a loop, for the loop
// vectoriser. At -O3 GCC 12 unrolls such a loop completely first and its SLP pass then
// leaves the lanes scalar: vec::max ran 10x slower (145 against 13 us per 512 rows of
// 256), softmax 2.6x, in the Release build against RelWithDebInfo's -O2.
#if defined(__GNUC__) && !defined(__clang__)
#define EMBER_VEC_LANES _Pragma("GCC unroll 1")
#else
#define EMBER_VEC_LANES
#endif

// Sum of x[0, n) in float over kLanes interleaved partial sums, combined in double.
inline double sum(const float* x, int64_t n) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    EMBER_VEC_LANES
    for (int l = 0; l < kLanes; ++l) acc[l] += x[i + l];
  }
  double s = 0;
  for (int l = 0; l < kLanes; ++l) s += acc[l];
  for (; i < n; ++i) s += x[i];
  return s;
}

// Sum of (x - c)^2 over x[0, n), as sum.
inline double sum_sq_dev(const float* x, int64_t n, float c) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    EMBER_VEC_LANES
    for (int l = 0; l < kLanes; ++l) {
      const float d = x[i + l] - c;
      acc[l] += d * d;
    }
  }
  double s = 0;
  for (int l = 0; l < kLanes; ++l) s += acc[l];
  for (; i < n; ++i) s += static_cast<double>(x[i] - c) * (x[i] - c);
  return s;
}

// Sum of a * b over [0, n), as sum.
inline double dot(const float* a, const float* b, int64_t n) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    EMBER_VEC_LANES
    for (int l = 0; l < kLanes; ++l) acc[l] += a[i + l] * b[i + l];
  }
  double s = 0;
  for (int l = 0; l < kLanes; ++l) s += acc[l];
  for (; i < n; ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

// Sum of a * (b - c) over [0, n), as sum (batch norm's sum of d_y (x - mean)).
inline double dot_dev(const float* a, const float* b, int64_t n, float c) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    EMBER_VEC_LANES
    for (int l = 0; l < kLanes; ++l) acc[l] += a[i + l] * (b[i + l] - c);
  }
  double s = 0;
  for (int l = 0; l < kLanes; ++l) s += acc[l];
  for (; i < n; ++i) s += static_cast<double>(a[i]) * (b[i] - c);
  return s;
}

// Largest of x[0, n) (n >= 1); true in `nan` when any is NaN.
inline float max(const float* x, int64_t n, bool& nan) {
  float acc[kLanes];
  int bad[kLanes] = {};
  for (int l = 0; l < kLanes; ++l) acc[l] = x[0];
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    EMBER_VEC_LANES
    for (int l = 0; l < kLanes; ++l) {
      const float v = x[i + l];
      acc[l] = v > acc[l] ? v : acc[l];
      bad[l] |= v != v;
    }
  }
  float m = acc[0];
  int any = 0;
  for (int l = 0; l < kLanes; ++l) {
    m = acc[l] > m ? acc[l] : m;
    any |= bad[l];
  }
  for (; i < n; ++i) {
    m = x[i] > m ? x[i] : m;
    any |= x[i] != x[i];
  }
  nan = any != 0;
  return m;
}

// exp(x) for x <= 0 (and -inf), within 2 ulp of the correctly rounded float for
// x >= -87 (0 below, where exp underflows float's normal range): x = k ln 2 + r,
// |r| <= ln 2 / 2 (Cody-Waite, two constants), exp(r) by its degree-6 Taylor
// polynomial (truncation < 1.4e-7 relative), times 2^k built in the exponent bits.
inline float exp_nonpositive(float x) {
  const float xc = x >= -87.0f ? x : -87.0f;  // NaN -> -87: the cast below stays defined
  const float kRound = 12582912.0f;           // 1.5 * 2^23: adding it rounds to an integer
  const float k = (xc * 1.44269504f + kRound) - kRound;
  const float r = (xc - k * 0.693145752f) - k * 1.42860677e-6f;
  float p = 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const float scale = std::bit_cast<float>((static_cast<int32_t>(k) + 127) << 23);
  const float e = p * scale;
  return x >= -87.0f ? e : (x != x ? x : 0.0f);
}

// GELU, tanh approximation, in float: 0.5 x (1 + tanh(u)) = x sigmoid(2u), with
// sigmoid(2u) = 1 / (1 + e) or e / (1 + e), e = exp(-2|u|) <= 1 (no cancellation on
// either side). s and 1 - s are returned for the derivative.
inline void gelu_parts(float x, float& u, float& s, float& one_minus_s) {
  u = 0.7978845608f * (x + 0.044715f * x * x * x);
  const float au = u >= 0.0f ? u : -u;
  const float e = exp_nonpositive(-2.0f * au);
  const float inv = 1.0f / (1.0f + e);
  s = u >= 0.0f ? inv : e * inv;
  one_minus_s = u >= 0.0f ? e * inv : inv;
}

}  // namespace ember::kernels::cpu::vec
