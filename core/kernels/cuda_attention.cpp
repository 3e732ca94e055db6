// CUDA fused attention: the adapters from the kernel table's attention families to
// cuda/kernels/attention.h (the forward picks its version by device there).
#include <array>
#include <atomic>
#include <cmath>

#include "core/kernels/registration.h"
#include "cuda/check.h"
#include "cuda/kernels/attention.h"
#include "cuda/runtime.h"

namespace ember::kernels {

namespace {

cuda::AttentionProblem problem_of(DType dtype, int64_t batch, int64_t heads, int64_t q_len,
                                  int64_t kv_len, int64_t head_dim, double scale, bool causal) {
  cuda::AttentionProblem p;
  p.dtype = dtype;
  p.batch = batch;
  p.heads = heads;
  p.q_len = q_len;
  p.kv_len = kv_len;
  p.head_dim = head_dim;
  p.scale = static_cast<float>(scale);
  p.causal = causal;
  return p;
}
cuda::AttentionInput in(const AttentionOperand& a) {
  return {a.data, a.stride_b, a.stride_h, a.stride_t};
}
// A contiguous (B, H, T, D) output.
cuda::AttentionOutput out(void* data, int64_t heads, int64_t t, int64_t d) {
  return {data, heads * t * d, t * d, d};
}

// Whether `device` runs the kernels (compute capability 8.0 or later), asked once
// per device. Without any CUDA device (the meta device predicting CUDA on a machine
// without one) it answers true, as the GPUs ember is measured on would.
bool device_runs_kernels(int device) {
  constexpr int kMaxDevices = 64;
  static std::array<std::atomic<int>, kMaxDevices> known{};  // 0 unknown, 1 yes, 2 no
  if (cuda::device_count() == 0) return true;
  if (device < 0 || device >= kMaxDevices) return false;
  int state = known[static_cast<size_t>(device)].load(std::memory_order_relaxed);
  if (state == 0) {
    int major = 0;
    EMBER_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    state = major >= 8 ? 1 : 2;
    known[static_cast<size_t>(device)].store(state, std::memory_order_relaxed);
  }
  return state == 1;
}

bool attention_fused_supported(const AttentionQuery& q) {
  return cuda::attention_supported(q.dtype, q.head_dim) && q.q_len > 0 && q.kv_len > 0 &&
         q.q_len < (int64_t{1} << 30) && q.kv_len < (int64_t{1} << 30) &&
         q.batch * q.heads < (int64_t{1} << 31) && device_runs_kernels(q.device.index);
}

void attention_fused(const AttentionArgs& a) {
  cuda::DeviceGuard guard(a.device.index);
  const cuda::AttentionProblem p =
      problem_of(a.dtype, a.batch, a.heads, a.q_len, a.kv_len, a.head_dim, a.scale, a.causal);
  cuda::launch_attention_forward(p, in(a.q), in(a.k), in(a.v),
                                 out(a.o, a.heads, a.q_len, a.head_dim), static_cast<float*>(a.lse),
                                 cuda::current_stream(a.device.index));
}

void attention_backward_fused(const AttentionBackwardArgs& a) {
  cuda::DeviceGuard guard(a.device.index);
  const cuda::AttentionProblem p =
      problem_of(a.dtype, a.batch, a.heads, a.q_len, a.kv_len, a.head_dim, a.scale, a.causal);
  cuda::launch_attention_backward(
      p, in(a.q), in(a.k), in(a.v), in(a.o), in(a.d_o), static_cast<const float*>(a.lse),
      out(a.d_q, a.heads, a.q_len, a.head_dim), out(a.d_k, a.heads, a.kv_len, a.head_dim),
      out(a.d_v, a.heads, a.kv_len, a.head_dim), a.deterministic, a.workspace, a.workspace_bytes,
      cuda::current_stream(a.device.index));
}

// Sizes alone (no device call): the meta device asks it as CUDA would.
size_t attention_workspace_bytes(const AttentionQuery& q) {
  return cuda::attention_backward_workspace_bytes(
      problem_of(q.dtype, q.batch, q.heads, q.q_len, q.kv_len, q.head_dim, 1.0, false),
      q.deterministic);
}

}  // namespace

void register_cuda_attention(KernelTable& t) {
  t.attention_fused_supported = &attention_fused_supported;
  t.attention_fused = &attention_fused;
  t.attention_backward_fused = &attention_backward_fused;
  t.attention_workspace_bytes = &attention_workspace_bytes;
}

}  // namespace ember::kernels
