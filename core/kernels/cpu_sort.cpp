// CPU scans and sorting: cumsum over the middle axis of (outer, n, inner),
// accumulating in double; sort as std::stable_sort of each row's positions by
// sort_key (core/base/sort_key.h), the order CUDA's radix sort gives too.
#include <algorithm>
#include <numeric>
#include <vector>

#include "core/base/sort_key.h"
#include "core/kernels/cpu_loops.h"
#include "core/kernels/registration.h"

namespace ember::kernels {

namespace {

using detail::dispatch_cpu;
using detail::load_as_double;
using detail::store_from_double;

void cumsum(const CumsumArgs& a) {
  dispatch_cpu(a.dtype, [&](auto tag) {
    using S = decltype(tag);
    const S* x = static_cast<const S*>(a.x);
    S* y = static_cast<S*>(a.y);
    for (int64_t o = 0; o < a.outer; ++o)
      for (int64_t i = 0; i < a.inner; ++i) {
        double acc = 0.0;
        for (int64_t j = 0; j < a.n; ++j) {
          const int64_t k = a.reverse ? a.n - 1 - j : j;
          const int64_t at = (o * a.n + k) * a.inner + i;
          acc += load_as_double(x + at);
          store_from_double(y + at, acc);
        }
      }
  });
}

void sort(const SortArgs& a) {
  dispatch_cpu(a.dtype, [&](auto tag) {
    using S = decltype(tag);
    const S* x = static_cast<const S*>(a.x);
    std::vector<uint64_t> keys(static_cast<size_t>(a.n));
    for (int64_t r = 0; r < a.rows; ++r) {
      const S* row = x + r * a.n;
      int64_t* idx = a.indices + r * a.n;
      for (int64_t j = 0; j < a.n; ++j) keys[j] = sort_key(load_as_double(row + j), a.descending);
      std::iota(idx, idx + a.n, int64_t{0});
      std::stable_sort(idx, idx + a.n, [&](int64_t p, int64_t q) { return keys[p] < keys[q]; });
    }
  });
}

size_t no_workspace(const SortQuery&) {
  return 0;
}

}  // namespace

void register_cpu_sort(KernelFamilies& t) {
  t.cumsum = &cumsum;
  t.sort = &sort;
  t.sort_workspace_bytes = &no_workspace;
}

}  // namespace ember::kernels
