// The measured half of GEMM dispatch (cuda/gemm_dispatch.h), on its own and
// free of CUDA calls, so that tools/gemm_probe can print what the rule picks
// beside what it measures: where ember's Hopper GEMM was measured at least as
// fast as cuBLASLt for one of Linear's products. benchmarks/NOTES.md ("GEMM
// dispatch") holds the measurements behind each edge.
#pragma once

#include <cstdint>

#include "core/base/dtype.h"

namespace ember::cuda {

// Linear's products (see cuda/gemm_dispatch.h for their operands).
enum class LinearProduct { Forward, InputGrad, WeightGrad };
const char* to_string(LinearProduct p);

// Whether the Hopper kernel runs the product faster than cuBLASLt, for
// D (m, n) summed over k (Forward: rows, out, in; InputGrad: rows, in, out;
// WeightGrad: out, in, rows). dtype bf16, or float32 run as TF32 (tf32 true);
// float32 without TF32 is never the Hopper kernel's.
bool sm90_measured_faster(LinearProduct p, DType dtype, bool tf32, int64_t m, int64_t n, int64_t k);

// Below this many FLOPs (2mnk) a Linear forward runs on our older kernels: one
// plain launch beats cuBLASLt's call there.
inline constexpr double kTinyForwardFlops = double{1 << 21};

// Whether d_w (out, in) = d_y^T x with d_b is better left to the op's composition
// (cuBLAS's plain GEMM for d_w, then a column sum for d_b, as PyTorch does) than
// run as one cuBLASLt call with BGRADB: when a row of d_y (out elements), of x
// (row stride ldx) or of d_w (in) is not a multiple of 16 bytes, cuBLASLt picks a
// much slower kernel (measured at bf16 4097x4096->4095 on an H200: benchmarks/
// NOTES.md, "GEMM dispatch"). Products under
// kTinyForwardFlops keep the single call: there one launch matters more.
bool weight_grad_composes(DType dtype, int64_t rows, int64_t out, int64_t in, int64_t ldx);

}  // namespace ember::cuda
