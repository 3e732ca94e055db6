// Launchers for the element-wise CUDA kernels (cuda/kernels/elementwise.cu). Raw
// pointers, layouts over the iteration shape, a stream; outputs may be strided
// (in-place ops on views) and may alias an input with the same layout.
#pragma once

#include <cuda_runtime_api.h>

#include "core/base/dtype.h"
#include "core/base/elementwise_ops.h"
#include "core/base/layout.h"

namespace ember::cuda {

// y = op(x, a) for n elements; x of dtype (floating point or int64, computed in
// double), y of out_dtype: dtype, or Bool for the comparisons.
void launch_unary(UnaryOp op, DType dtype, const void* x, const StridedLayout& xl, void* y,
                  const StridedLayout& yl, int64_t n, double a, DType out_dtype,
                  cudaStream_t stream);
inline void launch_unary(UnaryOp op, DType dtype, const void* x, const StridedLayout& xl, void* y,
                         const StridedLayout& yl, int64_t n, double a, cudaStream_t stream) {
  launch_unary(op, dtype, x, xl, y, yl, n, a, dtype, stream);
}
// out = unary_backward(op, g, saved, a): a unary op's d_x from the incoming
// gradient and what its backward saved (core/base/elementwise_ops.h).
void launch_unary_backward(UnaryOp op, DType dtype, const void* g, const StridedLayout& gl,
                           const void* saved, const StridedLayout& sl, void* out,
                           const StridedLayout& ol, int64_t n, double a, cudaStream_t stream);
// out = op(x, y, a); x, y of dtype, out of out_dtype (dtype, or Bool).
void launch_binary(BinaryOp op, DType dtype, const void* x, const StridedLayout& xl, const void* y,
                   const StridedLayout& yl, void* out, const StridedLayout& ol, int64_t n, double a,
                   DType out_dtype, cudaStream_t stream);
inline void launch_binary(BinaryOp op, DType dtype, const void* x, const StridedLayout& xl,
                          const void* y, const StridedLayout& yl, void* out,
                          const StridedLayout& ol, int64_t n, double a, cudaStream_t stream) {
  launch_binary(op, dtype, x, xl, y, yl, out, ol, n, a, dtype, stream);
}
// Whether unary, binary, their backwards and float32 <-> bfloat16 casts run their
// vector kernels (16 bytes per operand per thread; the same bits as the strided
// ones) where every operand is contiguous and aligned to its vector: on by default
// since the GPU measured it (benchmarks/RESULTS.md, 2026-12-06), EMBER_ELEMENTWISE_VECTORS=0
// (or set_elementwise_vectors) turns it off. bench_elementwise times both.
void set_elementwise_vectors(bool on);
bool elementwise_vectors();
// out (float32, or Bool) = op(x, y, a) in float32, where one of x and y is float32
// and the other bfloat16 (x_bf16: x is), widened as it is read.
void launch_binary_mixed(BinaryOp op, bool x_bf16, const void* x, const StridedLayout& xl,
                         const void* y, const StridedLayout& yl, void* out, const StridedLayout& ol,
                         int64_t n, double a, DType out_dtype, cudaStream_t stream);
// out = cond ? a : b; cond bool; a, b, out of dtype (any).
void launch_where(DType dtype, const void* cond, const StridedLayout& cl, const void* a,
                  const StridedLayout& al, const void* b, const StridedLayout& bl, void* out,
                  const StridedLayout& ol, int64_t n, cudaStream_t stream);
// out = binary_backward(op, side, g, x, y, a): a binary op's derivative with
// respect to x (side 0) or y (side 1), over the output's shape.
void launch_binary_backward(BinaryOp op, int side, DType dtype, const void* g,
                            const StridedLayout& gl, const void* x, const StridedLayout& xl,
                            const void* y, const StridedLayout& yl, void* out,
                            const StridedLayout& ol, int64_t n, double a, cudaStream_t stream);
// What launch_binary launches for (dtype, n elements): the kernel, grid and block.
// For benchmarks/op_overhead.cpp, which times a bare cudaLaunchKernel of the same
// work against the op. The kernel's parameters are those of launch_binary, in
// order: (BinaryOp, const S* x, StridedLayout, const S* y, StridedLayout, S* out,
// StridedLayout, int64_t n, double a), S the storage type of dtype. Either
// pointer can be cudaLaunchKernel's `func`; launch_binary passes the handle.
struct KernelLaunch {
  const void* kernel = nullptr;  // the host stub (&binary_kernel<S>)
  const void* handle = nullptr;  // its cudaKernel_t (cudaGetKernel), as <<<>>> uses
  unsigned grid = 0;
  unsigned block = 0;
};
KernelLaunch binary_kernel_launch(DType dtype, int64_t n);
// Whether launch_cast takes a tiled transpose kernel (32 x 32 tiles through shared
// memory) for same-dtype copies into a contiguous output that are batched transposes
// (cuda/kernels/transpose_plan.h: NCHW -> NHWC, a matrix's transpose made contiguous),
// instead of the generic strided copy; the same bits either way. On by default since
// the GPU measured it: EMBER_TRANSPOSE_COPY=0 (or set_transpose_copy) turns it off.
void set_transpose_copy(bool on);
bool transpose_copy();
// Whether launch_cast takes the row copy (4, 8 or 16 bytes a thread, a row's addresses
// found once per chunk) for same-dtype copies whose source and output are both
// contiguous along their innermost dimension but not as a whole (slices of the last
// dimension: split's, cat's and a GPT's q, k, v pieces), instead of the generic strided
// copy (cuda/kernels/row_copy_plan.h); the same bits either way. On by default since
// the GPU measured it: EMBER_ROW_COPY=0 (or set_row_copy) turns it off.
void set_row_copy(bool on);
bool row_copy();
// y = (to) x, any pair of dtypes.
void launch_cast(DType from, const void* x, const StridedLayout& xl, DType to, void* y,
                 const StridedLayout& yl, int64_t n, cudaStream_t stream);
// y[i] = value, or fma(step, i, value) where step != 0 (arange).
void launch_fill(DType dtype, void* y, const StridedLayout& yl, int64_t n, double value,
                 double step, cudaStream_t stream);
// y[i] = lo + (hi - lo) * U(seed, offset + i), or mean + std * N(seed, offset + i),
// or (integer) lo + floor((hi - lo) * U(seed, offset + i)); float types or int64.
// offset_base not null (inside a CUDA graph): offset + *offset_base, read when it runs.
void launch_random(DType dtype, void* y, int64_t n, uint64_t seed, uint64_t offset, bool normal,
                   bool integer, double p0, double p1, const uint64_t* offset_base,
                   cudaStream_t stream);

// dst[i] = values[i] for i < n <= kMaxStoredWords, the values passed in the launch
// itself (nothing for the host to keep alive): cuda::Graph's random-counter words,
// set before each replay.
inline constexpr int kMaxStoredWords = 64;
void launch_store_words(uint64_t* dst, const uint64_t* values, int n, cudaStream_t stream);

}  // namespace ember::cuda
