// linear: y = act(x w^T + b), the seam behind nn::Linear.
//
// A fused op with a composed fallback, chosen by one predicate (the device's
// linear_fused_supported for the dtype): where fused, the forward is one GEMM with
// the bias and activation in its epilogue (on CUDA ours or cuBLASLt, as
// cuda/gemm_dispatch.h picks) and the backward computes d_w with d_b in one pass
// where the device can; everywhere else (CPU, float64) it is composed from
// matmul, add, sum and the activation's element-wise op. The fused backward's
// d_x = d_pre w is the device's too (linear_input_grad), matmul where it declines.
// The activation's derivative is the element-wise op's own
// (core/base/elementwise_ops.h), read off y or the saved pre-activation as the
// list says.
#include "core/alloc_site.h"
#include "core/autocast.h"
#include "core/autograd.h"
#include "core/kernel_table.h"
#include "core/ops.h"

namespace ember {

namespace {

void check_linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  check_defined("linear", x, "input");
  check_defined("linear", w, "weight");
  check_floating("linear", x);
  check_same_device("linear", x, w);
  check_same_dtype("linear", x, w);
  EMBER_CHECK(w.dim() == 2, "linear: weight must be 2-D (out_features, in_features), got shape ",
              shape_str(w.sizes()));
  EMBER_CHECK(x.dim() >= 1, "linear: input must have at least 1 dim, got a scalar");
  EMBER_CHECK(x.size(-1) == w.size(1), "linear: input has ", x.size(-1), " features (shape ",
              shape_str(x.sizes()), "), weight expects ", w.size(1), " (shape ",
              shape_str(w.sizes()), ")");
  if (b.defined()) {
    check_same_device("linear", x, b);
    check_same_dtype("linear", x, b);
    EMBER_CHECK(b.dim() == 1 && b.size(0) == w.size(0), "linear: bias of shape ",
                shape_str(b.sizes()), " does not match ", w.size(0), " output features");
  }
}

bool has_contiguous_rows(const Tensor& t) {  // rows may be strided, each row contiguous
  return t.dim() == 2 && t.stride(1) == 1 && t.stride(0) >= t.size(1);
}

Tensor rows_contiguous(const Tensor& t) {
  return has_contiguous_rows(t) ? t : t.contiguous();
}

// The activation applied to the pre-activation, as its element-wise op.
Tensor apply_activation(const Tensor& pre, Activation act) {
  return act == Activation::None ? pre : detail::unary_op(unary_op_of(act), pre, 0.0);
}

// What the activation's backward reads: y for ReLU, the pre-activation for the
// others (activation_saves).
Tensor activation_saved(Activation act, const Tensor& y, const Tensor& pre) {
  switch (activation_saves(act)) {
    case Saves::Out:
      return y;
    case Saves::In:
      return pre;
    default:
      return Tensor();
  }
}

// Forward, no autograd: y2 (rows, out) and the tensor the activation's backward
// reads. fused: one kernel of the device; else composed.
std::pair<Tensor, Tensor> linear_forward(const Tensor& x2, const Tensor& w, const Tensor& b,
                                         Activation act, bool fused, bool needs_grad) {
  const int64_t rows = x2.size(0), in = w.size(1), out_features = w.size(0);
  if (!fused) {
    Tensor pre = matmul(x2, w.t());  // (M, out)
    if (b.defined()) pre = add(pre, b);
    Tensor y2 = apply_activation(pre, act);
    return {y2, activation_saved(act, y2, pre)};
  }
  const Tensor w2 = rows_contiguous(w);  // w2: (out, in)
  const Tensor b2 = b.defined() ? b.contiguous() : Tensor();
  Tensor y2 = empty({rows, out_features}, TensorOptions(x2.dtype()).device(x2.device()));
  Tensor pre = needs_grad && activation_saves(act) == Saves::In ? empty_like(y2) : Tensor();
  if (rows > 0 && out_features > 0)
    kernels::kernels_for(x2.device())
        .linear_fused({x2.device(), x2.dtype(), rows, out_features, in, x2.raw_data(), x2.stride(0),
                       w2.raw_data(), w2.stride(0), b2.defined() ? b2.raw_data() : nullptr,
                       y2.raw_data(), pre.defined() ? pre.raw_data() : nullptr, act});
  return {y2, activation_saved(act, y2, pre)};
}

// d_w and d_b in one pass of the device's kernel, or undefined where it cannot.
std::pair<Tensor, Tensor> fused_weight_grad(const Tensor& d_pre, const Tensor& x2, bool gb) {
  const int64_t m = d_pre.size(0), out_features = d_pre.size(1), in = x2.size(1);
  const kernels::KernelTable& k = kernels::kernels_for(d_pre.device());
  const bool fuse_db = gb && k.linear_bias_grad_fused_supported({d_pre.device(), d_pre.dtype()});
  const TensorOptions opts = TensorOptions(d_pre.dtype()).device(d_pre.device());
  Tensor d_w = empty({out_features, in}, opts);
  Tensor d_b = fuse_db ? empty({out_features}, opts) : Tensor();
  if (!k.linear_weight_grad_fused({d_pre.device(), d_pre.dtype(), m, out_features, in,
                                   x2.raw_data(), x2.stride(0), d_pre.raw_data(), d_w.raw_data(),
                                   fuse_db ? d_b.raw_data() : nullptr}))
    return {};  // no fused algorithm: the caller composes
  return {d_w, d_b};
}

// d_x = d_pre w by the device's kernel, or undefined where it leaves the product
// to matmul (which also reads a transposed w in place, as the kernel does not).
Tensor fused_input_grad(const Tensor& d_pre, const Tensor& w) {
  if (!has_contiguous_rows(w)) return Tensor();
  const Tensor g = rows_contiguous(d_pre);  // (M, out)
  const int64_t m = g.size(0), out_features = w.size(0), in = w.size(1);
  Tensor d_x = empty({m, in}, TensorOptions(g.dtype()).device(g.device()));
  if (!kernels::kernels_for(g.device())
           .linear_input_grad({g.device(), g.dtype(), m, out_features, in, g.raw_data(),
                               g.stride(0), w.raw_data(), w.stride(0), d_x.raw_data()}))
    return Tensor();
  return d_x;
}

}  // namespace

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  return linear(x, w, b, Activation::None);
}

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b, Activation act) {
  // Autocast (core/autocast.h): float32 operands run in the autocast dtype; the
  // casts are recorded, so float32 parameters get float32 gradients.
  if (autocast_lowers({&x, &w, &b})) [[unlikely]] {
    AutocastGuard off(autocast_dtype(), false);
    return linear(autocast_lower(x), autocast_lower(w), autocast_lower(b), act);
  }
  OpSite site("linear");  // names its allocations (core/alloc_site.h)
  check_linear(x, w, b);
  const int64_t in = w.size(1), out_features = w.size(0);
  Shape out_shape = x.sizes();
  out_shape.back() = out_features;
  int64_t rows = 1;  // product of the leading dims (not numel / in: in may be 0)
  for (int64_t d = 0; d + 1 < x.dim(); ++d) rows *= x.size(d);
  const bool needs_grad = any_requires_grad({&x, &w, &b});
  const bool fused =
      kernels::kernels_for(x.device()).linear_fused_supported({x.device(), x.dtype()});
  Tensor x2, y, saved_act;
  {
    NoGradGuard no_grad;  // the forward records nothing; backward is attached below
    x2 = rows_contiguous(x.dim() == 2 ? x.detach() : x.detach().reshape({rows, in}));  // (M, in)
    auto [y2, sa] =
        linear_forward(x2, w.detach(), b.defined() ? b.detach() : Tensor(), act, fused, needs_grad);
    saved_act = sa;
    y = x.dim() == 2 ? y2 : y2.reshape(out_shape);
  }
  if (needs_grad) {
    const bool gx = x.requires_grad(), gw = w.requires_grad();
    const bool gb = b.defined() && b.requires_grad();
    attach_grad_fn(
        y, "LinearBackward", {&x, &w, &b}, {gw ? x2 : Tensor(), gx ? w : Tensor(), saved_act},
        [x_shape = x.sizes(), rows, out_features, act, fused, gx, gw, gb](const Tensor& d_out,
                                                                          const SavedTensors& s) {
          const Tensor& xs = s[0];
          Tensor g2 = d_out.dim() == 2 ? d_out : d_out.reshape({rows, out_features});  // (M, out)
          // The gradient at the pre-activation: the activation's element-wise backward.
          Tensor d_pre = g2;
          if (act != Activation::None) {
            d_pre = detail::unary_backward_of(unary_op_of(act), g2, s[2], 0.0);
          }
          Tensor d_inp;
          if (gx) {
            if (fused) d_inp = fused_input_grad(d_pre, s[1]);
            if (!d_inp.defined()) d_inp = matmul(d_pre, s[1]);
            if (x_shape.size() != 2) d_inp = d_inp.reshape(x_shape);
          }
          Tensor d_w, d_b;
          if (gw && fused && rows > 0) {
            d_pre = d_pre.contiguous();
            std::tie(d_w, d_b) = fused_weight_grad(d_pre, xs, gb);
          }
          if (gw && !d_w.defined()) d_w = matmul(d_pre.t(), xs);
          if (gb && !d_b.defined()) d_b = sum(d_pre, 0);
          return std::vector<Tensor>{d_inp, d_w, d_b};
        });
  }
  return y;
}

}  // namespace ember
