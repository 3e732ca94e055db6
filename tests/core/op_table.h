// The op test table (tests/core/op_table.cpp): one entry per op declared in
// core/ops.h, saying how to call it, on which inputs (shapes that broadcast,
// transposed and strided views, empty tensors), in which dtypes, whether it is
// differentiable and at which tolerances. The drivers in
// tests/core/test_op_table.cpp run every entry through
//  - gradcheck (float64, CPU) when it is differentiable,
//  - CUDA against the CPU float64 reference, forward and backward, in each of
//    its CUDA dtypes (and TF32 for GEMMs), suite "cuda",
//  - the meta device: the output's (and each gradient's) sizes and dtype equal
//    the CPU's,
//  - determinism: the same inputs give the same bits on CUDA twice (suite "cuda");
// and fail naming any op of core/ops.h without an entry (or an exemption with its
// reason). CONTRIBUTING.md, "The op test table", says how to add an entry.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/ops.h"
#include "core/tensor.h"

namespace ember::testing::optable {

using Inputs = std::vector<Tensor>;
// Calls the op on the inputs as the op sees them (views already taken); `arg` is
// the sample's integer argument (a dim, a size, a mode), 0 unless it sets one.
using OpFn = std::function<Tensor(const Inputs& v, int64_t arg)>;

// How an input's values are drawn (seeded).
enum class Gen : uint8_t {
  Normal,   // standard normal, float64 (cast to the dtype under test)
  Uniform,  // uniform in [lo, hi), float64
  Index,    // int64 uniform in [lo, hi): indices, class targets
  Mask,     // bool, about half true
};

// The layout the op sees. The driver stores the values so that the op receives
// a view of that shape: Transposed stores the last two dims swapped and passes
// .transpose(-2, -1); Strided stores the last dim doubled and passes every second
// element. The gradient flows back through the view to the stored tensor.
enum class View : uint8_t { Contiguous, Transposed, Strided };

// One input of a sample: its shape as the op sees it, its values, its layout.
struct In {
  Shape shape;
  Gen gen = Gen::Normal;
  double lo = -1.0, hi = 1.0;
  View view = View::Contiguous;
  bool grad = true;  // a floating input that takes a gradient (false: held fixed)

  In T() const {
    In r = *this;
    r.view = View::Transposed;
    return r;
  }
  In strided() const {
    In r = *this;
    r.view = View::Strided;
    return r;
  }
  In nograd() const {
    In r = *this;
    r.grad = false;
    return r;
  }
  bool floating() const { return gen == Gen::Normal || gen == Gen::Uniform; }
};
// Standard normals; uniform in [lo, hi); int64 in [0, n); a bool mask.
inline In x(Shape s) {
  return In{std::move(s)};
}
inline In u(Shape s, double lo, double hi) {
  return In{std::move(s), Gen::Uniform, lo, hi};
}
inline In idx(Shape s, int64_t n) {
  return In{std::move(s), Gen::Index, 0.0, static_cast<double>(n), View::Contiguous, false};
}
inline In mask(Shape s) {
  return In{std::move(s), Gen::Mask, 0.0, 1.0, View::Contiguous, false};
}

// One call of the op: its inputs, and the integer argument passed to OpFn.
struct Sample {
  std::vector<In> inputs;
  int64_t arg = 0;
  // Empty unless the op's gradient is by design not the derivative here (a
  // padding row that gets none): why gradcheck skips this sample.
  const char* no_gradcheck = "";
};

// Relative-error budgets (DESIGN.md) of the CUDA result against the CPU float64
// reference on the same rounded inputs: float32 forward and backward, bfloat16.
// float64 on CUDA always gets 1e-12. NaN never passes (rel_error is +inf).
struct Tol {
  double f32, f32_grad, bf16;
};
// Element-wise: 1e-6 forward. Gradients get 1e-5: a derivative read off the saved
// output (tanh's 1 - y^2) amplifies the float rounding of y where it is small,
// which the reference, computing y in double, does not see.
inline constexpr Tol kElementwise{1e-6, 1e-5, 1e-2};
// Reductions and what is built on them (softmax, norms, losses): float sums over
// a row or more, GEMM's 1e-5.
inline constexpr Tol kReduction{1e-5, 1e-5, 1e-2};
inline constexpr Tol kGemm{1e-5, 1e-5, 1e-2};
// Ops that only move, select or compare values: exact in every dtype.
inline constexpr Tol kExact{0.0, 0.0, 0.0};
// Exact forward, summing backward (broadcast operands, repeated indices): the
// gradients get the reductions' 1e-5.
inline constexpr Tol kExactForward{0.0, 1e-5, 1e-2};

enum class Grad : uint8_t {
  Yes,      // differentiable in its floating inputs: gradcheck, CUDA backward
  None,     // never records a graph (comparisons, indices): the output never requires grad
  InPlace,  // in-place or an update without autograd: inputs never require grad
};

struct OpEntry {
  const char* op;       // the name declared in core/ops.h
  const char* variant;  // which overload or mode ("" for the plain one)
  OpFn fn;
  std::vector<Sample> samples;
  Grad grad = Grad::Yes;
  Tol tol = kElementwise;
  std::vector<DType> cuda_dtypes = {kFloat32, kFloat64, kBFloat16};
  bool bf16_grad = true;  // the bfloat16 backward is checked too (within tol.bf16)
  bool tf32 = false;      // a GEMM: float32 also checked with TF32 on, at 1e-3
  double gradcheck_tol = 1e-6;
  // Empty unless the op cannot run on the meta device: the reason.
  const char* no_meta = "";
  // Empty unless the op's CUDA result may differ in its bits from run to run: why.
  const char* nondeterministic = "";

  std::string name() const { return variant[0] ? std::string(op) + "/" + variant : op; }
};

// Every entry, grouped by family.
const std::vector<OpEntry>& op_table();

// Names declared in core/ops.h that are not tensor ops (dtype queries, argument
// checks) or are covered by the entry of the op they forward to: with the reason.
struct Exemption {
  const char* name;
  const char* reason;
};
const std::vector<Exemption>& op_table_exemptions();

}  // namespace ember::testing::optable
