// Indexing: index_select, gather, embedding, one_hot and stack. Forward selects
// through the device's index kernels, which check every index (the CPU throws at
// once; CUDA records the first bad one and ember raises it at the next host
// synchronisation, see cuda/device_error.h). Backward adds each gradient back
// where its value came from, in a fixed order on every device (no atomics), so
// repeated indices give the same bits run after run.
#include <vector>

#include "core/alloc_site.h"
#include "core/autograd.h"
#include "core/kernel_table.h"
#include "core/ops.h"

namespace ember {

using Grads = std::vector<Tensor>;

namespace {

Tensor workspace_of(size_t bytes, Device device) {
  if (bytes == 0) return Tensor();
  return empty({static_cast<int64_t>((bytes + 7) / 8)}, TensorOptions(kFloat64).device(device));
}
void* ptr_or_null(const Tensor& t) {
  return t.defined() ? t.raw_data() : nullptr;
}

void check_index_tensor(const char* op, const Tensor& index, const Tensor& x, const char* what) {
  check_defined(op, index, what);
  EMBER_CHECK(index.dtype() == kInt64, op, ": ", what, " must be an int64 tensor, got ",
              index.dtype(), " of shape ", shape_str(index.sizes()));
  check_same_device(op, x, index);
}

// x (..., n, ...) seen as (outer, n, inner) around dim.
struct Rows {
  int64_t outer = 1, n = 1, inner = 1;
};
Rows rows_around(const Shape& s, int64_t dim) {
  Rows r;
  for (int64_t d = 0; d < static_cast<int64_t>(s.size()); ++d) {
    if (d < dim)
      r.outer *= s[d];
    else if (d == dim)
      r.n = s[d];
    else
      r.inner *= s[d];
  }
  return r;
}

// x at entries idx (1-D, contiguous) along dim: out.size(dim) == idx.numel().
Tensor select_rows(const Tensor& x, int64_t dim, const Tensor& idx, const char* op) {
  const Rows r = rows_around(x.sizes(), dim);
  Shape out_sizes = x.sizes();
  out_sizes[dim] = idx.numel();
  Tensor out = empty(out_sizes, x.options());
  if (out.numel() == 0) return out;
  const Tensor xc = contiguous(x.detach());
  kernels::kernels_for(x.device())
      .index_select({x.device(), x.dtype(), op, xc.raw_data(), idx.data_ptr<int64_t>(),
                     out.raw_data(), r.outer, r.n, idx.numel(), r.inner});
  return out;
}

// The gradient of select_rows: zeros of x_sizes with g's rows added at idx.
Tensor add_rows_back(const Tensor& g, const Tensor& idx, const Shape& x_sizes, int64_t dim) {
  const Rows r = rows_around(x_sizes, dim);
  Tensor d = zeros(x_sizes, g.options());
  if (g.numel() == 0) return d;
  const Tensor gc = contiguous(g);
  const kernels::KernelTable& k = kernels::kernels_for(g.device());
  const Tensor ws =
      workspace_of(k.index_add_workspace_bytes({g.device(), idx.numel(), r.n}), g.device());
  k.index_add({g.device(), g.dtype(), gc.raw_data(), idx.data_ptr<int64_t>(), d.raw_data(), r.outer,
               r.n, idx.numel(), r.inner, ptr_or_null(ws)});
  return d;
}

}  // namespace

// ---------------------------------------------------------------- index_select

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  OpSite site("index_select");
  check_defined("index_select", x);
  check_index_tensor("index_select", index, x, "index");
  EMBER_CHECK(index.dim() <= 1, "index_select: index must be 0-D or 1-D, got shape ",
              shape_str(index.sizes()));
  EMBER_CHECK(x.dim() >= 1, "index_select: the input must have at least one dim");
  dim = wrap_dim(dim, x.dim(), "index_select");
  const Tensor idx = contiguous(index.reshape({-1}));
  Tensor out = select_rows(x, dim, idx, "index_select");
  if (any_requires_grad({&x}))
    attach_grad_fn(out, "IndexSelectBackward", {&x}, {idx},
                   [dim, sizes = x.sizes()](const Tensor& g, const SavedTensors& s) {
                     return Grads{add_rows_back(g, s[0], sizes, dim)};
                   });
  return out;
}

// ---------------------------------------------------------------- index_add

Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& source,
                 double alpha) {
  OpSite site("index_add");
  check_defined("index_add", x);
  check_defined("index_add", source, "source");
  check_index_tensor("index_add", index, x, "index");
  check_same_device("index_add", x, source);
  check_same_dtype("index_add", x, source);
  EMBER_CHECK(index.dim() <= 1, "index_add: index must be 0-D or 1-D, got shape ",
              shape_str(index.sizes()));
  EMBER_CHECK(x.dim() >= 1, "index_add: the input must have at least one dim");
  dim = wrap_dim(dim, x.dim(), "index_add");
  const Tensor idx = contiguous(index.reshape({-1}));
  Shape expect = x.sizes();
  expect[dim] = idx.numel();
  EMBER_CHECK(source.sizes() == expect, "index_add: source must have shape ", shape_str(expect),
              " (the input's with dim ", dim, " the index's length), got ",
              shape_str(source.sizes()));
  // The rows of source summed into zeros in index order (deterministic), then added.
  Tensor added = add_rows_back(source.detach(), idx, x.sizes(), dim);
  Tensor out = add(x.detach(), added, alpha);
  if (any_requires_grad({&x, &source}))
    attach_grad_fn(out, "IndexAddBackward", {&x, &source}, {idx},
                   [dim, alpha](const Tensor& g, const SavedTensors& s) {
                     Tensor d_src = select_rows(g, dim, s[0], "index_add");
                     return Grads{g, alpha == 1.0 ? d_src : mul(d_src, alpha)};
                   });
  return out;
}

// ---------------------------------------------------------------- embedding

Tensor embedding(const Tensor& weight, const Tensor& indices, int64_t padding_idx) {
  OpSite site("embedding");
  check_defined("embedding", weight, "weight");
  check_index_tensor("embedding", indices, weight, "indices");
  EMBER_CHECK(weight.dim() == 2,
              "embedding: weight must be 2-D (num_embeddings, embedding_dim), "
              "got shape ",
              shape_str(weight.sizes()));
  EMBER_CHECK(padding_idx >= -1 && padding_idx < weight.size(0), "embedding: padding_idx ",
              padding_idx, " is out of range for ", weight.size(0), " embeddings (-1: none)");
  const Tensor idx = contiguous(indices.reshape({-1}));
  Shape out_sizes = indices.sizes();
  out_sizes.push_back(weight.size(1));
  Tensor out = select_rows(weight, 0, idx, "embedding").view(out_sizes);
  if (any_requires_grad({&weight}))
    attach_grad_fn(out, "EmbeddingBackward", {&weight}, {idx},
                   [padding_idx, sizes = weight.sizes()](const Tensor& g, const SavedTensors& s) {
                     Tensor d = add_rows_back(g.reshape({-1, sizes[1]}), s[0], sizes, 0);
                     if (padding_idx >= 0) {
                       Tensor row = d.select(0, padding_idx);
                       fill_(row, 0.0);  // the padding row learns nothing, as PyTorch's
                     }
                     return Grads{d};
                   });
  return out;
}

// ---------------------------------------------------------------- gather

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  return detail::gather(x, dim, index, "gather", false);
}

Tensor detail::gather(const Tensor& x, int64_t dim, const Tensor& index, const char* op,
                      bool targets) {
  OpSite site(op);
  check_defined("gather", x);
  check_index_tensor("gather", index, x, "index");
  EMBER_CHECK(x.dim() >= 1 && index.dim() == x.dim(), "gather: index of shape ",
              shape_str(index.sizes()), " must have as many dims as the input of shape ",
              shape_str(x.sizes()));
  EMBER_CHECK(x.dim() <= kMaxDims, "gather: tensors of more than ", kMaxDims,
              " dims are not supported (got ", x.dim(), ")");
  dim = wrap_dim(dim, x.dim(), "gather");
  for (int64_t d = 0; d < x.dim(); ++d)
    EMBER_CHECK(d == dim || index.size(d) <= x.size(d), "gather: index of shape ",
                shape_str(index.sizes()), " is larger than the input of shape ",
                shape_str(x.sizes()), " in dim ", d, " (only dim ", dim, " may differ freely)");
  Tensor out = empty(index.sizes(), x.options());
  const Tensor ic = contiguous(index);
  if (out.numel() > 0) {
    const Tensor xc = contiguous(x.detach());
    kernels::GatherArgs a{};
    a.device = x.device();
    a.dtype = x.dtype();
    a.op = op;
    a.targets = targets;
    a.x = xc.raw_data();
    a.index = ic.data_ptr<int64_t>();
    a.out = out.raw_data();
    a.ndim = static_cast<int>(x.dim());
    a.dim = static_cast<int>(dim);
    for (int d = 0; d < a.ndim; ++d) {
      a.sizes[d] = index.size(d);
      a.x_sizes[d] = x.size(d);
    }
    a.n = out.numel();
    kernels::kernels_for(x.device()).gather(a);
  }
  if (any_requires_grad({&x}))
    attach_grad_fn(out, "GatherBackward", {&x}, {ic},
                   [dim, sizes = x.sizes()](const Tensor& g, const SavedTensors& s) {
                     const Tensor& idx = s[0];
                     Tensor d = zeros(sizes, g.options());
                     if (g.numel() == 0) return Grads{d};
                     const Tensor gc = contiguous(g);
                     const kernels::KernelTable& k = kernels::kernels_for(g.device());
                     kernels::ScatterAddArgs a{};
                     a.device = g.device();
                     a.dtype = g.dtype();
                     a.src = gc.raw_data();
                     a.index = idx.data_ptr<int64_t>();
                     a.dst = d.raw_data();
                     a.ndim = static_cast<int>(sizes.size());
                     a.dim = static_cast<int>(dim);
                     for (int i = 0; i < a.ndim; ++i) {
                       a.sizes[i] = idx.size(i);
                       a.x_sizes[i] = sizes[i];
                     }
                     a.n = idx.numel();
                     const Tensor ws = workspace_of(
                         k.scatter_add_workspace_bytes({g.device(), a.n, d.numel()}), g.device());
                     a.workspace = ptr_or_null(ws);
                     k.scatter_add(a);
                     return Grads{d};
                   });
  return out;
}

// ---------------------------------------------------------------- one_hot

Tensor one_hot(const Tensor& indices, int64_t num_classes) {
  OpSite site("one_hot");
  check_defined("one_hot", indices);
  EMBER_CHECK(indices.dtype() == kInt64, "one_hot: indices must be an int64 tensor, got ",
              indices.dtype());
  if (num_classes < 0) {
    EMBER_CHECK(indices.numel() > 0,
                "one_hot: cannot infer num_classes from an empty tensor; pass it");
    num_classes = max(indices).item<int64_t>() + 1;
  }
  const Device device = indices.device();
  // The range check, through the index kernels (so on CUDA without a sync): a
  // selection from a num_classes-long vector of the flattened indices.
  if (indices.numel() > 0)
    select_rows(zeros({num_classes}, TensorOptions(kBool).device(device)), 0,
                contiguous(indices.reshape({-1})), "one_hot");
  const Tensor classes =
      arange(static_cast<double>(num_classes), TensorOptions(kInt64).device(device));
  return cast(eq(unsqueeze(indices, -1), classes), kInt64);
}

// ---------------------------------------------------------------- stack

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  EMBER_CHECK(!tensors.empty(), "stack: expects a non-empty list of tensors");
  const Tensor& first = tensors[0];
  check_defined("stack", first, "tensor 0");
  for (size_t i = 1; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    EMBER_CHECK(t.defined(), "stack: tensor ", i, " is undefined");
    EMBER_CHECK(t.sizes() == first.sizes(), "stack: tensor ", i, " has shape ",
                shape_str(t.sizes()), ", tensor 0 has shape ", shape_str(first.sizes()),
                "; stack needs equal shapes");
    EMBER_CHECK(t.dtype() == first.dtype() && t.device() == first.device(), "stack: tensor ", i,
                " is ", t.dtype(), " on ", t.device(), ", tensor 0 is ", first.dtype(), " on ",
                first.device());
  }
  dim = wrap_dim(dim, first.dim() + 1, "stack");
  std::vector<Tensor> parts;
  parts.reserve(tensors.size());
  for (const Tensor& t : tensors) parts.push_back(unsqueeze(t, dim));
  return cat(parts, dim);
}

}  // namespace ember
