// sort, argsort and topk. One kernel family (sort: the stable order of each row's
// positions, core/kernel_table.h) gives the indices; the values are gathered
// through them (gather), so the values' gradient is gather's: scattered back to
// the positions they came from.
#include "core/alloc_site.h"
#include "core/autograd.h"
#include "core/kernel_table.h"
#include "core/ops.h"

namespace ember {

namespace {

// The int64 indices that sort x along dim (stable; NaN largest).
Tensor sort_indices(const Tensor& x, int64_t dim, bool descending) {
  // Integers are ordered through float64 (exact below 2^53).
  const Tensor keys = is_floating(x.dtype()) ? x.detach() : cast(x.detach(), kFloat64);
  const Tensor xt = contiguous(transpose(keys, dim, -1));
  Tensor it = empty(xt.sizes(), TensorOptions(kInt64).device(x.device()));
  const int64_t n = xt.size(-1);
  if (it.numel() > 0) {
    const int64_t rows = it.numel() / n;
    const kernels::KernelTable& k = kernels::kernels_for(x.device());
    const size_t bytes = k.sort_workspace_bytes({x.device(), xt.dtype(), rows, n});
    Tensor ws;
    if (bytes > 0)
      ws = empty({static_cast<int64_t>((bytes + 7) / 8)}, TensorOptions(kInt64).device(x.device()));
    k.sort({x.device(), xt.dtype(), xt.raw_data(), it.data_ptr<int64_t>(), rows, n, descending,
            ws.defined() ? ws.raw_data() : nullptr});
  }
  return contiguous(transpose(it, dim, -1));
}

int64_t sort_dim(const char* op, const Tensor& x, int64_t dim) {
  check_defined(op, x);
  // A 0-dim tensor sorts as one element (dim 0 or -1), as torch's.
  return x.dim() == 0 ? (wrap_dim(dim, 1, op), 0) : wrap_dim(dim, x.dim(), op);
}

// x as the op sees it: a 0-dim tensor as a 1-element vector.
Tensor as_sortable(const Tensor& x) {
  return x.dim() == 0 ? reshape(x, {1}) : x;
}

// Back to a 0-dim result where x was 0-dim and one element is kept.
ValuesAndIndices shaped_like(const Tensor& x, Tensor values, Tensor indices) {
  if (x.dim() == 0 && values.numel() == 1) return {reshape(values, {}), reshape(indices, {})};
  return {values, indices};
}

}  // namespace

ValuesAndIndices sort(const Tensor& x, int64_t dim, bool descending, bool stable) {
  OpSite site("sort");
  dim = sort_dim("sort", x, dim);
  (void)stable;  // always stable
  const Tensor xs = as_sortable(x);
  Tensor indices = sort_indices(xs, dim, descending);
  return shaped_like(x, gather(xs, dim, indices), indices);
}

Tensor argsort(const Tensor& x, int64_t dim, bool descending, bool stable) {
  OpSite site("argsort");
  dim = sort_dim("argsort", x, dim);
  (void)stable;
  const Tensor xs = as_sortable(x);
  return shaped_like(x, xs, sort_indices(xs, dim, descending)).indices;
}

ValuesAndIndices topk(const Tensor& x, int64_t k, int64_t dim, bool largest, bool sorted) {
  OpSite site("topk");
  dim = sort_dim("topk", x, dim);
  const Tensor xs = as_sortable(x);
  EMBER_CHECK(k >= 0 && k <= xs.size(dim), "topk: k ", k, " is out of range for dim ", dim,
              " of size ", xs.size(dim), " (input of shape ", shape_str(x.sizes()), ")");
  (void)sorted;  // the k are always in order
  const Tensor all = sort_indices(xs, dim, largest);
  Tensor indices = contiguous(slice(all, dim, 0, k));
  return shaped_like(x, gather(xs, dim, indices), indices);
}

}  // namespace ember
