// Gradients of adjacent views written into one buffer, for split's backward to take
// whole: the fused attention's backward can write the gradients of q, k and v split
// from one (B, T, 3C) projection (a GPT's c_attn) into one buffer laid out as that
// projection, and mark it; split's backward (core/ops/triangle_split.cpp) then passes
// the buffer on as the projection's gradient instead of copying the three pieces into a
// new one.
#pragma once

#include "core/storage.h"
#include "core/tensor.h"

namespace ember::detail {

// Marks t's storage: every element of it is written by the backward that made it, and
// it holds nothing but those gradients (Storage::mark_split_gradient).
inline void mark_split_gradient(const Tensor& t) {
  t.storage()->mark_split_gradient();
}
// Whether t's storage is so marked.
inline bool is_split_gradient(const Tensor& t) {
  return t.storage()->split_gradient();
}

// Whether the fused attention's backward writes q's, k's and v's gradients into one
// marked buffer where they are the head views of one (B, T, 3, H, D) layout. On unless
// EMBER_ATTENTION_QKV_GRAD=0 (or set here): GPT-2's eager step 0.980x [0.977-0.988] of
// the copies' on an H100, 2026-12-06 (benchmarks/RESULTS.md). The gradients' values are
// the same either way (defined in core/ops/attention_fused.cpp).
bool attention_qkv_grad();
void set_attention_qkv_grad(bool on);

}  // namespace ember::detail
