// Element-wise ops. The ops of core/base/elementwise_ops.h's lists are generated
// here: one generic forward per arity that runs the device's kernel from the
// table, and one generic backward that evaluates the list's derivative (a kernel
// of its own, or nothing where the derivative is the incoming gradient). Copies,
// casts, fills and the in-place ops follow.
#include "core/alloc_site.h"
#include "core/autograd.h"
#include "core/kernel_table.h"
#include "core/ops.h"
#include "core/ops/layouts.h"

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

// Node names, one per op of the lists: "ExpBackward", "MulBackward", ...
constexpr const char* kUnaryBackwardNames[] = {
#define EMBER_X(name, Enum, ...) #Enum "Backward",
    EMBER_UNARY_OPS(EMBER_X) EMBER_SCALAR_OPS(EMBER_X)
#undef EMBER_X
};
constexpr const char* kBinaryBackwardNames[] = {
#define EMBER_X(name, Enum, ...) #Enum "Backward",
    EMBER_BINARY_OPS(EMBER_X)
#undef EMBER_X
};

// out = op(a, s) elementwise; out may be a (in place) or a view.
void run_unary(UnaryOp op, const Tensor& a, const Tensor& out, double s, const char* name) {
  const Shape& shape = out.sizes();
  kernels::kernels_for(out.device())
      .unary({out.device(), op, out.dtype(), a.storage()->data(),
              detail::layout_of(a, shape, name), out.storage()->data(),
              detail::layout_of(out, shape, name), out.numel(), s});
}

void run_binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out, double s,
                const char* name) {
  const Shape& shape = out.sizes();
  kernels::kernels_for(out.device())
      .binary({out.device(), op, out.dtype(), a.storage()->data(),
               detail::layout_of(a, shape, name), b.storage()->data(),
               detail::layout_of(b, shape, name), out.storage()->data(),
               detail::layout_of(out, shape, name), out.numel(), s});
}

void check_binary(const char* name, const Tensor& a, const Tensor& b) {
  check_defined(name, a, "first operand");
  check_defined(name, b, "second operand");
  check_same_device(name, a, b);
  check_same_dtype(name, a, b);
  check_floating(name, a);
}

// d_x of a unary op: unary_backward(op, g, s, a) over g's shape, or g itself
// when the list says the derivative is the incoming gradient.
}  // namespace

Tensor detail::unary_backward_of(UnaryOp op, const Tensor& g, const Tensor& saved, double a) {
  if (unary_saves(op) == Saves::Pass) return g;
  const Tensor& s = saved.defined() ? saved : g;  // read by the formula only if it saves one
  Tensor out = empty(g.sizes(), g.options());
  const Shape& shape = g.sizes();
  kernels::kernels_for(g.device())
      .unary_backward({g.device(), op, g.dtype(), g.storage()->data(),
                       detail::layout_of(g, shape, "backward"), s.storage()->data(),
                       detail::layout_of(s, shape, "backward"), out.storage()->data(),
                       detail::layout_of(out, shape, "backward"), out.numel(), a});
  return out;
}

namespace {

// A binary op's derivative with respect to x (side 0) or y (side 1), over g's
// shape (the output's); x and y are read only where the list says so.
Tensor binary_grad(BinaryOp op, int side, const Tensor& g, const Tensor& x, const Tensor& y,
                   double a) {
  const Reads r = binary_reads(op, side);
  if (r == Reads::G) return g;
  if (r == Reads::GA) return a == 1.0 ? g : mul(g, a);
  const Tensor& xs = reads_x(r) ? x : g;
  const Tensor& ys = reads_y(r) ? y : g;
  Tensor out = empty(g.sizes(), g.options());
  const Shape& shape = g.sizes();
  kernels::kernels_for(g.device())
      .binary_backward({g.device(), op, side, g.dtype(), g.storage()->data(),
                        detail::layout_of(g, shape, "backward"), xs.storage()->data(),
                        detail::layout_of(xs, shape, "backward"), ys.storage()->data(),
                        detail::layout_of(ys, shape, "backward"), out.storage()->data(),
                        detail::layout_of(out, shape, "backward"), out.numel(), a});
  return out;
}

}  // namespace

namespace detail {

Tensor unary_op(UnaryOp op, const Tensor& a, double s) {
  const char* name = unary_name(op);
  OpSite site(name);
  check_defined(name, a);
  check_floating(name, a);
  Tensor out = empty(a.sizes(), a.options());
  run_unary(op, a, out, s, name);
  const Saves saves = unary_saves(op);
  if (saves != Saves::NoGrad && any_requires_grad({&a})) {
    const Tensor save = saves == Saves::In ? a : saves == Saves::Out ? out : Tensor();
    attach_grad_fn(out, kUnaryBackwardNames[static_cast<int>(op)], {&a},
                   save.defined() ? SavedTensors{save} : SavedTensors{},
                   [op, s](const Tensor& g, const SavedTensors& saved) {
                     return Grads{unary_backward_of(op, g, saved.size() ? saved[0] : Tensor(), s)};
                   });
  }
  return out;
}

Tensor binary_op(BinaryOp op, const Tensor& a, const Tensor& b, double alpha) {
  const char* name = binary_name(op);
  OpSite site(name);
  check_binary(name, a, b);
  Tensor out = a.sizes() == b.sizes()
                   ? empty(a.sizes(), a.options())
                   : empty(broadcast_shapes(a.sizes(), b.sizes(), name), a.options());
  run_binary(op, a, b, out, alpha, name);
  if (any_requires_grad({&a, &b})) {
    const bool ga = a.requires_grad(), gb = b.requires_grad();
    const Reads rx = binary_reads(op, 0), ry = binary_reads(op, 1);
    const bool save_x = (ga && reads_x(rx)) || (gb && reads_x(ry));
    const bool save_y = (ga && reads_y(rx)) || (gb && reads_y(ry));
    // Only what the derivatives read is saved (nothing at all for add and sub).
    SavedTensors saved = save_x || save_y
                             ? SavedTensors{save_x ? a : Tensor(), save_y ? b : Tensor()}
                             : SavedTensors{};
    attach_grad_fn(out, kBinaryBackwardNames[static_cast<int>(op)], {&a, &b}, std::move(saved),
                   [op, alpha, sa = a.sizes(), sb = b.sizes(), ga, gb](const Tensor& g,
                                                                      const SavedTensors& s) {
                     const Tensor none;
                     const Tensor& x = s.size() > 0 ? s[0] : none;
                     const Tensor& y = s.size() > 1 ? s[1] : none;
                     return Grads{ga ? sum_to(binary_grad(op, 0, g, x, y, alpha), sa) : Tensor(),
                                  gb ? sum_to(binary_grad(op, 1, g, x, y, alpha), sb) : Tensor()};
                   });
  }
  return out;
}

}  // namespace detail

// ---------------------------------------------------------------- the generated ops

#define EMBER_X(name, Enum, ...) \
  Tensor name(const Tensor& a) { return detail::unary_op(UnaryOp::Enum, a, 0.0); }
EMBER_UNARY_OPS(EMBER_X)
#undef EMBER_X
#define EMBER_X(name, Enum, ...) \
  Tensor name(const Tensor& a, double s) { return detail::unary_op(UnaryOp::Enum, a, s); }
EMBER_SCALAR_OPS(EMBER_X)
#undef EMBER_X
#define EMBER_X(name, Enum, ...)                         \
  Tensor name(const Tensor& a, const Tensor& b) {        \
    return detail::binary_op(BinaryOp::Enum, a, b, 1.0); \
  }
EMBER_BINARY_OPS(EMBER_X)
#undef EMBER_X

Tensor add(const Tensor& a, const Tensor& b, double alpha) {
  return detail::binary_op(BinaryOp::Add, a, b, alpha);
}

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
    kernels::kernels_for(dst.device())
        .cast({dst.device(), s.dtype(), s.storage()->data(),
               detail::layout_of(s, dst.sizes(), "copy_"), dst.dtype(), dst.storage()->data(),
               detail::layout_of(dst, "copy_"), n});
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
  kernels::kernels_for(t.device())
      .fill({t.device(), t.dtype(), t.storage()->data(), detail::layout_of(t, "fill_"), t.numel(),
             value});
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
