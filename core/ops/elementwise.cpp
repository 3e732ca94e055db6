// Element-wise ops: forward, backward and CPU reference loop together. The CPU
// loop computes in double; the CUDA path launches cuda/kernels/elementwise.cu.
#include <cstring>

#include "core/alloc_site.h"
#include "core/autograd.h"
#include "core/ops.h"
#include "core/ops/dispatch.h"
#include "cuda/check.h"
#include "cuda/kernels/elementwise.h"

namespace ember {

using Grads = std::vector<Tensor>;

// ---------------------------------------------------------------- checks

void check_defined(const char* op, const Tensor& a, const char* what) {
  EMBER_CHECK(a.defined(), op, ": ", what, " is an undefined tensor");
}

void check_same_device(const char* op, const Tensor& a, const Tensor& b) {
  EMBER_CHECK(a.device() == b.device(), op, ": operands are on different devices (", a.device(),
              " and ", b.device(), "); move one with .to()");
}

void check_same_dtype(const char* op, const Tensor& a, const Tensor& b) {
  EMBER_CHECK(a.dtype() == b.dtype(), op, ": operands have different dtypes (", a.dtype(),
              " and ", b.dtype(), "); convert one with .to(dtype)");
}

void check_floating(const char* op, const Tensor& a) {
  EMBER_CHECK(is_floating(a.dtype()), op, ": expects a floating-point tensor, got ", a.dtype());
}

void check_inplace(const char* op, const Tensor& t) {
  EMBER_CHECK(!(is_grad_enabled() && t.requires_grad()), op,
              ": in-place operation on a tensor that requires grad while grad mode is on; "
              "use the out-of-place op, or wrap the update in NoGradGuard");
}

namespace detail {

StridedLayout layout_of(const Tensor& t, const Shape& iter, const char* op) {
  EMBER_CHECK(iter.size() <= static_cast<size_t>(kMaxDims), op, ": tensors of more than ",
              kMaxDims, " dims are not supported (got ", iter.size(), ")");
  const int nd = static_cast<int>(iter.size());
  const Shape& sz = t.sizes();
  const Shape& st = t.strides();
  const int lead = nd - static_cast<int>(sz.size());
  StridedLayout l;  // left unzeroed: the loop writes every slot
  l.ndim = nd;
  l.offset = t.storage_offset();
  // Contiguous over iter when every dim that iter does not make 1 has the
  // row-major stride: broadcast dims (stride 0) and leading ones fail this.
  bool contiguous = true;
  int64_t expected = 1;
  // All kMaxDims slots (past ndim: size 1, stride 0), which also keeps compilers
  // from turning the copy of sizes into a string instruction (slow at this
  // length); this runs three times per binary op.
  for (int i = kMaxDims - 1; i >= 0; --i) {
    int64_t size = 1, stride = 0;
    if (i < nd) {
      size = iter[i];
      if (i >= lead && sz[i - lead] != 1) stride = st[i - lead];
      if (size != 1) {
        if (stride != expected) contiguous = false;
        expected *= size;
      }
    }
    l.sizes[i] = size;
    l.strides[i] = stride;
  }
  l.contiguous = contiguous;
  return l;
}

}  // namespace detail

namespace {

TensorOptions like(const Tensor& t) { return TensorOptions().dtype(t.dtype()).device(t.device()); }

// out = op(a, s) elementwise; out may be a (in place) or a view.
void run_unary(UnaryOp op, const Tensor& a, const Tensor& out, double s, const char* name) {
  const Shape& shape = out.sizes();
  StridedLayout al = detail::layout_of(a, shape, name);
  StridedLayout ol = detail::layout_of(out, shape, name);
  const int64_t n = out.numel();
  if (out.is_cuda()) {
    cuda::DeviceGuard guard(out.device().index);
    cuda::launch_unary(op, out.dtype(), a.storage()->data(), al, out.storage()->data(), ol, n, s,
                       detail::stream_of(out));
    return;
  }
  detail::dispatch_cpu(out.dtype(), [&](auto tag) {
    using S = decltype(tag);
    const S* x = static_cast<const S*>(a.storage()->data());
    S* y = static_cast<S*>(out.storage()->data());
    for (int64_t i = 0; i < n; ++i)
      detail::store_from_double(y + ol.offset_of(i),
                                apply_unary<double>(op, detail::load_as_double(x + al.offset_of(i)), s));
  });
}

void run_binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out, double s,
                const char* name) {
  const Shape& shape = out.sizes();
  StridedLayout al = detail::layout_of(a, shape, name);
  StridedLayout bl = detail::layout_of(b, shape, name);
  StridedLayout ol = detail::layout_of(out, shape, name);
  const int64_t n = out.numel();
  if (out.is_cuda()) {
    cuda::DeviceGuard guard(out.device().index);
    cuda::launch_binary(op, out.dtype(), a.storage()->data(), al, b.storage()->data(), bl,
                        out.storage()->data(), ol, n, s, detail::stream_of(out));
    return;
  }
  detail::dispatch_cpu(out.dtype(), [&](auto tag) {
    using S = decltype(tag);
    const S* x = static_cast<const S*>(a.storage()->data());
    const S* y = static_cast<const S*>(b.storage()->data());
    S* o = static_cast<S*>(out.storage()->data());
    for (int64_t i = 0; i < n; ++i)
      detail::store_from_double(
          o + ol.offset_of(i),
          apply_binary<double>(op, detail::load_as_double(x + al.offset_of(i)),
                                     detail::load_as_double(y + bl.offset_of(i)), s));
  });
}

void check_binary(const char* name, const Tensor& a, const Tensor& b) {
  check_defined(name, a, "first operand");
  check_defined(name, b, "second operand");
  check_same_device(name, a, b);
  check_same_dtype(name, a, b);
  check_floating(name, a);
}

Tensor unary_forward(UnaryOp op, const char* name, const Tensor& a, double s = 0.0) {
  OpSite site(name);
  check_defined(name, a);
  check_floating(name, a);
  Tensor out = empty(a.sizes(), like(a));
  run_unary(op, a, out, s, name);
  return out;
}

Tensor binary_forward(BinaryOp op, const char* name, const Tensor& a, const Tensor& b,
                      double s = 1.0) {
  OpSite site(name);
  check_binary(name, a, b);
  Tensor out = a.sizes() == b.sizes()
                   ? empty(a.sizes(), like(a))
                   : empty(broadcast_shapes(a.sizes(), b.sizes(), name), like(a));
  run_binary(op, a, b, out, s, name);
  return out;
}

// Backward helper: out = op(g, saved, s) for the activation derivatives.
Tensor grad_binary(BinaryOp op, const Tensor& g, const Tensor& saved, double s = 1.0) {
  Tensor out = empty(g.sizes(), like(g));
  run_binary(op, g, saved, out, s, "backward");
  return out;
}

}  // namespace

// ---------------------------------------------------------------- binary

Tensor add(const Tensor& a, const Tensor& b, double alpha) {
  Tensor out = binary_forward(BinaryOp::Add, "add", a, b, alpha);
  if (any_requires_grad({&a, &b})) {
    attach_grad_fn(out, "AddBackward", {&a, &b},
                   [sa = a.sizes(), sb = b.sizes(), alpha](const Tensor& g) {
                     return Grads{sum_to(g, sa), sum_to(alpha == 1.0 ? g : mul(g, alpha), sb)};
                   });
  }
  return out;
}

Tensor sub(const Tensor& a, const Tensor& b) {
  Tensor out = binary_forward(BinaryOp::Sub, "sub", a, b);
  if (any_requires_grad({&a, &b})) {
    attach_grad_fn(out, "SubBackward", {&a, &b}, [sa = a.sizes(), sb = b.sizes()](const Tensor& g) {
      return Grads{sum_to(g, sa), sum_to(neg(g), sb)};
    });
  }
  return out;
}

Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor out = binary_forward(BinaryOp::Mul, "mul", a, b);
  if (any_requires_grad({&a, &b})) {
    bool ga = a.requires_grad(), gb = b.requires_grad();
    attach_grad_fn(out, "MulBackward", {&a, &b},
                   [sa = SavedTensor(gb ? a : Tensor(), "mul"), sb = SavedTensor(ga ? b : Tensor(), "mul"),
                    sza = a.sizes(), szb = b.sizes(), ga, gb](const Tensor& g) {
                     return Grads{ga ? sum_to(mul(g, sb.get()), sza) : Tensor(),
                                  gb ? sum_to(mul(g, sa.get()), szb) : Tensor()};
                   });
  }
  return out;
}

Tensor div(const Tensor& a, const Tensor& b) {
  Tensor out = binary_forward(BinaryOp::Div, "div", a, b);
  if (any_requires_grad({&a, &b})) {
    bool gb = b.requires_grad();
    attach_grad_fn(out, "DivBackward", {&a, &b},
                   [sa = SavedTensor(gb ? a : Tensor(), "div"), sb = SavedTensor(b, "div"),
                    sza = a.sizes(), szb = b.sizes(), gb](const Tensor& g) {
                     const Tensor& bv = sb.get();
                     Tensor ga = div(g, bv);
                     Tensor gbv = gb ? sum_to(neg(div(mul(ga, sa.get()), bv)), szb) : Tensor();
                     return Grads{sum_to(ga, sza), gbv};
                   });
  }
  return out;
}

// ---------------------------------------------------------------- scalar and unary

Tensor add(const Tensor& a, double s) {
  Tensor out = unary_forward(UnaryOp::AddScalar, "add", a, s);
  if (any_requires_grad({&a}))
    attach_grad_fn(out, "AddScalarBackward", {&a}, [](const Tensor& g) { return Grads{g}; });
  return out;
}

Tensor mul(const Tensor& a, double s) {
  Tensor out = unary_forward(UnaryOp::MulScalar, "mul", a, s);
  if (any_requires_grad({&a}))
    attach_grad_fn(out, "MulScalarBackward", {&a},
                   [s](const Tensor& g) { return Grads{mul(g, s)}; });
  return out;
}

Tensor rsub(const Tensor& a, double s) {
  Tensor out = unary_forward(UnaryOp::RSubScalar, "rsub", a, s);
  if (any_requires_grad({&a}))
    attach_grad_fn(out, "RsubBackward", {&a}, [](const Tensor& g) { return Grads{neg(g)}; });
  return out;
}

Tensor rdiv(const Tensor& a, double s) {
  Tensor out = unary_forward(UnaryOp::RDivScalar, "rdiv", a, s);
  if (any_requires_grad({&a}))
    attach_grad_fn(out, "RdivBackward", {&a},
                   [sa = SavedTensor(a, "rdiv"), so = SavedTensor(out, "rdiv")](const Tensor& g) {
                     return Grads{neg(mul(g, div(so.get(), sa.get())))};
                   });
  return out;
}

Tensor neg(const Tensor& a) {
  Tensor out = unary_forward(UnaryOp::Neg, "neg", a);
  if (any_requires_grad({&a}))
    attach_grad_fn(out, "NegBackward", {&a}, [](const Tensor& g) { return Grads{neg(g)}; });
  return out;
}

Tensor pow(const Tensor& a, double e) {
  Tensor out = unary_forward(UnaryOp::Pow, "pow", a, e);
  if (any_requires_grad({&a}))
    attach_grad_fn(out, "PowBackward", {&a}, [sa = SavedTensor(a, "pow"), e](const Tensor& g) {
      return Grads{grad_binary(BinaryOp::PowGrad, g, sa.get(), e)};
    });
  return out;
}

Tensor exp(const Tensor& a) {
  Tensor out = unary_forward(UnaryOp::Exp, "exp", a);
  if (any_requires_grad({&a}))
    attach_grad_fn(out, "ExpBackward", {&a}, [so = SavedTensor(out, "exp")](const Tensor& g) {
      return Grads{mul(g, so.get())};
    });
  return out;
}

Tensor log(const Tensor& a) {
  Tensor out = unary_forward(UnaryOp::Log, "log", a);
  if (any_requires_grad({&a}))
    attach_grad_fn(out, "LogBackward", {&a}, [sa = SavedTensor(a, "log")](const Tensor& g) {
      return Grads{div(g, sa.get())};
    });
  return out;
}

Tensor sqrt(const Tensor& a) {
  Tensor out = unary_forward(UnaryOp::Sqrt, "sqrt", a);
  if (any_requires_grad({&a}))
    attach_grad_fn(out, "SqrtBackward", {&a}, [so = SavedTensor(out, "sqrt")](const Tensor& g) {
      return Grads{div(mul(g, 0.5), so.get())};
    });
  return out;
}

Tensor abs(const Tensor& a) {
  Tensor out = unary_forward(UnaryOp::Abs, "abs", a);
  if (any_requires_grad({&a}))
    attach_grad_fn(out, "AbsBackward", {&a}, [sa = SavedTensor(a, "abs")](const Tensor& g) {
      return Grads{mul(g, unary_forward(UnaryOp::Sign, "sign", sa.get()))};
    });
  return out;
}

Tensor relu(const Tensor& a) {
  Tensor out = unary_forward(UnaryOp::Relu, "relu", a);
  if (any_requires_grad({&a}))
    attach_grad_fn(out, "ReluBackward", {&a}, [so = SavedTensor(out, "relu")](const Tensor& g) {
      return Grads{grad_binary(BinaryOp::ReluGrad, g, so.get())};
    });
  return out;
}

Tensor sigmoid(const Tensor& a) {
  Tensor out = unary_forward(UnaryOp::Sigmoid, "sigmoid", a);
  if (any_requires_grad({&a}))
    attach_grad_fn(out, "SigmoidBackward", {&a},
                   [so = SavedTensor(out, "sigmoid")](const Tensor& g) {
                     return Grads{grad_binary(BinaryOp::SigmoidGrad, g, so.get())};
                   });
  return out;
}

Tensor tanh(const Tensor& a) {
  Tensor out = unary_forward(UnaryOp::Tanh, "tanh", a);
  if (any_requires_grad({&a}))
    attach_grad_fn(out, "TanhBackward", {&a}, [so = SavedTensor(out, "tanh")](const Tensor& g) {
      return Grads{grad_binary(BinaryOp::TanhGrad, g, so.get())};
    });
  return out;
}

Tensor gelu(const Tensor& a) {
  Tensor out = unary_forward(UnaryOp::Gelu, "gelu", a);
  if (any_requires_grad({&a}))
    attach_grad_fn(out, "GeluBackward", {&a}, [sa = SavedTensor(a, "gelu")](const Tensor& g) {
      return Grads{grad_binary(BinaryOp::GeluGrad, g, sa.get())};
    });
  return out;
}

Tensor ge(const Tensor& a, double s) { return unary_forward(UnaryOp::GeScalar, "ge", a, s); }
Tensor gt(const Tensor& a, double s) { return unary_forward(UnaryOp::GtScalar, "gt", a, s); }

// ---------------------------------------------------------------- copies and casts

Tensor& copy_(Tensor& dst, const Tensor& src) {
  check_defined("copy_", dst, "destination");
  check_defined("copy_", src, "source");
  check_inplace("copy_", dst);
  Shape bs = broadcast_shapes(dst.sizes(), src.sizes(), "copy_");
  EMBER_CHECK(bs == dst.sizes(), "copy_: source of shape ", shape_str(src.sizes()),
              " cannot be broadcast to destination of shape ", shape_str(dst.sizes()));
  Tensor s = src.device() == dst.device() ? src.detach() : src.detach().to(dst.device());
  const int64_t n = dst.numel();
  if (n > 0) {
    StridedLayout sl = detail::layout_of(s, dst.sizes(), "copy_");
    StridedLayout dl = detail::layout_of(dst, "copy_");
    if (dst.is_cuda()) {
      cuda::DeviceGuard guard(dst.device().index);
      if (sl.contiguous && dl.contiguous && s.dtype() == dst.dtype()) {
        EMBER_CUDA_CHECK(cudaMemcpyAsync(dst.raw_data(), s.raw_data(), dst.nbytes(),
                                         cudaMemcpyDeviceToDevice, detail::stream_of(dst)));
      } else {
        cuda::launch_cast(s.dtype(), s.storage()->data(), sl, dst.dtype(), dst.storage()->data(),
                          dl, n, detail::stream_of(dst));
      }
    } else if (sl.contiguous && dl.contiguous && s.dtype() == dst.dtype()) {
      std::memmove(dst.raw_data(), s.raw_data(), dst.nbytes());
    } else {
      detail::dispatch_cpu(s.dtype(), [&](auto stag) {
        using SS = decltype(stag);
        detail::dispatch_cpu(dst.dtype(), [&](auto dtag) {
          using DS = decltype(dtag);
          const SS* x = static_cast<const SS*>(s.storage()->data());
          DS* y = static_cast<DS*>(dst.storage()->data());
          for (int64_t i = 0; i < n; ++i)
            detail::store_from_double(y + dl.offset_of(i), detail::load_as_double(x + sl.offset_of(i)));
        });
      });
    }
  }
  dst.bump_version();
  return dst;
}

Tensor cast(const Tensor& a, DType t) {
  OpSite site("cast");
  check_defined("cast", a);
  if (a.dtype() == t) return a;
  Tensor out = empty(a.sizes(), TensorOptions().dtype(t).device(a.device()));
  {
    NoGradGuard ng;
    copy_(out, a);
  }
  if (any_requires_grad({&a}) && is_floating(t)) {
    DType from = a.dtype();
    attach_grad_fn(out, "CastBackward", {&a},
                   [from](const Tensor& g) { return Grads{cast(g, from)}; });
  }
  return out;
}

Tensor& fill_(Tensor& t, double value) {
  check_defined("fill_", t);
  check_inplace("fill_", t);
  const int64_t n = t.numel();
  StridedLayout l = detail::layout_of(t, "fill_");
  if (t.is_cuda()) {
    cuda::DeviceGuard guard(t.device().index);
    cuda::launch_fill(t.dtype(), t.storage()->data(), l, n, value, detail::stream_of(t));
  } else {
    detail::dispatch_cpu(t.dtype(), [&](auto tag) {
      using S = decltype(tag);
      S* y = static_cast<S*>(t.storage()->data());
      S v{};
      detail::store_from_double(&v, value);
      for (int64_t i = 0; i < n; ++i) y[l.offset_of(i)] = v;
    });
  }
  t.bump_version();
  return t;
}

// ---------------------------------------------------------------- in place

Tensor& add_(Tensor& t, const Tensor& other, double alpha) {
  check_binary("add_", t, other);
  check_inplace("add_", t);
  EMBER_CHECK(other.sizes() == t.sizes() ||
                  broadcast_shapes(t.sizes(), other.sizes(), "add_") == t.sizes(),
              "add_: operand of shape ", shape_str(other.sizes()), " cannot be broadcast to ",
              shape_str(t.sizes()));
  run_binary(BinaryOp::Add, t, other, t, alpha, "add_");
  t.bump_version();
  return t;
}

Tensor& add_(Tensor& t, double value) {
  check_defined("add_", t);
  check_floating("add_", t);
  check_inplace("add_", t);
  run_unary(UnaryOp::AddScalar, t, t, value, "add_");
  t.bump_version();
  return t;
}

Tensor& mul_(Tensor& t, const Tensor& other) {
  check_binary("mul_", t, other);
  check_inplace("mul_", t);
  EMBER_CHECK(other.sizes() == t.sizes() ||
                  broadcast_shapes(t.sizes(), other.sizes(), "mul_") == t.sizes(),
              "mul_: operand of shape ", shape_str(other.sizes()), " cannot be broadcast to ",
              shape_str(t.sizes()));
  run_binary(BinaryOp::Mul, t, other, t, 1.0, "mul_");
  t.bump_version();
  return t;
}

Tensor& mul_(Tensor& t, double value) {
  check_defined("mul_", t);
  check_floating("mul_", t);
  check_inplace("mul_", t);
  run_unary(UnaryOp::MulScalar, t, t, value, "mul_");
  t.bump_version();
  return t;
}

}  // namespace ember
