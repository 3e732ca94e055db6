// Reductions: sum, mean, max and min (full, or values with the index kept for
// backward), argmax, argmin and sum_to. Integer input: sum in int64 (exact, wrapping
// as PyTorch's), max and min through float64 (exact below 2^53), the result int64. Each views its
// input, made contiguous, as (outer, n, inner) and reduces over n, through the device's kernels
// (core/kernel_table.h): the CPU reference accumulates in double; CUDA's are deterministic
// (cuda/kernels/reduce.cu). Sum of nothing is 0, mean of nothing NaN (as PyTorch), max of nothing
// an error.
#include <cmath>
#include <limits>

#include "core/alloc_site.h"
#include "core/autograd.h"
#include "core/kernel_table.h"
#include "core/ops.h"

namespace ember {

using Grads = std::vector<Tensor>;

namespace {

// x (..., n, ...) seen as (outer, n, inner) around `dim`; a 0-dim tensor is (1, 1, 1).
struct Split {
  int64_t outer = 1, n = 1, inner = 1;
};

Split split_at(const Shape& s, int64_t dim) {
  Split r;
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

Shape reduced_shape(const Shape& s, int64_t dim, bool keepdim) {
  if (s.empty()) return s;
  Shape out = s;
  if (keepdim)
    out[dim] = 1;
  else
    out.erase(out.begin() + dim);
  return out;
}

// Space for the second pass of a large reduction (none on the CPU), from the
// device's allocator; `bytes` from the kernel's *_workspace_bytes.
Tensor workspace_of(size_t bytes, Device device) {
  if (bytes == 0) return Tensor();
  return empty({static_cast<int64_t>((bytes + 7) / 8)}, TensorOptions(kFloat64).device(device));
}

// out (outer, inner) = sum (or mean) of x (outer, n, inner); x and out contiguous.
void run_sum(const Tensor& x, const Tensor& out, const Split& s, bool mean) {
  if (out.numel() == 0) return;
  if (s.n == 0) {
    Tensor o = out;
    NoGradGuard ng;
    fill_(o, mean ? std::numeric_limits<double>::quiet_NaN() : 0.0);
    return;
  }
  const kernels::KernelTable& k = kernels::kernels_for(x.device());
  Tensor ws = workspace_of(k.sum_workspace_bytes({x.device(), x.dtype(), s.outer, s.n, s.inner}),
                           x.device());
  k.sum({x.device(), x.dtype(), x.raw_data(), out.raw_data(), s.outer, s.n, s.inner, mean,
         ws.defined() ? ws.raw_data() : nullptr});
}

// values (may be undefined) and indices (outer, inner) = max (min) and its first
// index of x (outer, n, inner) over n; NaN counts as the extreme value. n >= 1.
void run_max(const Tensor& x, const Tensor& values, const Tensor& indices, const Split& s,
             bool min) {
  if (indices.numel() == 0) return;
  const kernels::KernelTable& k = kernels::kernels_for(x.device());
  Tensor ws = workspace_of(k.max_workspace_bytes({x.device(), x.dtype(), s.outer, s.n, s.inner}),
                           x.device());
  k.max({x.device(), x.dtype(), x.raw_data(), values.defined() ? values.raw_data() : nullptr,
         indices.data_ptr<int64_t>(), s.outer, s.n, s.inner, ws.defined() ? ws.raw_data() : nullptr,
         min});
}

// d_inp (outer, n, inner) gets d_out (outer, inner) at the argmax, 0 elsewhere.
Tensor max_backward(const Tensor& d_out, const Tensor& indices, const Shape& in_sizes,
                    const Split& s) {
  Tensor g = contiguous(d_out);
  Tensor d_inp = empty(in_sizes, g.options());
  if (d_inp.numel() == 0) return d_inp;
  kernels::kernels_for(g.device())
      .max_backward({g.device(), g.dtype(), g.raw_data(), indices.data_ptr<int64_t>(),
                     d_inp.raw_data(), s.outer, s.n, s.inner});
  return d_inp;
}

void check_reduce_input(const char* op, const Tensor& a) {
  check_defined(op, a);
  EMBER_CHECK(is_floating(a.dtype()), op, ": expects a floating-point tensor, got ", a.dtype(),
              " of shape ", shape_str(a.sizes()));
}

// Gradient of a reduction over `dim` (all dims when dim < 0) back to `sizes`.
Tensor expand_back(const Tensor& g, const Shape& sizes, int64_t dim, bool keepdim) {
  if (dim < 0 || keepdim || sizes.empty()) return expand(g, sizes);
  return expand(unsqueeze(g, dim), sizes);
}

constexpr int64_t kAllDims = std::numeric_limits<int64_t>::min();

// The int64 sum of a over dim (kept, of size 1): halves added pairwise by the
// element-wise add, which computes int64 in int64 on every device, so the sum is
// exact over the whole range (no double in between); log2(n) adds.
Tensor sum_int64_over(Tensor t, int64_t dim) {
  int64_t n = t.size(dim);
  if (n == 0) {
    Shape s = t.sizes();
    s[static_cast<size_t>(dim)] = 1;
    return zeros(s, TensorOptions(kInt64).device(t.device()));
  }
  while (n > 1) {
    const int64_t h = n / 2;
    Tensor pairs = add(slice(t, dim, 0, h), slice(t, dim, h, 2 * h));
    t = n % 2 ? cat({pairs, slice(t, dim, 2 * h, n)}, dim) : pairs;
    n = t.size(dim);
  }
  return t;
}

Tensor sum_int64(const Tensor& a, int64_t dim, bool keepdim, const char* op) {
  const Tensor i = a.dtype() == kInt64 ? a.detach() : cast(a.detach(), kInt64);
  if (dim == kAllDims) return reshape(sum_int64_over(reshape(i, {i.numel()}), 0), {});
  dim = wrap_dim(dim, a.dim(), op);
  if (a.dim() == 0) return i.clone();
  const Tensor s = sum_int64_over(i, dim);
  return keepdim ? s : squeeze(s, dim);
}

// Sum (or mean) over `dim`, or over everything when dim == kAllDims.
Tensor reduce_sum(const Tensor& a, int64_t dim, bool keepdim, bool mean, const char* op) {
  OpSite site(op);
  check_defined(op, a);
  if (!is_floating(a.dtype()) && !mean) {
    // int64 and bool sum to int64 (as PyTorch), exactly.
    return sum_int64(a, dim, keepdim, op);
  }
  check_reduce_input(op, a);
  const bool all = dim == kAllDims;
  if (!all) dim = wrap_dim(dim, a.dim(), op);
  Split s = all ? Split{1, a.numel(), 1} : split_at(a.sizes(), dim);
  Tensor out = empty(all ? Shape{} : reduced_shape(a.sizes(), dim, keepdim), a.options());
  run_sum(contiguous(a.detach()), out, s, mean);
  if (any_requires_grad({&a})) {
    const double scale = mean ? 1.0 / static_cast<double>(s.n) : 1.0;
    attach_grad_fn(out, mean ? "MeanBackward" : "SumBackward", {&a},
                   [sizes = a.sizes(), d = all ? -1 : dim, keepdim, scale](const Tensor& g) {
                     return Grads{expand_back(scale == 1.0 ? g : mul(g, scale), sizes, d, keepdim)};
                   });
  }
  return out;
}

}  // namespace

// ---------------------------------------------------------------- sum and mean

Tensor sum(const Tensor& a) {
  return reduce_sum(a, kAllDims, false, false, "sum");
}

Tensor sum(const Tensor& a, int64_t dim, bool keepdim) {
  return reduce_sum(a, dim, keepdim, false, "sum");
}

Tensor mean(const Tensor& a) {
  return reduce_sum(a, kAllDims, false, true, "mean");
}

Tensor mean(const Tensor& a, int64_t dim, bool keepdim) {
  return reduce_sum(a, dim, keepdim, true, "mean");
}

// ---------------------------------------------------------------- max, min, argmax, argmin

namespace {

// Returns the values (when wanted) and the indices of the max (min) of `a` over `dim`.
std::pair<Tensor, Tensor> max_impl(const Tensor& a, int64_t dim, bool keepdim, bool want_values,
                                   bool min, const char* op) {
  OpSite site(op);
  check_defined(op, a);
  if (a.dtype() == kInt64) {
    // Through float64 (exact below 2^53); the same indices, values back to int64.
    std::pair<Tensor, Tensor> r = max_impl(cast(a, kFloat64), dim, keepdim, want_values, min, op);
    if (want_values) r.first = cast(r.first, kInt64);
    return r;
  }
  check_reduce_input(op, a);
  dim = wrap_dim(dim, a.dim(), op);
  Split s = split_at(a.sizes(), dim);
  EMBER_CHECK(s.n > 0, op, ": cannot reduce over dim ", dim, " of size 0 (input of shape ",
              shape_str(a.sizes()), "); the ", min ? "minimum" : "maximum",
              " of nothing is undefined");
  Shape out_sizes = reduced_shape(a.sizes(), dim, keepdim);
  Tensor values = want_values ? empty(out_sizes, a.options()) : Tensor();
  Tensor indices = empty(out_sizes, TensorOptions(kInt64).device(a.device()));
  run_max(contiguous(a.detach()), values, indices, s, min);
  return {values, indices};
}

ValuesAndIndices extreme_over_dim(const Tensor& a, int64_t dim, bool keepdim, bool min) {
  const char* op = min ? "min" : "max";
  // Not a structured binding: clang before 16 cannot capture one (make test-fuzz).
  std::pair<Tensor, Tensor> result = max_impl(a, dim, keepdim, true, min, op);
  Tensor& values = result.first;
  const Tensor indices = result.second;
  if (any_requires_grad({&a})) {
    Split s = split_at(a.sizes(), wrap_dim(dim, a.dim(), op));
    attach_grad_fn(values, min ? "MinBackward" : "MaxBackward", {&a},
                   [indices, sizes = a.sizes(), s](const Tensor& g) {
                     return Grads{max_backward(g, indices, sizes, s)};
                   });
  }
  return {values, indices};
}

// The max (min) of all elements. Its gradient is shared evenly by every element
// equal to it (PyTorch's evenly_distribute_backward): each of several equal
// maxima gets g / count.
Tensor extreme_of_all(const Tensor& a, bool min) {
  const char* op = min ? "min" : "max";
  check_defined(op, a);
  EMBER_CHECK(a.numel() > 0, op, ": the input of shape ", shape_str(a.sizes()), " is empty; the ",
              min ? "minimum" : "maximum", " of nothing is undefined");
  Tensor out;
  {
    NoGradGuard ng;
    out = max_impl(reshape(a.detach(), {-1}), 0, false, true, min, op).first;
  }
  if (any_requires_grad({&a}))
    attach_grad_fn(out, min ? "MinAllBackward" : "MaxAllBackward", {&a}, {a, out},
                   [](const Tensor& g, const SavedTensors& s) {
                     // A NaN maximum is shared by the NaN elements.
                     const Tensor hit = where(ne(s[1], s[1]), ne(s[0], s[0]), eq(s[0], s[1]));
                     const Tensor count = sum(hit);
                     return Grads{where(hit, div(g, count), zeros({}, g.options()))};
                   });
  return out;
}

}  // namespace

ValuesAndIndices max(const Tensor& a, int64_t dim, bool keepdim) {
  return extreme_over_dim(a, dim, keepdim, false);
}
ValuesAndIndices min(const Tensor& a, int64_t dim, bool keepdim) {
  return extreme_over_dim(a, dim, keepdim, true);
}
Tensor max(const Tensor& a) {
  return extreme_of_all(a, false);
}
Tensor min(const Tensor& a) {
  return extreme_of_all(a, true);
}

Tensor argmax(const Tensor& a, int64_t dim, bool keepdim) {
  return max_impl(a, dim, keepdim, false, false, "argmax").second;
}
Tensor argmin(const Tensor& a, int64_t dim, bool keepdim) {
  return max_impl(a, dim, keepdim, false, true, "argmin").second;
}

// ---------------------------------------------------------------- sum_to

Tensor sum_to(const Tensor& g, const Shape& shape) {
  check_defined("sum_to", g);
  const Shape& gs = g.sizes();
  if (gs == shape) return g;
  bool broadcasts = shape.size() <= gs.size();
  const size_t lead = broadcasts ? gs.size() - shape.size() : 0;
  for (size_t d = 0; broadcasts && d < shape.size(); ++d)
    broadcasts = shape[d] == gs[d + lead] || shape[d] == 1;
  EMBER_CHECK(broadcasts, "sum_to: a gradient of shape ", shape_str(gs),
              " cannot be summed to shape ", shape_str(shape),
              " (that shape does not broadcast to it)");
  // Collapse g into alternating runs of kept and summed dims (size-1 dims join
  // either), so each run of summed dims costs one reduction.
  Shape runs;
  std::vector<bool> summed;
  for (size_t d = 0; d < gs.size(); ++d) {
    if (gs[d] == 1) continue;
    const bool sum_d = d < lead || shape[d - lead] == 1;
    if (!runs.empty() && summed.back() == sum_d) {
      runs.back() *= gs[d];
    } else {
      runs.push_back(gs[d]);
      summed.push_back(sum_d);
    }
  }
  Tensor x = reshape(g, runs);
  for (size_t r = runs.size(); r-- > 0;)
    if (summed[r]) x = sum(x, static_cast<int64_t>(r), /*keepdim=*/true);
  return reshape(x, shape);
}

}  // namespace ember
