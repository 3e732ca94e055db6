#include "cuda/gemm_dispatch.h"

#include <cstdlib>
#include <cstring>

#include "core/base/error.h"
#include "cuda/blas.h"
#include "cuda/kernels/gemm.h"
#include "cuda/kernels/gemm_sm90.h"
#include "cuda/kernels/registration.h"
#include "cuda/runtime.h"

namespace ember::cuda {

namespace {

enum class Mode { Auto, Ours, Cublas };

Mode gemm_mode() {
  const char* env = std::getenv("EMBER_GEMM");
  if (env == nullptr || env[0] == '\0' || std::strcmp(env, "auto") == 0) return Mode::Auto;
  if (std::strcmp(env, "ours") == 0) return Mode::Ours;
  if (std::strcmp(env, "cublas") == 0) return Mode::Cublas;
  EMBER_FAIL("EMBER_GEMM=", env, ": expected ours, cublas or auto");
}

bool tf32_mode(DType dtype) {
  return dtype == DType::Float32 && allow_tf32();
}

struct Dims {
  int64_t m, n, k;
};
Dims gemm_dims(const LinearGemm& g) {
  switch (g.product) {
    case LinearProduct::Forward:
      return {g.rows, g.out, g.in};
    case LinearProduct::InputGrad:
      return {g.rows, g.in, g.out};
    default:
      return {g.out, g.in, g.rows};
  }
}

// The Hopper kernel's view of g: D (m, n) = sum_k A (m, k) B (n, k).
//   Forward     A = x (K-major),         B = w (K-major)
//   InputGrad   A = d_y (K-major),       B = w (N-major: w's rows run over k)
//   WeightGrad  A = d_y (M-major),       B = x (N-major), bias_grad = d_b
struct Sm90View {
  Sm90Operand a, b;
  GemmEpilogue epi;
};
Sm90View sm90_view(const LinearGemm& g) {
  Sm90View v;
  v.epi.out = g.dtype;
  switch (g.product) {
    case LinearProduct::Forward:
      v.a = {g.x, g.ldx, true};
      v.b = {g.w, g.ldw, true};
      v.epi.bias = g.b;
      v.epi.pre = g.pre;
      v.epi.act = g.act;
      break;
    case LinearProduct::InputGrad:
      v.a = {g.d_y, g.ldd, true};
      v.b = {g.w, g.ldw, false};
      break;
    case LinearProduct::WeightGrad:
      v.a = {g.d_y, g.ldd, false};
      v.b = {g.x, g.ldx, false};
      v.epi.bias_grad = g.d_b;
      break;
  }
  return v;
}

// Whether the Hopper kernel can run g on `device`. fp32 only as TF32: with
// TF32 off, float32 promises fp32 accuracy, which TF32 operands cannot give.
bool sm90_can(const LinearGemm& g, int device) {
  if (g.dtype == DType::Float32 && !allow_tf32()) return false;
  const Dims d = gemm_dims(g);
  const Sm90View v = sm90_view(g);
  return sm90_gemm_unsupported(g.dtype, d.m, d.n, d.k, v.a, v.b, v.epi, device)[0] == '\0';
}

bool rule_prefers_sm90(LinearProduct p, DType dtype, int64_t m, int64_t n, int64_t k) {
  return sm90_measured_faster(p, dtype, tf32_mode(dtype), m, n, k);
}

GemmKernel older_forward_kernel(DType dtype) {
  return dtype == DType::BFloat16 ? GemmKernel::MmaSync : GemmKernel::Simt;
}

void launch_sm90(const LinearGemm& g, cudaStream_t stream) {
  const Dims d = gemm_dims(g);
  const Sm90View v = sm90_view(g);
  launch_sm90_gemm(g.dtype, d.m, d.n, d.k, v.a, v.b, g.result, d.n, v.epi, stream);
}

void launch_older_forward(const LinearGemm& g, cudaStream_t stream) {
  launch_linear_gemm(g.dtype, g.x, g.ldx, g.w, g.ldw, g.b, g.result, g.pre, g.rows, g.out, g.in,
                     g.act, stream);
}

void check_gemm(const LinearGemm& g) {
  EMBER_CHECK(g.dtype == DType::Float32 || g.dtype == DType::BFloat16, "linear (",
              to_string(g.product), "): CUDA GEMMs take float32 or bfloat16, not ", g.dtype);
  EMBER_CHECK(g.rows >= 0 && g.in >= 0 && g.out >= 0, "linear (", to_string(g.product),
              "): negative size (rows ", g.rows, ", in ", g.in, ", out ", g.out, ")");
}

}  // namespace

const char* to_string(GemmBackend b) {
  return b == GemmBackend::Ours ? "ours" : "cublas";
}

const char* to_string(GemmKernel k) {
  switch (k) {
    case GemmKernel::Sm90:
      return "sm90";
    case GemmKernel::MmaSync:
      return "mma.sync";
    case GemmKernel::Simt:
      return "simt";
    case GemmKernel::Cublas:
      return "cublas";
    default:
      return "none";
  }
}

GemmBackend choose_linear_backend(LinearProduct p, DType dtype, int64_t m, int64_t n, int64_t k) {
  switch (gemm_mode()) {
    case Mode::Ours:
      return GemmBackend::Ours;
    case Mode::Cublas:
      return GemmBackend::Cublas;
    default:
      break;
  }
  const double flops =
      2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  if (p == LinearProduct::Forward && flops < kTinyForwardFlops) return GemmBackend::Ours;
  return rule_prefers_sm90(p, dtype, m, n, k) ? GemmBackend::Ours : GemmBackend::Cublas;
}

GemmKernel plan_linear(const LinearGemm& g, int device) {
  check_gemm(g);
  const Dims d = gemm_dims(g);
  const Mode mode = gemm_mode();
  if (g.product == LinearProduct::Forward) {
    if (g.rows == 0 || g.out == 0) return GemmKernel::None;  // nothing to write
    if (mode == Mode::Cublas && g.in > 0) return GemmKernel::Cublas;
    const bool sm90 = sm90_can(g, device);
    if (mode == Mode::Ours) return sm90 ? GemmKernel::Sm90 : older_forward_kernel(g.dtype);
    // The older kernels: tiny products (one plain launch wins) and K = 0 (the bias alone).
    if (g.in == 0 || 2.0 * d.m * d.n * d.k < kTinyForwardFlops)
      return older_forward_kernel(g.dtype);
    return sm90 && rule_prefers_sm90(g.product, g.dtype, d.m, d.n, d.k) ? GemmKernel::Sm90
                                                                        : GemmKernel::Cublas;
  }
  // The backward products: empty ones are left to the op's composition (matmul
  // and sum know every empty case), the rest to ours or cuBLAS(Lt).
  if (g.rows == 0 || g.in == 0 || g.out == 0) return GemmKernel::None;
  // cuBLAS's side: one call, except a d_w whose rows cuBLASLt reads slowly, which
  // the op composes (matmul through cuBLAS's plain GEMM, then sum; gemm_rule.h).
  const GemmKernel library = g.product == LinearProduct::WeightGrad &&
                                     weight_grad_composes(g.dtype, g.rows, g.out, g.in, g.ldx)
                                 ? GemmKernel::None
                                 : GemmKernel::Cublas;
  if (mode == Mode::Cublas) return library;
  const bool sm90 = sm90_can(g, device);
  if (mode == Mode::Ours) return sm90 ? GemmKernel::Sm90 : library;
  return sm90 && rule_prefers_sm90(g.product, g.dtype, d.m, d.n, d.k) ? GemmKernel::Sm90 : library;
}

GemmKernel run_linear(const LinearGemm& g, int device, cudaStream_t stream) {
  GemmKernel k = plan_linear(g, device);
  switch (g.product) {
    case LinearProduct::Forward:
      if (k == GemmKernel::Cublas) {
        if (lt_linear_forward(g.dtype, g.rows, g.out, g.in, g.x, g.ldx, g.w, g.ldw, g.b, g.result,
                              g.pre, g.act, device, stream))
          return k;
        k = sm90_can(g, device) ? GemmKernel::Sm90 : older_forward_kernel(g.dtype);  // no algorithm
      }
      if (k == GemmKernel::Sm90) launch_sm90(g, stream);
      if (k == GemmKernel::MmaSync || k == GemmKernel::Simt) launch_older_forward(g, stream);
      return k;
    case LinearProduct::InputGrad:
      if (k == GemmKernel::Cublas) {
        GemmOperand a, b;  // d_x (rows, in) = d_y (rows, out) w (out, in)
        a.data = g.d_y, a.ld = g.ldd;
        b.data = g.w, b.ld = g.ldw;
        gemm(g.dtype, 1, g.rows, g.in, g.out, a, b, g.result, device, stream);
      }
      if (k == GemmKernel::Sm90) launch_sm90(g, stream);
      return k;
    case LinearProduct::WeightGrad:
      if (k == GemmKernel::Cublas) {
        if (lt_linear_backward_weight(g.dtype, g.rows, g.out, g.in, g.x, g.ldx, g.d_y, g.ldd,
                                      g.result, g.d_b, device, stream))
          return k;
        k = sm90_can(g, device) ? GemmKernel::Sm90 : GemmKernel::None;  // no algorithm
      }
      if (k == GemmKernel::Sm90) launch_sm90(g, stream);
      return k;
  }
  return GemmKernel::None;
}

bool fuse_bias_grad(DType dtype) {
  (void)dtype;  // fused in every dtype (NOTES.md, run 1: BGRADB; ours sums rows in the pass)
  return true;
}

// ------------------------------------------------------------------ registration

namespace {
namespace entry {

GemmOperand operand(const kernels::MatrixOperand& m) {
  GemmOperand g;
  g.data = m.data;
  g.transposed = m.transposed;
  g.ld = m.ld;
  g.batch_stride = m.batch_stride;
  return g;
}

void gemm(const kernels::GemmArgs& a) {
  DeviceGuard guard(a.device.index);
  cuda::gemm(a.dtype, a.batch, a.m, a.n, a.k, operand(a.a), operand(a.b), a.c, a.device.index,
             current_stream(a.device.index));
}

bool linear_fused_supported(const kernels::DTypeQuery& q) {
  return q.dtype == DType::Float32 || q.dtype == DType::BFloat16;
}

void linear_fused(const kernels::LinearArgs& a) {
  DeviceGuard guard(a.device.index);
  LinearGemm g;
  g.product = LinearProduct::Forward;
  g.dtype = a.dtype;
  g.rows = a.m, g.out = a.n, g.in = a.k;
  g.x = a.x, g.ldx = a.ldx, g.w = a.w, g.ldw = a.ldw;
  g.b = a.b, g.pre = a.pre, g.act = a.act, g.result = a.y;
  run_linear(g, a.device.index, current_stream(a.device.index));
}

bool linear_input_grad(const kernels::LinearInputGradArgs& a) {
  DeviceGuard guard(a.device.index);
  LinearGemm g;
  g.product = LinearProduct::InputGrad;
  g.dtype = a.dtype;
  g.rows = a.m, g.out = a.n, g.in = a.k;
  g.d_y = a.d_y, g.ldd = a.ldd, g.w = a.w, g.ldw = a.ldw, g.result = a.d_x;
  return run_linear(g, a.device.index, current_stream(a.device.index)) != GemmKernel::None;
}

bool linear_weight_grad_fused(const kernels::LinearWeightGradArgs& a) {
  DeviceGuard guard(a.device.index);
  // A float32 d_w from bfloat16 operands, or a sum into d_w: cuBLASLt alone (its
  // output type and beta), without a bias gradient.
  if (weight_grad_into(a)) {
    if (a.d_b != nullptr) return false;
    return lt_linear_backward_weight_into(a.dtype, a.m, a.n, a.k, a.x, a.ldx, a.d_y, a.n, a.d_w,
                                          a.d_w_float32, a.accumulate, a.device.index,
                                          current_stream(a.device.index));
  }
  LinearGemm g;
  g.product = LinearProduct::WeightGrad;
  g.dtype = a.dtype;
  g.rows = a.m, g.out = a.n, g.in = a.k;
  g.x = a.x, g.ldx = a.ldx, g.d_y = a.d_y, g.ldd = a.n, g.result = a.d_w, g.d_b = a.d_b;
  return run_linear(g, a.device.index, current_stream(a.device.index)) != GemmKernel::None;
}

bool linear_bias_grad_fused_supported(const kernels::DTypeQuery& q) {
  return fuse_bias_grad(q.dtype);
}

}  // namespace entry
}  // namespace

// matmul on cuBLAS; Linear's three products (the forward with its bias and
// activation in the epilogue, d_x, and d_w with d_b in the same pass) on our GEMMs
// or cuBLAS(Lt), as plan_linear picks.
void register_linalg(kernels::KernelFamilies& t) {
  t.gemm = &entry::gemm;
  t.linear_fused_supported = &entry::linear_fused_supported;
  t.linear_fused = &entry::linear_fused;
  t.linear_weight_grad_fused = &entry::linear_weight_grad_fused;
  t.linear_input_grad = &entry::linear_input_grad;
  t.linear_bias_grad_fused_supported = &entry::linear_bias_grad_fused_supported;
}

}  // namespace ember::cuda
