// CPU matrix product (cpu_linalg.h): through OpenBLAS where ember was built with it
// (float32, float64; bfloat16 converted to float32 and back), the reference loops
// (double accumulation in i-k-j order) otherwise, and as the tests' oracle. Linear
// has no fused CPU kernel (it composes matmul, add and the activation).
#include "core/kernels/cpu_linalg.h"

#include <algorithm>
#include <type_traits>
#include <vector>

#include "core/kernels/cpu_loops.h"
#include "core/kernels/cpu_parallel.h"
#include "core/kernels/registration.h"

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
// Products up to this many multiply-adds OpenBLAS runs on the calling thread
// (interface/gemm.c: 65536 * GEMM_MULTITHREAD_THRESHOLD, 4 by default); batches
// of them are spread over ember's pool instead, one single-threaded sgemm each.
constexpr double kBlasSerialMnk = 65536.0 * 4;

template <typename T>
void blas_one(const GemmArgs& g, const MatrixOperand& a, const MatrixOperand& b, const T* pa,
              const T* pb, T* pc) {
  const auto ta = a.transposed ? CblasTrans : CblasNoTrans;
  const auto tb = b.transposed ? CblasTrans : CblasNoTrans;
  const int m = static_cast<int>(g.m), n = static_cast<int>(g.n), k = static_cast<int>(g.k);
  const int lda = static_cast<int>(a.ld), ldb = static_cast<int>(b.ld);
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, 1.0f, pa, lda, pb, ldb, 0.0f, pc, n);
  else
    cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, 1.0, pa, lda, pb, ldb, 0.0, pc, n);
}

template <typename T>
void blas_batched(const GemmArgs& g, const MatrixOperand& a, const MatrixOperand& b, T* c) {
  const T* pa = static_cast<const T*>(a.data);
  const T* pb = static_cast<const T*>(b.data);
  auto run = [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t)
      blas_one<T>(g, a, b, pa + t * a.batch_stride, pb + t * b.batch_stride, c + t * g.m * g.n);
  };
  const double mnk = static_cast<double>(g.m) * static_cast<double>(g.n) * static_cast<double>(g.k);
  if (g.batch > 1 && mnk <= kBlasSerialMnk)
    parallel_for(g.batch, std::max<int64_t>(1, static_cast<int64_t>(16384.0 / mnk)), run);
  else
    run(0, g.batch);
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

bool gemm_blas(const GemmArgs& g) {
#if EMBER_HAS_OPENBLAS
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

bool unsupported(const DTypeQuery&) {
  return false;
}

}  // namespace

void register_cpu_linalg(KernelTable& t) {
  t.gemm = &gemm;
  t.linear_fused_supported = &unsupported;
  t.linear_fuses_bias_grad = &unsupported;
  t.mse_fused_supported = &unsupported;
}

}  // namespace ember::kernels
