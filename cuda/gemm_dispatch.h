// Which GEMM runs each of Linear's three products on CUDA: ember's own kernels
// (the Hopper wgmma + TMA kernels of cuda/kernels/gemm_sm90.h, the older
// mma.sync / SIMT kernels of cuda/kernels/gemm.h) or cuBLAS(Lt). The rule is
// chosen by measurement (benchmarks/NOTES.md, "GEMM dispatch"); EMBER_GEMM=ours
// or =cublas forces one side (read on every call, so a benchmark can switch
// between runs; =auto or unset: the rule). Where ours cannot take the operands
// (not a compute capability 9.0 device, or a base or row stride TMA cannot
// address), "ours" falls back to the older kernels for the forward and to
// cuBLAS for the backward products, which have no older kernel of ours.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "core/base/dtype.h"
#include "core/base/elementwise_ops.h"  // Activation
#include "core/base/kernel_families.h"
#include "cuda/gemm_rule.h"

namespace ember::cuda {

enum class GemmBackend { Ours, Cublas };
const char* to_string(GemmBackend b);

// Linear's products (LinearProduct, cuda/gemm_rule.h) on row-major operands
// whose rows are contiguous (row strides ld*), outputs contiguous:
//   Forward     y   (rows, out) = act(x (rows, in) w (out, in)^T + b)
//   InputGrad   d_x (rows, in)  = d_y (rows, out) w (out, in)
//   WeightGrad  d_w (out, in)   = d_y^T x, and d_b (out) = column sums of d_y

// The kernel that runs a product. None: nothing ran (the op composes instead).
enum class GemmKernel { Sm90, MmaSync, Simt, Cublas, None };
const char* to_string(GemmKernel k);

struct LinearGemm {
  LinearProduct product = LinearProduct::Forward;
  DType dtype = DType::Float32;  // float32 (TF32 where allow_tf32()) or bfloat16
  int64_t rows = 0, in = 0, out = 0;
  const void* x = nullptr;  // Forward, WeightGrad
  int64_t ldx = 0;
  const void* w = nullptr;  // Forward, InputGrad
  int64_t ldw = 0;
  const void* d_y = nullptr;  // InputGrad, WeightGrad
  int64_t ldd = 0;
  const void* b = nullptr;  // Forward: the bias (may be null)
  void* pre = nullptr;      // Forward: x w^T + b (may be null)
  Activation act = Activation::None;
  void* result = nullptr;  // y, d_x or d_w
  void* d_b = nullptr;     // WeightGrad (may be null)
};

// The backend the rule (or EMBER_GEMM) asks for, before looking at the operands.
// GEMM sizes: m x n outputs, k the reduced size (Forward: rows, out, in;
// InputGrad: rows, in, out; WeightGrad: out, in, rows).
GemmBackend choose_linear_backend(LinearProduct p, DType dtype, int64_t m, int64_t n, int64_t k);

// The kernel run_linear would run for g on `device` (no launch). Throws when
// EMBER_GEMM holds something other than ours, cublas or auto.
GemmKernel plan_linear(const LinearGemm& g, int device);

// Runs g on `stream` and returns the kernel that ran: plan_linear's, except
// that a cuBLASLt call that finds no algorithm falls back to ours (or to None
// for WeightGrad when ours cannot take it: the caller then composes).
GemmKernel run_linear(const LinearGemm& g, int device, cudaStream_t stream);

// Whether a weight-gradient call asks for what only cuBLASLt's output type and
// beta give (lt_linear_backward_weight_into): a float32 d_w from other operands, or
// a sum into d_w. The CUDA and meta devices route it alike.
inline bool weight_grad_into(const kernels::LinearWeightGradArgs& a) {
  return a.accumulate || (a.d_w_float32 && a.dtype != DType::Float32);
}

// Whether Linear's backward sums d_b inside the d_w GEMM (our kernel's row sums,
// cuBLASLt's BGRADB) rather than in a separate reduction; measured per dtype.
bool fuse_bias_grad(DType dtype);

}  // namespace ember::cuda
