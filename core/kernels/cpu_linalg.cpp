// CPU matrix product: the reference, accumulating in double in i-k-j order. Linear
// has no fused CPU kernel: its predicates are not registered, so they answer
// false and linear() composes matmul, add and the activation.
#include <vector>

#include "core/kernels/cpu_loops.h"
#include "core/kernels/registration.h"

namespace ember::kernels {

namespace {

using detail::dispatch_cpu;
using detail::load_as_double;
using detail::store_from_double;

template <typename S>
double element(const MatrixOperand& op, int64_t batch, int64_t r, int64_t c) {
  const S* p = static_cast<const S*>(op.data) + batch * op.batch_stride;
  return load_as_double(p + (op.transposed ? c * op.ld + r : r * op.ld + c));
}

void gemm(const GemmArgs& g) {
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

}  // namespace

void register_cpu_linalg(KernelTable& t) {
  t.gemm = &gemm;
}

}  // namespace ember::kernels
