// The element-wise lists of core/base/elementwise_ops.h: every entry, as it is
// added, gets its hand-computed value (the entry's `at` and `value`) through the
// free function and the Tensor method, on the CPU in float64. The op table
// (tests/core/op_table.cpp) generates an entry from each list entry too:
// gradcheck, CUDA against the CPU forward and backward, the meta device and
// determinism, on inputs drawn from the entry's interval.
// Comparisons (Saves::Bool, Reads::Bool) give bool tensors and have no gradient.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/base/elementwise_ops.h"
#include "core/ops.h"
#include "gradcheck.h"

using namespace ember;

namespace {

struct UnaryCase {
  const char* name;
  Tensor (*fn)(const Tensor&);
  Tensor (*method)(const Tensor&);
  double lo, hi, a, at, value;
  bool differentiable;
  bool boolean;  // a comparison: its output is bool
};

#define EMBER_UNARY_CASE(name, Enum, act, saves, fwd, bwd, lo, hi, at, value) \
  UnaryCase{#name,                                                            \
            [](const Tensor& t) { return ember::name(t); },                   \
            [](const Tensor& t) { return t.name(); },                         \
            lo,                                                               \
            hi,                                                               \
            0.0,                                                              \
            at,                                                               \
            value,                                                            \
            Saves::saves != Saves::NoGrad && Saves::saves != Saves::Bool,     \
            Saves::saves == Saves::Bool},
#define EMBER_SCALAR_CASE(name, Enum, saves, fwd, bwd, lo, hi, a, at, value) \
  UnaryCase{#name "(a=" #a ")",                                              \
            [](const Tensor& t) { return ember::name(t, a); },               \
            [](const Tensor& t) { return t.name(a); },                       \
            lo,                                                              \
            hi,                                                              \
            a,                                                               \
            at,                                                              \
            value,                                                           \
            Saves::saves != Saves::NoGrad && Saves::saves != Saves::Bool,    \
            Saves::saves == Saves::Bool},
const UnaryCase kUnaryCases[] = {EMBER_UNARY_OPS(EMBER_UNARY_CASE)
                                     EMBER_SCALAR_OPS(EMBER_SCALAR_CASE)};
#undef EMBER_UNARY_CASE
#undef EMBER_SCALAR_CASE

struct BinaryCase {
  const char* name;
  Tensor (*fn)(const Tensor&, const Tensor&);
  Tensor (*method)(const Tensor&, const Tensor&);
  double lo, hi, at_x, at_y, value;
  bool boolean;  // a comparison: bool output, no gradient
};
#define EMBER_BINARY_CASE(name, Enum, fwd, dx, dy, dx_reads, dy_reads, lo, hi, at_x, at_y, value) \
  BinaryCase{#name,                                                                               \
             [](const Tensor& x, const Tensor& y) { return ember::name(x, y); },                  \
             [](const Tensor& x, const Tensor& y) { return x.name(y); },                          \
             lo,                                                                                  \
             hi,                                                                                  \
             at_x,                                                                                \
             at_y,                                                                                \
             value,                                                                               \
             Reads::dx_reads == Reads::Bool},
const BinaryCase kBinaryCases[] = {EMBER_BINARY_OPS(EMBER_BINARY_CASE)};
#undef EMBER_BINARY_CASE

}  // namespace

TEST_CASE("ops/list: every element-wise op gives its hand-computed value") {
  for (const UnaryCase& c : kUnaryCases) {
    CAPTURE(std::string(c.name));
    const Tensor x = tensor({c.at}, kFloat64);
    CHECK(c.fn(x).item() == doctest::Approx(c.value).epsilon(1e-12));
    CHECK(c.method(x).item() == doctest::Approx(c.value).epsilon(1e-12));
    CHECK(c.fn(x).dtype() == (c.boolean ? kBool : kFloat64));
  }
  for (const BinaryCase& c : kBinaryCases) {
    CAPTURE(std::string(c.name));
    const Tensor x = tensor({c.at_x}, kFloat64), y = tensor({c.at_y}, kFloat64);
    CHECK(c.fn(x, y).item() == doctest::Approx(c.value).epsilon(1e-12));
    CHECK(c.method(x, y).item() == doctest::Approx(c.value).epsilon(1e-12));
    CHECK(c.fn(x, y).dtype() == (c.boolean ? kBool : kFloat64));
  }
}
