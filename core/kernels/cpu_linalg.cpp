// CPU matrix product (cpu_linalg.h): through OpenBLAS where ember was built with it
// (float32, float64; bfloat16 converted to float32 and back), the reference loops
// (double accumulation in i-k-j order) otherwise, and as the tests' oracle. Linear
// has no fused CPU kernel: its predicates are not registered, so they answer false
// and linear() composes matmul, add and the activation.
#include "core/kernels/cpu_linalg.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <string>
#include <type_traits>
#include <vector>

#include "core/kernels/cpu_loops.h"
#include "core/kernels/cpu_parallel.h"
#include "core/kernels/registration.h"
#include "core/threads.h"

#if EMBER_HAS_OPENBLAS
#include <cblas.h>
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
template <typename T>
void blas_tile(const GemmArgs& g, const MatrixOperand& a, const MatrixOperand& b, const T* pa,
               const T* pb, T* pc, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
  const auto ta = a.transposed ? CblasTrans : CblasNoTrans;
  const auto tb = b.transposed ? CblasTrans : CblasNoTrans;
  const T* ta0 = pa + (a.transposed ? m0 : m0 * a.ld);  // row m0 of a
  const T* tb0 = pb + (b.transposed ? n0 * b.ld : n0);  // column n0 of b
  T* tc0 = pc + m0 * g.n + n0;
  const int m = static_cast<int>(m1 - m0), n = static_cast<int>(n1 - n0);
  const int k = static_cast<int>(g.k), ldc = static_cast<int>(g.n);
  const int lda = static_cast<int>(a.ld), ldb = static_cast<int>(b.ld);
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, 1.0f, ta0, lda, tb0, ldb, 0.0f, tc0, ldc);
  else
    cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, 1.0, ta0, lda, tb0, ldb, 0.0, tc0, ldc);
}

// The grid pm x pn = tiles (pm dividing tiles) with the least m / pm + n / pn: the
// least of a and b each tile packs.
void tile_grid(int64_t m, int64_t n, int64_t tiles, int64_t& pm, int64_t& pn) {
  pm = 1;
  pn = tiles;
  double best = -1;
  for (int64_t d = 1; d <= tiles; ++d) {
    if (tiles % d != 0 || d > m || tiles / d > n) continue;
    const double cost = static_cast<double>(m) / d + static_cast<double>(n) / (tiles / d);
    if (best < 0 || cost < best) {
      best = cost;
      pm = d;
      pn = tiles / d;
    }
  }
  if (best < 0) pm = pn = 1;
}

template <typename T>
void blas_batched(const GemmArgs& g, const MatrixOperand& a, const MatrixOperand& b, T* c) {
  const T* pa = static_cast<const T*>(a.data);
  const T* pb = static_cast<const T*>(b.data);
  const double mnk = static_cast<double>(g.m) * static_cast<double>(g.n) * static_cast<double>(g.k);
  auto whole = [&](int64_t t) {
    return blas_tile<T>(g, a, b, pa + t * a.batch_stride, pb + t * b.batch_stride,
                        c + t * g.m * g.n, 0, g.m, 0, g.n);
  };
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
      blas_tile<T>(g, a, b, pa + t * a.batch_stride, pb + t * b.batch_stride, c + t * g.m * g.n, m0,
                   m1, n0, n1);
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

namespace {

bool cpu_has_avx2_fma() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

// Once per process, at the first product: OpenBLAS on one thread (see kTileMnk), and
// a warning when its kernels are older than the CPU.
void blas_setup() {
#if EMBER_HAS_OPENBLAS
  openblas_set_num_threads(1);
  const std::string core = blas_core();
  if (blas_core_is_fallback(core, cpu_has_avx2_fma()))
    std::fprintf(stderr,
                 "ember: OpenBLAS picked its %s kernels, older than this CPU (it has AVX2 and "
                 "FMA): CPU matrix products run several times slower than they could. Start the "
                 "program with OPENBLAS_CORETYPE=Haswell (or SkylakeX where the CPU has "
                 "AVX-512) in the environment.\n",
                 core.c_str());
#endif
}

}  // namespace

bool gemm_blas(const GemmArgs& g) {
#if EMBER_HAS_OPENBLAS
  static const bool ready = (blas_setup(), true);
  (void)ready;
  constexpr int64_t kIntMax = 2147483647;  // the CBLAS interface's int
  if (g.m > kIntMax || g.n > kIntMax || g.k > kIntMax || g.a.ld > kIntMax || g.b.ld > kIntMax)
    return false;
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

}  // namespace cpu

namespace {

void gemm(const GemmArgs& g) {
  if (cpu::fast_paths() && cpu::gemm_blas(g)) return;
  cpu::gemm_reference(g);
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
}

}  // namespace ember::kernels
