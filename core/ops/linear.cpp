// linear: y = act(x w^T + b), the seam behind nn::Linear.
//
// On CUDA in float32 (TF32 when allowed) and bfloat16 the forward is one GEMM
// with the bias and activation in its epilogue (ours or cuBLASLt, as
// cuda/gemm_dispatch.h picks); the backward applies the activation's derivative
// (one element-wise kernel), then d_x = d_pre w (cuBLAS) and d_w = d_pre^T x with
// d_b summed in the same cuBLASLt pass (BGRADB). Everywhere else (CPU, float64)
// it is composed from matmul, add, sum and the element-wise ops.
#include "core/alloc_site.h"
#include "core/autocast.h"
#include "core/autograd.h"
#include "core/ops.h"
#include "core/ops/dispatch.h"
#include "cuda/blas.h"
#include "cuda/gemm_dispatch.h"
#include "cuda/kernels/gemm.h"

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

cuda::GemmActivation to_gemm(Activation act) {
  switch (act) {
    case Activation::Relu:
      return cuda::GemmActivation::Relu;
    case Activation::Gelu:
      return cuda::GemmActivation::Gelu;
    default:
      return cuda::GemmActivation::None;
  }
}

Tensor apply_activation(const Tensor& pre, Activation act) {
  switch (act) {
    case Activation::Relu:
      return relu(pre);
    case Activation::Gelu:
      return gelu(pre);
    default:
      return pre;
  }
}

// act'(v) * d_y composed from element-wise ops (CPU, float64). For ReLU `saved`
// is the output y (y > 0 exactly where the pre-activation is), for GELU the
// pre-activation.
Tensor activation_backward_composed(const Tensor& d_y, const Tensor& saved, Activation act) {
  if (act == Activation::Relu) return mul(d_y, gt(saved, 0.0));
  constexpr double kAlpha = 0.7978845608028654, kC = 0.044715;  // sqrt(2/pi), GELU's cubic
  const Tensor& v = saved;
  Tensor v2 = mul(v, v);
  Tensor t = tanh(mul(add(v, mul(mul(v2, v), kC)), kAlpha));
  Tensor left = mul(add(t, 1.0), 0.5);
  Tensor right = mul(mul(mul(v, rsub(mul(t, t), 1.0)), add(mul(v2, 3.0 * kC), 1.0)), 0.5 * kAlpha);
  return mul(d_y, add(left, right));
}

// The CUDA fast path: float32 / bfloat16 with K-contiguous operand rows.
bool use_fused_cuda(const Tensor& x) {
  return x.is_cuda() && (x.dtype() == kFloat32 || x.dtype() == kBFloat16);
}

Tensor rows_contiguous(const Tensor& t) {  // rows may be strided, each row contiguous
  const bool ok = t.dim() == 2 && t.stride(1) == 1 && t.stride(0) >= t.size(1);
  return ok ? t : t.contiguous();
}

}  // namespace

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  return linear(x, w, b, Activation::None);
}

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b, Activation act) {
  if (is_autocast_enabled() && x.defined() && x.is_cuda()) [[unlikely]] {
    // Autocast (core/autocast.h): float32 operands run in the autocast dtype;
    // the casts are recorded, so the float32 parameters get float32 gradients.
    const DType lo = autocast_dtype();
    auto down = [lo](const Tensor& t) {
      return t.defined() && t.dtype() == kFloat32 ? cast(t, lo) : t;
    };
    if ((x.dtype() == kFloat32 || (w.defined() && w.dtype() == kFloat32) ||
         (b.defined() && b.dtype() == kFloat32)) &&
        (x.dtype() == kFloat32 || x.dtype() == lo)) {
      AutocastGuard off(lo, false);
      return linear(down(x), down(w), down(b), act);
    }
  }
  OpSite site("linear");  // names its allocations (core/alloc_site.h)
  check_linear(x, w, b);
  const int64_t in = w.size(1), out_features = w.size(0);
  Shape out_shape = x.sizes();
  out_shape.back() = out_features;
  int64_t rows = 1;  // product of the leading dims (not numel / in: in may be 0)
  for (int64_t d = 0; d + 1 < x.dim(); ++d) rows *= x.size(d);
  const bool needs_grad = any_requires_grad({&x, &w, &b});
  const bool fused = use_fused_cuda(x);
  Tensor x2, y, saved_act;  // saved_act: y for ReLU, the pre-activation for GELU
  {
    NoGradGuard no_grad;  // the forward records nothing; backward is attached below
    x2 = rows_contiguous(x.dim() == 2 ? x.detach() : x.detach().reshape({rows, in}));  // (M, in)
    if (fused) {
      const Tensor w2 = rows_contiguous(w.detach());  // w2: (out, in)
      const Tensor b2 = b.defined() ? b.detach().contiguous() : Tensor();
      const int64_t m = rows;
      Tensor y2 = empty({rows, out_features}, TensorOptions(x.dtype()).device(x.device()));
      Tensor pre = needs_grad && act == Activation::Gelu ? empty_like(y2) : Tensor();
      if (m > 0 && out_features > 0)
        cuda::linear_forward(x.dtype(), m, out_features, in, x2.raw_data(), x2.stride(0),
                             w2.raw_data(), w2.stride(0), b2.defined() ? b2.raw_data() : nullptr,
                             y2.raw_data(), pre.defined() ? pre.raw_data() : nullptr, to_gemm(act),
                             x.device().index, detail::stream_of(x));
      saved_act = act == Activation::Relu ? y2 : pre;
      y = x.dim() == 2 ? y2 : y2.reshape(out_shape);
    } else {
      Tensor pre = matmul(x2, w.detach().t());  // (M, out)
      if (b.defined()) pre = add(pre, b.detach());
      Tensor y2 = apply_activation(pre, act);
      saved_act = act == Activation::Relu ? y2 : act == Activation::Gelu ? pre : Tensor();
      y = x.dim() == 2 ? y2 : y2.reshape(out_shape);
    }
  }
  if (needs_grad) {
    const bool gx = x.requires_grad(), gw = w.requires_grad();
    const bool gb = b.defined() && b.requires_grad();
    attach_grad_fn(
        y, "LinearBackward", {&x, &w, &b},
        [sx = SavedTensor(gw ? x2 : Tensor(), "linear"),
         sw = SavedTensor(gx ? w : Tensor(), "linear"), sa = SavedTensor(saved_act, "linear"),
         x_shape = x.sizes(), rows, in, out_features, act, fused, gx, gw, gb](const Tensor& d_out) {
          Tensor g2 = d_out.dim() == 2 ? d_out : d_out.reshape({rows, out_features});  // (M, out)
          const int64_t m = rows;
          Tensor d_pre = g2;  // gradient at the pre-activation
          if (act != Activation::None) {
            if (fused) {
              g2 = g2.contiguous();
              d_pre = empty_like(g2);
              cuda::launch_activation_backward(g2.dtype(), to_gemm(act), g2.raw_data(),
                                               sa.get().raw_data(), d_pre.raw_data(), g2.numel(),
                                               detail::stream_of(g2));
            } else {
              d_pre = activation_backward_composed(g2, sa.get(), act);
            }
          }
          Tensor d_inp;
          if (gx) {
            d_inp = matmul(d_pre, sw.get());
            if (x_shape.size() != 2) d_inp = d_inp.reshape(x_shape);
          }
          Tensor d_w, d_b;
          if (gw && fused && m > 0) {
            const Tensor& xs = sx.get();
            const bool fuse_db = cuda::fuse_bias_grad(d_pre.dtype());
            d_pre = d_pre.contiguous();
            d_w = empty({out_features, in}, TensorOptions(d_pre.dtype()).device(d_pre.device()));
            d_b = gb && fuse_db
                      ? empty({out_features}, TensorOptions(d_pre.dtype()).device(d_pre.device()))
                      : Tensor();
            if (!cuda::lt_linear_backward_weight(d_pre.dtype(), m, out_features, in, xs.raw_data(),
                                                 xs.stride(0), d_pre.raw_data(), d_w.raw_data(),
                                                 gb && fuse_db ? d_b.raw_data() : nullptr,
                                                 d_pre.device().index, detail::stream_of(d_pre)))
              d_w = Tensor(), d_b = Tensor();  // no fused algorithm: the composed path below
          }
          if (gw && !d_w.defined()) d_w = matmul(d_pre.t(), sx.get());
          if (gb && !d_b.defined()) d_b = sum(d_pre, 0);
          return std::vector<Tensor>{d_inp, d_w, d_b};
        });
  }
  return y;
}

}  // namespace ember
