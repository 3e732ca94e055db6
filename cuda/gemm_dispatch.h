// Which GEMM runs a CUDA Linear forward: ember's own kernels (cuda/kernels/gemm.cu)
// or cuBLASLt with a fused epilogue. The rule, from the measurements recorded in
// benchmarks/NOTES.md, is in gemm_dispatch.cpp; EMBER_GEMM=ours|cublas overrides
// it (read on every call, so a benchmark can switch between runs).
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "core/base/dtype.h"
#include "cuda/kernels/gemm.h"

namespace ember::cuda {

enum class GemmBackend { Ours, Cublas };
const char* to_string(GemmBackend b);

// The backend the rule (or EMBER_GEMM) picks for y (m, n) = x (m, k) w (n, k)^T.
GemmBackend choose_linear_backend(DType dtype, int64_t m, int64_t n, int64_t k);

// Whether Linear's backward sums d_b inside the d_w GEMM (cuBLASLt BGRADB) rather
// than in a separate reduction; measured per dtype (benchmarks/NOTES.md).
bool fuse_bias_grad(DType dtype);

// y = act(x w^T + b) (pre: the pre-activation, when not null) on the chosen
// backend; falls back to ours when cuBLASLt offers no algorithm. Returns the
// backend that ran. float32 (TF32 through cuBLASLt when allowed) and bfloat16.
GemmBackend linear_forward(DType dtype, int64_t m, int64_t n, int64_t k, const void* x, int64_t ldx,
                           const void* w, int64_t ldw, const void* b, void* y, void* pre,
                           Activation act, int device, cudaStream_t stream);

}  // namespace ember::cuda
