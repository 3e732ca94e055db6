// The element-wise ops, declared once. Each list entry below is an op's whole
// definition: its name, its formula, its derivative, what backward must save, and
// the test data its tests use. From these lists come the op enums, the formula
// cases every device's kernel evaluates (CPU loops in double, CUDA kernels in
// float or double), the free functions and Tensor methods (core/ops.h,
// core/tensor.h), the backward bindings (core/ops/elementwise.cpp), the one
// Activation enum that GEMM epilogues fuse, and the tests (the hand-computed value
// in tests/core/test_elementwise_list.cpp; gradcheck, CPU vs CUDA in float32,
// float64 and bfloat16, the meta device and determinism in the op test table,
// tests/core/op_table.cpp). Adding an op is one entry here (README, "Adding an op").
//
// Inside an entry, T is the compute type, x the input, a the scalar parameter,
// g the incoming gradient and s the tensor backward saved (see `saves`).
#pragma once

#include <cmath>
#include <cstdint>

#include "core/base/hd.h"

namespace ember {

// ------------------------------------------------------------- shared formulas

// GELU, exact (PyTorch's default, approximate="none"): x Phi(x), Phi the standard
// normal CDF, written 0.5 x erfc(-x / sqrt(2)) so that 1 + erf(x / sqrt(2)) does not
// cancel for negative x. Its derivative is Phi(x) + x phi(x), phi the normal density.
template <typename T>
EMBER_HD T gelu_erf_of(T x) {
  using std::erfc;
  return T(0.5) * x * erfc(T(-0.7071067811865476) * x);  // -x / sqrt(2)
}
template <typename T>
EMBER_HD T gelu_erf_grad(T x) {
  using std::erfc;
  using std::exp;
  const T cdf = T(0.5) * erfc(T(-0.7071067811865476) * x);
  return cdf + x * T(0.3989422804014327) * exp(T(-0.5) * x * x);  // 1 / sqrt(2 pi)
}
// d erf(x) / dx = 2 / sqrt(pi) exp(-x^2).
template <typename T>
EMBER_HD T erf_grad(T x) {
  using std::exp;
  return T(1.1283791670955126) * exp(-x * x);
}
// GELU, tanh approximation (PyTorch's approximate="tanh"), and its derivative.
template <typename T>
EMBER_HD T gelu_tanh_of(T x) {
  using std::tanh;
  const T inner = T(0.7978845608028654) * (x + T(0.044715) * x * x * x);  // sqrt(2/pi)(x + c x^3)
  return T(0.5) * x * (T(1) + tanh(inner));
}
template <typename T>
EMBER_HD T gelu_tanh_grad(T x) {
  using std::tanh;
  const T t = tanh(T(0.7978845608028654) * (x + T(0.044715) * x * x * x));
  const T d_inner = T(0.7978845608028654) * (T(1) + T(3) * T(0.044715) * x * x);
  return T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * d_inner;
}
template <typename T>
EMBER_HD T sigmoid_of(T x) {
  using std::exp;
  return T(1) / (T(1) + exp(-x));
}
// SiLU (swish): x sigmoid(x); derivative sigmoid(x) (1 + x (1 - sigmoid(x))).
template <typename T>
EMBER_HD T silu_grad(T x) {
  const T sg = sigmoid_of(x);
  return sg * (T(1) + x * (T(1) - sg));
}
// softplus(x) = log(1 + exp(x)), written so that neither side overflows:
// max(x, 0) + log1p(exp(-|x|)). Its derivative is sigmoid(x).
template <typename T>
EMBER_HD T softplus_of(T x) {
  using std::exp;
  using std::log1p;
  const T ax = x < T(0) ? -x : x;
  return (x > T(0) ? x : T(0)) + log1p(exp(-ax));
}
// maximum/minimum: NaN wins (as torch.maximum); on a tie each side gets half the
// gradient (PyTorch's rule), so the two halves add up to g.
template <typename T>
EMBER_HD T max_of(T x, T y) {
  return (x != x || y != y) ? x + y : (x > y ? x : y);
}
template <typename T>
EMBER_HD T min_of(T x, T y) {
  return (x != x || y != y) ? x + y : (x < y ? x : y);
}
template <typename T>
EMBER_HD T wins_over(T x, T y) {  // d max(x, y) / dx
  return x > y ? T(1) : x == y ? T(0.5) : T(0);
}

// ------------------------------------------------------------- the lists

// What backward reads as `s`: the input (In), the output (Out), nothing (None:
// the formula reads g and a only); Pass: the derivative is g itself, no kernel
// runs; NoGrad: the op is not differentiable (its output never requires grad);
// Bool: a comparison, not differentiable, whose output is a bool tensor (the
// formula's 1 or 0).
enum class Saves : int { None, In, Out, Pass, NoGrad, Bool };

// Unary ops, t -> op(t).
// ENTRY(name, Enum, act, saves, forward, backward, lo, hi, at, value)
//   act: Act when a GEMM epilogue can fuse it (an Activation), NoAct otherwise
//   lo, hi: the interval tests draw inputs from; at, value: name(at) == value,
//   computed by hand
#define EMBER_UNARY_OPS(ENTRY)                                                                    \
  ENTRY(neg, Neg, NoAct, None, -x, -g, -4.0, 4.0, 1.5, -1.5)                                      \
  ENTRY(exp, Exp, NoAct, Out, exp(x), g* s, -3.0, 3.0, 1.0, 2.718281828459045)                    \
  ENTRY(log, Log, NoAct, In, log(x), g / s, 0.2, 4.0, 2.0, 0.6931471805599453)                    \
  ENTRY(sqrt, Sqrt, NoAct, Out, sqrt(x), g* T(0.5) / s, 0.2, 4.0, 2.0, 1.4142135623730951)        \
  ENTRY(abs, Abs, NoAct, In, (x < T(0) ? -x : x),                                                 \
        (s > T(0)   ? g                                                                           \
         : s < T(0) ? -g                                                                          \
                    : T(0)),                                                                      \
        -4.0, 4.0, -2.5, 2.5)                                                                     \
  ENTRY(relu, Relu, Act, Out, (x > T(0) ? x : T(0)), (s > T(0) ? g : T(0)), -4.0, 4.0, -2.0, 0.0) \
  ENTRY(sigmoid, Sigmoid, NoAct, Out, sigmoid_of(x), g* s*(T(1) - s), -4.0, 4.0, 0.5,             \
        0.6224593312018546)                                                                       \
  ENTRY(tanh, Tanh, NoAct, Out, tanh(x), g*(T(1) - s * s), -3.0, 3.0, 0.5, 0.46211715726000974)   \
  ENTRY(gelu, Gelu, Act, In, gelu_erf_of(x), g* gelu_erf_grad(s), -4.0, 4.0, 1.0,                 \
        0.8413447460685429)                                                                       \
  ENTRY(gelu_tanh, GeluTanh, Act, In, gelu_tanh_of(x), g* gelu_tanh_grad(s), -4.0, 4.0, 1.0,      \
        0.8411919906082768)                                                                       \
  ENTRY(silu, Silu, Act, In, x* sigmoid_of(x), g* silu_grad(s), -4.0, 4.0, 1.0,                   \
        0.7310585786300049)                                                                       \
  ENTRY(sin, Sin, NoAct, In, sin(x), g* cos(s), -3.0, 3.0, 0.5, 0.479425538604203)                \
  ENTRY(cos, Cos, NoAct, In, cos(x), -g* sin(s), -3.0, 3.0, 0.5, 0.8775825618903728)              \
  ENTRY(softplus, Softplus, NoAct, In, softplus_of(x), g* sigmoid_of(s), -4.0, 4.0, 1.0,          \
        1.3132616875182228)                                                                       \
  ENTRY(erf, Erf, NoAct, In, erf(x), g* erf_grad(s), -3.0, 3.0, 0.5, 0.5204998778130465)

// Ops of a tensor and a scalar a, t -> op(t, a).
// ENTRY(name, Enum, saves, forward, backward, lo, hi, a, at, value)
#define EMBER_SCALAR_OPS(ENTRY)                                                                   \
  ENTRY(pow, Pow, In, pow(x, a), g* a* pow(s, a - T(1)), 0.2, 3.0, 2.5, 2.0, 5.656854249492381)   \
  ENTRY(add, AddScalar, Pass, x + a, g, -4.0, 4.0, 0.5, 1.0, 1.5)                                 \
  ENTRY(mul, MulScalar, None, x* a, g* a, -4.0, 4.0, -1.5, 2.0, -3.0)                             \
  ENTRY(rsub, RSubScalar, None, a - x, -g, -4.0, 4.0, 2.0, 0.5, 1.5)                              \
  ENTRY(rdiv, RDivScalar, In, a / x, -g * a / (s * s), 0.2, 3.0, 2.0, 4.0, 0.5)                   \
  ENTRY(clamp_min, ClampMin, In, (x < a ? a : x), (s >= a ? g : T(0)), -4.0, 4.0, 0.5, 0.25, 0.5) \
  ENTRY(clamp_max, ClampMax, In, (x > a ? a : x), (s <= a ? g : T(0)), -4.0, 4.0, 0.5, 1.0, 0.5)  \
  ENTRY(eq, EqScalar, Bool, (x == a ? T(1) : T(0)), T(0), -4.0, 4.0, 1.0, 1.0, 1.0)               \
  ENTRY(ne, NeScalar, Bool, (x != a ? T(1) : T(0)), T(0), -4.0, 4.0, 1.0, 1.0, 0.0)               \
  ENTRY(lt, LtScalar, Bool, (x < a ? T(1) : T(0)), T(0), -4.0, 4.0, 1.0, 0.5, 1.0)                \
  ENTRY(le, LeScalar, Bool, (x <= a ? T(1) : T(0)), T(0), -4.0, 4.0, 1.0, 1.0, 1.0)               \
  ENTRY(ge, GeScalar, Bool, (x >= a ? T(1) : T(0)), T(0), -4.0, 4.0, 1.0, 1.0, 1.0)               \
  ENTRY(gt, GtScalar, Bool, (x > a ? T(1) : T(0)), T(0), -4.0, 4.0, 1.0, 1.0, 0.0)

// What a binary op's derivative with respect to one operand reads: G (it is the
// incoming gradient itself; no kernel runs), GA (g * a), or a formula reading g
// and the saved operands: None (g only), X, Y or XY. Bool marks a comparison: not
// differentiable, its output a bool tensor (the formula's 1 or 0).
enum class Reads : int { G, GA, None, X, Y, XY, Bool };

// Ops of two tensors (numpy broadcasting), (x, y) -> op(x, y, a); a is add's alpha.
// ENTRY(name, Enum, forward, d_x, d_y, dx_reads, dy_reads, lo, hi, at_x, at_y, value)
#define EMBER_BINARY_OPS(ENTRY)                                                                    \
  ENTRY(add, Add, x + a * y, g, g * a, G, GA, -4.0, 4.0, 1.0, 2.0, 3.0)                            \
  ENTRY(sub, Sub, x - y, g, -g, G, None, -4.0, 4.0, 5.0, 2.0, 3.0)                                 \
  ENTRY(mul, Mul, x* y, g* y, g* x, Y, X, -4.0, 4.0, 3.0, 4.0, 12.0)                               \
  ENTRY(div, Div, x / y, g / y, -((g / y) * x / y), Y, XY, 0.5, 3.0, 3.0, 4.0, 0.75)               \
  ENTRY(maximum, Maximum, max_of(x, y), g* wins_over(x, y), g* wins_over(y, x), XY, XY, -4.0, 4.0, \
        1.0, 2.0, 2.0)                                                                             \
  ENTRY(minimum, Minimum, min_of(x, y), g* wins_over(y, x), g* wins_over(x, y), XY, XY, -4.0, 4.0, \
        1.0, 2.0, 1.0)                                                                             \
  ENTRY(eq, Eq, (x == y ? T(1) : T(0)), T(0), T(0), Bool, Bool, -4.0, 4.0, 1.0, 1.0, 1.0)          \
  ENTRY(ne, Ne, (x != y ? T(1) : T(0)), T(0), T(0), Bool, Bool, -4.0, 4.0, 1.0, 1.0, 0.0)          \
  ENTRY(lt, Lt, (x < y ? T(1) : T(0)), T(0), T(0), Bool, Bool, -4.0, 4.0, 1.0, 2.0, 1.0)           \
  ENTRY(le, Le, (x <= y ? T(1) : T(0)), T(0), T(0), Bool, Bool, -4.0, 4.0, 2.0, 2.0, 1.0)          \
  ENTRY(gt, Gt, (x > y ? T(1) : T(0)), T(0), T(0), Bool, Bool, -4.0, 4.0, 1.0, 2.0, 0.0)           \
  ENTRY(ge, Ge, (x >= y ? T(1) : T(0)), T(0), T(0), Bool, Bool, -4.0, 4.0, 2.0, 2.0, 1.0)

// ------------------------------------------------------------- enums

enum class UnaryOp : int {
#define EMBER_X(name, Enum, ...) Enum,
  EMBER_UNARY_OPS(EMBER_X) EMBER_SCALAR_OPS(EMBER_X)
#undef EMBER_X
};

enum class BinaryOp : int {
#define EMBER_X(name, Enum, ...) Enum,
  EMBER_BINARY_OPS(EMBER_X)
#undef EMBER_X
};

// The one activation enum of the library: the unary ops marked Act, which
// Linear (and every GEMM epilogue) can fuse. None: no activation.
#define EMBER_ACT_Act(Enum) Enum,
#define EMBER_ACT_NoAct(Enum)
enum class Activation : int {
  None,
#define EMBER_X(name, Enum, act, ...) EMBER_ACT_##act(Enum)
  EMBER_UNARY_OPS(EMBER_X)
#undef EMBER_X
};

// How many Activation values there are (None included): kernels that fuse an
// activation instantiate their epilogue once per value, from 0 to this.
#define EMBER_ACT_COUNT_Act 1
#define EMBER_ACT_COUNT_NoAct 0
inline constexpr int kActivationCount = 1
#define EMBER_X(name, Enum, act, ...) +EMBER_ACT_COUNT_##act
    EMBER_UNARY_OPS(EMBER_X)
#undef EMBER_X
    ;

// ------------------------------------------------------------- formulas

template <typename T>
EMBER_HD T unary_forward(UnaryOp op, T x, T a) {
  using std::cos;
  using std::erf;
  using std::exp;
  using std::log;
  using std::pow;
  using std::sin;
  using std::sqrt;
  using std::tanh;
  (void)a;
  switch (op) {
#define EMBER_X(name, Enum, act, saves, fwd, ...) \
  case UnaryOp::Enum:                             \
    return fwd;
    EMBER_UNARY_OPS(EMBER_X)
#undef EMBER_X
#define EMBER_X(name, Enum, saves, fwd, ...) \
  case UnaryOp::Enum:                        \
    return fwd;
    EMBER_SCALAR_OPS(EMBER_X)
#undef EMBER_X
  }
  return x;
}

// d_x of a unary op, from the incoming gradient g and the saved tensor s.
template <typename T>
EMBER_HD T unary_backward(UnaryOp op, T g, T s, T a) {
  using std::cos;
  using std::erf;
  using std::exp;
  using std::log;
  using std::pow;
  using std::sin;
  using std::sqrt;
  using std::tanh;
  (void)s;
  (void)a;
  switch (op) {
#define EMBER_X(name, Enum, act, saves, fwd, bwd, ...) \
  case UnaryOp::Enum:                                  \
    return bwd;
    EMBER_UNARY_OPS(EMBER_X)
#undef EMBER_X
#define EMBER_X(name, Enum, saves, fwd, bwd, ...) \
  case UnaryOp::Enum:                             \
    return bwd;
    EMBER_SCALAR_OPS(EMBER_X)
#undef EMBER_X
  }
  return g;
}

template <typename T>
EMBER_HD T binary_forward(BinaryOp op, T x, T y, T a) {
  (void)a;
  switch (op) {
#define EMBER_X(name, Enum, fwd, ...) \
  case BinaryOp::Enum:                \
    return fwd;
    EMBER_BINARY_OPS(EMBER_X)
#undef EMBER_X
  }
  return x;
}

// The derivative of a binary op with respect to x (side 0) or y (side 1).
template <typename T>
EMBER_HD T binary_backward(BinaryOp op, int side, T g, T x, T y, T a) {
  (void)x;
  (void)y;
  (void)a;
  switch (op) {
#define EMBER_X(name, Enum, fwd, dx, dy, ...) \
  case BinaryOp::Enum:                        \
    return side == 0 ? (dx) : (dy);
    EMBER_BINARY_OPS(EMBER_X)
#undef EMBER_X
  }
  return g;
}

constexpr Saves unary_saves(UnaryOp op) {
  switch (op) {
#define EMBER_X(name, Enum, act, saves, ...) \
  case UnaryOp::Enum:                        \
    return Saves::saves;
    EMBER_UNARY_OPS(EMBER_X)
#undef EMBER_X
#define EMBER_X(name, Enum, saves, ...) \
  case UnaryOp::Enum:                   \
    return Saves::saves;
    EMBER_SCALAR_OPS(EMBER_X)
#undef EMBER_X
  }
  return Saves::None;
}

constexpr const char* unary_name(UnaryOp op) {
  switch (op) {
#define EMBER_X(name, Enum, ...) \
  case UnaryOp::Enum:            \
    return #name;
    EMBER_UNARY_OPS(EMBER_X) EMBER_SCALAR_OPS(EMBER_X)
#undef EMBER_X
  }
  return "?";
}

constexpr const char* binary_name(BinaryOp op) {
  switch (op) {
#define EMBER_X(name, Enum, ...) \
  case BinaryOp::Enum:           \
    return #name;
    EMBER_BINARY_OPS(EMBER_X)
#undef EMBER_X
  }
  return "?";
}

// Which operands the derivative with respect to each side reads.
constexpr Reads binary_reads(BinaryOp op, int side) {
  switch (op) {
#define EMBER_X(name, Enum, fwd, dx, dy, dx_reads, dy_reads, ...) \
  case BinaryOp::Enum:                                            \
    return side == 0 ? Reads::dx_reads : Reads::dy_reads;
    EMBER_BINARY_OPS(EMBER_X)
#undef EMBER_X
  }
  return Reads::None;
}
constexpr bool reads_x(Reads r) {
  return r == Reads::X || r == Reads::XY;
}
constexpr bool reads_y(Reads r) {
  return r == Reads::Y || r == Reads::XY;
}

// --- comparisons and integers (PyTorch's type promotion)

// The comparisons: their output is a bool tensor, whatever their inputs.
constexpr bool gives_bool(UnaryOp op) {
  return unary_saves(op) == Saves::Bool;
}
constexpr bool gives_bool(BinaryOp op) {
  return binary_reads(op, 0) == Reads::Bool;
}

// The ops that map integers to integers, so an int64 input stays int64 (with an
// integral scalar, for the ops that take one); every other op computes integer
// and bool inputs in float32, as PyTorch does (exp, true division by /, ...).
// A new op not named here is computed in floating point: the safe default.
constexpr bool keeps_integers(UnaryOp op) {
  switch (op) {
    case UnaryOp::Neg:
    case UnaryOp::Abs:
    case UnaryOp::Relu:
    case UnaryOp::AddScalar:
    case UnaryOp::MulScalar:
    case UnaryOp::RSubScalar:
    case UnaryOp::Pow:  // with an exponent >= 0 (core/ops/elementwise.cpp)
    case UnaryOp::ClampMin:
    case UnaryOp::ClampMax:
      return true;
    default:
      return false;
  }
}
constexpr bool keeps_integers(BinaryOp op) {
  return op == BinaryOp::Add || op == BinaryOp::Sub || op == BinaryOp::Mul ||
         op == BinaryOp::Maximum || op == BinaryOp::Minimum;
}

// --- integer arithmetic, in int64 itself

// The ops that compute an int64 operand in int64 (never through double, so exact
// over the whole range): those that keep integers and the comparisons. + - * and
// negation wrap modulo 2^64, as PyTorch's (in unsigned arithmetic: no undefined
// behaviour). The scalar a arrives as a double (integral for the ops that keep
// integers: exact below 2^53); comparisons against it are exact for any double.
constexpr bool computes_in_int64(UnaryOp op) {
  return keeps_integers(op) || gives_bool(op);
}
constexpr bool computes_in_int64(BinaryOp op) {
  return keeps_integers(op) || gives_bool(op);
}

EMBER_HD int64_t wrap_add(int64_t x, int64_t y) {
  return static_cast<int64_t>(static_cast<uint64_t>(x) + static_cast<uint64_t>(y));
}
EMBER_HD int64_t wrap_sub(int64_t x, int64_t y) {
  return static_cast<int64_t>(static_cast<uint64_t>(x) - static_cast<uint64_t>(y));
}
EMBER_HD int64_t wrap_mul(int64_t x, int64_t y) {
  return static_cast<int64_t>(static_cast<uint64_t>(x) * static_cast<uint64_t>(y));
}
// x^e for e >= 0 by squaring, wrapping as the products do.
EMBER_HD int64_t wrap_pow(int64_t x, int64_t e) {
  uint64_t r = 1, b = static_cast<uint64_t>(x);
  for (; e > 0; e >>= 1) {
    if (e & 1) r *= b;
    b *= b;
  }
  return static_cast<int64_t>(r);
}
// A double as int64, saturating (NaN gives 0): no conversion is undefined.
EMBER_HD int64_t int64_of(double v) {
  constexpr double kTwo63 = 9223372036854775808.0;
  return v != v ? 0 : v >= kTwo63 ? INT64_MAX : v < -kTwo63 ? INT64_MIN : static_cast<int64_t>(v);
}
// The sign of x - a, exactly (x need not be representable as a double); 2 when a
// is NaN (every comparison but != is false).
EMBER_HD int compare_exact(int64_t x, double a) {
  constexpr double kTwo63 = 9223372036854775808.0;
  if (a != a) return 2;
  if (a >= kTwo63) return -1;
  if (a < -kTwo63) return 1;
  const int64_t t = static_cast<int64_t>(a);  // a truncated: in range, exact as a double
  if (x != t) return x < t ? -1 : 1;
  const double frac = a - static_cast<double>(t);  // exact
  return frac > 0 ? -1 : frac < 0 ? 1 : 0;
}

// The ops of computes_in_int64 on int64 operands; others return x unchanged (never
// called for them).
EMBER_HD int64_t unary_forward_int64(UnaryOp op, int64_t x, double a) {
  const int c = gives_bool(op) ? compare_exact(x, a) : 0;
  switch (op) {
    case UnaryOp::Neg:
      return wrap_sub(0, x);
    case UnaryOp::Abs:
      return x < 0 ? wrap_sub(0, x) : x;
    case UnaryOp::Relu:
      return x > 0 ? x : 0;
    case UnaryOp::AddScalar:
      return wrap_add(x, int64_of(a));
    case UnaryOp::MulScalar:
      return wrap_mul(x, int64_of(a));
    case UnaryOp::RSubScalar:
      return wrap_sub(int64_of(a), x);
    case UnaryOp::Pow:
      return wrap_pow(x, int64_of(a));
    case UnaryOp::ClampMin:
      return compare_exact(x, a) == -1 ? int64_of(a) : x;
    case UnaryOp::ClampMax:
      return compare_exact(x, a) == 1 ? int64_of(a) : x;
    case UnaryOp::EqScalar:
      return c == 0;
    case UnaryOp::NeScalar:
      return c != 0;
    case UnaryOp::LtScalar:
      return c == -1;
    case UnaryOp::LeScalar:
      return c == -1 || c == 0;
    case UnaryOp::GeScalar:
      return c == 1 || c == 0;
    case UnaryOp::GtScalar:
      return c == 1;
    default:
      return x;
  }
}

// a is add's alpha (integral).
EMBER_HD int64_t binary_forward_int64(BinaryOp op, int64_t x, int64_t y, double a) {
  switch (op) {
    case BinaryOp::Add:
      return wrap_add(x, a == 1.0 ? y : wrap_mul(int64_of(a), y));
    case BinaryOp::Sub:
      return wrap_sub(x, y);
    case BinaryOp::Mul:
      return wrap_mul(x, y);
    case BinaryOp::Maximum:
      return x > y ? x : y;
    case BinaryOp::Minimum:
      return x < y ? x : y;
    case BinaryOp::Eq:
      return x == y;
    case BinaryOp::Ne:
      return x != y;
    case BinaryOp::Lt:
      return x < y;
    case BinaryOp::Le:
      return x <= y;
    case BinaryOp::Gt:
      return x > y;
    case BinaryOp::Ge:
      return x >= y;
    default:
      return x;
  }
}

// --- activations, as the unary ops they are

constexpr UnaryOp unary_op_of(Activation act) {
  switch (act) {
#define EMBER_ACT_CASE_Act(Enum) \
  case Activation::Enum:         \
    return UnaryOp::Enum;
#define EMBER_ACT_CASE_NoAct(Enum)
#define EMBER_X(name, Enum, act, ...) EMBER_ACT_CASE_##act(Enum)
    EMBER_UNARY_OPS(EMBER_X)
#undef EMBER_X
#undef EMBER_ACT_CASE_Act
#undef EMBER_ACT_CASE_NoAct
    case Activation::None:
      break;
  }
  return UnaryOp::Neg;  // not reached for a real activation
}

constexpr const char* activation_name(Activation act) {
  return act == Activation::None ? "none" : unary_name(unary_op_of(act));
}

// What an activation's backward reads: its input (the pre-activation: GELU,
// SiLU) or its output (ReLU), as the list says.
constexpr Saves activation_saves(Activation act) {
  return act == Activation::None ? Saves::None : unary_saves(unary_op_of(act));
}

// act(v), for GEMM epilogues; None is the identity.
template <typename T>
EMBER_HD T activation_forward(Activation act, T v) {
  return act == Activation::None ? v : unary_forward(unary_op_of(act), v, T(0));
}

}  // namespace ember
