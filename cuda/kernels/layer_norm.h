// Launchers for the fused layer norm (cuda/kernels/layer_norm.cu, which also holds
// the RMS norm's, registered there and called through the kernel table alone):
// rows of `cols` contiguous elements, normalised over the row, one read of x and
// one write of y per element forward; one read of d_y and x and one write of d_x
// backward, the weight (and bias) gradients summed in the same pass. float32 and
// bfloat16, statistics in float32 (float64 composes: the ops' reference).
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "core/base/dtype.h"

namespace ember::cuda {

// Whether the fused kernels (both norms) take rows of `cols` elements of dtype (a
// row must fit one block's registers: cols <= 8192).
bool layer_norm_supported(DType dtype, int64_t cols);

// Whether rows of up to 1024 elements (a GPT's 768) run a warp per row, their
// reductions by shuffles, instead of a block per row: EMBER_LAYER_NORM_WARP (0 or 1) on
// first use, on when unset (GPT-2's step 0.988x [0.980-0.993] of the block kernels' on
// an H100, 2026-12-06: benchmarks/RESULTS.md); set_layer_norm_warp overrides it. Both
// norms, forward and backward; the results agree to rounding, not bit for bit.
bool layer_norm_warp();
void set_layer_norm_warp(bool on);

// Whether the warp kernels hold only the items a lane needs (16, 24 or 32: 24 for 768,
// ~40 registers fewer in the backward) and the backward's weight and bias partials are
// added by one launch of many blocks (each column's sum split over 16 warps, then added
// in their order) instead of one thread's chain of reads per column:
// EMBER_LAYER_NORM_LEAN (0 or 1) on first use, on when unset; set_layer_norm_lean
// overrides it. Off: 32 items and two launches of the chain (as before 2026-12-06's
// tenth session). Either way deterministic; the items give the same bits, the column
// sums' order differs (rounding).
bool layer_norm_lean();
void set_layer_norm_lean(bool on);

// y = (x - mean) rstd w + b per row (w, b of cols, either may be null);
// mean[row] and rstd[row] = 1 / sqrt(biased variance + eps) kept (float32).
void launch_layer_norm(DType dtype, const void* x, const void* w, const void* b, void* y,
                       void* mean, void* rstd, int64_t rows, int64_t cols, double eps,
                       cudaStream_t stream);

// Scratch bytes of launch_layer_norm_backward (its per-block column partials).
size_t layer_norm_workspace_bytes(DType dtype, int64_t rows, int64_t cols);

// d_x = rstd (g - mean(g) - xhat mean(g xhat)) with g = d_y w and xhat = (x - mean)
// rstd; d_w = sum over rows of d_y xhat, d_b = sum of d_y. d_x, d_w, d_b may each
// be null. Each block keeps its rows' column sums in registers and writes them
// once; a second kernel adds the blocks' partials in a fixed order (deterministic).
void launch_layer_norm_backward(DType dtype, const void* d_y, const void* x, const void* w,
                                const void* mean, const void* rstd, void* d_x, void* d_w, void* d_b,
                                int64_t rows, int64_t cols, void* workspace, cudaStream_t stream);

}  // namespace ember::cuda
