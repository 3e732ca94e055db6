// CPU indexing: plain loops, the reference for cuda/kernels/index.cu. An index out
// of range throws at once, naming the op; the backward adds in index order.
#include <cstring>

#include "core/base/error.h"
#include "core/kernels/cpu_loops.h"
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

void index_add(const IndexAddArgs& a) {
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

void register_cpu_index(KernelTable& t) {
  t.index_select = &index_select;
  t.index_add = &index_add;
  t.index_add_workspace_bytes = &no_workspace;
  t.gather = &gather;
  t.scatter_add = &scatter_add;
  t.scatter_add_workspace_bytes = &no_workspace;
}

}  // namespace ember::kernels
