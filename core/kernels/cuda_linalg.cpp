// CUDA matrix products: cuBLAS for matmul, and Linear's three products (the
// forward with its bias and activation in the epilogue, d_x, and d_w with d_b in
// the same pass) on our GEMMs or cuBLAS(Lt), as cuda/gemm_dispatch.h picks.
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
  cuda::LinearGemm g;
  g.product = cuda::LinearProduct::Forward;
  g.dtype = a.dtype;
  g.rows = a.m, g.out = a.n, g.in = a.k;
  g.x = a.x, g.ldx = a.ldx, g.w = a.w, g.ldw = a.ldw;
  g.b = a.b, g.pre = a.pre, g.act = a.act, g.result = a.y;
  cuda::run_linear(g, a.device.index, cuda::current_stream(a.device.index));
}

bool linear_input_grad(const LinearInputGradArgs& a) {
  cuda::DeviceGuard guard(a.device.index);
  cuda::LinearGemm g;
  g.product = cuda::LinearProduct::InputGrad;
  g.dtype = a.dtype;
  g.rows = a.m, g.out = a.n, g.in = a.k;
  g.d_y = a.d_y, g.ldd = a.ldd, g.w = a.w, g.ldw = a.ldw, g.result = a.d_x;
  return cuda::run_linear(g, a.device.index, cuda::current_stream(a.device.index)) !=
         cuda::GemmKernel::None;
}

bool linear_weight_grad_fused(const LinearWeightGradArgs& a) {
  cuda::DeviceGuard guard(a.device.index);
  cuda::LinearGemm g;
  g.product = cuda::LinearProduct::WeightGrad;
  g.dtype = a.dtype;
  g.rows = a.m, g.out = a.n, g.in = a.k;
  g.x = a.x, g.ldx = a.ldx, g.d_y = a.d_y, g.ldd = a.n, g.result = a.d_w, g.d_b = a.d_b;
  return cuda::run_linear(g, a.device.index, cuda::current_stream(a.device.index)) !=
         cuda::GemmKernel::None;
}

bool linear_bias_grad_fused_supported(const DTypeQuery& q) {
  return cuda::fuse_bias_grad(q.dtype);
}

}  // namespace

void register_cuda_linalg(KernelTable& t) {
  t.gemm = &gemm;
  t.linear_fused_supported = &linear_fused_supported;
  t.linear_fused = &linear_fused;
  t.linear_weight_grad_fused = &linear_weight_grad_fused;
  t.linear_input_grad = &linear_input_grad;
  t.linear_bias_grad_fused_supported = &linear_bias_grad_fused_supported;
}

}  // namespace ember::kernels
