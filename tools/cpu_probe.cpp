// A standalone probe of the CPU path's building blocks on one host, built in a second
// (no ember library): which instruction sets the CPU reports to GCC's dispatcher, how
// fast the softmax and layer-norm row loops of core/kernels/cpu_softmax.cpp and GELU's
// of cpu_float_math.cpp run when compiled for each (the baseline SSE2, x86-64-v3,
// x86-64-v4, and feature lists without the v3/v4 extras), which clone GCC's
// target_clones resolver takes (the one whose time it matches), and
// OpenBLAS's sgemm at 1024^3 and at the Linear of bench_cpu (512x64 -> 256, bias)
// threaded by OpenBLAS against tiles on threads of our own (as ember's pool does).
//
//   g++ -O2 -ftree-vectorize -fvect-cost-model=dynamic -fno-trapping-math -std=c++20 -I. \
//       tools/cpu_probe.cpp -o cpu_probe -lopenblas -pthread     (cpu_softmax.cpp's flags)
//   OPENBLAS_CORETYPE=SkylakeX ./cpu_probe
//
// Each figure is the median of 15 rounds (each the mean over enough calls for ~2 ms),
// with the min and max; every variant's output is compared with the SSE2 one first.
#include <cblas.h>
#include <cpuid.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <thread>
#include <vector>

#include "core/kernels/cpu_vec.h"

extern "C" char* openblas_get_corename(void);
extern "C" void openblas_set_num_threads(int);

namespace {

using Clock = std::chrono::steady_clock;
namespace vec = ember::kernels::cpu::vec;
constexpr int kRows = 512, kCols = 256;

// The row loops as ember's (max, exp, sum, scale; mean, variance, normalise).
#define SOFTMAX_BODY                                                     \
  for (int r = 0; r < rows; ++r) {                                       \
    const float* xr = x + r * n;                                         \
    float* yr = y + r * n;                                               \
    bool nan = false;                                                    \
    const float m = vec::max(xr, n, nan);                                \
    for (int k = 0; k < n; ++k) yr[k] = vec::exp_nonpositive(xr[k] - m); \
    const float inv = static_cast<float>(1.0 / vec::sum(yr, n));         \
    for (int k = 0; k < n; ++k) yr[k] *= inv;                            \
  }
#define LAYER_NORM_BODY                                                      \
  for (int r = 0; r < rows; ++r) {                                           \
    const float* xr = x + r * n;                                             \
    float* yr = y + r * n;                                                   \
    const float mean = static_cast<float>(vec::sum(xr, n) / n);              \
    const float var = static_cast<float>(vec::sum_sq_dev(xr, n, mean) / n);  \
    const float rstd = 1.0f / std::sqrt(var + 1e-5f);                        \
    for (int k = 0; k < n; ++k) yr[k] = (xr[k] - mean) * rstd * w[k] + b[k]; \
  }

#define DEFINE_VARIANT(name, attr)                                                        \
  attr void softmax_##name(const float* x, float* y, int rows, int n){                    \
      SOFTMAX_BODY} attr void layer_norm_##name(const float* x, float* y, const float* w, \
                                                const float* b, int rows, int n){         \
      LAYER_NORM_BODY} attr void gelu_##name(const float* x, float* y, int count) {       \
    for (int i = 0; i < count; ++i) {                                                     \
      float u, s, oms;                                                                    \
      vec::gelu_parts(x[i], u, s, oms);                                                   \
      y[i] = x[i] * s;                                                                    \
    }                                                                                     \
  }

DEFINE_VARIANT(sse2, )
DEFINE_VARIANT(v3, __attribute__((target("arch=x86-64-v3"))))
DEFINE_VARIANT(v4, __attribute__((target("arch=x86-64-v4"))))
DEFINE_VARIANT(avx2fma, __attribute__((target("avx2,fma"))))
DEFINE_VARIANT(avx512, __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma"))))
DEFINE_VARIANT(clones,
               __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"))))

struct Spread {
  double median, min, max;
};

Spread time_us(const std::function<void()>& f) {
  f();
  int calls = 1;
  for (auto t0 = Clock::now();; calls *= 2) {
    t0 = Clock::now();
    for (int i = 0; i < calls; ++i) f();
    if (std::chrono::duration<double>(Clock::now() - t0).count() > 2e-3) break;
  }
  std::vector<double> v;
  for (int r = 0; r < 15; ++r) {
    const auto t0 = Clock::now();
    for (int i = 0; i < calls; ++i) f();
    v.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / calls);
  }
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v.front(), v.back()};
}

void print(const char* what, Spread s) {
  std::printf("%-44s %10.2f us  (%.2f-%.2f)\n", what, s.median, s.min, s.max);
}

double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(double(a[i]) - b[i]));
  return d;
}

void check(const char* what, const std::vector<float>& got, const std::vector<float>& want,
           double tol) {
  const double d = max_diff(got, want);
  if (!(d <= tol)) {
    std::printf("cpu_probe: %s differs from the SSE2 loop by %g (tolerance %g)\n", what, d, tol);
    std::exit(1);
  }
}

void features() {
  __builtin_cpu_init();
  std::printf(
      "__builtin_cpu_supports: x86-64-v2 %d, x86-64-v3 %d, x86-64-v4 %d | avx2 %d fma %d "
      "avx512f %d avx512bw %d avx512dq %d avx512vl %d | bmi %d bmi2 %d lzcnt %d movbe %d "
      "f16c %d\n",
      !!__builtin_cpu_supports("x86-64-v2"), !!__builtin_cpu_supports("x86-64-v3"),
      !!__builtin_cpu_supports("x86-64-v4"), !!__builtin_cpu_supports("avx2"),
      !!__builtin_cpu_supports("fma"), !!__builtin_cpu_supports("avx512f"),
      !!__builtin_cpu_supports("avx512bw"), !!__builtin_cpu_supports("avx512dq"),
      !!__builtin_cpu_supports("avx512vl"), !!__builtin_cpu_supports("bmi"),
      !!__builtin_cpu_supports("bmi2"), !!__builtin_cpu_supports("lzcnt"),
      !!__builtin_cpu_supports("movbe"), !!__builtin_cpu_supports("f16c"));
  // What CPUID itself says (GCC's dispatcher trusts AVX only when OSXSAVE is set and
  // XCR0 enables the vector state; OpenBLAS checks the same).
  unsigned a = 0, b = 0, c = 0, d = 0;
  __get_cpuid(1, &a, &b, &c, &d);
  const unsigned family = ((a >> 8) & 0xf) + ((a >> 20) & 0xff),
                 model = ((a >> 4) & 0xf) | ((a >> 12) & 0xf0);
  std::printf("cpuid 1: family %u model 0x%x | ecx: fma %u movbe %u osxsave %u avx %u f16c %u\n",
              family, model, (c >> 12) & 1, (c >> 22) & 1, (c >> 27) & 1, (c >> 28) & 1,
              (c >> 29) & 1);
  const bool osxsave = (c >> 27) & 1;
  __get_cpuid_count(7, 0, &a, &b, &c, &d);
  std::printf("cpuid 7: avx2 %u bmi1 %u bmi2 %u avx512f %u avx512dq %u avx512bw %u avx512vl %u\n",
              (b >> 5) & 1, (b >> 3) & 1, (b >> 8) & 1, (b >> 16) & 1, (b >> 17) & 1, (b >> 30) & 1,
              (b >> 31) & 1);
  __get_cpuid(0x80000001, &a, &b, &c, &d);
  std::printf("cpuid 0x80000001: lzcnt %u\n", (c >> 5) & 1);
  if (osxsave) {
    unsigned lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    std::printf("xgetbv(0) = 0x%x: sse %u avx %u avx512 %u\n", lo, (lo >> 1) & 1, (lo >> 2) & 1,
                (lo >> 5) & 7);
  } else {
    std::printf("xgetbv: not run (OSXSAVE clear)\n");
  }
  std::printf("OpenBLAS core: %s\n", openblas_get_corename());
}

void rows() {
  std::vector<float> x(kRows * kCols), w(kCols), b(kCols);
  unsigned s = 12345;
  for (auto& v : x) v = float((s = s * 1103515245u + 12345u) >> 8) / float(1 << 24) * 6 - 3;
  for (int k = 0; k < kCols; ++k) w[k] = 1.0f + 0.01f * k, b[k] = 0.1f * (k % 7);
  std::vector<float> ref(x.size()), y(x.size());
  softmax_sse2(x.data(), ref.data(), kRows, kCols);
  std::vector<float> ref_ln(x.size());
  layer_norm_sse2(x.data(), ref_ln.data(), w.data(), b.data(), kRows, kCols);
  std::vector<float> ref_gelu(x.size());
  gelu_sse2(x.data(), ref_gelu.data(), kRows * kCols);
  struct V {
    const char* name;
    void (*sm)(const float*, float*, int, int);
    void (*ln)(const float*, float*, const float*, const float*, int, int);
    void (*gelu)(const float*, float*, int);
    bool (*ok)();
  };
  const V variants[] = {
      {"sse2", softmax_sse2, layer_norm_sse2, gelu_sse2, [] { return true; }},
      {"x86-64-v3", softmax_v3, layer_norm_v3, gelu_v3,
       [] { return bool(__builtin_cpu_supports("x86-64-v3")); }},
      {"x86-64-v4", softmax_v4, layer_norm_v4, gelu_v4,
       [] { return bool(__builtin_cpu_supports("x86-64-v4")); }},
      {"avx2,fma", softmax_avx2fma, layer_norm_avx2fma, gelu_avx2fma,
       [] { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); }},
      {"avx512f,bw,dq,vl,avx2,fma", softmax_avx512, layer_norm_avx512, gelu_avx512,
       [] {
         return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
                __builtin_cpu_supports("fma");
       }},
      {"target_clones (ember's resolver)", softmax_clones, layer_norm_clones, gelu_clones,
       [] { return true; }},
  };
  char label[96];
  for (const V& v : variants) {
    if (!v.ok()) {
      std::printf("%-44s not supported here\n", v.name);
      continue;
    }
    v.sm(x.data(), y.data(), kRows, kCols);
    check(v.name, y, ref, 1e-6);
    std::snprintf(label, sizeof label, "softmax 512x256, 1 thread, %s", v.name);
    print(label, time_us([&] { v.sm(x.data(), y.data(), kRows, kCols); }));
    v.ln(x.data(), y.data(), w.data(), b.data(), kRows, kCols);
    check(v.name, y, ref_ln, 1e-4);
    std::snprintf(label, sizeof label, "layer_norm 512x256, 1 thread, %s", v.name);
    print(label, time_us([&] { v.ln(x.data(), y.data(), w.data(), b.data(), kRows, kCols); }));
    v.gelu(x.data(), y.data(), kRows * kCols);
    check(v.name, y, ref_gelu, 1e-5);
    std::snprintf(label, sizeof label, "gelu (tanh) 512x256, 1 thread, %s", v.name);
    print(label, time_us([&] { v.gelu(x.data(), y.data(), kRows * kCols); }));
  }
}

// C (m x n) = A (m x k) B^T (B: n x k), as Linear; beta 0 or 1 (C prefilled).
void sgemm_nt(int m, int n, int k, const float* a, const float* bt, float* c, float beta) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0f, a, k, bt, k, beta, c, n);
}

void gemms() {
  auto fill = [](std::vector<float>& v, unsigned seed) {
    for (auto& e : v) e = float((seed = seed * 1103515245u + 12345u) >> 8) / float(1 << 24) - 0.5f;
  };
  {  // 1024^3, C = A B (both row-major, no transpose)
    const int n = 1024;
    std::vector<float> a(n * n), b(n * n), c(n * n), ref(n * n);
    fill(a, 1), fill(b, 2);
    auto nn = [&](int m0, int m1, int n0, int n1, float* out) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m1 - m0, n1 - n0, n, 1.0f,
                  a.data() + m0 * n, n, b.data() + n0, n, 0.0f, out + m0 * n + n0, n);
    };
    openblas_set_num_threads(1);
    nn(0, n, 0, n, ref.data());
    print("sgemm 1024^3, OpenBLAS 1 thread", time_us([&] { nn(0, n, 0, n, c.data()); }));
    openblas_set_num_threads(2);
    nn(0, n, 0, n, c.data());
    check("sgemm 2 threads", c, ref, 1e-3);
    print("sgemm 1024^3, OpenBLAS 2 threads", time_us([&] { nn(0, n, 0, n, c.data()); }));
    openblas_set_num_threads(1);
    for (int split = 0; split < 2; ++split) {
      auto two = [&] {  // two tiles on two threads: rows halves, or column halves
        std::thread t([&] { split ? nn(0, n, 0, n / 2, c.data()) : nn(0, n / 2, 0, n, c.data()); });
        split ? nn(0, n, n / 2, n, c.data()) : nn(n / 2, n, 0, n, c.data());
        t.join();
      };
      two();
      check("sgemm tiles", c, ref, 1e-3);
      print(split ? "sgemm 1024^3, 2 threads x 1024x512 tiles"
                  : "sgemm 1024^3, 2 threads x 512x1024 tiles",
            time_us(two));
    }
  }
  {  // Linear 512x64 -> 256 with bias: GEMM then add, or bias prefilled and beta 1
    const int m = 512, k = 64, n = 256;
    std::vector<float> x(m * k), w(n * k), bias(n), y(m * n), ref(m * n);
    fill(x, 3), fill(w, 4), fill(bias, 5);
    auto then_add = [&] {
      sgemm_nt(m, n, k, x.data(), w.data(), y.data(), 0.0f);
      for (int r = 0; r < m; ++r)
        for (int j = 0; j < n; ++j) y[r * n + j] += bias[j];
    };
    auto prefill = [&] {
      for (int r = 0; r < m; ++r) std::copy(bias.begin(), bias.end(), y.begin() + r * n);
      sgemm_nt(m, n, k, x.data(), w.data(), y.data(), 1.0f);
    };
    openblas_set_num_threads(1);
    then_add();
    ref = y;
    prefill();
    check("linear prefill", y, ref, 1e-5);
    print("linear 512x64->256, 1 thread, gemm + add", time_us(then_add));
    print("linear 512x64->256, 1 thread, bias + beta 1", time_us(prefill));
    openblas_set_num_threads(2);
    print("linear, OpenBLAS 2 threads, bias + beta 1", time_us(prefill));
    openblas_set_num_threads(1);
    auto two = [&] {
      auto half = [&](int r0, int r1) {
        for (int r = r0; r < r1; ++r) std::copy(bias.begin(), bias.end(), y.begin() + r * n);
        sgemm_nt(r1 - r0, n, k, x.data() + r0 * k, w.data(), y.data() + r0 * n, 1.0f);
      };
      std::thread t([&] { half(0, m / 2); });
      half(m / 2, m);
      t.join();
    };
    two();
    check("linear tiles", y, ref, 1e-5);
    print("linear, 2 threads x 256-row tiles, bias + beta 1", time_us(two));
  }
}

}  // namespace

int main() {
  features();
  rows();
  gemms();
  return 0;
}
