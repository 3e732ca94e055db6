// CPU indexing: plain loops, the reference for cuda/kernels/index.cu. An index out
// of range throws at once, naming the op; the backward adds in index order.
// index_add (the backward of embedding and index_select) has a fast path when
// cpu::fast_paths(): the destination rows are split over the thread pool, each
// chunk owning a range of rows and adding into them, in index order, the source
// rows that land there (float32 and float64 as plain adds in their own type, which
// round as the reference's double add; other dtypes through double as the
// reference). So every destination element sees the same additions in the same
// order as the reference loop: the same bits at every thread count.
#include <algorithm>
#include <cstring>
#include <type_traits>

#include "core/base/error.h"
#include "core/kernels/cpu_loops.h"
#include "core/kernels/cpu_parallel.h"
#include "core/kernels/registration.h"

namespace ember::kernels {

namespace {

using detail::dispatch_cpu;
using detail::load_as_double;
using detail::store_from_double;

void check_index(const char* op, int64_t idx, int64_t n, const char* what = "index") {
  EMBER_CHECK(idx >= 0 && idx < n, op, ": ", what, " ", idx, " is out of range [0, ", n, ")");
}

void index_select(const IndexSelectArgs& a) {
  for (int64_t j = 0; j < a.k; ++j) check_index(a.op, a.index[j], a.n);  // before writing
  const size_t es = element_size(a.dtype);
  const char* x = static_cast<const char*>(a.x);
  char* out = static_cast<char*>(a.out);
  const size_t row = static_cast<size_t>(a.inner) * es;
  for (int64_t o = 0; o < a.outer; ++o)
    for (int64_t j = 0; j < a.k; ++j)
      std::memcpy(out + static_cast<size_t>(o * a.k + j) * row,
                  x + static_cast<size_t>(o * a.n + a.index[j]) * row, row);
}

// dst[o, idx[j], :] += src[o, j, :] for the destination rows [lo, hi) of the
// (outer * n) rows, j in index order.
template <typename S>
void index_add_rows(const IndexAddArgs& a, int64_t lo, int64_t hi) {
  const S* src = static_cast<const S*>(a.src);
  S* dst = static_cast<S*>(a.dst);
  const int64_t inner = a.inner;
  for (int64_t o = lo / a.n; o < a.outer && o * a.n < hi; ++o) {
    const int64_t first = std::max<int64_t>(lo - o * a.n, 0);
    const int64_t last = std::min<int64_t>(hi - o * a.n, a.n);  // rows [first, last) of o
    for (int64_t j = 0; j < a.k; ++j) {
      const int64_t idx = a.index[j];
      if (idx < first || idx >= last) continue;  // another chunk's row, or out of range
      S* __restrict d = dst + (o * a.n + idx) * inner;
      const S* __restrict s = src + (o * a.k + j) * inner;
      if constexpr (std::is_same_v<S, float> || std::is_same_v<S, double>) {
        for (int64_t i = 0; i < inner; ++i) d[i] += s[i];
      } else {
        for (int64_t i = 0; i < inner; ++i)
          store_from_double(d + i, load_as_double(d + i) + load_as_double(s + i));
      }
    }
  }
}

void index_add(const IndexAddArgs& a) {
  if (cpu::fast_paths() && a.n > 0 && a.outer > 0 && a.inner > 0) {
    const int64_t rows = a.outer * a.n;
    // Chunks by the work (k * outer * inner additions), at most one a destination row.
    const int64_t work = a.k * a.outer * a.inner;
    const int64_t chunks = std::min(rows, cpu::chunk_count(work, cpu::kElementwiseGrain));
    dispatch_cpu(a.dtype, [&](auto tag) {
      using S = decltype(tag);
      cpu::parallel_chunks(rows, chunks,
                           [&](int64_t, int64_t lo, int64_t hi) { index_add_rows<S>(a, lo, hi); });
    });
    return;
  }
  dispatch_cpu(a.dtype, [&](auto tag) {
    using S = decltype(tag);
    const S* src = static_cast<const S*>(a.src);
    S* dst = static_cast<S*>(a.dst);
    for (int64_t o = 0; o < a.outer; ++o)
      for (int64_t j = 0; j < a.k; ++j) {
        const int64_t idx = a.index[j];
        if (idx < 0 || idx >= a.n) continue;
        for (int64_t i = 0; i < a.inner; ++i) {
          S* d = dst + (o * a.n + idx) * a.inner + i;
          store_from_double(d,
                            load_as_double(d) + load_as_double(src + (o * a.k + j) * a.inner + i));
        }
      }
  });
}

// Offset in x (contiguous, x_sizes) of element p of index (sizes) read by gather.
int64_t gather_offset(const int64_t* sizes, const int64_t* x_sizes, int ndim, int dim, int64_t p,
                      int64_t idx) {
  int64_t off = 0, stride = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    const int64_t c = p % sizes[d];
    p /= sizes[d];
    off += (d == dim ? idx : c) * stride;
    stride *= x_sizes[d];
  }
  return off;
}

void gather(const GatherArgs& a) {
  for (int64_t p = 0; p < a.n; ++p)
    check_index(a.op, a.index[p], a.x_sizes[a.dim], a.targets ? "target" : "index");
  dispatch_cpu(a.dtype, [&](auto tag) {
    using S = decltype(tag);
    const S* x = static_cast<const S*>(a.x);
    S* out = static_cast<S*>(a.out);
    for (int64_t p = 0; p < a.n; ++p)
      out[p] = x[gather_offset(a.sizes, a.x_sizes, a.ndim, a.dim, p, a.index[p])];
  });
}

void scatter_add(const ScatterAddArgs& a) {
  dispatch_cpu(a.dtype, [&](auto tag) {
    using S = decltype(tag);
    const S* src = static_cast<const S*>(a.src);
    S* dst = static_cast<S*>(a.dst);
    for (int64_t p = 0; p < a.n; ++p) {
      const int64_t idx = a.index[p];
      if (idx < 0 || idx >= a.x_sizes[a.dim]) continue;
      S* d = dst + gather_offset(a.sizes, a.x_sizes, a.ndim, a.dim, p, idx);
      store_from_double(d, load_as_double(d) + load_as_double(src + p));
    }
  });
}

size_t no_workspace(const ScatterQuery&) {
  return 0;
}

}  // namespace

void register_cpu_index(KernelFamilies& t) {
  t.index_select = &index_select;
  t.index_add = &index_add;
  t.index_add_workspace_bytes = &no_workspace;
  t.gather = &gather;
  t.scatter_add = &scatter_add;
  t.scatter_add_workspace_bytes = &no_workspace;
}

}  // namespace ember::kernels
