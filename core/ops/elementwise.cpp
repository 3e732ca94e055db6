// Element-wise ops. The ops of core/base/elementwise_ops.h's lists are generated
// here: one generic forward per arity that runs the device's kernel from the
// table, and one generic backward that evaluates the list's derivative (a kernel
// of its own, or nothing where the derivative is the incoming gradient). Mixed
// dtypes follow PyTorch's type promotion (result_type): operands are cast to the
// dtype the op computes in (a differentiable cast), comparisons give bool.
// where, masked_fill and clamp, copies, casts, fills and the in-place ops follow.
#include <cmath>

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
  EMBER_CHECK(a.dtype() == b.dtype(), op, ": operands have different dtypes (", a.dtype(), " and ",
              b.dtype(), "); convert one with .to(dtype)");
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
  EMBER_CHECK(iter.size() <= static_cast<size_t>(kMaxDims), op, ": tensors of more than ", kMaxDims,
              " dims are not supported (got ", iter.size(), ")");
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

// out = op(a, s) elementwise; out may be a (in place) or a view. a is of the
// dtype the op computes in; out of that dtype, or bool for a comparison.
void run_unary(UnaryOp op, const Tensor& a, const Tensor& out, double s, const char* name) {
  const Shape& shape = out.sizes();
  kernels::kernels_for(out.device())
      .unary({out.device(), op, a.dtype(), a.storage()->data(), detail::layout_of(a, shape, name),
              out.storage()->data(), detail::layout_of(out, shape, name), out.numel(), s,
              out.dtype()});
}

// a and b of the dtype the op computes in, or (computing in float32) one of them
// bfloat16, which the kernel widens as it reads (BinaryArgs::x_bf16, y_bf16).
void run_binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out, double s,
                const char* name) {
  const Shape& shape = out.sizes();
  const bool a_narrow = a.dtype() == kBFloat16 && b.dtype() == kFloat32;
  const bool b_narrow = b.dtype() == kBFloat16 && a.dtype() == kFloat32;
  kernels::BinaryArgs args{out.device(),
                           op,
                           a_narrow ? kFloat32 : a.dtype(),
                           a.storage()->data(),
                           detail::layout_of(a, shape, name),
                           b.storage()->data(),
                           detail::layout_of(b, shape, name),
                           out.storage()->data(),
                           detail::layout_of(out, shape, name),
                           out.numel(),
                           s,
                           out.dtype()};
  args.x_bf16 = a_narrow;
  args.y_bf16 = b_narrow;
  kernels::kernels_for(out.device()).binary(args);
}

// Whether a float32 op reads a bfloat16 operand as it is (the kernel widening it)
// instead of through a cast: for ops whose backward reads neither operand (add,
// sub), so no bfloat16 operand is saved, and for the comparisons.
bool reads_bf16_in_place(BinaryOp op, DType compute, DType x, DType y) {
  if (compute != kFloat32) return false;
  if (!((x == kBFloat16 && y == kFloat32) || (x == kFloat32 && y == kBFloat16))) return false;
  if (gives_bool(op)) return true;
  auto reads_operand = [](Reads r) { return r != Reads::G && r != Reads::GA && r != Reads::None; };
  return !reads_operand(binary_reads(op, 0)) && !reads_operand(binary_reads(op, 1));
}

// The in-place binary ops: `other` is cast to t's dtype when the promoted type of
// the two is t's own (float32 += bfloat16, float32 += int64), as PyTorch allows;
// otherwise the result could not be stored in t, an error.
Tensor operand_for_inplace(const char* name, const Tensor& t, const Tensor& other) {
  check_defined(name, t, "first operand");
  check_defined(name, other, "second operand");
  check_same_device(name, t, other);
  EMBER_CHECK(t.dtype() != kBool, name, ": in-place arithmetic on a bool tensor is not supported");
  if (other.dtype() == t.dtype()) return other;
  EMBER_CHECK(promote_types(t.dtype(), other.dtype()) == t.dtype(), name,
              ": operands have different dtypes (", t.dtype(), " and ", other.dtype(),
              ") and the result type ", promote_types(t.dtype(), other.dtype()),
              " cannot be stored in the ", t.dtype(), " tensor");
  return cast(other, t.dtype());
}

// Ops of the unary list proper come first in UnaryOp; those of the scalar list
// (which take a scalar) after them.
constexpr int kPlainUnaryOps = 0
#define EMBER_X(...) +1
    EMBER_UNARY_OPS(EMBER_X)
#undef EMBER_X
    ;
constexpr bool takes_scalar(UnaryOp op) {
  return static_cast<int>(op) >= kPlainUnaryOps;
}

// The dtype a unary op computes in, given its input's: floating inputs as they
// are; integer (and bool) inputs stay int64 for the ops that keep integers (with
// an integral scalar, and pow's exponent >= 0) and the comparisons, and become
// float32 for everything else (as PyTorch: exp of an int64 tensor is float32).
DType unary_compute_dtype(UnaryOp op, DType in, Scalar s) {
  if (is_floating(in)) return in;
  if (gives_bool(op)) return kInt64;
  const bool closed = keeps_integers(op) && (!takes_scalar(op) || s.is_integral()) &&
                      !(op == UnaryOp::Pow && s.to_double() < 0);
  return closed ? kInt64 : kFloat32;
}

Tensor as_dtype(const Tensor& t, DType d) {
  return t.dtype() == d ? t : cast(t, d);
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

// PyTorch's result_type for two tensors: dimensioned operands decide within their
// category, a 0-dim operand counts only when of a higher category (as a scalar):
// a float32 tensor times a float64 0-dim tensor stays float32, an int64 tensor
// plus a float64 0-dim tensor is float64.
DType result_type(const Tensor& a, const Tensor& b) {
  const DType x = a.dtype(), y = b.dtype();
  if (x == y) return x;
  const bool za = a.dim() == 0, zb = b.dim() == 0;
  if (za == zb) return promote_types(x, y);
  const DType dimmed = za ? y : x, zero = za ? x : y;
  if (is_floating(dimmed)) return dimmed;
  if (dimmed == kBool || is_floating(zero)) return promote_types(dimmed, zero);
  return dimmed;
}

namespace detail {

Tensor unary_op(UnaryOp op, const Tensor& input, Scalar scalar) {
  const char* name = unary_name(op);
  OpSite site(name);
  check_defined(name, input);
  const DType compute = unary_compute_dtype(op, input.dtype(), scalar);
  Tensor converted;  // only when the input's dtype is not the one the op computes in
  const Tensor& a = input.dtype() == compute ? input : (converted = cast(input, compute));
  const double s = scalar.to_double();
  Tensor out =
      empty(a.sizes(), TensorOptions(gives_bool(op) ? kBool : a.dtype()).device(a.device()));
  run_unary(op, a, out, s, name);
  const Saves saves = unary_saves(op);
  if (saves != Saves::NoGrad && saves != Saves::Bool && any_requires_grad({&a})) {
    const Tensor save = saves == Saves::In ? a : saves == Saves::Out ? out : Tensor();
    attach_grad_fn(out, kUnaryBackwardNames[static_cast<int>(op)], {&a},
                   save.defined() ? SavedTensors{save} : SavedTensors{},
                   [op, s](const Tensor& g, const SavedTensors& saved) {
                     return Grads{unary_backward_of(op, g, saved.size() ? saved[0] : Tensor(), s)};
                   });
  }
  return out;
}

Tensor binary_op(BinaryOp op, const Tensor& x, const Tensor& y, double alpha) {
  const char* name = binary_name(op);
  OpSite site(name);
  check_defined(name, x, "first operand");
  check_defined(name, y, "second operand");
  check_same_device(name, x, y);
  // The dtype it computes in: the operands' result type, where integers stay
  // int64 for the ops that keep integers and the comparisons (true division and
  // the rest compute them in float32), as PyTorch.
  DType compute = result_type(x, y);
  if (!is_floating(compute)) {
    if (gives_bool(op)) {
      compute = kInt64;
    } else if (keeps_integers(op)) {
      EMBER_CHECK(compute != kBool, name,
                  ": arithmetic on two bool tensors is not supported; "
                  "convert one with .to(kInt64)");
      EMBER_CHECK(alpha == std::floor(alpha), name,
                  ": alpha must be an integer for integer "
                  "operands, got ",
                  alpha);
    } else {
      compute = kFloat32;
    }
  }
  // Operands not of the compute dtype are cast to it, except a bfloat16 one that
  // the kernel reads as it is (reads_bf16_in_place); its gradient is then cast
  // back to bfloat16 below, as CastBackward would have.
  const bool in_place = reads_bf16_in_place(op, compute, x.dtype(), y.dtype());
  Tensor xc, yc;
  const Tensor& a = x.dtype() == compute || in_place ? x : (xc = cast(x, compute));
  const Tensor& b = y.dtype() == compute || in_place ? y : (yc = cast(y, compute));
  const TensorOptions opts = TensorOptions(gives_bool(op) ? kBool : compute).device(a.device());
  Tensor out = a.sizes() == b.sizes() ? empty(a.sizes(), opts)
                                      : empty(broadcast_shapes(a.sizes(), b.sizes(), name), opts);
  run_binary(op, a, b, out, alpha, name);
  if (!gives_bool(op) && any_requires_grad({&a, &b})) {
    const bool ga = a.requires_grad(), gb = b.requires_grad();
    const Reads rx = binary_reads(op, 0), ry = binary_reads(op, 1);
    const bool save_x = (ga && reads_x(rx)) || (gb && reads_x(ry));
    const bool save_y = (ga && reads_y(rx)) || (gb && reads_y(ry));
    // Only what the derivatives read is saved (nothing at all for add and sub).
    SavedTensors saved = save_x || save_y
                             ? SavedTensors{save_x ? a : Tensor(), save_y ? b : Tensor()}
                             : SavedTensors{};
    attach_grad_fn(
        out, kBinaryBackwardNames[static_cast<int>(op)], {&a, &b}, std::move(saved),
        [op, alpha, sa = a.sizes(), sb = b.sizes(), ga, gb, ta = a.dtype(), tb = b.dtype()](
            const Tensor& g, const SavedTensors& s) {
          const Tensor none;
          const Tensor& x = s.size() > 0 ? s[0] : none;
          const Tensor& y = s.size() > 1 ? s[1] : none;
          return Grads{
              ga ? as_dtype(sum_to(binary_grad(op, 0, g, x, y, alpha), sa), ta) : Tensor(),
              gb ? as_dtype(sum_to(binary_grad(op, 1, g, x, y, alpha), sb), tb) : Tensor()};
        });
  }
  return out;
}

}  // namespace detail

// ---------------------------------------------------------------- the generated ops

#define EMBER_X(name, Enum, ...)                    \
  Tensor name(const Tensor& a) {                    \
    return detail::unary_op(UnaryOp::Enum, a, 0.0); \
  }
EMBER_UNARY_OPS(EMBER_X)
#undef EMBER_X
#define EMBER_X(name, Enum, ...)                  \
  Tensor name(const Tensor& a, Scalar s) {        \
    return detail::unary_op(UnaryOp::Enum, a, s); \
  }
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
  if (is_floating(t)) detail::record_cast(out, a);
  return out;
}

void detail::record_cast(Tensor& out, const Tensor& a) {
  if (!any_requires_grad({&a})) return;
  const DType from = a.dtype();
  attach_grad_fn(out, "CastBackward", {&a},
                 [from](const Tensor& g) { return Grads{cast(g, from)}; });
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
  // float32 += bfloat16 reads the bfloat16 operand as it is (no cast pass).
  const Tensor o = t.defined() && other.defined() && t.dtype() == kFloat32 &&
                           other.dtype() == kBFloat16 && other.device() == t.device()
                       ? other
                       : operand_for_inplace("add_", t, other);
  check_inplace("add_", t);
  EMBER_CHECK(
      other.sizes() == t.sizes() || broadcast_shapes(t.sizes(), other.sizes(), "add_") == t.sizes(),
      "add_: operand of shape ", shape_str(other.sizes()), " cannot be broadcast to ",
      shape_str(t.sizes()));
  EMBER_CHECK(is_floating(t.dtype()) || alpha == std::floor(alpha),
              "add_: alpha must be an integer for an integer tensor, got ", alpha);
  run_binary(BinaryOp::Add, t, o, t, alpha, "add_");
  t.bump_version();
  return t;
}

Tensor& add_(Tensor& t, Scalar value) {
  check_defined("add_", t);
  check_inplace("add_", t);
  EMBER_CHECK(is_floating(t.dtype()) || (t.dtype() == kInt64 && value.is_integral()),
              "add_: cannot add ", value.is_integral() ? "an integer" : "a floating-point",
              " scalar to a ", t.dtype(), " tensor in place");
  run_unary(UnaryOp::AddScalar, t, t, value.to_double(), "add_");
  t.bump_version();
  return t;
}

Tensor& mul_(Tensor& t, const Tensor& other) {
  const Tensor o = operand_for_inplace("mul_", t, other);
  check_inplace("mul_", t);
  EMBER_CHECK(
      other.sizes() == t.sizes() || broadcast_shapes(t.sizes(), other.sizes(), "mul_") == t.sizes(),
      "mul_: operand of shape ", shape_str(other.sizes()), " cannot be broadcast to ",
      shape_str(t.sizes()));
  run_binary(BinaryOp::Mul, t, o, t, 1.0, "mul_");
  t.bump_version();
  return t;
}

Tensor& mul_(Tensor& t, Scalar value) {
  check_defined("mul_", t);
  check_inplace("mul_", t);
  EMBER_CHECK(is_floating(t.dtype()) || (t.dtype() == kInt64 && value.is_integral()),
              "mul_: cannot multiply a ", t.dtype(), " tensor by a",
              value.is_integral() ? "n integer" : " floating-point", " scalar in place");
  run_unary(UnaryOp::MulScalar, t, t, value.to_double(), "mul_");
  t.bump_version();
  return t;
}

// ---------------------------------------------------------------- selection

Tensor where(const Tensor& condition, const Tensor& x, const Tensor& y) {
  OpSite site("where");
  check_defined("where", condition, "condition");
  check_defined("where", x, "first operand");
  check_defined("where", y, "second operand");
  EMBER_CHECK(condition.dtype() == kBool, "where: the condition must be a bool tensor, got ",
              condition.dtype(), " (compare, e.g. t > 0, to make one)");
  check_same_device("where", condition, x);
  check_same_device("where", x, y);
  const DType dtype = result_type(x, y);
  const Tensor a = as_dtype(x, dtype), b = as_dtype(y, dtype);
  const Shape shape =
      broadcast_shapes(condition.sizes(), broadcast_shapes(a.sizes(), b.sizes(), "where"), "where");
  Tensor out = empty(shape, a.options());
  if (out.numel() > 0)
    kernels::kernels_for(out.device())
        .where({out.device(), dtype, condition.storage()->data(),
                detail::layout_of(condition, shape, "where"), a.storage()->data(),
                detail::layout_of(a, shape, "where"), b.storage()->data(),
                detail::layout_of(b, shape, "where"), out.storage()->data(),
                detail::layout_of(out, shape, "where"), out.numel()});
  if (any_requires_grad({&a, &b})) {
    const bool ga = a.requires_grad(), gb = b.requires_grad();
    attach_grad_fn(
        out, "WhereBackward", {&a, &b}, {condition},
        [ga, gb, sa = a.sizes(), sb = b.sizes()](const Tensor& g, const SavedTensors& s) {
          const Tensor zero = zeros({}, g.options());
          return Grads{ga ? sum_to(where(s[0], g, zero), sa) : Tensor(),
                       gb ? sum_to(where(s[0], zero, g), sb) : Tensor()};
        });
  }
  return out;
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, Scalar value) {
  check_defined("masked_fill", x);
  check_defined("masked_fill", mask, "mask");
  EMBER_CHECK(mask.dtype() == kBool, "masked_fill: the mask must be a bool tensor, got ",
              mask.dtype());
  EMBER_CHECK(broadcast_shapes(x.sizes(), mask.sizes(), "masked_fill") == x.sizes(),
              "masked_fill: a mask of shape ", shape_str(mask.sizes()),
              " does not broadcast to the input's shape ", shape_str(x.sizes()));
  EMBER_CHECK(is_floating(x.dtype()) || value.is_integral(), "masked_fill: cannot fill a ",
              x.dtype(), " tensor with the floating-point value ", value.to_double());
  // A 0-dim value of x's dtype: where keeps x's dtype, and the value has no gradient.
  return where(mask, full({}, value.to_double(), x.options()), x);
}

Tensor clamp(const Tensor& x, Scalar min, Scalar max) {
  check_defined("clamp", x);
  return clamp_max(clamp_min(x, min), max);
}

}  // namespace ember
