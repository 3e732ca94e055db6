// ember's fused attention (cuda/kernels/attention.cu): softmax(scale Q K^T) V for
// bfloat16 query, key and value with float32 accumulation, never writing the
// (T, T) score matrix. Forward keeps the row log-sum-exp for backward; backward
// recomputes the probabilities from it and gives dQ, dK and dV, with a
// deterministic mode (no atomics). Causal masking is top-left aligned, as
// PyTorch's is_causal: query i sees keys 0..i. Dropout drawn in the kernels from
// ember's counters (AttentionProblem::dropout_p); bool or additive masks read by them
// (AttentionProblem::mask_kind).
//
// Tensors are (B, H, T, D) with any strides for B, H and T (in elements) and D
// contiguous, so (B, T, H, D) storage viewed as (B, H, T, D) needs no copy.
// Version 1 runs on warp-level tensor-core MMAs (mma.sync, sm_80 and later).
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "core/base/dtype.h"

namespace ember::cuda {

/// A read-only (B, H, T, D) operand: element (b, h, t, d) at
/// data[b * stride_b + h * stride_h + t * stride_t + d].
struct AttentionInput {
  const void* data = nullptr;
  int64_t stride_b = 0;
  int64_t stride_h = 0;
  int64_t stride_t = 0;
};

/// A written (B, H, T, D) operand, strided as AttentionInput.
struct AttentionOutput {
  void* data = nullptr;
  int64_t stride_b = 0;
  int64_t stride_h = 0;
  int64_t stride_t = 0;
};

/// The sizes and options shared by forward and backward.
struct AttentionProblem {
  DType dtype = DType::BFloat16;
  int64_t batch = 0;
  int64_t heads = 0;
  int64_t q_len = 0;     ///< query rows per (batch, head)
  int64_t kv_len = 0;    ///< key and value rows per (batch, head)
  int64_t head_dim = 0;  ///< D of query, key, value and output
  float scale = 0.f;     ///< the factor on Q K^T (usually 1/sqrt(D))
  bool causal = false;   ///< query i sees keys 0..i only
  /// Attention dropout, after the softmax: weight (b, h, i, j) kept iff
  /// dropout_keeps(dropout_seed, dropout_offset + ((b heads + h) q_len + i) kv_len + j,
  /// dropout_threshold(dropout_p)) (core/base/random.h), the composed path's mask, and
  /// scaled by 1 / (1 - dropout_p); the backward draws the same. 0: none. Forward
  /// versions 1 and 2 and backward versions 1 and 2 (version 0 picks version 2 on compute
  /// capability 9.0 while attention_dropout_wgmma() is on, else 1; attention_dropout.cuh).
  double dropout_p = 0.0;
  uint64_t dropout_seed = 0;
  uint64_t dropout_offset = 0;
  /// Inside a CUDA graph (cuda/graph.h): the device word holding the replay's base,
  /// added to dropout_offset when the kernels run; null otherwise.
  const uint64_t* dropout_base = nullptr;
  /// An attention mask (not with causal): 0 none; 1 bool (uint8 storage, nonzero = take
  /// part, as PyTorch's bool mask); 2 additive bfloat16, added to the scaled score.
  /// Element (b, h, i, j) at mask[b mask_stride_b + h mask_stride_h + i mask_stride_q +
  /// j mask_stride_k] (strides in elements, 0 where it broadcasts). A row whose keys are
  /// all masked gives zeros (and lse -inf), as the composed path. Forward version 1 only.
  int mask_kind = 0;
  const void* mask = nullptr;
  int64_t mask_stride_b = 0, mask_stride_h = 0, mask_stride_q = 0, mask_stride_k = 0;
};

/// Knobs for measuring; the defaults (zeros) are what the launchers choose.
struct AttentionTuning {
  /// Which forward: 1 (mma.sync, any device from compute capability 8.0), 2 (wgmma,
  /// compute capability 9.0 only, key tile 64 at head dim 64 and 128 at 128), 0:
  /// version 2 on compute capability 9.0, else version 1 (the faster per shape in
  /// the first H200 run, benchmarks/NOTES.md "Flash attention").
  /// 3: version 2 pipelined (the next tile's Q K^T during this tile's softmax; compute
  /// capability 9.0 only; experimental, never the default until measured).
  /// 4: warp-specialised (a TMA producer warpgroup, two consumer warpgroups in
  /// ping-pong; compute capability 9.0 only; launch_attention_forward_sm90_ws).
  /// 5: version 4 with the intra-warpgroup overlap; 6: version 5 with three consumer
  /// warpgroups at head dim 64 (version 5 at 128); both with 128-key tiles.
  /// 0 takes, on compute capability 9.0 where TMA takes the strides
  /// (attention_forward_ws_takes) and without dropout: version 4 at head dim 128, version
  /// 6 at 64 without the causal mask, else version 2 (the faster per shape in the probe's runs,
  /// benchmarks/NOTES.md).
  int forward_version = 0;
  int forward_warps = 0;  ///< version 1: 4 or 8 warps, 16 query rows each, per block; 0: 4
  /// Deterministic backward: 32 or 64 query rows per tile of the dK/dV kernel; 0:
  /// 32 at head dim 128 (64 spills registers there), 64 at head dim 64.
  int backward_query_tile = 0;
  /// Which deterministic backward: 1 (mma.sync, any device from compute capability 8.0),
  /// 2 (wgmma, compute capability 9.0 only; dropout, no mask), 0: version 2 where it
  /// applies and attention_backward_v2() is on, else version 1. 3: version 2 with the
  /// warp-specialised dK/dV kernel (launch_attention_backward_sm90's warp_specialised; no
  /// dropout); 0 takes it in place of version 2 at head dim 128 where TMA takes the
  /// strides, without dropout.
  /// The atomic mode (deterministic false): version 1 (mma.sync, dropout and masks), or 4
  /// (compute capability 9.0, no dropout, no mask: version 2's dK/dV kernel adding each
  /// tile's dQ share into the float32 accumulator, no dQ pass; launch_attention_backward_sm90's
  /// dq_acc); 0 takes 4 where it applies and attention_backward_v2() is on.
  int backward_version = 0;
};

/// The forward version callers get when AttentionTuning::forward_version is 0:
/// EMBER_ATTENTION_FWD_VERSION (0 to 6) on first use, 0 when unset (the launcher's choice
/// per shape); a version that does not take the problem (a mask for 2 to 6, dropout for 3
/// to 6, a device other than compute capability 9.0, strides TMA cannot take for 4 to 6)
/// falls back to that choice. set_attention_forward_version overrides it. For measuring.
int attention_forward_version();
void set_attention_forward_version(int version);

/// Whether the default backward takes version 2 where it applies: EMBER_ATTENTION_BWD_V2
/// (0 or 1) on first use, on when unset (measured 0.67-0.91x version 1's forward +
/// backward time at every shape of the probe, benchmarks/NOTES.md "Flash attention
/// backward on wgmma"); set_attention_backward_v2 overrides it.
bool attention_backward_v2();
void set_attention_backward_v2(bool on);

/// Whether the default forward and backward (version 0) take version 2's wgmma kernels
/// for attention dropout on compute capability 9.0: EMBER_ATTENTION_DROPOUT_WGMMA (0 or
/// 1) on first use, on when unset (off: version 1's kernels). On one H100 (2026-12-06) the
/// char GPT's step took 0.926x [0.925-0.927] version 1's time graphed, 0.924x eager, with
/// version 2's (benchmarks/RESULTS.md, fifteenth session); set_attention_dropout_wgmma
/// overrides it. For measuring.
bool attention_dropout_wgmma();
void set_attention_dropout_wgmma(bool on);

/// Whether backward version 3's consumer warpgroups take turns on their first products:
/// EMBER_ATTENTION_BWD_PINGPONG (0 or 1) on first use, on when unset (a measuring knob:
/// the probe's forward + backward times with and without differed by 8% at most,
/// benchmarks/NOTES.md);
/// set_attention_backward_pingpong overrides it.
bool attention_backward_pingpong();
void set_attention_backward_pingpong(bool on);

/// The backward mode callers use unless told otherwise: the separate dQ pass (no
/// atomics), measured faster than the atomic one at every shape of the first H200
/// run (e.g. 2.63 against 3.75 ms forward+backward at B 8, H 16, T 2048, D 128 causal).
inline constexpr bool kAttentionDeterministicDefault = true;

/// Null when the kernels take `dtype` and `head_dim` (bfloat16; 64 or 128), else
/// why not.
const char* attention_unsupported(DType dtype, int64_t head_dim);

/// True when attention_unsupported(dtype, head_dim) is null.
bool attention_supported(DType dtype, int64_t head_dim);

/// O = softmax(scale Q K^T) V and lse (B, H, q_len) float32 contiguous, the natural
/// log of each row's sum of exp(scale q.k) (-inf for a row that sees no key).
/// Every base pointer must be 16-byte aligned and every stride a multiple of 8
/// elements. Throws ember::Error on bad arguments.
void launch_attention_forward(const AttentionProblem& p, AttentionInput q, AttentionInput k,
                              AttentionInput v, AttentionOutput o, float* lse, cudaStream_t stream,
                              const AttentionTuning& tuning = {});

/// Version 2 of the forward (cuda/kernels/sm90/attention_fwd.cu: wgmma, sm_90a),
/// the same contract as launch_attention_forward, `key_tile` 64 or 128 keys per
/// step. launch_attention_forward calls it on compute capability 9.0 (see
/// AttentionTuning::forward_version). `pipelined`: the variant with the next tile's
/// Q K^T in flight during this tile's softmax (experimental: forward_version 3).
/// Attention dropout (AttentionProblem::dropout_p) in the unpipelined kernel with its
/// default key tile only: 64 at head dim 64, 128 at 128. No mask.
/// Throws unless the device has compute capability 9.0.
void launch_attention_forward_sm90(const AttentionProblem& p, AttentionInput q, AttentionInput k,
                                   AttentionInput v, AttentionOutput o, float* lse,
                                   cudaStream_t stream, int key_tile = 64, bool pipelined = false);

/// Version 4 of the forward (cuda/kernels/sm90/attention_fwd.cu), the contract of
/// launch_attention_forward_sm90: a producer warpgroup loads Q once and K and V tile by
/// tile with TMA into two stages; two consumer warpgroups take turns on the tensor cores,
/// so one's softmax runs under the other's products (FlashAttention-3's ping-pong).
/// `overlap` (forward version 5): each consumer also runs the first half of a tile's
/// softmax while its own P V of the tile before is in flight (FlashAttention-3's
/// intra-warpgroup overlap). `consumers`: 2, or 3 at head dim 64 (192 query rows a block,
/// the turns going round the three: forward_version 6).
/// `persistent`: one block an SM, each walking every SM-count-th query tile, the longest
/// causal tiles first (the producer loads a tile's Q and keys while the consumers finish
/// the one before); else one block a tile, in the same order.
/// Needs, besides version 2's conditions, strides TMA takes (attention_forward_ws_takes).
void launch_attention_forward_sm90_ws(const AttentionProblem& p, AttentionInput q, AttentionInput k,
                                      AttentionInput v, AttentionOutput o, float* lse,
                                      cudaStream_t stream, int key_tile = 128,
                                      bool persistent = true, bool overlap = false,
                                      int consumers = 2);

/// Whether version 4 can describe q, k and v to TMA: each stride of a dimension longer
/// than 1 a positive multiple of 8 elements (a broadcast stride of 0 is not).
bool attention_forward_ws_takes(const AttentionProblem& p, AttentionInput q, AttentionInput k,
                                AttentionInput v);

/// Version 2 of the deterministic backward's two matrix kernels (cuda/kernels/sm90/
/// attention_bwd.cu: wgmma, sm_90a): dK and dV over key blocks, then dQ over query
/// blocks, from `delta` = rowsum(dO * O) (B H q_len floats, contiguous) that the caller
/// computed. Attention dropout (not with `warp_specialised` or `dq_acc`); no mask.
/// launch_attention_backward calls it (see
/// AttentionTuning::backward_version). `warp_specialised` (backward version 3): the dK/dV
/// kernel with a TMA producer warpgroup and its two consumer warpgroups taking turns, as
/// the forward's version 4 (needs attention_backward_ws_takes). `dq_acc` (backward
/// version 4, the atomic mode; not with `warp_specialised`): the dK/dV kernel also forms
/// each query tile's dQ share (dS^T staged in shared memory, times K) and adds it into
/// dq_acc, (B, H, q_len, D) float32 that the caller zeroed, with vector reductions; no dQ
/// pass runs, d_q is not written (the caller scales and converts dq_acc). Throws unless the
/// device has compute capability 9.0.
void launch_attention_backward_sm90(const AttentionProblem& p, AttentionInput q, AttentionInput k,
                                    AttentionInput v, AttentionInput d_out, const float* lse,
                                    const float* delta, AttentionOutput d_q, AttentionOutput d_k,
                                    AttentionOutput d_v, cudaStream_t stream,
                                    bool warp_specialised = false, float* dq_acc = nullptr);

/// Whether backward version 3 can describe q, k, v and d_out to TMA (as
/// attention_forward_ws_takes).
bool attention_backward_ws_takes(const AttentionProblem& p, AttentionInput q, AttentionInput k,
                                 AttentionInput v, AttentionInput d_out);

/// Device bytes launch_attention_backward needs as workspace: the rowsum(dO * O)
/// pre-pass (B H q_len floats), and in the atomic mode (deterministic false) a
/// float32 dQ accumulator (B H q_len D floats) that key tiles add to atomically.
size_t attention_backward_workspace_bytes(const AttentionProblem& p, bool deterministic);

/// dQ, dK, dV from the forward's q, k, v, o, lse and d_out. `deterministic`
/// computes dQ in its own pass over key tiles (no atomics, the same bits each
/// run; more arithmetic, yet faster: kAttentionDeterministicDefault); false adds
/// each key tile's dQ share atomically into a float32 accumulator. `workspace` holds at least
/// attention_backward_workspace_bytes(p, deterministic) bytes, 256-byte aligned.
void launch_attention_backward(const AttentionProblem& p, AttentionInput q, AttentionInput k,
                               AttentionInput v, AttentionInput o, AttentionInput d_out,
                               const float* lse, AttentionOutput d_q, AttentionOutput d_k,
                               AttentionOutput d_v, bool deterministic, void* workspace,
                               size_t workspace_bytes, cudaStream_t stream,
                               const AttentionTuning& tuning = {});

}  // namespace ember::cuda
