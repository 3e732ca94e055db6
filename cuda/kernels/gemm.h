// Launchers for ember's own GEMM kernels (cuda/kernels/gemm.cu), the Linear
// forward layout: y (M, N) = act(x (M, K) w (N, K)^T + b (N)), every operand
// row-major with its rows K-contiguous (row strides ldx, ldw; y contiguous).
// float32 on CUDA cores (register-blocked SGEMM), bfloat16 on tensor cores
// (mma.sync m16n8k16, fp32 accumulation). Any M, N, K >= 0: ragged edges are
// bounds-checked; 16-byte vector loads are used where K, the row strides and the
// pointers allow, a scalar loader otherwise.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "core/base/dtype.h"
#include "core/base/elementwise_ops.h"  // Activation

namespace ember::cuda {

// Kernel variants: bf16 block tiles (M x N, pipeline stages) and the fp32 K step.
// Auto picks (see gemm.cu); the others exist so bench_linear can time each in one run.
enum class GemmTile { Auto, k128x128s3, k128x128s4, k128x256s3, k128x256s4, kF32Bk8, kF32Bk16 };

// y = act(x w^T + b); b may be null. When pre is not null it receives x w^T + b
// (the pre-activation, saved for backward). dtype: Float32 or BFloat16.
void launch_linear_gemm(DType dtype, const void* x, int64_t ldx, const void* w, int64_t ldw,
                        const void* b, void* y, void* pre, int64_t m, int64_t n, int64_t k,
                        Activation act, cudaStream_t stream, GemmTile tile = GemmTile::Auto);

}  // namespace ember::cuda
