// Reductions over a list of dims (sum, mean, amax, amin), variance and standard
// deviation, and cumsum. The list reductions compose the one-dim reductions of
// core/ops/reduce.cpp (one keepdim pass per dim, from the last), so every device
// and the gradients of sum and mean come from them; amax and amin attach their
// own gradient (shared evenly on ties). var is composed of mean, sub, mul and sum.
// cumsum has a kernel family of its own (core/kernel_table.h, CumsumArgs).
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/alloc_site.h"
#include "core/autograd.h"
#include "core/kernel_table.h"
#include "core/ops.h"

namespace ember {

using Grads = std::vector<Tensor>;

namespace {

// The dims to reduce, wrapped and in descending order; empty means every dim.
std::vector<int64_t> reduce_dims(const char* op, const Tensor& a,
                                 const std::vector<int64_t>& dims) {
  check_defined(op, a);
  std::vector<int64_t> out;
  if (dims.empty()) {
    for (int64_t d = 0; d < a.dim(); ++d) out.push_back(d);
  } else {
    for (int64_t d : dims) {
      const int64_t w = wrap_dim(d, a.dim() == 0 ? 1 : a.dim(), op);
      EMBER_CHECK(std::find(out.begin(), out.end(), w) == out.end(), op, ": dim ", w,
                  " appears more than once in the list of dims ", shape_str(dims),
                  " (input of shape ", shape_str(a.sizes()), ")");
      out.push_back(w);
    }
    if (a.dim() == 0) out.clear();  // a 0-dim tensor takes dim 0 or -1 as itself
  }
  std::sort(out.rbegin(), out.rend());
  return out;
}

// Removes the (kept, size-1) dims `dims` (descending) unless keepdim.
Tensor drop_dims(Tensor t, const std::vector<int64_t>& dims, bool keepdim) {
  if (keepdim) return t;
  Shape s;
  for (int64_t d = 0; d < t.dim(); ++d)
    if (std::find(dims.begin(), dims.end(), d) == dims.end()) s.push_back(t.size(d));
  return reshape(t, s);
}

int64_t count_of(const Tensor& a, const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= a.size(d);
  return n;
}

Tensor sum_dims(const Tensor& a, const std::vector<int64_t>& dims, bool keepdim, bool mean,
                const char* op) {
  const std::vector<int64_t> ds = reduce_dims(op, a, dims);
  EMBER_CHECK(!mean || is_floating(a.dtype()), op, ": expects a floating-point tensor, got ",
              a.dtype(), " of shape ", shape_str(a.sizes()));
  if (ds.empty()) return mean ? ember::mean(a) : ember::sum(a);  // a 0-dim tensor
  Tensor t = a;
  for (int64_t d : ds) t = ember::sum(t, d, /*keepdim=*/true);
  t = drop_dims(t, ds, keepdim);
  if (!mean) return t;
  // Mean of nothing is NaN, as torch's.
  const int64_t n = count_of(a, ds);
  return n == 0 ? full_like(t, std::numeric_limits<double>::quiet_NaN())
                : mul(t, 1.0 / static_cast<double>(n));
}

// The max (min) over dims; the gradient goes evenly to the elements equal to it
// (a NaN result to the NaN elements), as torch.amax.
Tensor extreme_dims(const Tensor& a, const std::vector<int64_t>& dims, bool keepdim, bool min,
                    const char* op) {
  OpSite site(op);
  const std::vector<int64_t> ds = reduce_dims(op, a, dims);
  for (int64_t d : ds)
    EMBER_CHECK(a.size(d) > 0, op, ": cannot reduce over dim ", d, " of size 0 (input of shape ",
                shape_str(a.sizes()), ")");
  Tensor kept;
  {
    NoGradGuard ng;
    kept = ds.empty() ? a.detach().clone() : a.detach();  // never a view of the input
    for (int64_t d : ds)
      kept = (min ? ember::min(kept, d, true) : ember::max(kept, d, true)).values;
  }
  Tensor out = drop_dims(kept, ds, keepdim);
  if (out.is_same(kept)) out = make_view(kept, kept.sizes(), kept.strides(), kept.storage_offset());
  if (is_floating(a.dtype()) && any_requires_grad({&a})) {
    attach_grad_fn(out, min ? "AminBackward" : "AmaxBackward", {&a}, {a, kept},
                   [ds](const Tensor& g, const SavedTensors& s) {
                     const Tensor& x = s[0];
                     const Tensor& m = s[1];  // x's dims, reduced ones of size 1
                     const Tensor hit = where(ne(m, m), ne(x, x), eq(x, m));
                     Tensor count = cast(hit, x.dtype());
                     for (int64_t d : ds) count = ember::sum(count, d, true);
                     const Tensor gk = reshape(g, m.sizes());
                     return Grads{where(hit, div(gk, count), zeros({}, g.options()))};
                   });
  }
  return out;
}

Tensor var_impl(const Tensor& x, const std::vector<int64_t>& dims, double correction, bool keepdim,
                const char* op) {
  OpSite site(op);
  const std::vector<int64_t> ds = reduce_dims(op, x, dims);
  EMBER_CHECK(is_floating(x.dtype()), op, ": expects a floating-point tensor, got ", x.dtype(),
              " of shape ", shape_str(x.sizes()));
  const std::vector<int64_t> list(ds.begin(), ds.end());
  const Tensor m = list.empty() ? x : ember::mean(x, list, /*keepdim=*/true);
  const Tensor dev = sub(x, m);
  const Tensor sq = list.empty() ? mul(dev, dev) : ember::sum(mul(dev, dev), list, keepdim);
  const double n = static_cast<double>(count_of(x, ds));
  const double divisor = std::max(0.0, n - correction);
  // divisor 0: inf, or nan where the sum is 0 (as torch), by IEEE division.
  return div(sq, full({}, divisor, x.options()));
}

}  // namespace

Tensor sum(const Tensor& a, const std::vector<int64_t>& dims, bool keepdim) {
  return sum_dims(a, dims, keepdim, false, "sum");
}
Tensor mean(const Tensor& a, const std::vector<int64_t>& dims, bool keepdim) {
  return sum_dims(a, dims, keepdim, true, "mean");
}
Tensor amax(const Tensor& a, const std::vector<int64_t>& dims, bool keepdim) {
  return extreme_dims(a, dims, keepdim, false, "amax");
}
Tensor amin(const Tensor& a, const std::vector<int64_t>& dims, bool keepdim) {
  return extreme_dims(a, dims, keepdim, true, "amin");
}

Tensor var(const Tensor& x, const std::vector<int64_t>& dims, double correction, bool keepdim) {
  return var_impl(x, dims, correction, keepdim, "var");
}
Tensor var(const Tensor& x, int64_t dim, double correction, bool keepdim) {
  return var_impl(x, {dim}, correction, keepdim, "var");
}
Tensor std(const Tensor& x, const std::vector<int64_t>& dims, double correction, bool keepdim) {
  return sqrt(var_impl(x, dims, correction, keepdim, "std"));
}
Tensor std(const Tensor& x, int64_t dim, double correction, bool keepdim) {
  return sqrt(var_impl(x, {dim}, correction, keepdim, "std"));
}

// ---------------------------------------------------------------- cumsum

namespace {

// The running sum of x (contiguous, floating) over dim, from the end when reverse;
// its gradient is the running sum the other way.
Tensor cumsum_impl(const Tensor& x, int64_t dim, bool reverse) {
  OpSite site("cumsum");
  const Tensor xc = contiguous(x.detach());
  Tensor out = empty(x.sizes(), x.options());
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (d < dim) outer *= x.size(d);
    if (d > dim) inner *= x.size(d);
  }
  const int64_t n = x.dim() == 0 ? 1 : x.size(dim);
  if (out.numel() > 0)
    kernels::kernels_for(x.device())
        .cumsum({x.device(), x.dtype(), xc.raw_data(), out.raw_data(), outer, n, inner, reverse});
  if (any_requires_grad({&x}))
    attach_grad_fn(
        out, reverse ? "CumsumReverseBackward" : "CumsumBackward", {&x},
        [dim, reverse](const Tensor& g) { return Grads{cumsum_impl(g, dim, !reverse)}; });
  return out;
}

}  // namespace

Tensor cumsum(const Tensor& x, int64_t dim) {
  check_defined("cumsum", x);
  dim = wrap_dim(dim, x.dim() == 0 ? 1 : x.dim(), "cumsum");
  if (x.dim() == 0) dim = 0;
  if (!is_floating(x.dtype())) {
    // int64 and bool give int64 (as torch), through float64: exact below 2^53.
    return cast(cumsum_impl(cast(x, kFloat64), dim, false), kInt64);
  }
  return cumsum_impl(x, dim, false);
}

}  // namespace ember
