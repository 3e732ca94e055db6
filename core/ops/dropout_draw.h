// Internal to core/ops: a dropout's draw (its generator counters, threshold and scale),
// shared by dropout and by the fused ops that apply one (dropout_add_layer_norm's
// residual), so that both draw the same mask from the same generator state.
#pragma once

#include <cstdint>

#include "core/base/dtype.h"
#include "core/tensor.h"

namespace ember::detail {

struct DropoutDraw {
  uint64_t seed, offset;
  uint32_t threshold;    // core/base/random.h's dropout_threshold(p)
  double scale;          // 1 / (1 - p)
  const uint64_t* base;  // inside a CUDA graph: the replay's word (draw_counters)
};

// The draw dropout(x, p) takes (0 < p < 1): x.numel() counters of `gen` (null: the
// default generator), or inside a CUDA graph of the replay's word. `what` names the op
// in errors.
DropoutDraw draw_dropout(const Tensor& x, double p, Generator* gen, const char* what);

// x through the draw's mask and scale, stored as `out`: x's dtype, or bfloat16 from
// float32 (x rounded to it first, as a cast and then the dropout, in one pass; other
// pairs cast first). Differentiable: its backward is the same draw on the gradient.
Tensor apply_dropout_draw(const Tensor& x, const DropoutDraw& d, DType out);

}  // namespace ember::detail
