// When a copy is a batched transpose, and which: the host-side half of the tiled
// transpose kernel that launch_cast takes for same-dtype copies into a contiguous
// output (cuda/kernels/elementwise.cu, set_transpose_copy). Plain C++, so that the
// CPU tests replay every element's address (tests/cuda/test_kernels_transpose.cpp).
//
// The generic strided copy (one element a thread, its source offset from a division
// per dimension) reads a permuted image such as NCHW -> NHWC one element per 32-byte
// sector: 0.4 TB/s on the H200 (2026-12-05, ncu, the implicit GEMM's channels-last
// copies). A tiled transpose reads along the source's contiguous dimension and writes
// along the output's, both coalesced.
#pragma once

#include <cstdint>
#include <optional>

#include "core/base/layout.h"

namespace ember::cuda {

// out[b][i][j] = src[offset + b * batch_stride + i + j * col_stride], over
// b < batch, i < rows, j < cols: the output contiguous (rows * cols per batch), the
// source contiguous along i, strided along j (the output's innermost dimension).
struct TransposePlan {
  int64_t batch = 1;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t batch_stride = 0;  // in elements of the source
  int64_t col_stride = 0;
  int64_t offset = 0;  // the source's first element
};

// Below this many rows or columns the tiles would be mostly empty: the generic copy.
inline constexpr int64_t kTransposeMinSide = 16;
// The kernel's grid: 32-square tiles, rows tiles in gridDim.y (at most 65535).
inline constexpr int64_t kTransposeTile = 32;
inline constexpr int64_t kTransposeMaxRowTiles = 65535;
// Batches in gridDim.z at most; each block loops over the rest (b += gridDim.z).
inline constexpr int64_t kTransposeMaxBatchBlocks = 1024;

// The plan for copying n elements laid out as src into dst (the same logical shape,
// src's sizes and strides over it), or nothing where the copy is not such a
// transpose: dst not contiguous, other than two or three dimensions left after merging
// the source's (size-1 dimensions dropped, adjacent ones merged where the source's
// strides chain), the source already contiguous along the output's innermost dimension,
// the dimension before it not of stride 1, or a side under kTransposeMinSide.
inline std::optional<TransposePlan> transpose_plan(const StridedLayout& src,
                                                   const StridedLayout& dst) {
  if (!dst.contiguous || src.contiguous || src.ndim < 2) return std::nullopt;
  int64_t sizes[kMaxDims], strides[kMaxDims];
  int n = 0;
  for (int d = 0; d < src.ndim; ++d) {
    if (src.sizes[d] == 0) return std::nullopt;
    if (src.sizes[d] == 1) continue;
    if (n > 0 && strides[n - 1] == src.strides[d] * src.sizes[d]) {
      sizes[n - 1] *= src.sizes[d];  // the previous dimension steps over this one whole
      strides[n - 1] = src.strides[d];
      continue;
    }
    sizes[n] = src.sizes[d];
    strides[n] = src.strides[d];
    ++n;
  }
  TransposePlan p;
  p.offset = src.offset;
  if (n == 3) {
    p.batch = sizes[0];
    p.batch_stride = strides[0];
  } else if (n != 2) {
    return std::nullopt;
  }
  p.rows = sizes[n - 2];
  p.cols = sizes[n - 1];
  p.col_stride = strides[n - 1];
  if (strides[n - 2] != 1 || p.col_stride == 1) return std::nullopt;
  if (p.rows < kTransposeMinSide || p.cols < kTransposeMinSide) return std::nullopt;
  if ((p.rows + kTransposeTile - 1) / kTransposeTile > kTransposeMaxRowTiles) return std::nullopt;
  return p;
}

}  // namespace ember::cuda
