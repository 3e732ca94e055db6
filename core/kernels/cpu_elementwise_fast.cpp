// The CPU element-wise fast path (cpu_elementwise.h says what it takes and
// promises): each formula of core/base/elementwise_ops.h's lists, the text the
// generic loop evaluates, in a loop of its own over contiguous elements, the op
// chosen once per call, so that the compiler can vectorise. Bit-identity with the generic loop
// comes from computing the same expression in the same type, or, for the ops listed as exact in
// float below, from the double-rounding theorem. tests/core/test_cpu_fast_path.cpp compares the two
// bit for bit on every op of the lists.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/kernels/cpu_elementwise.h"
#include "core/kernels/cpu_loops.h"
#include "core/kernels/cpu_parallel.h"

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
  return std::fabs(a) <= static_cast<double>(FLT_MAX) &&
         static_cast<double>(static_cast<float>(a)) == a;
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
    case DType::Float32:
      f(float{});
      return true;
    case DType::Float64:
      f(double{});
      return true;
    case DType::BFloat16:
      f(BFloat16{});
      return true;
    case DType::Int64:
      f(int64_t{});
      return true;
    case DType::Bool:
      return false;
  }
  return false;
}

// ---------------------------------------------------------------- the iteration

// Rows shorter than this go to the generic loop: finding each row's start costs
// a division per dim and operand.
constexpr int64_t kMinRow = 16;

struct Operand {
  const void* base;
  const StridedLayout* layout;
  size_t size;  // bytes per element
};

// How the fast loop covers the n elements: `rows` stretches of `length`, each
// contiguous in every operand (one stretch when every operand is contiguous).
struct Plan {
  int64_t rows = 0, length = 0;
};

// The first and one-past-last byte an operand reaches; false for a negative
// stride.
bool span_of(const Operand& o, int64_t n, uintptr_t& lo, uintptr_t& hi) {
  const StridedLayout& l = *o.layout;
  for (int d = 0; d < l.ndim && !l.contiguous; ++d)
    if (l.strides[d] < 0) return false;
  const auto base = reinterpret_cast<uintptr_t>(o.base);
  lo = base + static_cast<uintptr_t>(l.offset) * o.size;
  hi = base + static_cast<uintptr_t>(l.offset_of(n - 1) + 1) * o.size;
  return true;
}

bool same_layout(const Operand& a, const Operand& b) {
  const StridedLayout &la = *a.layout, &lb = *b.layout;
  if (a.base != b.base || a.size != b.size || la.offset != lb.offset) return false;
  if (la.contiguous && lb.contiguous) return true;
  for (int d = 0; d < la.ndim; ++d)
    if (la.strides[d] != lb.strides[d]) return false;
  return true;
}

// A plan for operands ops[0..count) (the output last, all over one iteration
// shape of n elements), or false: a layout it does not cover (an innermost dim
// that is not contiguous in every operand, or short), or an input that
// overlaps the output without being it (a shifted view written in place is
// left to the generic loop's element-by-element order).
bool plan_of(const Operand* ops, int count, int64_t n, Plan& p) {
  if (n <= 0) {
    p = {0, 0};
    return true;
  }
  bool contiguous = true;
  for (int i = 0; i < count; ++i) contiguous = contiguous && ops[i].layout->contiguous;
  if (contiguous) {
    p = {1, n};
  } else {
    const StridedLayout& out = *ops[count - 1].layout;
    if (out.ndim < 1) return false;
    const int64_t length = out.sizes[out.ndim - 1];
    if (length < kMinRow) return false;
    for (int i = 0; i < count; ++i)
      if (ops[i].layout->ndim != out.ndim ||
          (!ops[i].layout->contiguous && ops[i].layout->strides[out.ndim - 1] != 1))
        return false;
    p = {n / length, length};
  }
  const Operand& out = ops[count - 1];
  uintptr_t out_lo = 0, out_hi = 0;
  if (!span_of(out, n, out_lo, out_hi)) return false;
  for (int i = 0; i + 1 < count; ++i) {
    if (same_layout(ops[i], out)) continue;
    uintptr_t lo = 0, hi = 0;
    if (!span_of(ops[i], n, lo, hi) || !(hi <= out_lo || out_hi <= lo)) return false;
  }
  return true;
}

// Row r's first element in operand o.
template <typename P>
P* row_start(P* base, const StridedLayout& l, size_t size, const Plan& p, int64_t r) {
  using Byte = std::conditional_t<std::is_const_v<P>, const char, char>;
  return static_cast<Byte*>(base) + l.offset_of(r * p.length) * static_cast<int64_t>(size);
}

// Pointer `count` elements of `size` bytes past p.
template <typename P>
P* advance(P* p, int64_t count, size_t size) {
  using Byte = std::conditional_t<std::is_const_v<P>, const char, char>;
  return static_cast<Byte*>(p) + count * static_cast<int64_t>(size);
}

// body(row, first, count) over the plan's elements, in chunks on the thread pool
// (cpu_parallel.h): a contiguous plan splits its one row, a strided one its rows.
// Each element is computed as alone, so the chunking changes no bit.
template <typename F>
void for_plan(const Plan& p, F&& body) {
  if (p.rows == 1) {
    parallel_for(p.length, kElementwiseGrain,
                 [&](int64_t b, int64_t e) { body(int64_t{0}, b, e - b); });
    return;
  }
  parallel_for(p.rows, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(1, p.length)),
               [&](int64_t b, int64_t e) {
                 for (int64_t r = b; r < e; ++r) body(r, int64_t{0}, p.length);
               });
}

// ---------------------------------------------------------------- the formulas, one type per op

// Each list entry's formula text, as elementwise_ops.h's unary_forward and
// friends evaluate it, in a function of its own: no switch for the compiler to
// fold (it does not inline the switch of 26 cases into every loop), the same
// expression in the same type.
#define EMBER_FORMULA_MATH \
  using std::cos;          \
  using std::erf;          \
  using std::exp;          \
  using std::log;          \
  using std::pow;          \
  using std::sin;          \
  using std::sqrt;         \
  using std::tanh;

template <UnaryOp kOp>
struct UnaryFormula;
#define EMBER_UNARY_FORMULA(Enum, fwd, bwd)                                               \
  template <>                                                                             \
  struct UnaryFormula<UnaryOp::Enum> {                                                    \
    template <typename T>                                                                 \
    static T forward([[maybe_unused]] T x, [[maybe_unused]] T a) {                        \
      EMBER_FORMULA_MATH                                                                  \
      return fwd;                                                                         \
    }                                                                                     \
    template <typename T>                                                                 \
    static T backward([[maybe_unused]] T g, [[maybe_unused]] T s, [[maybe_unused]] T a) { \
      EMBER_FORMULA_MATH                                                                  \
      return bwd;                                                                         \
    }                                                                                     \
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
#define EMBER_X(name, Enum, fwd, dx, dy, ...)                                            \
  template <>                                                                            \
  struct BinaryFormula<BinaryOp::Enum> {                                                 \
    template <typename T>                                                                \
    static T forward([[maybe_unused]] T x, [[maybe_unused]] T y, [[maybe_unused]] T a) { \
      return fwd;                                                                        \
    }                                                                                    \
    template <int kSide, typename T>                                                     \
    static T backward([[maybe_unused]] T g, [[maybe_unused]] T x, [[maybe_unused]] T y,  \
                      [[maybe_unused]] T a) {                                            \
      if constexpr (kSide == 0)                                                          \
        return dx;                                                                       \
      else                                                                               \
        return dy;                                                                       \
    }                                                                                    \
  };
EMBER_BINARY_OPS(EMBER_X)
#undef EMBER_X
#undef EMBER_FORMULA_MATH

// ---------------------------------------------------------------- the loops

// int64 in int64 (elementwise_ops.h's computes_in_int64 ops); a: the op's scalar.
template <UnaryOp kOp, typename O>
void unary_int64_loop(const int64_t* x, O* y, int64_t n, double a) {
  EMBER_INDEPENDENT_ITERATIONS
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<O>(unary_forward_int64(kOp, x[i], a));
}

template <BinaryOp kOp, typename O>
void binary_int64_loop(const int64_t* x, const int64_t* y, O* out, int64_t n, double a) {
  EMBER_INDEPENDENT_ITERATIONS
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<O>(binary_forward_int64(kOp, x[i], y[i], a));
}

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

// The loops behind a type-erased pointer, chosen once per call and run once per
// row.
using UnaryLoop = void (*)(const void* x, void* y, int64_t n, double a);
using UnaryBackwardLoop = void (*)(const void* g, const void* s, void* out, int64_t n, double a);
using BinaryLoop = void (*)(const void* x, const void* y, void* out, int64_t n, double a);
using BinaryBackwardLoop = void (*)(const void* g, const void* x, const void* y, void* out,
                                    int64_t n, double a);

template <UnaryOp kOp, typename S>
void unary_op(const void* x_raw, void* y_raw, int64_t n, double a) {
  using O = std::conditional_t<gives_bool(kOp), bool, S>;
  const S* x = static_cast<const S*>(x_raw);
  O* y = static_cast<O*>(y_raw);
  if constexpr (std::is_same_v<S, int64_t> && computes_in_int64(kOp)) {
    return unary_int64_loop<kOp>(x, y, n, a);
  }
  if constexpr (has_float_math<S> && exact_in_float(kOp)) {
    if (float_holds(a)) return unary_loop<kOp, float>(x, y, n, static_cast<float>(a));
  }
  unary_loop<kOp, double>(x, y, n, a);
}

template <UnaryOp kOp, typename S>
void unary_backward_op(const void* g, const void* s, void* out, int64_t n, double a) {
  const S* gs = static_cast<const S*>(g);
  const S* ss = static_cast<const S*>(s);
  S* os = static_cast<S*>(out);
  if constexpr (has_float_math<S> && backward_exact_in_float(kOp)) {
    if (float_holds(a))
      return unary_backward_loop<kOp, float>(gs, ss, os, n, static_cast<float>(a));
  }
  unary_backward_loop<kOp, double>(gs, ss, os, n, a);
}

template <BinaryOp kOp, typename S>
void binary_op(const void* x_raw, const void* y_raw, void* out_raw, int64_t n, double a) {
  using O = std::conditional_t<gives_bool(kOp), bool, S>;
  const S* x = static_cast<const S*>(x_raw);
  const S* y = static_cast<const S*>(y_raw);
  O* out = static_cast<O*>(out_raw);
  if constexpr (std::is_same_v<S, int64_t> && computes_in_int64(kOp)) {
    return binary_int64_loop<kOp>(x, y, out, n, a);
  }
  if constexpr (has_float_math<S> && exact_in_float(kOp)) {
    if (kOp == BinaryOp::Add ? a == 1.0 : float_holds(a))
      return binary_loop<kOp, float>(x, y, out, n, static_cast<float>(a));
  }
  binary_loop<kOp, double>(x, y, out, n, a);
}

template <BinaryOp kOp, int kSide, typename S>
void binary_backward_op(const void* g, const void* x, const void* y, void* out, int64_t n,
                        double a) {
  const S* gs = static_cast<const S*>(g);
  const S* xs = static_cast<const S*>(x);
  const S* ys = static_cast<const S*>(y);
  S* os = static_cast<S*>(out);
  if constexpr (has_float_math<S> && backward_exact_in_float(kOp, kSide)) {
    if (float_holds(a))
      return binary_backward_loop<kOp, kSide, float>(gs, xs, ys, os, n, static_cast<float>(a));
  }
  binary_backward_loop<kOp, kSide, double>(gs, xs, ys, os, n, a);
}

// The loop for (op, dtype), or nullptr for a dtype the fast path does not cover.
UnaryLoop unary_loop_for(UnaryOp op, DType t) {
  UnaryLoop loop = nullptr;
  dispatch_fast(t, [&](auto tag) {
    using S = decltype(tag);
    switch (op) {
#define EMBER_X(name, Enum, ...)        \
  case UnaryOp::Enum:                   \
    loop = &unary_op<UnaryOp::Enum, S>; \
    break;
      EMBER_UNARY_OPS(EMBER_X) EMBER_SCALAR_OPS(EMBER_X)
#undef EMBER_X
    }
  });
  return loop;
}

UnaryBackwardLoop unary_backward_loop_for(UnaryOp op, DType t) {
  UnaryBackwardLoop loop = nullptr;
  dispatch_fast(t, [&](auto tag) {
    using S = decltype(tag);
    switch (op) {
#define EMBER_X(name, Enum, ...)                 \
  case UnaryOp::Enum:                            \
    loop = &unary_backward_op<UnaryOp::Enum, S>; \
    break;
      EMBER_UNARY_OPS(EMBER_X) EMBER_SCALAR_OPS(EMBER_X)
#undef EMBER_X
    }
  });
  return loop;
}

BinaryLoop binary_loop_for(BinaryOp op, DType t) {
  BinaryLoop loop = nullptr;
  dispatch_fast(t, [&](auto tag) {
    using S = decltype(tag);
    switch (op) {
#define EMBER_X(name, Enum, ...)          \
  case BinaryOp::Enum:                    \
    loop = &binary_op<BinaryOp::Enum, S>; \
    break;
      EMBER_BINARY_OPS(EMBER_X)
#undef EMBER_X
    }
  });
  return loop;
}

BinaryBackwardLoop binary_backward_loop_for(BinaryOp op, int side, DType t) {
  BinaryBackwardLoop loop = nullptr;
  if (side != 0 && side != 1) return nullptr;
  dispatch_fast(t, [&](auto tag) {
    using S = decltype(tag);
    switch (op) {
#define EMBER_X(name, Enum, ...)                                  \
  case BinaryOp::Enum:                                            \
    loop = side == 0 ? &binary_backward_op<BinaryOp::Enum, 0, S>  \
                     : &binary_backward_op<BinaryOp::Enum, 1, S>; \
    break;
      EMBER_BINARY_OPS(EMBER_X)
#undef EMBER_X
    }
  });
  return loop;
}

}  // namespace

// ---------------------------------------------------------------- the entry points

bool unary_fast(const UnaryArgs& a) {
  if (a.out_dtype != (gives_bool(a.op) ? DType::Bool : a.dtype)) return false;
  const UnaryLoop loop = unary_loop_for(a.op, a.dtype);
  const size_t in = element_size(a.dtype), out = element_size(a.out_dtype);
  const Operand ops[] = {{a.x, &a.xl, in}, {a.y, &a.yl, out}};
  Plan p;
  if (loop == nullptr || !plan_of(ops, 2, a.n, p)) return false;
  for_plan(p, [&](int64_t r, int64_t f, int64_t len) {
    loop(advance(row_start(a.x, a.xl, in, p, r), f, in),
         advance(row_start(a.y, a.yl, out, p, r), f, out), len, a.a);
  });
  return true;
}

bool unary_backward_fast(const UnaryBackwardArgs& a) {
  const UnaryBackwardLoop loop = unary_backward_loop_for(a.op, a.dtype);
  const size_t size = element_size(a.dtype);
  const Operand ops[] = {{a.g, &a.gl, size}, {a.s, &a.sl, size}, {a.out, &a.ol, size}};
  Plan p;
  if (loop == nullptr || !plan_of(ops, 3, a.n, p)) return false;
  for_plan(p, [&](int64_t r, int64_t f, int64_t len) {
    loop(advance(row_start(a.g, a.gl, size, p, r), f, size),
         advance(row_start(a.s, a.sl, size, p, r), f, size),
         advance(row_start(a.out, a.ol, size, p, r), f, size), len, a.a);
  });
  return true;
}

bool binary_fast(const BinaryArgs& a) {
  if (a.out_dtype != (gives_bool(a.op) ? DType::Bool : a.dtype)) return false;
  const BinaryLoop loop = binary_loop_for(a.op, a.dtype);
  const size_t in = element_size(a.dtype), out = element_size(a.out_dtype);
  const Operand ops[] = {{a.x, &a.xl, in}, {a.y, &a.yl, in}, {a.out, &a.ol, out}};
  Plan p;
  if (loop == nullptr || !plan_of(ops, 3, a.n, p)) return false;
  for_plan(p, [&](int64_t r, int64_t f, int64_t len) {
    loop(advance(row_start(a.x, a.xl, in, p, r), f, in),
         advance(row_start(a.y, a.yl, in, p, r), f, in),
         advance(row_start(a.out, a.ol, out, p, r), f, out), len, a.a);
  });
  return true;
}

bool binary_backward_fast(const BinaryBackwardArgs& a) {
  const BinaryBackwardLoop loop = binary_backward_loop_for(a.op, a.side, a.dtype);
  const size_t size = element_size(a.dtype);
  const Operand ops[] = {
      {a.g, &a.gl, size}, {a.x, &a.xl, size}, {a.y, &a.yl, size}, {a.out, &a.ol, size}};
  Plan p;
  if (loop == nullptr || !plan_of(ops, 4, a.n, p)) return false;
  for_plan(p, [&](int64_t r, int64_t f, int64_t len) {
    loop(advance(row_start(a.g, a.gl, size, p, r), f, size),
         advance(row_start(a.x, a.xl, size, p, r), f, size),
         advance(row_start(a.y, a.yl, size, p, r), f, size),
         advance(row_start(a.out, a.ol, size, p, r), f, size), len, a.a);
  });
  return true;
}

// Through double as the generic loop (float -> double -> bfloat16 rounds once,
// the double being exact), one tight loop per pair of dtypes; contiguous only.
namespace {

// Strides of a layout over `sizes` (row-major; a contiguous layout's own sizes may
// be another shape of the same elements, e.g. flat).
void strides_over(const StridedLayout& l, const int64_t* sizes, int ndim, int64_t* out) {
  if (!l.contiguous) {
    for (int d = 0; d < ndim; ++d) out[d] = l.strides[d];
    return;
  }
  int64_t s = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    out[d] = s;
    s *= sizes[d];
  }
}

// [lowest, highest] element offset a layout reaches over sizes/strides.
void extent(int64_t offset, const int64_t* sizes, const int64_t* strides, int ndim, int64_t& lo,
            int64_t& hi) {
  lo = hi = offset;
  for (int d = 0; d < ndim; ++d) {
    const int64_t span = (sizes[d] - 1) * strides[d];
    (span < 0 ? lo : hi) += span;
  }
}

// y[i] = x[i] in the generic loop's row-major order over the strided operand's
// sizes, one odometer step per element instead of its division per dim; W is the
// element's bytes as an integer type (a copy moves bits).
template <typename W>
void copy_strided_rows(const W* x, W* y, const int64_t* sizes, const int64_t* xs, const int64_t* ys,
                       int ndim, int64_t x0, int64_t y0, int64_t lo, int64_t hi) {
  const int64_t inner = sizes[ndim - 1], xi = xs[ndim - 1], yi = ys[ndim - 1];
  int64_t idx[kMaxDims];
  int64_t xo = x0, yo = y0, r = lo;
  for (int d = ndim - 2; d >= 0; --d) {  // the coordinates of row lo
    idx[d] = r % sizes[d];
    r /= sizes[d];
    xo += idx[d] * xs[d];
    yo += idx[d] * ys[d];
  }
  for (int64_t row = lo; row < hi; ++row) {
    const W* xr = x + xo;
    W* yr = y + yo;
    if (xi == 1 && yi == 1)
      std::memcpy(yr, xr, static_cast<size_t>(inner) * sizeof(W));
    else
      for (int64_t k = 0; k < inner; ++k) yr[k * yi] = xr[k * xi];
    for (int d = ndim - 2; d >= 0; --d) {  // next row
      xo += xs[d];
      yo += ys[d];
      if (++idx[d] < sizes[d]) break;
      xo -= sizes[d] * xs[d];
      yo -= sizes[d] * ys[d];
      idx[d] = 0;
    }
  }
}

// A copy between layouts (same dtype) where one is strided and the layouts' shapes
// agree: rows of the innermost dim over the pool. Overlapping operands are left to
// the generic loop (its element order decides what such a copy gives).
bool copy_strided(const CastArgs& a) {
  const StridedLayout& ref = a.xl.contiguous ? a.yl : a.xl;  // the strided one's shape
  const int ndim = ref.ndim;
  if (ndim < 1 || ndim > kMaxDims) return false;
  if (!a.xl.contiguous && !a.yl.contiguous) {
    if (a.yl.ndim != ndim) return false;
    for (int d = 0; d < ndim; ++d)
      if (a.yl.sizes[d] != a.xl.sizes[d]) return false;
  }
  int64_t n = 1;
  for (int d = 0; d < ndim; ++d) n *= ref.sizes[d];
  if (n != a.n) return false;
  if (n == 0) return true;
  int64_t xs[kMaxDims], ys[kMaxDims];
  strides_over(a.xl, ref.sizes, ndim, xs);
  strides_over(a.yl, ref.sizes, ndim, ys);
  const size_t es = element_size(a.from);
  int64_t xlo, xhi, ylo, yhi;
  extent(a.xl.offset, ref.sizes, xs, ndim, xlo, xhi);
  extent(a.yl.offset, ref.sizes, ys, ndim, ylo, yhi);
  const char* xb = static_cast<const char*>(a.x);
  const char* yb = static_cast<const char*>(a.y);
  if (xb + static_cast<size_t>(xlo) * es < yb + static_cast<size_t>(yhi + 1) * es &&
      yb + static_cast<size_t>(ylo) * es < xb + static_cast<size_t>(xhi + 1) * es)
    return false;  // overlapping: the generic loop's element order decides
  const int64_t inner = ref.sizes[ndim - 1], rows = n / inner;
  const int64_t grain = std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(inner, 1));
  auto run = [&](auto tag) {
    using W = decltype(tag);
    const W* x = static_cast<const W*>(a.x);
    W* y = static_cast<W*>(a.y);
    parallel_for(rows, grain, [&](int64_t lo, int64_t hi) {
      copy_strided_rows<W>(x, y, ref.sizes, xs, ys, ndim, a.xl.offset, a.yl.offset, lo, hi);
    });
  };
  switch (es) {
    case 1:
      run(uint8_t{});
      return true;
    case 2:
      run(uint16_t{});
      return true;
    case 4:
      run(uint32_t{});
      return true;
    case 8:
      run(uint64_t{});
      return true;
    default:
      return false;
  }
}

// out[i] = c[i] ? x[i] : y[i] over rows lo..hi of the output's shape, one
// odometer step per row (as copy_strided_rows); W is the element's bytes as an
// integer type (a selection moves bits). Strides per operand over the shape: 0 where
// broadcast.
template <typename W>
void where_rows(const bool* c, const W* x, const W* y, W* out, const int64_t* sizes,
                const int64_t* const* strides, const int64_t* offsets, int ndim, int64_t lo,
                int64_t hi) {
  const int64_t inner = sizes[ndim - 1];
  const int64_t ci = strides[0][ndim - 1], xi = strides[1][ndim - 1], yi = strides[2][ndim - 1];
  int64_t idx[kMaxDims];
  int64_t co = offsets[0], xo = offsets[1], yo = offsets[2], r = lo;
  for (int d = ndim - 2; d >= 0; --d) {  // the coordinates of row lo
    idx[d] = r % sizes[d];
    r /= sizes[d];
    co += idx[d] * strides[0][d];
    xo += idx[d] * strides[1][d];
    yo += idx[d] * strides[2][d];
  }
  for (int64_t row = lo; row < hi; ++row) {
    const bool* cr = c + co;
    const W* xr = x + xo;
    const W* yr = y + yo;
    W* orow = out + row * inner;
    if (ci == 1 && xi == 1 && yi == 1) {
      for (int64_t k = 0; k < inner; ++k) orow[k] = cr[k] ? xr[k] : yr[k];
    } else {
      for (int64_t k = 0; k < inner; ++k) orow[k] = cr[k * ci] ? xr[k * xi] : yr[k * yi];
    }
    for (int d = ndim - 2; d >= 0; --d) {  // next row
      co += strides[0][d];
      xo += strides[1][d];
      yo += strides[2][d];
      if (++idx[d] < sizes[d]) break;
      co -= sizes[d] * strides[0][d];
      xo -= sizes[d] * strides[1][d];
      yo -= sizes[d] * strides[2][d];
      idx[d] = 0;
    }
  }
}

// Whether an operand over (sizes, strides) from `offset`, of `es` bytes per element,
// shares a byte with the output's [out_lo, out_hi).
bool overlaps_output(const void* base, int64_t offset, const int64_t* sizes, const int64_t* strides,
                     int ndim, size_t es, uintptr_t out_lo, uintptr_t out_hi) {
  int64_t lo = 0, hi = 0;
  extent(offset, sizes, strides, ndim, lo, hi);
  const auto b = reinterpret_cast<uintptr_t>(base);
  const uintptr_t first = b + static_cast<uintptr_t>(lo) * es;
  const uintptr_t last = b + static_cast<uintptr_t>(hi + 1) * es;
  return first < out_hi && out_lo < last;
}

}  // namespace

bool where_fast(const WhereArgs& a) {
  const StridedLayout& o = a.ol;
  const int ndim = o.ndim;
  if (!o.contiguous || ndim < 1 || ndim > kMaxDims) return false;
  int64_t n = 1;
  for (int d = 0; d < ndim; ++d) n *= o.sizes[d];
  if (n != a.n) return false;
  if (n == 0) return true;
  const StridedLayout* layouts[3] = {&a.cl, &a.al, &a.bl};
  int64_t strides[3][kMaxDims];
  int64_t offsets[3];
  for (int i = 0; i < 3; ++i) {
    const StridedLayout& l = *layouts[i];
    if (!l.contiguous && l.ndim != ndim) return false;
    for (int d = 0; d < ndim && !l.contiguous; ++d)
      if (l.sizes[d] != o.sizes[d]) return false;
    strides_over(l, o.sizes, ndim, strides[i]);
    offsets[i] = l.offset;
  }
  const size_t es = element_size(a.dtype);
  const auto out_base = reinterpret_cast<uintptr_t>(a.out);
  const uintptr_t out_lo = out_base + static_cast<uintptr_t>(o.offset) * es;
  const uintptr_t out_hi = out_lo + static_cast<uintptr_t>(n) * es;
  if (overlaps_output(a.cond, offsets[0], o.sizes, strides[0], ndim, 1, out_lo, out_hi) ||
      overlaps_output(a.a, offsets[1], o.sizes, strides[1], ndim, es, out_lo, out_hi) ||
      overlaps_output(a.b, offsets[2], o.sizes, strides[2], ndim, es, out_lo, out_hi))
    return false;  // in place or overlapping: the generic loop's element order decides
  const int64_t inner = o.sizes[ndim - 1], rows = n / inner;
  const int64_t grain = std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(inner, 1));
  const int64_t* sp[3] = {strides[0], strides[1], strides[2]};
  auto run = [&](auto tag) {
    using W = decltype(tag);
    const bool* c = static_cast<const bool*>(a.cond);
    const W* x = static_cast<const W*>(a.a);
    const W* y = static_cast<const W*>(a.b);
    W* out = static_cast<W*>(a.out) + o.offset;
    parallel_for(rows, grain, [&](int64_t lo, int64_t hi) {
      where_rows<W>(c, x, y, out, o.sizes, sp, offsets, ndim, lo, hi);
    });
  };
  switch (es) {
    case 1:
      run(uint8_t{});
      return true;
    case 2:
      run(uint16_t{});
      return true;
    case 4:
      run(uint32_t{});
      return true;
    case 8:
      run(uint64_t{});
      return true;
    default:
      return false;
  }
}

bool cast_fast(const CastArgs& a) {
  if ((!a.xl.contiguous || !a.yl.contiguous) && a.from == a.to && copy_strided(a)) return true;
  const Operand ops[] = {{a.x, &a.xl, element_size(a.from)}, {a.y, &a.yl, element_size(a.to)}};
  Plan p;
  if (!a.xl.contiguous || !a.yl.contiguous || !plan_of(ops, 2, a.n, p)) return false;
  if (a.n <= 0) return true;
  const void* x = row_start(a.x, a.xl, ops[0].size, p, 0);
  void* y = row_start(a.y, a.yl, ops[1].size, p, 0);
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
  if (!a.yl.contiguous || a.step != 0.0) return false;
  ember::detail::dispatch_cpu(a.dtype, [&](auto tag) {
    using S = decltype(tag);
    S v{};
    ember::detail::store_from_double(&v, a.value);
    S* ys = static_cast<S*>(a.y) + a.yl.offset;
    for (int64_t i = 0; i < a.n; ++i) ys[i] = v;
  });
  return true;
}

}  // namespace ember::kernels::cpu
