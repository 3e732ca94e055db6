// CPU reductions over the middle axis of (outer, n, inner), accumulating in double
// (sum spread over the thread pool by outputs).
// NaN counts as the extreme value in max and min, as in PyTorch.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/kernels/cpu_loops.h"
#include "core/kernels/cpu_parallel.h"
#include "core/kernels/registration.h"

namespace ember::kernels {

namespace {

using detail::dispatch_cpu;
using detail::load_as_double;
using detail::store_from_double;

// Rows (outer) or columns (inner) are spread over the thread pool; each output is
// summed over k in order whatever the split: the same bits at every thread count.
void sum(const SumArgs& a) {
  dispatch_cpu(a.dtype, [&](auto tag) {
    using S = decltype(tag);
    const S* px = static_cast<const S*>(a.x);
    S* py = static_cast<S*>(a.y);
    // outputs o in [o0, o1), columns i in [i0, i1)
    auto block = [&](int64_t o0, int64_t o1, int64_t i0, int64_t i1) {
      std::vector<double> acc(static_cast<size_t>(i1 - i0));
      for (int64_t o = o0; o < o1; ++o) {
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t k = 0; k < a.n; ++k) {
          const S* row = px + (o * a.n + k) * a.inner + i0;
          for (int64_t i = 0; i < i1 - i0; ++i) acc[i] += load_as_double(row + i);
        }
        for (int64_t i = i0; i < i1; ++i)
          store_from_double(py + o * a.inner + i,
                            a.mean ? acc[i - i0] / static_cast<double>(a.n) : acc[i - i0]);
      }
    };
    const int64_t n = std::max<int64_t>(1, a.n), g = cpu::kElementwiseGrain;
    if (a.outer >= a.inner)
      cpu::parallel_for(a.outer, std::max<int64_t>(1, g / (n * std::max<int64_t>(1, a.inner))),
                        [&](int64_t lo, int64_t hi) { block(lo, hi, 0, a.inner); });
    else
      cpu::parallel_for(a.inner, std::max<int64_t>(1, g / (n * std::max<int64_t>(1, a.outer))),
                        [&](int64_t lo, int64_t hi) { block(0, a.outer, lo, hi); });
  });
}

void max(const MaxArgs& a) {
  dispatch_cpu(a.dtype, [&](auto tag) {
    using S = decltype(tag);
    const S* px = static_cast<const S*>(a.x);
    S* pv = static_cast<S*>(a.values);
    std::vector<double> best(static_cast<size_t>(a.inner));
    for (int64_t o = 0; o < a.outer; ++o) {
      int64_t* arg = a.indices + o * a.inner;
      for (int64_t i = 0; i < a.inner; ++i) {
        best[i] = load_as_double(px + o * a.n * a.inner + i);
        arg[i] = 0;
      }
      for (int64_t k = 1; k < a.n; ++k) {
        const S* row = px + (o * a.n + k) * a.inner;
        for (int64_t i = 0; i < a.inner; ++i) {
          double v = load_as_double(row + i);
          if (!std::isnan(best[i]) && (std::isnan(v) || (a.min ? v < best[i] : v > best[i]))) {
            best[i] = v;
            arg[i] = k;
          }
        }
      }
      if (pv)
        for (int64_t i = 0; i < a.inner; ++i) store_from_double(pv + o * a.inner + i, best[i]);
    }
  });
}

void max_backward(const MaxBackwardArgs& a) {
  dispatch_cpu(a.dtype, [&](auto tag) {
    using S = decltype(tag);
    const S* pg = static_cast<const S*>(a.d_out);
    S* pd = static_cast<S*>(a.d_inp);
    for (int64_t o = 0; o < a.outer; ++o)
      for (int64_t k = 0; k < a.n; ++k)
        for (int64_t i = 0; i < a.inner; ++i) {
          const int64_t oi = o * a.inner + i;
          store_from_double(pd + (o * a.n + k) * a.inner + i,
                            a.indices[oi] == k ? load_as_double(pg + oi) : 0.0);
        }
  });
}

size_t no_workspace(const ReduceShape&) {
  return 0;
}

}  // namespace

void register_cpu_reduce(KernelFamilies& t) {
  t.sum = &sum;
  t.sum_workspace_bytes = &no_workspace;
  t.max = &max;
  t.max_workspace_bytes = &no_workspace;
  t.max_backward = &max_backward;
}

}  // namespace ember::kernels
