// CUDA matrix products: cuBLAS for matmul, and the fused Linear (our GEMMs or
// cuBLASLt with the bias and activation in the epilogue, as cuda/gemm_dispatch.h
// picks) with its fused weight-and-bias gradient.
#include "core/kernels/registration.h"
#include "cuda/blas.h"
#include "cuda/gemm_dispatch.h"
#include "cuda/runtime.h"

namespace ember::kernels {

namespace {

cuda::GemmOperand operand(const MatrixOperand& m) {
  cuda::GemmOperand g;
  g.data = m.data;
  g.transposed = m.transposed;
  g.ld = m.ld;
  g.batch_stride = m.batch_stride;
  return g;
}

void gemm(const GemmArgs& a) {
  cuda::DeviceGuard guard(a.device.index);
  cuda::gemm(a.dtype, a.batch, a.m, a.n, a.k, operand(a.a), operand(a.b), a.c, a.device.index,
             cuda::current_stream(a.device.index));
}

bool linear_fused_supported(const DTypeQuery& q) {
  return q.dtype == DType::Float32 || q.dtype == DType::BFloat16;
}

void linear_fused(const LinearArgs& a) {
  cuda::DeviceGuard guard(a.device.index);
  cuda::linear_forward(a.dtype, a.m, a.n, a.k, a.x, a.ldx, a.w, a.ldw, a.b, a.y, a.pre, a.act,
                       a.device.index, cuda::current_stream(a.device.index));
}

bool linear_weight_grad_fused(const LinearWeightGradArgs& a) {
  cuda::DeviceGuard guard(a.device.index);
  return cuda::lt_linear_backward_weight(a.dtype, a.m, a.n, a.k, a.x, a.ldx, a.d_y, a.d_w, a.d_b,
                                         a.device.index, cuda::current_stream(a.device.index));
}

bool linear_fuses_bias_grad(const DTypeQuery& q) { return cuda::fuse_bias_grad(q.dtype); }

}  // namespace

void register_cuda_linalg(KernelTable& t) {
  t.gemm = &gemm;
  t.linear_fused_supported = &linear_fused_supported;
  t.linear_fused = &linear_fused;
  t.linear_weight_grad_fused = &linear_weight_grad_fused;
  t.linear_fuses_bias_grad = &linear_fuses_bias_grad;
}

}  // namespace ember::kernels
