// cuBLAS for ember: one handle per device, created on first use and bound to the
// caller's stream on every call, and a row-major GEMM on raw pointers. float32
// runs in full fp32 unless TF32 is allowed globally; bfloat16 accumulates in fp32.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "core/base/dtype.h"
#include "cuda/kernels/gemm.h"

namespace ember::cuda {

// Lets float32 GEMMs use TF32 tensor cores (faster, ~1e-3 relative error).
// Off by default; applies to every device from the next call on.
void set_allow_tf32(bool allow);
bool allow_tf32();

// Device bytes of the cuBLAS and cuBLASLt workspaces: each cudaMalloc'd once per
// device when its handle is created (by the first matmul, the first cuBLASLt
// Linear), outside the caching allocator, and kept for the process.
size_t blas_workspace_bytes();
size_t lt_workspace_bytes();

// Creates `device`'s cuBLAS and cuBLASLt handles and their workspaces now if
// they do not exist yet. cuda::Graph calls it before capturing: creating them
// allocates and may synchronise, which a capture forbids.
void create_handles(int device);

// One row-major operand of a GEMM: element (r, c) of batch b is at
// data + b * batch_stride + (transposed ? c * ld + r : r * ld + c).
// batch_stride may be 0 (the operand is shared by every batch).
struct GemmOperand {
  const void* data = nullptr;
  bool transposed = false;
  int64_t ld = 0;
  int64_t batch_stride = 0;
};

// For b < batch: C_b (m, n) = A_b (m, k) @ B_b (k, n), all row-major, C contiguous
// ((batch, m, n), leading dimension n). Sizes must fit cuBLAS's int; m, n, k >= 1.
void gemm(DType dtype, int64_t batch, int64_t m, int64_t n, int64_t k, const GemmOperand& a,
          const GemmOperand& b, void* c, int device, cudaStream_t stream);

// --- cuBLASLt for Linear: the GEMM with its epilogue fused. Row-major x (m, k)
// with row stride ldx, w (n, k) with row stride ldw, y (m, n) contiguous.
// Each returns false, having done nothing, when cuBLASLt offers no algorithm for
// the case (the caller then takes an unfused path); errors from a call that was
// attempted throw. float32 (TF32 when allow_tf32()) and bfloat16.

// y = act(x w^T + b); b may be null. pre, when not null, receives x w^T + b
// (the activations whose backward reads their input, GELU and SiLU, need it; a
// ReLU's derivative is read off y itself).
bool lt_linear_forward(DType dtype, int64_t m, int64_t n, int64_t k, const void* x, int64_t ldx,
                       const void* w, int64_t ldw, const void* b, void* y, void* pre,
                       Activation act, int device, cudaStream_t stream);

// Whether lt_linear_backward_weight attempts cuBLASLt for these sizes (dtype and
// 32-bit sizes; it then succeeds unless the heuristic offers no algorithm, which
// no shape of ember's tests or benchmarks meets). Needs no GPU: the meta device
// answers with it.
bool lt_linear_backward_weight_attempts(DType dtype, int64_t m, int64_t n, int64_t k, int64_t ldx);

// d_w (n, k) = d_y^T x and, when d_b is not null, d_b (n) = column sums of d_y,
// in the same pass (CUBLASLT_EPILOGUE_BGRADB). d_y: (m, n), row stride ldd.
bool lt_linear_backward_weight(DType dtype, int64_t m, int64_t n, int64_t k, const void* x,
                               int64_t ldx, const void* d_y, int64_t ldd, void* d_w, void* d_b,
                               int device, cudaStream_t stream);

// d_w (n, k) = d_y^T x, or d_w += d_y^T x when accumulate (beta 1), with d_w
// float32 when d_w_float32 (bfloat16 operands summed in float32 and stored so:
// a sum over chunks of rows keeps float32 accuracy with no cast or add pass), else
// of dtype. No bias gradient. Attempted as lt_linear_backward_weight_attempts says.
bool lt_linear_backward_weight_into(DType dtype, int64_t m, int64_t n, int64_t k, const void* x,
                                    int64_t ldx, const void* d_y, int64_t ldd, void* d_w,
                                    bool d_w_float32, bool accumulate, int device,
                                    cudaStream_t stream);

}  // namespace ember::cuda
