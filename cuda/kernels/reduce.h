// Launchers for the reduction CUDA kernels (cuda/kernels/reduce.cu). The input is
// contiguous and viewed as (outer, n, inner); the reduction runs over n. Results
// are deterministic: a fixed reduction order chosen from the sizes alone, no
// atomics. Large reductions that would leave the GPU idle run in two passes
// through a caller-provided workspace (see reduce_workspace_bytes).
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "core/base/dtype.h"

namespace ember::cuda {

enum class ReduceKind { Sum, Max };

// Scratch bytes a reduction of (outer, n, inner) needs (0 when one pass suffices).
size_t reduce_workspace_bytes(ReduceKind kind, DType dtype, int64_t outer, int64_t n,
                              int64_t inner);

// y[o, i] = scale * sum_k x[o, k, i]; y contiguous (outer, inner); n >= 1.
// float32 and float64 accumulate in double, bfloat16 in float.
void launch_sum(DType dtype, const void* x, void* y, int64_t outer, int64_t n, int64_t inner,
                double scale, void* workspace, cudaStream_t stream);

// values[o, i] = max_k x[o, k, i] (min_k with `min`) and indices[o, i] = its first
// index k (NaN counts as the extreme value, as in PyTorch); either output may be
// null; n >= 1.
void launch_max(DType dtype, const void* x, void* values, int64_t* indices, int64_t outer,
                int64_t n, int64_t inner, void* workspace, cudaStream_t stream, bool min = false);

// d_inp[o, k, i] = k == indices[o, i] ? d_out[o, i] : 0; every element written.
void launch_max_backward(DType dtype, const void* d_out, const int64_t* indices, void* d_inp,
                         int64_t outer, int64_t n, int64_t inner, cudaStream_t stream);

}  // namespace ember::cuda
