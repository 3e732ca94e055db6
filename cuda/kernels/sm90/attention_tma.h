// Tensor maps of the fused attention's (B, H, T, D) bf16 operands for the warp-specialised
// sm_90 kernels (the forward's version 4 in attention_fwd.cu, the backward's dK/dV kernel
// in attention_bwd.cu): host code, defined in attention_fwd.cu.
#pragma once

#include <cstdint>

#include <cuda.h>  // CUtensorMap

#include "cuda/kernels/attention.h"

namespace ember::cuda::sm90 {

// TMA's view of x: dims (D, T, H, B) with T = t_len, strides (t, h, b) in elements. A
// dimension of size 1 may have any stride (a broadcast one is 0) and TMA wants each a
// positive multiple of 16 bytes, so such a stride is replaced by 8 elements, never used.
// False when a longer dimension has a stride TMA cannot take.
bool attention_tma_dims(const AttentionProblem& p, AttentionInput x, int64_t t_len,
                        int64_t (&dims)[4], int64_t (&strides)[3]);

// x read in boxes of 64 columns by `rows` rows of one head, the 128-byte swizzle, rows
// past t_len as zeros (the layout of attention_common.cuh's shared tiles, one box per
// column block). Throws ember::Error when attention_tma_dims refuses x.
CUtensorMap attention_tensor_map(const AttentionProblem& p, AttentionInput x, int64_t t_len,
                                 unsigned rows);

}  // namespace ember::cuda::sm90
