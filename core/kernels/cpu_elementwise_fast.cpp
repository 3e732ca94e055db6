// The CPU element-wise fast path (cpu_elementwise.h says what it takes and
// promises): each formula of core/base/elementwise_ops.h's lists, the text the
// generic loop evaluates, in a loop of its own over contiguous elements, the op
// chosen once per call, so that the compiler can vectorise. Bit-identity with the generic loop comes from computing the same
// expression in the same type, or, for the ops listed as exact in float below,
// from the double-rounding theorem. tests/core/test_cpu_fast_path.cpp compares
// the two bit for bit on every op of the lists.
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/kernels/cpu_elementwise.h"
#include "core/kernels/cpu_loops.h"

// Each operand is the output itself or disjoint from it (checked before any loop
// runs), so no iteration reads what another wrote: the compiler may vectorise
// without its runtime overlap test, which would refuse the in-place case.
#if defined(__clang__)
#define EMBER_INDEPENDENT_ITERATIONS _Pragma("clang loop vectorize(assume_safety)")
#elif defined(__GNUC__)
#define EMBER_INDEPENDENT_ITERATIONS _Pragma("GCC ivdep")
#else
#define EMBER_INDEPENDENT_ITERATIONS
#endif

namespace ember::kernels::cpu {

namespace {

// ---------------------------------------------------------------- which ops compute in float

// Forward formulas that are one correctly rounded operation on float operands
// (+ - * / sqrt) or exact (negation, selection, comparison): computed in float
// they give what the double computation rounded to float gives. A formula of two
// roundings (sqrt's backward g * 0.5 / s: g * 0.5 can underflow in float, never in
// double) or of a transcendental function is not listed. A new op is computed in
// double until it is listed here: the safe default.
constexpr bool exact_in_float(UnaryOp op) {
  switch (op) {
    case UnaryOp::Neg:         // -x
    case UnaryOp::Sqrt:        // sqrt(x)
    case UnaryOp::Abs:         // selection
    case UnaryOp::Relu:        // selection
    case UnaryOp::AddScalar:   // x + a
    case UnaryOp::MulScalar:   // x * a
    case UnaryOp::RSubScalar:  // a - x
    case UnaryOp::RDivScalar:  // a / x
    case UnaryOp::ClampMin:
    case UnaryOp::ClampMax:
    case UnaryOp::EqScalar:
    case UnaryOp::NeScalar:
    case UnaryOp::LtScalar:
    case UnaryOp::LeScalar:
    case UnaryOp::GeScalar:
    case UnaryOp::GtScalar:
      return true;
    default:
      return false;
  }
}

// Backward formulas of the same kind (unary_backward(op, g, s, a)).
constexpr bool backward_exact_in_float(UnaryOp op) {
  switch (op) {
    case UnaryOp::Neg:         // -g
    case UnaryOp::Exp:         // g * s
    case UnaryOp::Log:         // g / s
    case UnaryOp::Abs:         // selection of g, -g, 0
    case UnaryOp::Relu:        // selection
    case UnaryOp::MulScalar:   // g * a
    case UnaryOp::RSubScalar:  // -g
    case UnaryOp::ClampMin:    // selection
    case UnaryOp::ClampMax:    // selection
      return true;
    default:
      return false;
  }
}

// add's x + a * y is one rounding only for a == 1 (checked at run time); the
// others read no alpha.
constexpr bool exact_in_float(BinaryOp op) {
  switch (op) {
    case BinaryOp::Add:
    case BinaryOp::Sub:
    case BinaryOp::Mul:
    case BinaryOp::Div:
    case BinaryOp::Maximum:
    case BinaryOp::Minimum:
    case BinaryOp::Eq:
    case BinaryOp::Ne:
    case BinaryOp::Lt:
    case BinaryOp::Le:
    case BinaryOp::Gt:
    case BinaryOp::Ge:
      return true;
  }
  return false;
}

// The derivative with respect to side 0 (x) or 1 (y).
constexpr bool backward_exact_in_float(BinaryOp op, int side) {
  switch (op) {
    case BinaryOp::Sub:      // -g
    case BinaryOp::Mul:      // g * y, g * x
    case BinaryOp::Maximum:  // g * (1, 0.5 or 0)
    case BinaryOp::Minimum:
      return true;
    case BinaryOp::Div:  // g / y; the other side is -((g / y) * x / y)
      return side == 0;
    default:
      return false;
  }
}

// A scalar parameter that float holds exactly: the float formula then reads the
// value the double one reads. (The range test first: converting a double
// outside float's range is undefined behaviour.)
bool float_holds(double a) {
  return std::fabs(a) <= static_cast<double>(FLT_MAX) && static_cast<double>(static_cast<float>(a)) == a;
}

// ---------------------------------------------------------------- element access

// Loads an element as the compute type C and stores C as an element. In double
// these are the generic loop's own conversions; in float (float32 and bfloat16
// operands) the load is exact and the store rounds once, as the generic store
// does from the double value that rounds to the same float.
template <typename C, typename S>
inline C load(const S* p) {
  if constexpr (std::is_same_v<C, double>)
    return ember::detail::load_as_double(p);
  else
    return static_cast<float>(*p);
}
template <typename C, typename O>
inline void store(O* p, C v) {
  if constexpr (std::is_same_v<C, double>)
    ember::detail::store_from_double(p, v);
  else if constexpr (std::is_same_v<O, bool>)
    *p = v != 0.0f;  // as store_from_double<bool>: NaN is true
  else
    *p = O(v);
}

// float32 and bfloat16 compute the listed ops in float.
template <typename S>
constexpr bool has_float_math = std::is_same_v<S, float> || std::is_same_v<S, BFloat16>;

// Calls f(S{}) for the dtypes the fast path covers; false for the others.
template <typename F>
bool dispatch_fast(DType t, F&& f) {
  switch (t) {
    case DType::Float32: f(float{}); return true;
    case DType::Float64: f(double{}); return true;
    case DType::BFloat16: f(BFloat16{}); return true;
    case DType::Int64: f(int64_t{}); return true;
    case DType::Bool: return false;
  }
  return false;
}

// ---------------------------------------------------------------- operand checks

// An operand's first element, or nullptr when its layout is not contiguous.
template <typename T>
T* first_of(T* base, const StridedLayout& l, DType dtype) {
  using Byte = std::conditional_t<std::is_const_v<T>, const char, char>;
  if (!l.contiguous) return nullptr;
  return static_cast<Byte*>(base) + l.offset * static_cast<int64_t>(element_size(dtype));
}

// An input either is the output (same first element, same element size) or
// shares no byte with it. Partial overlap (a shifted view written in place) is
// left to the generic loop's element-by-element order.
bool same_or_disjoint(const void* in, size_t in_size, const void* out, size_t out_size,
                      int64_t n) {
  const auto i = reinterpret_cast<uintptr_t>(in), o = reinterpret_cast<uintptr_t>(out);
  if (i == o) return in_size == out_size;
  const auto count = static_cast<uintptr_t>(n);
  return i + count * in_size <= o || o + count * out_size <= i;
}

// ---------------------------------------------------------------- the formulas, one type per op

// Each list entry's formula text, as elementwise_ops.h's unary_forward and
// friends evaluate it, in a function of its own: no switch for the compiler to
// fold (it does not inline the switch of 26 cases into every loop), the same
// expression in the same type.
#define EMBER_FORMULA_MATH \
  using std::cos;          \
  using std::exp;          \
  using std::log;          \
  using std::pow;          \
  using std::sin;          \
  using std::sqrt;         \
  using std::tanh;

template <UnaryOp kOp>
struct UnaryFormula;
#define EMBER_UNARY_FORMULA(Enum, fwd, bwd)                              \
  template <>                                                            \
  struct UnaryFormula<UnaryOp::Enum> {                                   \
    template <typename T>                                                \
    static T forward([[maybe_unused]] T x, [[maybe_unused]] T a) {       \
      EMBER_FORMULA_MATH                                                 \
      return fwd;                                                        \
    }                                                                    \
    template <typename T>                                                \
    static T backward([[maybe_unused]] T g, [[maybe_unused]] T s,        \
                      [[maybe_unused]] T a) {                            \
      EMBER_FORMULA_MATH                                                 \
      return bwd;                                                        \
    }                                                                    \
  };
#define EMBER_X(name, Enum, act, saves, fwd, bwd, ...) EMBER_UNARY_FORMULA(Enum, fwd, bwd)
EMBER_UNARY_OPS(EMBER_X)
#undef EMBER_X
#define EMBER_X(name, Enum, saves, fwd, bwd, ...) EMBER_UNARY_FORMULA(Enum, fwd, bwd)
EMBER_SCALAR_OPS(EMBER_X)
#undef EMBER_X
#undef EMBER_UNARY_FORMULA

template <BinaryOp kOp>
struct BinaryFormula;
#define EMBER_X(name, Enum, fwd, dx, dy, ...)                                               \
  template <>                                                                               \
  struct BinaryFormula<BinaryOp::Enum> {                                                    \
    template <typename T>                                                                   \
    static T forward([[maybe_unused]] T x, [[maybe_unused]] T y, [[maybe_unused]] T a) {    \
      return fwd;                                                                           \
    }                                                                                       \
    template <int kSide, typename T>                                                        \
    static T backward([[maybe_unused]] T g, [[maybe_unused]] T x, [[maybe_unused]] T y,    \
                      [[maybe_unused]] T a) {                                               \
      if constexpr (kSide == 0)                                                             \
        return dx;                                                                          \
      else                                                                                  \
        return dy;                                                                          \
    }                                                                                       \
  };
EMBER_BINARY_OPS(EMBER_X)
#undef EMBER_X
#undef EMBER_FORMULA_MATH

// ---------------------------------------------------------------- the loops

template <UnaryOp kOp, typename C, typename S, typename O>
void unary_loop(const S* x, O* y, int64_t n, C a) {
  EMBER_INDEPENDENT_ITERATIONS
  for (int64_t i = 0; i < n; ++i)
    store<C>(y + i, UnaryFormula<kOp>::template forward<C>(load<C>(x + i), a));
}

template <UnaryOp kOp, typename C, typename S>
void unary_backward_loop(const S* g, const S* s, S* out, int64_t n, C a) {
  EMBER_INDEPENDENT_ITERATIONS
  for (int64_t i = 0; i < n; ++i)
    store<C>(out + i, UnaryFormula<kOp>::template backward<C>(load<C>(g + i), load<C>(s + i), a));
}

template <BinaryOp kOp, typename C, typename S, typename O>
void binary_loop(const S* x, const S* y, O* out, int64_t n, C a) {
  EMBER_INDEPENDENT_ITERATIONS
  for (int64_t i = 0; i < n; ++i)
    store<C>(out + i, BinaryFormula<kOp>::template forward<C>(load<C>(x + i), load<C>(y + i), a));
}

template <BinaryOp kOp, int kSide, typename C, typename S>
void binary_backward_loop(const S* g, const S* x, const S* y, S* out, int64_t n, C a) {
  EMBER_INDEPENDENT_ITERATIONS
  for (int64_t i = 0; i < n; ++i)
    store<C>(out + i, BinaryFormula<kOp>::template backward<kSide, C>(
                          load<C>(g + i), load<C>(x + i), load<C>(y + i), a));
}

// ---------------------------------------------------------------- one op, one dtype

template <UnaryOp kOp, typename S>
void unary_op(const S* x, void* y_raw, int64_t n, double a) {
  using O = std::conditional_t<gives_bool(kOp), bool, S>;
  O* y = static_cast<O*>(y_raw);
  if constexpr (has_float_math<S> && exact_in_float(kOp)) {
    if (float_holds(a)) return unary_loop<kOp, float>(x, y, n, static_cast<float>(a));
  }
  unary_loop<kOp, double>(x, y, n, a);
}

template <UnaryOp kOp, typename S>
void unary_backward_op(const S* g, const S* s, S* out, int64_t n, double a) {
  if constexpr (has_float_math<S> && backward_exact_in_float(kOp)) {
    if (float_holds(a))
      return unary_backward_loop<kOp, float>(g, s, out, n, static_cast<float>(a));
  }
  unary_backward_loop<kOp, double>(g, s, out, n, a);
}

template <BinaryOp kOp, typename S>
void binary_op(const S* x, const S* y, void* out_raw, int64_t n, double a) {
  using O = std::conditional_t<gives_bool(kOp), bool, S>;
  O* out = static_cast<O*>(out_raw);
  if constexpr (has_float_math<S> && exact_in_float(kOp)) {
    if (kOp == BinaryOp::Add ? a == 1.0 : float_holds(a))
      return binary_loop<kOp, float>(x, y, out, n, static_cast<float>(a));
  }
  binary_loop<kOp, double>(x, y, out, n, a);
}

template <BinaryOp kOp, int kSide, typename S>
void binary_backward_op(const S* g, const S* x, const S* y, S* out, int64_t n, double a) {
  if constexpr (has_float_math<S> && backward_exact_in_float(kOp, kSide)) {
    if (float_holds(a))
      return binary_backward_loop<kOp, kSide, float>(g, x, y, out, n, static_cast<float>(a));
  }
  binary_backward_loop<kOp, kSide, double>(g, x, y, out, n, a);
}

}  // namespace

// ---------------------------------------------------------------- the entry points

bool unary_fast(const UnaryArgs& a) {
  const DType out_dtype = gives_bool(a.op) ? DType::Bool : a.dtype;
  if (a.out_dtype != out_dtype) return false;
  const void* x = first_of(a.x, a.xl, a.dtype);
  void* y = first_of(a.y, a.yl, a.out_dtype);
  if (x == nullptr || y == nullptr ||
      !same_or_disjoint(x, element_size(a.dtype), y, element_size(a.out_dtype), a.n))
    return false;
  return dispatch_fast(a.dtype, [&](auto tag) {
    using S = decltype(tag);
    const S* xs = static_cast<const S*>(x);
    switch (a.op) {
#define EMBER_X(name, Enum, ...) \
  case UnaryOp::Enum:            \
    return unary_op<UnaryOp::Enum>(xs, y, a.n, a.a);
      EMBER_UNARY_OPS(EMBER_X) EMBER_SCALAR_OPS(EMBER_X)
#undef EMBER_X
    }
  });
}

bool unary_backward_fast(const UnaryBackwardArgs& a) {
  const size_t size = element_size(a.dtype);
  const void* g = first_of(a.g, a.gl, a.dtype);
  const void* s = first_of(a.s, a.sl, a.dtype);
  void* out = first_of(a.out, a.ol, a.dtype);
  if (g == nullptr || s == nullptr || out == nullptr || !same_or_disjoint(g, size, out, size, a.n) ||
      !same_or_disjoint(s, size, out, size, a.n))
    return false;
  return dispatch_fast(a.dtype, [&](auto tag) {
    using S = decltype(tag);
    const S* gs = static_cast<const S*>(g);
    const S* ss = static_cast<const S*>(s);
    S* os = static_cast<S*>(out);
    switch (a.op) {
#define EMBER_X(name, Enum, ...) \
  case UnaryOp::Enum:            \
    return unary_backward_op<UnaryOp::Enum>(gs, ss, os, a.n, a.a);
      EMBER_UNARY_OPS(EMBER_X) EMBER_SCALAR_OPS(EMBER_X)
#undef EMBER_X
    }
  });
}

bool binary_fast(const BinaryArgs& a) {
  const DType out_dtype = gives_bool(a.op) ? DType::Bool : a.dtype;
  if (a.out_dtype != out_dtype) return false;
  const size_t in_size = element_size(a.dtype), out_size = element_size(a.out_dtype);
  const void* x = first_of(a.x, a.xl, a.dtype);
  const void* y = first_of(a.y, a.yl, a.dtype);
  void* out = first_of(a.out, a.ol, a.out_dtype);
  if (x == nullptr || y == nullptr || out == nullptr ||
      !same_or_disjoint(x, in_size, out, out_size, a.n) ||
      !same_or_disjoint(y, in_size, out, out_size, a.n))
    return false;
  return dispatch_fast(a.dtype, [&](auto tag) {
    using S = decltype(tag);
    const S* xs = static_cast<const S*>(x);
    const S* ys = static_cast<const S*>(y);
    switch (a.op) {
#define EMBER_X(name, Enum, ...) \
  case BinaryOp::Enum:           \
    return binary_op<BinaryOp::Enum>(xs, ys, out, a.n, a.a);
      EMBER_BINARY_OPS(EMBER_X)
#undef EMBER_X
    }
  });
}

bool binary_backward_fast(const BinaryBackwardArgs& a) {
  const size_t size = element_size(a.dtype);
  const void* g = first_of(a.g, a.gl, a.dtype);
  const void* x = first_of(a.x, a.xl, a.dtype);
  const void* y = first_of(a.y, a.yl, a.dtype);
  void* out = first_of(a.out, a.ol, a.dtype);
  if (g == nullptr || x == nullptr || y == nullptr || out == nullptr ||
      !same_or_disjoint(g, size, out, size, a.n) || !same_or_disjoint(x, size, out, size, a.n) ||
      !same_or_disjoint(y, size, out, size, a.n) || (a.side != 0 && a.side != 1))
    return false;
  return dispatch_fast(a.dtype, [&](auto tag) {
    using S = decltype(tag);
    const S* gs = static_cast<const S*>(g);
    const S* xs = static_cast<const S*>(x);
    const S* ys = static_cast<const S*>(y);
    S* os = static_cast<S*>(out);
    switch (a.op) {
#define EMBER_X(name, Enum, ...)                                                \
  case BinaryOp::Enum:                                                          \
    return a.side == 0                                                          \
               ? binary_backward_op<BinaryOp::Enum, 0>(gs, xs, ys, os, a.n, a.a) \
               : binary_backward_op<BinaryOp::Enum, 1>(gs, xs, ys, os, a.n, a.a);
      EMBER_BINARY_OPS(EMBER_X)
#undef EMBER_X
    }
  });
}

// Through double as the generic loop (float -> double -> bfloat16 rounds once,
// the double being exact), one tight loop per pair of dtypes.
bool cast_fast(const CastArgs& a) {
  const void* x = first_of(a.x, a.xl, a.from);
  void* y = first_of(a.y, a.yl, a.to);
  if (x == nullptr || y == nullptr ||
      !same_or_disjoint(x, element_size(a.from), y, element_size(a.to), a.n))
    return false;
  if (a.from == a.to) {
    if (x != y) std::memcpy(y, x, static_cast<size_t>(a.n) * element_size(a.to));
    return true;
  }
  ember::detail::dispatch_cpu(a.from, [&](auto from_tag) {
    using F = decltype(from_tag);
    ember::detail::dispatch_cpu(a.to, [&](auto to_tag) {
      using T = decltype(to_tag);
      const F* xs = static_cast<const F*>(x);
      T* ys = static_cast<T*>(y);
      EMBER_INDEPENDENT_ITERATIONS
      for (int64_t i = 0; i < a.n; ++i)
        ember::detail::store_from_double(ys + i, ember::detail::load_as_double(xs + i));
    });
  });
  return true;
}

bool fill_fast(const FillArgs& a) {
  void* y = first_of(a.y, a.yl, a.dtype);
  if (y == nullptr) return false;
  ember::detail::dispatch_cpu(a.dtype, [&](auto tag) {
    using S = decltype(tag);
    S v{};
    ember::detail::store_from_double(&v, a.value);
    S* ys = static_cast<S*>(y);
    for (int64_t i = 0; i < a.n; ++i) ys[i] = v;
  });
  return true;
}

}  // namespace ember::kernels::cpu
