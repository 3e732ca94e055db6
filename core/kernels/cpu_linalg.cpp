// CPU matrix product (cpu_linalg.h): through OpenBLAS where ember was built with it
// (float32, float64; bfloat16 converted to float32 and back), the reference loops
// (double accumulation in i-k-j order) otherwise, and as the tests' oracle. Linear is
// fused where OpenBLAS runs it (float32, float64, fast paths on): forward, the bias
// written into the output, one GEMM adding the product to it, the activation in
// place; backward, d_x and d_w one GEMM each (d_b is linear()'s sum). Elsewhere
// linear() composes matmul, add, sum and the activation.
#include "core/kernels/cpu_linalg.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <vector>

#include "core/base/error.h"
#include "core/kernels/cpu_loops.h"
#include "core/kernels/cpu_parallel.h"
#include "core/kernels/registration.h"
#include "core/threads.h"

#if EMBER_HAS_OPENBLAS
#include <cblas.h>
// OpenBLAS's pthread build stops its server threads with this (its fork handler does);
// not in cblas.h, so declared weak: a BLAS without it leaves the pointer null.
extern "C" int blas_thread_shutdown_(void) __attribute__((weak));
#endif

namespace ember::kernels {

namespace cpu {

namespace {

using ember::detail::dispatch_cpu;
using ember::detail::load_as_double;
using ember::detail::store_from_double;

template <typename S>
double element(const MatrixOperand& op, int64_t batch, int64_t r, int64_t c) {
  const S* p = static_cast<const S*>(op.data) + batch * op.batch_stride;
  return load_as_double(p + (op.transposed ? c * op.ld + r : r * op.ld + c));
}

#if EMBER_HAS_OPENBLAS
// A batch of products up to this many multiply-adds each is spread over the pool by
// batches; a larger product is cut into a grid of tiles of C, at least this many
// multiply-adds each, one per chunk of the pool. OpenBLAS itself runs on one thread
// (set once below): only ember's pool makes threads, so the two never oversubscribe
// the cores and no BLAS thread spins between products.
constexpr double kTileMnk = 65536.0 * 4;

// c[m0:m1, n0:n1] = a[m0:m1, :] b[:, n0:n1] of one batch (c's row stride g.n).
// beta 1: c += the product (Linear's bias, written into c first).
template <typename T>
void blas_tile(const GemmArgs& g, const MatrixOperand& a, const MatrixOperand& b, const T* pa,
               const T* pb, T* pc, int64_t m0, int64_t m1, int64_t n0, int64_t n1, T beta) {
  const auto ta = a.transposed ? CblasTrans : CblasNoTrans;
  const auto tb = b.transposed ? CblasTrans : CblasNoTrans;
  const T* ta0 = pa + (a.transposed ? m0 : m0 * a.ld);  // row m0 of a
  const T* tb0 = pb + (b.transposed ? n0 * b.ld : n0);  // column n0 of b
  T* tc0 = pc + m0 * g.n + n0;
  const int m = static_cast<int>(m1 - m0), n = static_cast<int>(n1 - n0);
  const int k = static_cast<int>(g.k), ldc = static_cast<int>(g.n);
  const int lda = static_cast<int>(a.ld), ldb = static_cast<int>(b.ld);
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, 1.0f, ta0, lda, tb0, ldb, beta, tc0, ldc);
  else
    cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, 1.0, ta0, lda, tb0, ldb, beta, tc0, ldc);
}

// The grid pm x pn = tiles (pm dividing tiles) with the least m / pm + n / pn: the
// least of a and b each tile packs. On a tie, more row tiles: full-width tiles ran
// 1024^3 at 2 threads 17% faster than half-width ones on the development machine
// (tools/cpu_probe.cpp, OpenBLAS 0.3.21: 12.4 ms against 14.9 ms).
void tile_grid(int64_t m, int64_t n, int64_t tiles, int64_t& pm, int64_t& pn) {
  pm = 1;
  pn = tiles;
  double best = -1;
  for (int64_t d = 1; d <= tiles; ++d) {
    if (tiles % d != 0 || d > m || tiles / d > n) continue;
    const double cost = static_cast<double>(m) / d + static_cast<double>(n) / (tiles / d);
    if (best < 0 || cost <= best) {
      best = cost;
      pm = d;
      pn = tiles / d;
    }
  }
  if (best < 0) pm = pn = 1;
}

// bias (one row of n, or null): each tile first writes it into its block of c and its
// product adds to it (beta 1), on the thread that runs the tile, so Linear's bias costs
// no pass of its own and no hand-over of c between threads.
template <typename T>
void blas_batched(const GemmArgs& g, const MatrixOperand& a, const MatrixOperand& b, T* c,
                  T beta = T(0), const T* bias = nullptr) {
  const T* pa = static_cast<const T*>(a.data);
  const T* pb = static_cast<const T*>(b.data);
  const double mnk = static_cast<double>(g.m) * static_cast<double>(g.n) * static_cast<double>(g.k);
  auto run_tile = [&](int64_t t, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
    T* ct = c + t * g.m * g.n;
    if (bias != nullptr)
      for (int64_t r = m0; r < m1; ++r) std::copy(bias + n0, bias + n1, ct + r * g.n + n0);
    blas_tile<T>(g, a, b, pa + t * a.batch_stride, pb + t * b.batch_stride, ct, m0, m1, n0, n1,
                 bias != nullptr ? T(1) : beta);
  };
  auto whole = [&](int64_t t) { run_tile(t, 0, g.m, 0, g.n); };
  if (g.batch > 1 && mnk <= kTileMnk) {
    parallel_for(g.batch, std::max<int64_t>(1, static_cast<int64_t>(kTileMnk / 4 / mnk)),
                 [&](int64_t lo, int64_t hi) {
                   for (int64_t t = lo; t < hi; ++t) whole(t);
                 });
    return;
  }
  const int64_t tiles = chunk_count(static_cast<int64_t>(mnk / kTileMnk), 1);
  if (tiles <= 1) {
    for (int64_t t = 0; t < g.batch; ++t) whole(t);
    return;
  }
  int64_t pm = 1, pn = 1;
  tile_grid(g.m, g.n, tiles, pm, pn);
  for (int64_t t = 0; t < g.batch; ++t)
    parallel_chunks(pm * pn, pm * pn, [&](int64_t tile, int64_t, int64_t) {
      const auto [m0, m1] = chunk_bounds(g.m, pm, tile / pn);
      const auto [n0, n1] = chunk_bounds(g.n, pn, tile % pn);
      run_tile(t, m0, m1, n0, n1);
    });
}

// bfloat16 operand -> a float32 copy laid out as the original (same ld, batch stride).
std::vector<float> widened(const MatrixOperand& op, int64_t batch, int64_t rows, int64_t cols,
                           MatrixOperand& out) {
  const int64_t inner = op.transposed ? rows : cols, outer = op.transposed ? cols : rows;
  const int64_t per = (outer - 1) * op.ld + inner;  // elements one batch spans
  const int64_t batches = op.batch_stride == 0 ? 1 : batch;
  std::vector<float> w(static_cast<size_t>(batches * per));
  const BFloat16* src = static_cast<const BFloat16*>(op.data);
  for (int64_t t = 0; t < batches; ++t)
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i)
        w[t * per + o * op.ld + i] = static_cast<float>(src[t * op.batch_stride + o * op.ld + i]);
  out = op;
  out.data = w.data();
  out.batch_stride = op.batch_stride == 0 ? 0 : per;
  return w;
}
#endif

}  // namespace

void gemm_reference(const GemmArgs& g) {
  dispatch_cpu(g.dtype, [&](auto tag) {
    using S = decltype(tag);
    std::vector<double> acc(static_cast<size_t>(g.n));
    S* pc = static_cast<S*>(g.c);
    for (int64_t t = 0; t < g.batch; ++t) {
      for (int64_t i = 0; i < g.m; ++i) {
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t p = 0; p < g.k; ++p) {
          const double aip = element<S>(g.a, t, i, p);
          for (int64_t j = 0; j < g.n; ++j) acc[j] += aip * element<S>(g.b, t, p, j);
        }
        S* row = pc + (t * g.m + i) * g.n;
        for (int64_t j = 0; j < g.n; ++j) store_from_double(row + j, acc[j]);
      }
    }
  });
}

std::string blas_core() {
#if EMBER_HAS_OPENBLAS
  const char* name = openblas_get_corename();
  return name != nullptr ? name : "";
#else
  return "";
#endif
}

bool blas_core_is_fallback(std::string_view core, bool cpu_has_avx2_fma) {
  if (!cpu_has_avx2_fma || core.empty()) return false;
  std::string lower(core);
  for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  // OpenBLAS's x86-64 kernel sets without AVX2 and FMA (driver/others/dynamic.c).
  static const char* const kOld[] = {
      "katmai", "coppermine",  "northwood", "prescott",  "banias",     "atom",          "core2",
      "penryn", "dunnington",  "nehalem",   "athlon",    "opteron",    "opteron(sse3)", "barcelona",
      "nano",   "sandybridge", "bobcat",    "bulldozer", "piledriver", "steamroller"};
  for (const char* old : kOld)
    if (lower == old) return true;
  return false;
}

const char* blas_coretype_for(bool cpu_has_avx512) {
  return cpu_has_avx512 ? "SkylakeX" : "Haswell";
}

namespace {

#if EMBER_HAS_OPENBLAS
bool cpu_has_avx2_fma() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

bool cpu_has_avx512() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
#else
  return false;
#endif
}

// When ember's library loads: OpenBLAS on one thread (see kTileMnk), and its own
// threads stopped. OpenBLAS's pthread build starts a server thread per core when it
// loads, and each spins (sched_yield) for about 2^28 cycles waiting for work before it
// sleeps, whether or not a product ever runs. That spinning took cores from ember's
// pool in a process's first tenths of a second: on the 2-core development machine a
// 2-thread layer norm (bench_cpu, 512x256) took the one-thread time, 0.029-0.031 ms, in
// 9 of 12 processes, and about 0.015 ms in most with OPENBLAS_NUM_THREADS=1 or with
// this (2026-12-04; docs/cpu.md has the counts). ember never asks OpenBLAS for threads, so stopping
// them loses nothing (OpenBLAS would start them again if asked).
void blas_threads_off() {
  openblas_set_num_threads(1);
  if (blas_thread_shutdown_ != nullptr) blas_thread_shutdown_();
}
[[maybe_unused]] const bool kBlasThreadsOff = (blas_threads_off(), true);

// Once per process, at the first product: a warning when OpenBLAS's kernels are older
// than the CPU.
void blas_setup() {
  const std::string core = blas_core();
  if (!blas_core_is_fallback(core, cpu_has_avx2_fma())) return;
  const char* asked = std::getenv("OPENBLAS_CORETYPE");
  const std::string why = asked != nullptr && asked[0] != '\0'
                              ? std::string("OPENBLAS_CORETYPE=") + asked + " asked for them"
                              : std::string("OpenBLAS does not know this CPU model");
  const bool avx512 = cpu_has_avx512();
  std::fprintf(stderr,
               "ember: OpenBLAS picked its %s kernels, older than this CPU (it has AVX2 and "
               "FMA%s; %s): CPU matrix products run several times slower than they could. "
               "Start the program with OPENBLAS_CORETYPE=%s in the environment (OpenBLAS reads "
               "it when it loads).\n",
               core.c_str(), avx512 ? ", AVX-512" : "", why.c_str(), blas_coretype_for(avx512));
}

// blas_setup once per process, whichever product comes first.
void blas_ready() {
  static const bool ready = (blas_setup(), true);
  (void)ready;
}
#endif

// Whether every size fits the CBLAS interface's int.
bool fits_cblas_int(std::initializer_list<int64_t> v) {
  constexpr int64_t kIntMax = 2147483647;
  return std::all_of(v.begin(), v.end(), [](int64_t x) { return x <= kIntMax; });
}

}  // namespace

bool gemm_blas(const GemmArgs& g) {
#if EMBER_HAS_OPENBLAS
  blas_ready();
  if (!fits_cblas_int({g.m, g.n, g.k, g.a.ld, g.b.ld})) return false;
  switch (g.dtype) {
    case DType::Float32:
      blas_batched<float>(g, g.a, g.b, static_cast<float*>(g.c));
      return true;
    case DType::Float64:
      blas_batched<double>(g, g.a, g.b, static_cast<double*>(g.c));
      return true;
    case DType::BFloat16: {
      MatrixOperand a32, b32;
      const std::vector<float> wa = widened(g.a, g.batch, g.m, g.k, a32);
      const std::vector<float> wb = widened(g.b, g.batch, g.k, g.n, b32);
      const int64_t count = g.batch * g.m * g.n;
      std::vector<float> c32(static_cast<size_t>(count));
      blas_batched<float>(g, a32, b32, c32.data());
      BFloat16* c = static_cast<BFloat16*>(g.c);
      for (int64_t i = 0; i < count; ++i) c[i] = BFloat16(c32[i]);
      return true;
    }
    default:
      return false;
  }
#else
  (void)g;
  return false;
#endif
}

#if EMBER_HAS_OPENBLAS
namespace {

// y = x w^T + b through one sgemm/dgemm per tile: each tile writes the bias into its
// block of y first and adds its product to it (beta 1), which saves the composed path's
// second pass over y; then the activation in place by the registered element-wise
// kernel (pre, when asked for, gets x w^T + b before it).
template <typename T>
void linear_blas(const LinearArgs& a) {
  T* y = static_cast<T*>(a.y);
  const T* b = static_cast<const T*>(a.b);
  const int64_t count = a.m * a.n;
  if (a.k == 0) {  // no product (CBLAS would refuse its leading dimensions): y = b or 0
    if (b == nullptr)
      std::fill(y, y + count, T(0));
    else
      for (int64_t r = 0; r < a.m; ++r) std::copy(b, b + a.n, y + r * a.n);
  } else {
    // b (k, n) read as w (n, k) transposed, in place
    const GemmArgs g{
        a.device, a.dtype, 1, a.m, a.n, a.k, {a.x, false, a.ldx, 0}, {a.w, true, a.ldw, 0}, a.y};
    blas_batched<T>(g, g.a, g.b, y, T(0), b);
  }
  if (a.act == Activation::None) return;
  const void* src = a.y;
  if (a.pre != nullptr) {
    T* pre = static_cast<T*>(a.pre);
    parallel_for(count, kElementwiseGrain,
                 [&](int64_t lo, int64_t hi) { std::copy(y + lo, y + hi, pre + lo); });
    src = a.pre;
  }
  StridedLayout l{};
  l.ndim = 1;
  l.sizes[0] = count;
  l.strides[0] = 1;
  kernels_for(a.device).unary(
      {a.device, unary_op_of(a.act), a.dtype, src, l, a.y, l, count, 0.0, a.dtype});
}

}  // namespace
#endif

// Both backward products want m, n, k >= 1 (matmul takes the empty ones).
bool linear_input_grad_takes(const LinearInputGradArgs& a) {
  return linear_fused_supported(a.dtype) && a.m > 0 && a.n > 0 && a.k > 0 &&
         fits_cblas_int({a.m, a.n, a.k, a.ldd, a.ldw});
}

// Not a sum into d_w, nor a float32 d_w from other operands: the op composes those.
bool linear_weight_grad_takes(const LinearWeightGradArgs& a) {
  return linear_fused_supported(a.dtype) && a.d_b == nullptr && !a.accumulate &&
         (!a.d_w_float32 || a.dtype == DType::Float32) && a.m > 0 && a.n > 0 && a.k > 0 &&
         fits_cblas_int({a.m, a.n, a.k, a.ldx});
}

// Both as gemm_blas's products (which the *_takes answers above admit).
bool linear_input_grad(const LinearInputGradArgs& a) {
  if (!linear_input_grad_takes(a)) return false;
  // d_x (m, k) = d_y (m, n) w (n, k): both read as stored.
  const GemmArgs g{
      a.device, a.dtype, 1, a.m, a.k, a.n, {a.d_y, false, a.ldd, 0}, {a.w, false, a.ldw, 0}, a.d_x};
  return gemm_blas(g);
}

bool linear_weight_grad(const LinearWeightGradArgs& a) {
  if (!linear_weight_grad_takes(a)) return false;
  // d_w (n, k) = d_y^T (n, m) x (m, k): d_y (m, n) read transposed in place.
  const GemmArgs g{
      a.device, a.dtype, 1, a.n, a.k, a.m, {a.d_y, true, a.n, 0}, {a.x, false, a.ldx, 0}, a.d_w};
  return gemm_blas(g);
}

bool linear_fused_supported(DType dtype) {
#if EMBER_HAS_OPENBLAS
  return fast_paths() && (dtype == DType::Float32 || dtype == DType::Float64);
#else
  (void)dtype;
  return false;
#endif
}

void linear_fused(const LinearArgs& a) {
  EMBER_CHECK(linear_fused_supported(a.dtype), "linear: the CPU's fused Linear does not take ",
              dtype_name(a.dtype), " (its predicate said no)");
#if EMBER_HAS_OPENBLAS
  blas_ready();
  EMBER_CHECK(fits_cblas_int({a.m, a.n, a.k, a.ldx, a.ldw}),
              "linear: sizes beyond the CBLAS interface's int (", a.m, " x ", a.k, " -> ", a.n,
              ")");
  if (a.dtype == DType::Float32)
    linear_blas<float>(a);
  else
    linear_blas<double>(a);
#endif
}

}  // namespace cpu

namespace {

void gemm(const GemmArgs& g) {
  if (cpu::fast_paths() && cpu::gemm_blas(g)) return;
  cpu::gemm_reference(g);
}

// Linear on the CPU where OpenBLAS runs it (cpu::linear_fused): the forward fused,
// both backward products as single GEMMs; the bias gradient is linear()'s sum.
bool linear_fused_supported(const DTypeQuery& q) {
  return cpu::linear_fused_supported(q.dtype);
}

}  // namespace

}  // namespace ember::kernels

namespace ember {

std::string cpu_blas_info() {
#if EMBER_HAS_OPENBLAS
  const char* config = openblas_get_config();
  return std::string(config != nullptr ? config : "OpenBLAS") + " (" + kernels::cpu::blas_core() +
         " kernels)";
#else
  return "none: the reference loops";
#endif
}

}  // namespace ember

namespace ember::kernels {

void register_cpu_linalg(KernelFamilies& t) {
  t.gemm = &gemm;
  t.linear_fused_supported = &linear_fused_supported;
  t.linear_fused = &cpu::linear_fused;
  t.linear_input_grad = &cpu::linear_input_grad;
  t.linear_weight_grad_fused = &cpu::linear_weight_grad;
}

}  // namespace ember::kernels
