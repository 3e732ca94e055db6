// Shape ops. view, transpose, slice, select, unsqueeze, squeeze and expand return
// views sharing storage; reshape views when it can and copies otherwise; cat and
// contiguous copy. Backward of each undoes its geometry.
#include <optional>

#include "core/alloc_site.h"
#include "core/autograd.h"
#include "core/ops.h"

namespace ember {

using Grads = std::vector<Tensor>;

namespace {

// The backward of slice(a, dim, start, end, step): the gradient is the slice's
// inside it and zero elsewhere. The engine has it add that straight into the
// slice of the input's gradient sum (Node::adds_into_sum), so the pieces of a
// split (q, k and v of one projection) share one zero-filled buffer and each
// writes its part, instead of a zero-filled tensor each and the sums of those.
class SliceBackward final : public Node {
 public:
  SliceBackward(Shape sizes, int64_t dim, int64_t start, int64_t end, int64_t step)
      : sizes_(std::move(sizes)), dim_(dim), start_(start), end_(end), step_(step) {}
  const char* name() const override { return "SliceBackward"; }
  std::vector<Tensor> apply(const Tensor& g) override {
    Tensor whole;
    add_into(g, whole);
    return {std::move(whole)};
  }
  bool adds_into_sum() const override { return true; }
  void add_into(const Tensor& g, Tensor& sum) override {
    if (released_) [[unlikely]]
      detail::throw_backward_twice(name());
    const bool fresh = !sum.defined();
    if (fresh) sum = zeros(sizes_, TensorOptions().dtype(g.dtype()).device(g.device()));
    Tensor part = slice(sum, dim_, start_, end_, step_);
    if (fresh)
      copy_(part, g);  // a copy, not 0 + g: keeps a -0.0
    else
      part.add_(g);
  }
  void release() override { released_ = true; }

 private:
  Shape sizes_;
  int64_t dim_, start_, end_, step_;
  bool released_ = false;
};

Shape infer_size(Shape sizes, int64_t numel, const char* op, const Shape& from) {
  int64_t infer = -1, known = 1;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == -1) {
      EMBER_CHECK(infer < 0, op, ": only one dimension can be -1, got ", shape_str(sizes));
      infer = static_cast<int64_t>(i);
    } else {
      EMBER_CHECK(sizes[i] >= 0, op, ": invalid size ", sizes[i], " in ", shape_str(sizes));
      // Checked: an overflowing product could wrap to a count that matches.
      EMBER_CHECK(!__builtin_mul_overflow(known, sizes[i], &known), op, ": shape ",
                  shape_str(sizes), " has more elements than int64 can count");
    }
  }
  if (infer >= 0) {
    EMBER_CHECK(known != 0 && numel % known == 0, op, ": shape ", shape_str(sizes),
                " is invalid for input of shape ", shape_str(from), " (", numel, " elements)");
    sizes[infer] = numel / known;
  }
  EMBER_CHECK(numel_of(sizes) == numel, op, ": shape ", shape_str(sizes),
              " is invalid for input of shape ", shape_str(from), " (", numel, " elements)");
  return sizes;
}

// The strides that address a tensor of (sizes, strides) as `target` (the same
// element count) without moving an element, or nothing when the layout does not
// allow it (as PyTorch's view). The input's dims fall into runs that are
// contiguous among themselves (each dim's stride its inner neighbour's stride times
// that neighbour's size; dims of size 1 take no part); a view exists when every
// run boundary is also a boundary between target dims, and a target dim inside a
// run then steps by the run's innermost stride times the sizes inside it.
std::optional<Shape> view_strides(const Shape& sizes, const Shape& strides, const Shape& target) {
  if (numel_of(sizes) == 0) return contiguous_strides(target);  // nothing to address
  struct Run {
    int64_t numel, step;  // elements, the innermost dim's stride
  };
  std::vector<Run> runs;  // innermost first
  for (size_t d = sizes.size(); d-- > 0;) {
    if (sizes[d] == 1) continue;
    if (!runs.empty() && strides[d] == runs.back().step * runs.back().numel)
      runs.back().numel *= sizes[d];
    else
      runs.push_back({sizes[d], strides[d]});
  }
  Shape out(target.size());
  size_t run = 0;     // the run the next target dim (from the innermost) falls in
  int64_t inner = 1;  // elements of that run below it
  for (size_t d = target.size(); d-- > 0;) {
    const int64_t step = run < runs.size() ? runs[run].step : 1;
    out[d] = inner * step;
    if (target[d] == 1) continue;
    if (run == runs.size()) return std::nullopt;
    inner *= target[d];
    if (inner == runs[run].numel) {
      ++run;
      inner = 1;
    } else if (inner > runs[run].numel) {
      return std::nullopt;  // this target dim would straddle two runs
    }
  }
  if (run != runs.size()) return std::nullopt;
  return out;
}

Tensor reshape_backward_attach(Tensor out, const Tensor& a, const char* name) {
  if (any_requires_grad({&a}))
    attach_grad_fn(out, name, {&a},
                   [s = a.sizes()](const Tensor& g) { return Grads{reshape(g, s)}; });
  return out;
}

// The strides of a's view as `sizes` (inferred already), or nothing where none exists.
std::optional<Shape> strides_as(const Tensor& a, const Shape& sizes) {
  return a.is_contiguous() ? std::optional<Shape>(contiguous_strides(sizes))
                           : view_strides(a.sizes(), a.strides(), sizes);
}

Tensor view_with(const Tensor& a, Shape sizes, Shape strides) {
  return reshape_backward_attach(
      make_view(a, std::move(sizes), std::move(strides), a.storage_offset()), a, "ViewBackward");
}

}  // namespace

Tensor view(const Tensor& a, Shape sizes) {
  check_defined("view", a);
  sizes = infer_size(std::move(sizes), a.numel(), "view", a.sizes());
  std::optional<Shape> strides = strides_as(a, sizes);
  EMBER_CHECK(strides.has_value(), "view: input of shape ", shape_str(a.sizes()), " and strides ",
              shape_str(a.strides()), " is not contiguous and cannot be viewed as ",
              shape_str(sizes), " (a dim would span elements that are not evenly spaced); ",
              "use reshape() (which copies)");
  return view_with(a, std::move(sizes), std::move(*strides));
}

Tensor reshape(const Tensor& a, Shape sizes) {
  check_defined("reshape", a);
  sizes = infer_size(std::move(sizes), a.numel(), "reshape", a.sizes());
  // A view whenever the layout allows one (as torch.reshape), so the result may be
  // non-contiguous; a copy otherwise.
  if (std::optional<Shape> strides = strides_as(a, sizes))
    return view_with(a, std::move(sizes), std::move(*strides));
  const Tensor c = contiguous(a);
  Shape strides = contiguous_strides(sizes);
  return view_with(c, std::move(sizes), std::move(strides));
}

Tensor flatten(const Tensor& a, int64_t start_dim, int64_t end_dim) {
  check_defined("flatten", a);
  if (a.dim() == 0) return reshape(a, {1});
  start_dim = wrap_dim(start_dim, a.dim(), "flatten");
  end_dim = wrap_dim(end_dim, a.dim(), "flatten");
  EMBER_CHECK(start_dim <= end_dim, "flatten: start_dim ", start_dim, " comes after end_dim ",
              end_dim, " (input of shape ", shape_str(a.sizes()), ")");
  if (start_dim == end_dim) return a;
  Shape sizes(a.sizes().begin(), a.sizes().begin() + start_dim);
  int64_t merged = 1;
  for (int64_t d = start_dim; d <= end_dim; ++d) merged *= a.size(d);
  sizes.push_back(merged);
  sizes.insert(sizes.end(), a.sizes().begin() + end_dim + 1, a.sizes().end());
  return reshape(a, std::move(sizes));
}

Tensor contiguous(const Tensor& a) {
  check_defined("contiguous", a);
  return a.is_contiguous() ? a : a.clone();
}

Tensor transpose(const Tensor& a, int64_t d0, int64_t d1) {
  check_defined("transpose", a);
  d0 = wrap_dim(d0, a.dim(), "transpose");
  d1 = wrap_dim(d1, a.dim(), "transpose");
  Shape sizes = a.sizes(), strides = a.strides();
  std::swap(sizes[d0], sizes[d1]);
  std::swap(strides[d0], strides[d1]);
  Tensor out = make_view(a, sizes, strides, a.storage_offset());
  if (any_requires_grad({&a}))
    attach_grad_fn(out, "TransposeBackward", {&a},
                   [d0, d1](const Tensor& g) { return Grads{transpose(g, d0, d1)}; });
  return out;
}

Tensor slice(const Tensor& a, int64_t dim, int64_t start, int64_t end, int64_t step) {
  check_defined("slice", a);
  dim = wrap_dim(dim, a.dim(), "slice");
  EMBER_CHECK(step > 0, "slice: step must be positive, got ", step);
  const int64_t n = a.size(dim);
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Shape sizes = a.sizes(), strides = a.strides();
  // Written so that no step (up to INT64_MAX) overflows; a dim of one element
  // keeps its stride, so stride * step is only formed when it stays in bounds.
  sizes[dim] = end == start ? 0 : 1 + (end - start - 1) / step;
  if (sizes[dim] > 1) strides[dim] *= step;
  Tensor out = make_view(a, sizes, strides, a.storage_offset() + start * a.stride(dim));
  if (any_requires_grad({&a})) {
    const Tensor* in = &a;
    detail::attach_node(out, std::make_shared<SliceBackward>(a.sizes(), dim, start, end, step), &in,
                        1);
  }
  return out;
}

Tensor select(const Tensor& a, int64_t dim, int64_t index) {
  check_defined("select", a);
  dim = wrap_dim(dim, a.dim(), "select");
  const int64_t n = a.size(dim);
  EMBER_CHECK(index >= -n && index < n, "select: index ", index, " is out of range for dim ", dim,
              " of size ", n);
  if (index < 0) index += n;
  Tensor s = slice(a, dim, index, index + 1);
  return squeeze(s, dim);
}

Tensor unsqueeze(const Tensor& a, int64_t dim) {
  check_defined("unsqueeze", a);
  dim = wrap_dim(dim, a.dim() + 1, "unsqueeze");
  Shape sizes = a.sizes(), strides = a.strides();
  int64_t st = dim < a.dim() ? strides[dim] * sizes[dim] : 1;
  sizes.insert(sizes.begin() + dim, 1);
  strides.insert(strides.begin() + dim, st);
  return reshape_backward_attach(make_view(a, sizes, strides, a.storage_offset()), a,
                                 "UnsqueezeBackward");
}

Tensor squeeze(const Tensor& a, int64_t dim) {
  check_defined("squeeze", a);
  dim = wrap_dim(dim, a.dim(), "squeeze");
  if (a.size(dim) != 1) return a;
  Shape sizes = a.sizes(), strides = a.strides();
  sizes.erase(sizes.begin() + dim);
  strides.erase(strides.begin() + dim);
  return reshape_backward_attach(make_view(a, sizes, strides, a.storage_offset()), a,
                                 "SqueezeBackward");
}

Tensor expand(const Tensor& a, Shape sizes) {
  check_defined("expand", a);
  EMBER_CHECK(sizes.size() >= static_cast<size_t>(a.dim()), "expand: cannot expand shape ",
              shape_str(a.sizes()), " to fewer dims ", shape_str(sizes));
  const size_t lead = sizes.size() - a.sizes().size();
  Shape strides(sizes.size(), 0);
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (i < lead) {
      EMBER_CHECK(sizes[i] >= 0, "expand: invalid size ", sizes[i]);
      continue;
    }
    int64_t s = a.sizes()[i - lead];
    if (sizes[i] == -1) sizes[i] = s;
    EMBER_CHECK(sizes[i] >= 0, "expand: invalid size ", sizes[i]);
    EMBER_CHECK(s == sizes[i] || s == 1, "expand: size ", s, " at dim ", i - lead,
                " cannot be expanded to ", sizes[i], " (shape ", shape_str(a.sizes()), " to ",
                shape_str(sizes), ")");
    strides[i] = s == sizes[i] ? a.strides()[i - lead] : 0;
  }
  check_sizes(sizes, "expand");  // no element count past int64
  Tensor out = make_view(a, sizes, strides, a.storage_offset());
  if (any_requires_grad({&a}))
    attach_grad_fn(out, "ExpandBackward", {&a},
                   [s = a.sizes()](const Tensor& g) { return Grads{sum_to(g, s)}; });
  return out;
}

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  OpSite site("cat");
  EMBER_CHECK(!tensors.empty(), "cat: expects a non-empty list of tensors");
  const Tensor& first = tensors[0];
  check_defined("cat", first, "tensor 0");
  dim = wrap_dim(dim, first.dim(), "cat");
  Shape out_sizes = first.sizes();
  out_sizes[dim] = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    EMBER_CHECK(t.defined(), "cat: tensor ", i, " is undefined");
    EMBER_CHECK(t.dtype() == first.dtype() && t.device() == first.device(), "cat: tensor ", i,
                " is ", t.dtype(), " on ", t.device(), ", tensor 0 is ", first.dtype(), " on ",
                first.device());
    EMBER_CHECK(t.dim() == first.dim(), "cat: tensor ", i, " has ", t.dim(), " dims, tensor 0 has ",
                first.dim());
    for (int64_t d = 0; d < t.dim(); ++d)
      EMBER_CHECK(d == dim || t.size(d) == first.size(d), "cat: tensor ", i, " has shape ",
                  shape_str(t.sizes()), ", which does not match ", shape_str(first.sizes()),
                  " except in dim ", dim);
    out_sizes[dim] += t.size(dim);
  }
  Tensor out = empty(out_sizes, TensorOptions().dtype(first.dtype()).device(first.device()));
  std::vector<int64_t> starts;
  {
    NoGradGuard ng;
    int64_t at = 0;
    for (const Tensor& t : tensors) {
      starts.push_back(at);
      Tensor part = slice(out, dim, at, at + t.size(dim));
      copy_(part, t);
      at += t.size(dim);
    }
  }
  if (is_grad_enabled()) {
    bool any = false;
    for (const Tensor& t : tensors) any = any || t.requires_grad();
    if (any) {
      std::vector<int64_t> lengths;
      for (const Tensor& t : tensors) lengths.push_back(t.size(dim));
      attach_grad_fn(out, "CatBackward", tensors, [starts, lengths, dim](const Tensor& g) {
        Grads gs;
        for (size_t i = 0; i < starts.size(); ++i)
          gs.push_back(slice(g, dim, starts[i], starts[i] + lengths[i]));
        return gs;
      });
    }
  }
  return out;
}

}  // namespace ember
