// dropout, as torch::dropout: one kernel (kernel family dropout: core/kernels/cpu_elementwise.cpp,
// cuda/kernels/elementwise.cu, nothing on the meta device). The mask comes from the
// generator's counters (core/base/random.h's dropout_keeps) inside the kernel, and the
// backward draws it again from the same (seed, offset): no mask is stored, so a dropout
// keeps nothing alive for backward but its output's gradient.
#include <cstdint>
#include <vector>

#include "core/alloc_site.h"
#include "core/autograd.h"
#include "core/base/random.h"
#include "core/device_services.h"
#include "core/kernel_table.h"
#include "core/ops.h"
#include "core/ops/dropout_draw.h"

namespace ember {

using detail::DropoutDraw;

DropoutDraw detail::draw_dropout(const Tensor& x, double p, Generator* gen, const char* what) {
  Generator& g = gen != nullptr ? *gen : default_generator();
  const RandomCounters c = draw_counters(x.device(), g, static_cast<uint64_t>(x.numel()), what);
  return {c.seed, c.offset, dropout_threshold(p), 1.0 / (1.0 - p), c.base};
}

Tensor detail::apply_dropout_draw(const Tensor& x, const DropoutDraw& d, DType out) {
  const bool narrowing = x.dtype() == kFloat32 && out == kBFloat16;
  if (out != x.dtype() && !narrowing) return apply_dropout_draw(cast(x, out), d, out);
  const Tensor xs = contiguous(x.detach());
  Tensor y = empty(xs.sizes(), TensorOptions(out).device(xs.device()));
  if (xs.numel() > 0) {
    kernels::DropoutArgs args{xs.device(), xs.dtype(), xs.raw_data(), y.raw_data(), xs.numel(),
                              d.seed,      d.offset,   d.threshold,   d.scale,      d.base};
    args.y_bf16 = narrowing;
    kernels::kernels_for(xs.device()).dropout(args);
  }
  if (any_requires_grad({&x}))
    attach_grad_fn(y, "FusedDropoutBackward", {&x},
                   [d, in = x.dtype()](const Tensor& grad, const SavedTensors&) {
                     return std::vector<Tensor>{apply_dropout_draw(grad, d, in)};
                   });
  return y;
}

Tensor dropout(const Tensor& x, double p, bool train, Generator* gen) {
  OpSite site("dropout");
  EMBER_CHECK(p >= 0.0 && p <= 1.0, "dropout: probability must be in [0, 1], got ", p);
  check_defined("dropout", x);
  if (!train || p == 0.0) return x;
  if (p == 1.0) return mul(x, 0.0);
  EMBER_CHECK(x.dtype() == kFloat32 || x.dtype() == kFloat64 || x.dtype() == kBFloat16,
              "dropout: takes float32, float64 or bfloat16, got ", x.dtype());
  // Inside a CUDA graph the counters come from a word each replay sets (draw_counters).
  return detail::apply_dropout_draw(x, detail::draw_dropout(x, p, gen, "dropout"), x.dtype());
}

}  // namespace ember
