// Launchers for the element-wise CUDA kernels (cuda/kernels/elementwise.cu). Raw
// pointers, layouts over the iteration shape, a stream; outputs may be strided
// (in-place ops on views) and may alias an input with the same layout.
#pragma once

#include <cuda_runtime_api.h>

#include "core/dtype.h"
#include "cuda/kernels/elementwise_math.h"

namespace ember::cuda {

// y = op(x, a) for n elements; x and y share dtype.
void launch_unary(UnaryOp op, DType dtype, const void* x, const StridedLayout& xl, void* y,
                  const StridedLayout& yl, int64_t n, double a, cudaStream_t stream);
// out = op(x, y, a).
void launch_binary(BinaryOp op, DType dtype, const void* x, const StridedLayout& xl,
                   const void* y, const StridedLayout& yl, void* out, const StridedLayout& ol,
                   int64_t n, double a, cudaStream_t stream);
// y = (to) x, any pair of dtypes.
void launch_cast(DType from, const void* x, const StridedLayout& xl, DType to, void* y,
                 const StridedLayout& yl, int64_t n, cudaStream_t stream);
void launch_fill(DType dtype, void* y, const StridedLayout& yl, int64_t n, double value,
                 cudaStream_t stream);
// y[i] = lo + (hi - lo) * U(seed, offset + i), or mean + std * N(seed, offset + i).
void launch_random(DType dtype, void* y, int64_t n, uint64_t seed, uint64_t offset, bool normal,
                   double p0, double p1, cudaStream_t stream);

}  // namespace ember::cuda
