// The CPU element-wise fast path (core/kernels/cpu_elementwise.h) against the
// generic strided loop, the reference, bit for bit (NaN payloads aside: any NaN
// matches any NaN), on every op of core/base/elementwise_ops.h's lists, forward
// and backward, in float32, float64, bfloat16 and (for the ops that keep
// integers, and the comparisons) int64, on values that include NaN, infinities,
// signed zeros, subnormals and float32's extremes. The fast path must take the
// contiguous layouts (in place too) and leave strided, broadcast and partially
// overlapping ones to the generic loop, which the registered kernel then runs.
#include <doctest/doctest.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/base/elementwise_ops.h"
#include "core/kernel_table.h"
#include "core/kernels/cpu_elementwise.h"
#include "core/kernels/cpu_linalg.h"
#include "core/kernels/cpu_loops.h"
#include "core/ops.h"
#include "core/ops/layouts.h"
#include "core/threads.h"

using namespace ember;
using namespace ember::kernels;
namespace cpu = ember::kernels::cpu;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Values every formula meets: the specials, then numbers of either sign and of
// very different sizes (sums that cancel, products that overflow or underflow
// float32, quotients that round).
const std::vector<double> kSpecials = {
    0.0,     -0.0,   1.0,     -1.0,     0.5,  -2.5,   3.0,   kInf, -kInf,   kNaN,     1e-40, -1e-40,
    1.4e-45, 1e-310, FLT_MAX, -FLT_MAX, 1e30, -3e-30, 1e-20, 0.1,  1.0 / 3, 16777217, 2.0,   -7.25};
const std::vector<int64_t> kIntSpecials = {0,         1,         -1,
                                           2,         -3,        7,
                                           100,       -100,      (int64_t{1} << 53) + 1,
                                           INT64_MAX, INT64_MIN, -(int64_t{1} << 60)};

// A typed buffer of n elements after `offset` unused ones (so the layouts carry a
// storage offset), filled from doubles through the generic store.
struct Buffer {
  DType dtype;
  int64_t offset;
  std::vector<unsigned char> bytes;
  Buffer(DType t, const std::vector<double>& values, int64_t off = 3)
      : dtype(t), offset(off), bytes((values.size() + off) * element_size(t)) {
    for (size_t i = 0; i < values.size(); ++i)
      ember::detail::dispatch_cpu(t, [&](auto tag) {
        using S = decltype(tag);
        ember::detail::store_from_double(static_cast<S*>(data()) + off + i, values[i]);
      });
  }
  void* data() { return bytes.data(); }
  int64_t n() const { return static_cast<int64_t>(bytes.size() / element_size(dtype)) - offset; }
  StridedLayout layout() const {
    StridedLayout l = flat_layout(n());
    l.offset = offset;
    return l;
  }
};

// Same bits, or both NaN.
bool same_element(DType t, const unsigned char* a, const unsigned char* b) {
  return ember::detail::dispatch_cpu(t, [&](auto tag) {
    using S = decltype(tag);
    if (std::memcmp(a, b, sizeof(S)) == 0) return true;
    S x, y;
    std::memcpy(&x, a, sizeof(S));
    std::memcpy(&y, b, sizeof(S));
    const double dx = ember::detail::load_as_double(&x), dy = ember::detail::load_as_double(&y);
    return dx != dx && dy != dy;
  });
}

// The first element where two buffers differ, or -1.
int64_t first_difference(const Buffer& a, const Buffer& b) {
  const size_t size = element_size(a.dtype);
  for (int64_t i = 0; i < a.n(); ++i)
    if (!same_element(a.dtype, a.bytes.data() + (a.offset + i) * size,
                      b.bytes.data() + (b.offset + i) * size))
      return i;
  return -1;
}

// Pairs of specials (x[i], y[i]) over all k * k combinations, then random values
// from [lo, hi] and from a wide range; an odd length, so loops have a tail.
void operand_values(DType t, double lo, double hi, std::vector<double>& x, std::vector<double>& y) {
  std::mt19937_64 rng(42);
  x.clear();
  y.clear();
  if (t == kInt64) {
    const size_t k = kIntSpecials.size();
    for (size_t i = 0; i < k * k; ++i) {
      x.push_back(static_cast<double>(kIntSpecials[i / k]));
      y.push_back(static_cast<double>(kIntSpecials[i % k]));
    }
    std::uniform_int_distribution<int> d(-50, 50);
    for (int i = 0; i < 301; ++i) {
      x.push_back(d(rng));
      y.push_back(d(rng));
    }
    return;
  }
  const size_t k = kSpecials.size();
  for (size_t i = 0; i < k * k; ++i) {
    x.push_back(kSpecials[i / k]);
    y.push_back(kSpecials[i % k]);
  }
  std::uniform_real_distribution<double> in(lo, hi), wide(-1e6, 1e6);
  for (int i = 0; i < 301; ++i) {
    x.push_back(i % 2 ? in(rng) : wide(rng) * std::pow(10.0, (i % 7) - 3));
    y.push_back(i % 3 ? in(rng) : wide(rng));
  }
}

std::vector<DType> dtypes_for(bool integers) {
  std::vector<DType> d = {kFloat32, kFloat64, kBFloat16};
  if (integers) d.push_back(kInt64);
  return d;
}

struct UnaryEntry {
  UnaryOp op;
  double lo, hi;
  std::vector<double> scalars;  // the a values to test with
};

std::vector<UnaryEntry> unary_entries() {
  std::vector<UnaryEntry> e;
#define EMBER_X(name, Enum, act, saves, fwd, bwd, lo, hi, ...) \
  e.push_back({UnaryOp::Enum, lo, hi, {0.0}});
  EMBER_UNARY_OPS(EMBER_X)
#undef EMBER_X
  // The list's a (float holds it: float math), a value float does not hold
  // (double math), and a special.
#define EMBER_X(name, Enum, saves, fwd, bwd, lo, hi, a, ...) \
  e.push_back({UnaryOp::Enum, lo, hi, {a, 0.1, -0.0, kInf}});
  EMBER_SCALAR_OPS(EMBER_X)
#undef EMBER_X
  return e;
}

struct BinaryEntry {
  BinaryOp op;
  double lo, hi;
};

std::vector<BinaryEntry> binary_entries() {
  std::vector<BinaryEntry> e;
#define EMBER_X(name, Enum, fwd, dx, dy, dxr, dyr, lo, hi, ...) \
  e.push_back({BinaryOp::Enum, lo, hi});
  EMBER_BINARY_OPS(EMBER_X)
#undef EMBER_X
  return e;
}

std::string what(const char* op, DType t, double a) {
  return std::string(op) + " " + std::string(dtype_name(t)) + " a=" + std::to_string(a);
}

}  // namespace

TEST_CASE("cpu fast path/unary: every op of the lists gives the generic loop's bits") {
  std::vector<double> xv, unused;
  for (const UnaryEntry& u : unary_entries())
    for (DType t : dtypes_for(keeps_integers(u.op) || gives_bool(u.op))) {
      operand_values(t, u.lo, u.hi, xv, unused);
      const DType out_t = gives_bool(u.op) ? kBool : t;
      Buffer x(t, xv);
      const std::vector<double> zeros(xv.size(), 0.0);
      for (double a : u.scalars) {
        CAPTURE(what(unary_name(u.op), t, a));
        Buffer fast(out_t, zeros), generic(out_t, zeros, 5);
        const UnaryArgs fa{kCPU,        u.op,          t,     x.data(), x.layout(),
                           fast.data(), fast.layout(), x.n(), a,        out_t};
        UnaryArgs ga = fa;
        ga.y = generic.data();
        ga.yl = generic.layout();
        REQUIRE(cpu::unary_fast(fa));
        cpu::unary_generic(ga);
        CHECK(first_difference(fast, generic) == -1);
      }
    }
}

TEST_CASE("cpu fast path/unary backward: every op of the lists gives the generic loop's bits") {
  std::vector<double> gv, sv;
  for (const UnaryEntry& u : unary_entries())
    for (DType t : dtypes_for(keeps_integers(u.op))) {
      operand_values(t, u.lo, u.hi, gv, sv);
      Buffer g(t, gv), s(t, sv, 1);
      const std::vector<double> zeros(gv.size(), 0.0);
      for (double a : u.scalars) {
        CAPTURE(what(unary_name(u.op), t, a));
        Buffer fast(t, zeros), generic(t, zeros);
        const UnaryBackwardArgs fa{kCPU,          u.op,     t,          g.data(),
                                   g.layout(),    s.data(), s.layout(), fast.data(),
                                   fast.layout(), g.n(),    a};
        UnaryBackwardArgs ga = fa;
        ga.out = generic.data();
        REQUIRE(cpu::unary_backward_fast(fa));
        cpu::unary_backward_generic(ga);
        CHECK(first_difference(fast, generic) == -1);
      }
    }
}

TEST_CASE("cpu fast path/binary: every op of the lists gives the generic loop's bits") {
  std::vector<double> xv, yv;
  for (const BinaryEntry& b : binary_entries())
    for (DType t : dtypes_for(keeps_integers(b.op) || gives_bool(b.op))) {
      operand_values(t, b.lo, b.hi, xv, yv);
      const DType out_t = gives_bool(b.op) ? kBool : t;
      Buffer x(t, xv), y(t, yv, 0);
      const std::vector<double> zeros(xv.size(), 0.0);
      // add reads a (alpha): 1 computes in float, others in double.
      for (double a : {1.0, 0.3, 2.0, -1.0}) {
        CAPTURE(what(binary_name(b.op), t, a));
        Buffer fast(out_t, zeros), generic(out_t, zeros);
        const BinaryArgs fa{kCPU,          b.op,     t,          x.data(),
                            x.layout(),    y.data(), y.layout(), fast.data(),
                            fast.layout(), x.n(),    a,          out_t};
        BinaryArgs ga = fa;
        ga.out = generic.data();
        REQUIRE(cpu::binary_fast(fa));
        cpu::binary_generic(ga);
        CHECK(first_difference(fast, generic) == -1);
      }
    }
}

TEST_CASE("cpu fast path/binary backward: both sides of every op give the generic loop's bits") {
  std::vector<double> xv, yv;
  for (const BinaryEntry& b : binary_entries())
    for (DType t : dtypes_for(keeps_integers(b.op)))
      for (int side : {0, 1}) {
        operand_values(t, b.lo, b.hi, xv, yv);
        std::vector<double> gv(xv.rbegin(), xv.rend());  // g meets the specials too
        Buffer g(t, gv), x(t, xv), y(t, yv, 0);
        const std::vector<double> zeros(xv.size(), 0.0);
        for (double a : {1.0, 0.3}) {
          CAPTURE(what(binary_name(b.op), t, a) + " side " + std::to_string(side));
          Buffer fast(t, zeros), generic(t, zeros);
          const BinaryBackwardArgs fa{kCPU,        b.op,          side,       t,        g.data(),
                                      g.layout(),  x.data(),      x.layout(), y.data(), y.layout(),
                                      fast.data(), fast.layout(), g.n(),      a};
          BinaryBackwardArgs ga = fa;
          ga.out = generic.data();
          REQUIRE(cpu::binary_backward_fast(fa));
          cpu::binary_backward_generic(ga);
          CHECK(first_difference(fast, generic) == -1);
        }
      }
}

TEST_CASE("cpu fast path/cast and fill: every pair of dtypes gives the generic loop's bits") {
  const DType all[] = {kFloat32, kFloat64, kBFloat16, kInt64, kBool};
  std::vector<double> values, unused;
  for (DType from : all)
    for (DType to : all) {
      CAPTURE(std::string(dtype_name(from)) + " -> " + std::string(dtype_name(to)));
      operand_values(from == kInt64 ? kInt64 : kFloat64, -4, 4, values, unused);
      Buffer x(from, values);
      const std::vector<double> zeros(values.size(), 0.0);
      Buffer fast(to, zeros), generic(to, zeros, 1);
      const CastArgs fa{kCPU, from, x.data(), x.layout(), to, fast.data(), fast.layout(), x.n()};
      CastArgs ga = fa;
      ga.y = generic.data();
      ga.yl = generic.layout();
      REQUIRE(cpu::cast_fast(fa));
      cpu::cast_generic(ga);
      CHECK(first_difference(fast, generic) == -1);
    }
  for (DType t : all)
    for (double v : {0.0, -0.0, 2.5, -kInf, kNaN, 1e-40, 1e300}) {
      CAPTURE(std::string(dtype_name(t)) + " fill " + std::to_string(v));
      const std::vector<double> ones(129, 1.0);
      Buffer fast(t, ones), generic(t, ones);
      const FillArgs fa{kCPU, t, fast.data(), fast.layout(), fast.n(), v};
      FillArgs ga = fa;
      ga.y = generic.data();
      REQUIRE(cpu::fill_fast(fa));
      cpu::fill_generic(ga);
      CHECK(first_difference(fast, generic) == -1);
      CHECK(fast.bytes == generic.bytes);  // the offset's elements left alone as well
    }
}

TEST_CASE("cpu fast path/in place: the output may be an input") {
  std::vector<double> xv, yv;
  for (DType t : {kFloat32, kFloat64, kBFloat16})
    for (BinaryOp op : {BinaryOp::Add, BinaryOp::Mul, BinaryOp::Div, BinaryOp::Maximum}) {
      CAPTURE(what(binary_name(op), t, 1.0));
      operand_values(t, -4, 4, xv, yv);
      Buffer x(t, xv), y(t, yv), want(t, xv);
      // want = op(x, y) out of place by the generic loop; x = op(x, y) in place by
      // the fast path; then x = op(x, x), both ways.
      cpu::binary_generic({kCPU, op, t, x.data(), x.layout(), y.data(), y.layout(), want.data(),
                           want.layout(), x.n(), 1.0, t});
      REQUIRE(cpu::binary_fast({kCPU, op, t, x.data(), x.layout(), y.data(), y.layout(), x.data(),
                                x.layout(), x.n(), 1.0, t}));
      CHECK(first_difference(x, want) == -1);
      Buffer twice(t, std::vector<double>(xv.size(), 0.0));
      cpu::binary_generic({kCPU, op, t, x.data(), x.layout(), x.data(), x.layout(), twice.data(),
                           twice.layout(), x.n(), 1.0, t});
      REQUIRE(cpu::binary_fast({kCPU, op, t, x.data(), x.layout(), x.data(), x.layout(), x.data(),
                                x.layout(), x.n(), 1.0, t}));
      CHECK(first_difference(x, twice) == -1);
    }
}

TEST_CASE("cpu fast path/layouts it leaves to the generic loop, which the kernel then runs") {
  // x: (4, 6) read through a transposed, a broadcast and a shifted overlapping
  // layout over an iteration of (6, 4).
  std::vector<double> xv(24 + 8);
  for (size_t i = 0; i < xv.size(); ++i) xv[i] = 0.37 * static_cast<double>(i) - 3.0;
  xv[5] = kNaN;
  xv[7] = -0.0;
  Buffer x(kFloat32, xv, 0), y(kFloat32, xv, 0);
  StridedLayout out_l{};
  out_l.ndim = 2;
  out_l.sizes[0] = 6;
  out_l.sizes[1] = 4;
  out_l.strides[0] = 4;
  out_l.strides[1] = 1;
  StridedLayout transposed = out_l;
  transposed.strides[0] = 1;
  transposed.strides[1] = 6;
  transposed.contiguous = false;
  StridedLayout broadcast = out_l;  // a row of 4, repeated
  broadcast.strides[0] = 0;
  broadcast.contiguous = false;
  const kernels::KernelTable& table = kernels::kernels_for(kCPU);
  for (const StridedLayout& xl : {transposed, broadcast}) {
    Buffer got(kFloat32, std::vector<double>(24, 0.0), 0),
        want(kFloat32, std::vector<double>(24, 0.0), 0);
    BinaryArgs a{kCPU,  BinaryOp::Sub, kFloat32, x.data(), xl,  y.data(),
                 out_l, got.data(),    out_l,    24,       1.0, kFloat32};
    CHECK_FALSE(cpu::binary_fast(a));
    table.binary(a);
    a.out = want.data();
    cpu::binary_generic(a);
    CHECK(first_difference(got, want) == -1);
    // By hand at one element: out[1][2] = x(xl at 1, 2) - y[6].
    const double x12 =
        static_cast<float>(xv[static_cast<size_t>(xl.strides[0] + 2 * xl.strides[1])]);
    CHECK(static_cast<float*>(got.data())[6] ==
          static_cast<float>(x12 - static_cast<float>(xv[6])));
  }
  // In place into a view one element past its input: partial overlap.
  Buffer z(kFloat32, xv, 0), z_want(kFloat32, xv, 0);
  StridedLayout in_l = flat_layout(24), shifted = flat_layout(24);
  shifted.offset = 1;
  UnaryArgs u{kCPU, UnaryOp::Neg, kFloat32, z.data(), in_l, z.data(), shifted, 24, 0.0, kFloat32};
  CHECK_FALSE(cpu::unary_fast(u));
  table.unary(u);
  u.x = z_want.data();
  u.y = z_want.data();
  cpu::unary_generic(u);
  CHECK(first_difference(z, z_want) == -1);
  // A dtype the fast path does not cover: bool in, bool out (cast covers bool).
  Buffer b(kBool, {1, 0, 1}), b_out(kBool, {0, 0, 0});
  CHECK_FALSE(cpu::unary_fast({kCPU, UnaryOp::Neg, kBool, b.data(), b.layout(), b_out.data(),
                               b_out.layout(), 3, 0.0, kBool}));
  // A strided output for cast and fill.
  StridedLayout every_other = flat_layout(3);
  every_other.strides[0] = 2;
  every_other.contiguous = false;
  Buffer six(kFloat32, std::vector<double>(6, 0.0), 0);
  CHECK_FALSE(cpu::fill_fast({kCPU, kFloat32, six.data(), every_other, 3, 1.0}));
  CHECK_FALSE(cpu::cast_fast(
      {kCPU, kFloat32, x.data(), flat_layout(3), kFloat64, six.data(), every_other, 3}));
}

TEST_CASE("cpu fast path/rows: broadcast and sliced operands give the generic loop's bits") {
  // Iteration (5, 20): x a column slice of a (5, 24) buffer (rows 24 apart), y a
  // row of 20 broadcast over the 5 rows, out contiguous.
  std::vector<double> xv, yv;
  StridedLayout iter{};
  iter.ndim = 2;
  iter.sizes[0] = 5;
  iter.sizes[1] = 20;
  iter.strides[0] = 20;
  iter.strides[1] = 1;
  StridedLayout sliced = iter, broadcast = iter;
  sliced.strides[0] = 24;
  sliced.offset = 2;
  sliced.contiguous = false;
  broadcast.strides[0] = 0;
  broadcast.contiguous = false;
  for (DType t : {kFloat32, kBFloat16, kFloat64})
    for (const BinaryEntry& b : binary_entries()) {
      CAPTURE(what(binary_name(b.op), t, 1.0));
      operand_values(t, b.lo, b.hi, xv, yv);
      xv.resize(5 * 24);
      yv.resize(20);
      const DType out_t = gives_bool(b.op) ? kBool : t;
      Buffer x(t, xv, 0), y(t, yv, 0);
      Buffer fast(out_t, std::vector<double>(100, 0.0), 0),
          generic(out_t, std::vector<double>(100, 0.0), 0);
      BinaryArgs a{kCPU,      b.op,        t,    x.data(), sliced, y.data(),
                   broadcast, fast.data(), iter, 100,      1.0,    out_t};
      REQUIRE(cpu::binary_fast(a));
      a.out = generic.data();
      cpu::binary_generic(a);
      CHECK(first_difference(fast, generic) == -1);
      // Backward over the same layouts (g contiguous), where the op has a kernel.
      if (gives_bool(b.op)) continue;
      for (int side : {0, 1}) {
        Buffer bf(t, std::vector<double>(100, 0.0), 0), bg(t, std::vector<double>(100, 0.0), 0);
        BinaryBackwardArgs ba{kCPU,   b.op,     side,      t,         x.data(), sliced, x.data(),
                              sliced, y.data(), broadcast, bf.data(), iter,     100,    1.0};
        REQUIRE(cpu::binary_backward_fast(ba));
        ba.out = bg.data();
        cpu::binary_backward_generic(ba);
        CHECK(first_difference(bf, bg) == -1);
      }
    }
  // A unary op on the slice, and a row too short for the fast path.
  Buffer x(kFloat32, std::vector<double>(5 * 24, 0.5), 0);
  Buffer fast(kFloat32, std::vector<double>(100, 0.0), 0),
      generic(kFloat32, std::vector<double>(100, 0.0), 0);
  UnaryArgs u{kCPU,        UnaryOp::Tanh, kFloat32, x.data(), sliced,
              fast.data(), iter,          100,      0.0,      kFloat32};
  REQUIRE(cpu::unary_fast(u));
  u.y = generic.data();
  cpu::unary_generic(u);
  CHECK(first_difference(fast, generic) == -1);
  CHECK(static_cast<float*>(fast.data())[99] == static_cast<float>(std::tanh(0.5)));
  StridedLayout short_rows = sliced, short_iter = iter;
  short_rows.sizes[1] = short_iter.sizes[1] = 15;
  short_iter.strides[0] = 15;
  CHECK_FALSE(cpu::unary_fast({kCPU, UnaryOp::Neg, kFloat32, x.data(), short_rows, fast.data(),
                               short_iter, 75, 0.0, kFloat32}));
}

TEST_CASE("cpu fast path/the ops' layouts of contiguous tensors take it") {
  // The arguments run_binary (core/ops/elementwise.cpp) builds for add(a, b):
  // contiguous tensors, and a row of a matrix (a storage offset), take the fast
  // path; a transposed one does not. The op's result is the fast path's.
  manual_seed(3);
  const Tensor m = randn({5, 8});
  const Tensor a = randn({8}), b = m.select(0, 2);
  REQUIRE(b.storage_offset() == 16);
  Tensor out = empty({8});
  const Shape& shape = out.sizes();
  BinaryArgs args{kCPU,
                  BinaryOp::Add,
                  kFloat32,
                  a.storage()->data(),
                  detail::layout_of(a, shape, "add"),
                  b.storage()->data(),
                  detail::layout_of(b, shape, "add"),
                  out.storage()->data(),
                  detail::layout_of(out, shape, "add"),
                  out.numel(),
                  1.0,
                  kFloat32};
  REQUIRE(cpu::binary_fast(args));
  const std::vector<float> av = a.to_vector<float>(), bv = b.to_vector<float>();
  const std::vector<float> got = out.to_vector<float>(), op = add(a, b).to_vector<float>();
  for (size_t i = 0; i < av.size(); ++i) {
    CHECK(got[i] == av[i] + bv[i]);  // float's own sum: the correctly rounded one
    CHECK(op[i] == got[i]);
  }
  Tensor out2 = empty({8, 5});
  const Shape& s2 = out2.sizes();
  const Tensor t2 = randn({5, 8}).t();
  BinaryArgs strided{kCPU,
                     BinaryOp::Add,
                     kFloat32,
                     t2.storage()->data(),
                     detail::layout_of(t2, s2, "add"),
                     out2.storage()->data(),
                     detail::layout_of(out2, s2, "add"),
                     out2.storage()->data(),
                     detail::layout_of(out2, s2, "add"),
                     out2.numel(),
                     1.0,
                     kFloat32};
  CHECK_FALSE(cpu::binary_fast(strided));
}

TEST_CASE(
    "cpu fast path/where: broadcast, transposed and 0-dim operands give the generic loop's "
    "bits") {
  // Iteration (3, 7, 19): the condition broadcast from (1, 1, 19), the first operand
  // a transposed view, the second a 0-dim value.
  const Shape shape = {3, 7, 19};
  const int64_t n = 3 * 7 * 19;
  Generator g(5);
  const Tensor cond = gt(rand({1, 1, 19}, TensorOptions(kFloat32), &g), 0.5);
  for (DType t : {kFloat32, kFloat64, kBFloat16, kInt64, kBool}) {
    CAPTURE(t);
    const Tensor a =
        cast(mul(randn({3, 19, 7}, TensorOptions(kFloat64), &g), 10.0), t).transpose(1, 2);
    const Tensor b = cast(full({}, 2.5, TensorOptions(kFloat64)), t);
    Tensor fast = empty(shape, TensorOptions(t)), generic = empty(shape, TensorOptions(t));
    WhereArgs args{kCPU,
                   t,
                   cond.storage()->data(),
                   detail::layout_of(cond, shape, "test"),
                   a.storage()->data(),
                   detail::layout_of(a, shape, "test"),
                   b.storage()->data(),
                   detail::layout_of(b, shape, "test"),
                   fast.storage()->data(),
                   detail::layout_of(fast, shape, "test"),
                   n};
    REQUIRE(cpu::where_fast(args));
    args.out = generic.storage()->data();
    cpu::where_generic(args);
    CHECK(std::memcmp(fast.storage()->data(), generic.storage()->data(),
                      static_cast<size_t>(n) * element_size(t)) == 0);
    // And the op itself, element by element against the definition.
    const std::vector<double> got = where(cond, a, b).to_vector<double>();
    const std::vector<double> av = a.contiguous().to_vector<double>();
    const std::vector<double> cv = cond.to_vector<double>();
    const double bv = b.item();
    int64_t wrong = 0;
    for (int64_t i = 0; i < n; ++i)
      wrong += got[static_cast<size_t>(i)] !=
               (cv[static_cast<size_t>(i % 19)] != 0.0 ? av[static_cast<size_t>(i)] : bv);
    CHECK(wrong == 0);
  }
  // An operand that is the output (in place) is left to the generic loop.
  Tensor x = randn({4, 20});
  const StridedLayout xl = detail::layout_of(x, {4, 20}, "test");
  const Tensor c2 = gt(x, 0.0), zero = zeros({});
  WhereArgs in_place{kCPU,
                     kFloat32,
                     c2.storage()->data(),
                     detail::layout_of(c2, {4, 20}, "test"),
                     x.storage()->data(),
                     xl,
                     zero.storage()->data(),
                     detail::layout_of(zero, {4, 20}, "test"),
                     x.storage()->data(),
                     xl,
                     80};
  CHECK_FALSE(cpu::where_fast(in_place));
}

TEST_CASE("cpu/blas: OpenBLAS's kernel set is named, and an old one on a new CPU is flagged") {
  using kernels::cpu::blas_core_is_fallback;
  // SSE3-era and AVX-only kernel sets on a CPU with AVX2 and FMA: OpenBLAS did not
  // know the CPU (the H200 host's OpenBLAS 0.3.21 ran matmul 1024^3 at ~31 GFLOP/s).
  CHECK(blas_core_is_fallback("Prescott", true));
  CHECK(blas_core_is_fallback("PRESCOTT", true));
  CHECK(blas_core_is_fallback("Core2", true));
  CHECK(blas_core_is_fallback("Sandybridge", true));
  CHECK(blas_core_is_fallback("Nehalem", true));
  // Kernel sets that use AVX2 or AVX-512, in DYNAMIC_ARCH and fixed-target spellings.
  CHECK_FALSE(blas_core_is_fallback("Haswell", true));
  CHECK_FALSE(blas_core_is_fallback("HASWELL", true));
  CHECK_FALSE(blas_core_is_fallback("Zen", true));
  CHECK_FALSE(blas_core_is_fallback("SkylakeX", true));
  CHECK_FALSE(blas_core_is_fallback("SapphireRapids", true));
  // A CPU without AVX2/FMA: old kernels are the right ones; no name: no BLAS.
  CHECK_FALSE(blas_core_is_fallback("Prescott", false));
  CHECK_FALSE(blas_core_is_fallback("", true));
  // The fix the warning names: AVX-512 kernels where the CPU has them (on the H200
  // host, an Emerald Rapids Xeon, SkylakeX ran 1024^3 on one thread in 16.9 ms against
  // Prescott's 66.0), else AVX2's.
  CHECK(std::string(kernels::cpu::blas_coretype_for(true)) == "SkylakeX");
  CHECK(std::string(kernels::cpu::blas_coretype_for(false)) == "Haswell");
  const std::string info = cpu_blas_info();
  if (info.rfind("OpenBLAS", 0) == 0) {
    CHECK_FALSE(kernels::cpu::blas_core().empty());
    CHECK(info.find(kernels::cpu::blas_core() + " kernels") != std::string::npos);
  } else {
    CHECK(info == "none: the reference loops");
    CHECK(kernels::cpu::blas_core().empty());
  }
  MESSAGE("cpu blas: ", info);
}
