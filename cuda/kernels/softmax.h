// Launchers for softmax and log_softmax (cuda/kernels/softmax.cu) over the middle
// axis of a contiguous (outer, n, inner) array: numerically stable (an online
// maximum and sum in one sweep, then the output in a second), float32 and
// bfloat16 computed in float, float64 in double.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "core/base/dtype.h"

namespace ember::cuda {

// y = softmax(x) (log_softmax when `log`) over n.
void launch_softmax(DType dtype, const void* x, void* y, int64_t outer, int64_t n, int64_t inner,
                    bool log, cudaStream_t stream);

// d_x from the forward's output y and d_y: y (d_y - sum(d_y y)) for softmax,
// d_y - exp(y) sum(d_y) for log_softmax.
void launch_softmax_backward(DType dtype, const void* y, const void* d_y, void* d_x, int64_t outer,
                             int64_t n, int64_t inner, bool log, cudaStream_t stream);

}  // namespace ember::cuda
