// Launchers for the fused batch norm (cuda/kernels/batch_norm.cu) over a contiguous
// (N, C, M) input (M = H*W, 1 for a (N, C) input), statistics per channel over N*M
// values. Forward in training: a Welford pass over x for each channel's mean and
// biased variance, then one pass reading x and writing y; in eval: one pass with the
// running statistics. Backward: one pass reading d_y and x for sum(d_y) and
// sum(d_y xhat) per channel, one reading them again and writing d_x. float32 and
// bfloat16 (every per-channel tensor in the input's dtype, or float32 with a
// bfloat16 input where params_f32: autocast's mix), statistics in float32; every
// per-channel sum in a fixed order (deterministic, no atomics).
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "core/base/dtype.h"

namespace ember::cuda {

// Whether the fused kernels take an (n, c, m) input of dtype: float32 or bfloat16,
// c >= 1 and 1 <= n*m < 2^31 (a channel's values are counted in 32 bits).
bool batch_norm_supported(DType dtype, int64_t n, int64_t c, int64_t m);

// Scratch bytes of both launchers (the per-block partial statistics and sums): a
// function of the sizes alone (no device is asked).
size_t batch_norm_workspace_bytes(DType dtype, int64_t n, int64_t c, int64_t m);

// y = (x - mean) invstd w + b per channel (w, b of c, either may be null); relu:
// max(0, y) instead.
// training: mean and invstd = 1 / sqrt(biased var + eps) of the batch, written to
// `mean` and `invstd` (c, float32); running_mean and running_var (c, or null) move
// by momentum towards the batch's mean and unbiased variance. Eval: mean and
// invstd come from running_mean and running_var (read only) and are written too.
void launch_batch_norm(DType dtype, const void* x, const void* w, const void* b, void* running_mean,
                       void* running_var, void* y, void* mean, void* invstd, int64_t n, int64_t c,
                       int64_t m, bool training, double momentum, double eps, void* workspace,
                       cudaStream_t stream, bool params_f32 = false, bool relu = false);

// From the forward's mean and invstd: d_b = sum(d_y), d_w = sum(d_y xhat) per
// channel, xhat = (x - mean) invstd, and d_x = w invstd (d_y - mean(d_y) - xhat
// mean(d_y xhat)) in training, d_x = w invstd d_y in eval (the statistics are
// constants there). d_x, d_w and d_b may each be null. relu: d_y is the gradient of
// the forward's max(0, y), masked where y (recomputed from x, w and b, which is read
// then) was not positive.
void launch_batch_norm_backward(DType dtype, const void* d_y, const void* x, const void* w,
                                const void* mean, const void* invstd, void* d_x, void* d_w,
                                void* d_b, int64_t n, int64_t c, int64_t m, bool training,
                                void* workspace, cudaStream_t stream, bool params_f32 = false,
                                bool relu = false, const void* b = nullptr);

}  // namespace ember::cuda
