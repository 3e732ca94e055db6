// Launchers for the fused MSE kernels (cuda/kernels/mse.cu): one pass over pred and
// target that both reduces the loss and writes the gradient (3 accesses per
// element), with a deterministic two-pass reduction: the number of blocks and
// every summation order depend on n alone, so the same input gives the same bits.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "core/base/dtype.h"

namespace ember::cuda {

// Scratch bytes launch_mse_fused needs for its per-block partial sums.
size_t mse_workspace_bytes(int64_t n);

// loss[0] = loss_scale * sum_i (pred_i - target_i)^2 (in dtype; accumulated in
// double for float32/float64, in float for bfloat16), and, when d_pred is not
// null, d_pred_i = grad_scale * (pred_i - target_i). n may be 0 (loss = 0 *
// loss_scale). float32, float64, bfloat16; the three arrays contiguous.
void launch_mse_fused(DType dtype, const void* pred, const void* target, void* d_pred, void* loss,
                      int64_t n, double grad_scale, double loss_scale, void* workspace,
                      cudaStream_t stream);

// d[i] *= g[0] for n elements, where g is a one-element device tensor of dtype;
// when g[0] == 1 every thread returns after one read of g (no pass over d). Lets
// MSE's backward scale its stashed gradient without a host round trip.
void launch_scale_by_device_scalar(DType dtype, void* d, const void* g, int64_t n,
                                   cudaStream_t stream);

}  // namespace ember::cuda
