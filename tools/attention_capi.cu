// A C entry to ember's fused attention launchers (cuda/kernels/attention.h) for
// tools/attention_peer.py, which loads the shared library tools/attention_probe.sh
// builds (libember_attention_probe.so) through ctypes and times ours and PyTorch's
// scaled_dot_product_attention alternately on the same tensors. Strides are
// (b, h, t) in elements. Each call returns 0, or 1 after printing the error.
#include <cstdio>
#include <exception>

#include "cuda/kernels/attention.h"

using namespace ember;
using namespace ember::cuda;

namespace {

AttentionProblem problem(int b, int h, int tq, int tk, int d, float scale, int causal) {
  AttentionProblem p;
  p.dtype = DType::BFloat16;
  p.batch = b;
  p.heads = h;
  p.q_len = tq;
  p.kv_len = tk;
  p.head_dim = d;
  p.scale = scale;
  p.causal = causal != 0;
  return p;
}
AttentionInput in(const void* p, const long long* s) {
  return {p, s[0], s[1], s[2]};
}
AttentionOutput out(void* p, const long long* s) {
  return {p, s[0], s[1], s[2]};
}

}  // namespace

extern "C" {

size_t ember_attention_workspace(int b, int h, int tq, int tk, int d, int deterministic) {
  return attention_backward_workspace_bytes(problem(b, h, tq, tk, d, 1.f, 0), deterministic != 0);
}

int ember_attention_forward(int b, int h, int tq, int tk, int d, float scale, int causal,
                            const void* q, const long long* sq, const void* k, const long long* sk,
                            const void* v, const long long* sv, void* o, const long long* so,
                            float* lse, void* stream) {
  try {
    launch_attention_forward(problem(b, h, tq, tk, d, scale, causal), in(q, sq), in(k, sk),
                             in(v, sv), out(o, so), lse, static_cast<cudaStream_t>(stream));
    return 0;
  } catch (const std::exception& e) {
    std::printf("ember_attention_forward: %s\n", e.what());
    return 1;
  }
}

// Version 1 (mma.sync) whatever the device, for comparing with the default.
int ember_attention_forward_v1(int b, int h, int tq, int tk, int d, float scale, int causal,
                               const void* q, const long long* sq, const void* k,
                               const long long* sk, const void* v, const long long* sv, void* o,
                               const long long* so, float* lse, void* stream) {
  try {
    AttentionTuning tuning;
    tuning.forward_version = 1;
    launch_attention_forward(problem(b, h, tq, tk, d, scale, causal), in(q, sq), in(k, sk),
                             in(v, sv), out(o, so), lse, static_cast<cudaStream_t>(stream), tuning);
    return 0;
  } catch (const std::exception& e) {
    std::printf("ember_attention_forward_v1: %s\n", e.what());
    return 1;
  }
}

int ember_attention_forward_sm90(int b, int h, int tq, int tk, int d, float scale, int causal,
                                 const void* q, const long long* sq, const void* k,
                                 const long long* sk, const void* v, const long long* sv, void* o,
                                 const long long* so, float* lse, int key_tile, void* stream) {
  try {
    launch_attention_forward_sm90(problem(b, h, tq, tk, d, scale, causal), in(q, sq), in(k, sk),
                                  in(v, sv), out(o, so), lse, static_cast<cudaStream_t>(stream),
                                  key_tile);
    return 0;
  } catch (const std::exception& e) {
    std::printf("ember_attention_forward_sm90: %s\n", e.what());
    return 1;
  }
}

int ember_attention_backward(int b, int h, int tq, int tk, int d, float scale, int causal,
                             const void* q, const long long* sq, const void* k, const long long* sk,
                             const void* v, const long long* sv, const void* o, const long long* so,
                             const void* dout, const long long* sdo, const float* lse, void* dq,
                             const long long* sdq, void* dk, const long long* sdk, void* dv,
                             const long long* sdv, int deterministic, void* ws, size_t ws_bytes,
                             void* stream) {
  try {
    launch_attention_backward(problem(b, h, tq, tk, d, scale, causal), in(q, sq), in(k, sk),
                              in(v, sv), in(o, so), in(dout, sdo), lse, out(dq, sdq), out(dk, sdk),
                              out(dv, sdv), deterministic != 0, ws, ws_bytes,
                              static_cast<cudaStream_t>(stream));
    return 0;
  } catch (const std::exception& e) {
    std::printf("ember_attention_backward: %s\n", e.what());
    return 1;
  }
}

}  // extern "C"
