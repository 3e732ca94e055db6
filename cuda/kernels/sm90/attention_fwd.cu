// Fused attention forward, version 2 (see cuda/kernels/attention.h,
// launch_attention_forward_sm90): the warpgroup MMA (wgmma, sm_90a) in place of
// version 1's mma.sync. launch_attention_forward runs it by default on compute
// capability 9.0 without a mask, with attention dropout too (its DROP kernels; docs/attention.md,
// "Which kernels run").
//
// A block of two warpgroups owns 128 query rows (64 each) and walks kBN-key
// tiles of K and V, double-buffered in shared memory by cp.async (all 256
// threads load). Per tile and warpgroup: S (64 x kBN) = Q K^T by wgmma with both
// operands from shared memory; the online softmax on the accumulators (wgmma's
// accumulator layout per warp equals mma.sync's m16n8 one, so version 1's code
// carries over); O (64 x D) += P V by wgmma with P from registers (version 1's
// accumulator-to-A conversion) and V from shared memory, N-major. Not yet here:
// TMA, producer/consumer warp specialisation, softmax overlapped with the next
// tile's products, the persistent longest-first grid (FA3's remaining steps).
//
// Shared tiles use the 128-byte swizzle of wgmma's layout type 1: a (rows, D)
// bf16 tile is D / 64 column blocks of (rows, 64); in a block, row r is 128
// bytes at r * 128 with its 16-byte chunk c at c ^ (r % 8); blocks 1024-byte
// aligned. K-major descriptors (Q, K): start + 32 bytes per k16 step inside a
// block, the next block after 4 steps, SBO 1024. V as the N-major B operand of
// P V (n = d contiguous): start + 16 rows per k16 step, LBO = one column block
// (kBN * 128 bytes), SBO 1024 (see gemm_kernel.cuh's layout notes).
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/base/error.h"
#include "cuda/check.h"
#include "cuda/kernels/attention.h"
#include "cuda/kernels/attention_dropout.cuh"
#include "cuda/kernels/kernel_helpers.cuh"
#include "cuda/kernels/sm90/attention_tma.h"
#include "cuda/tensor_map.h"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define EMBER_ATTN_SM90A 1
#include "cuda/kernels/sm90/attention_common.cuh"
#else
#define EMBER_ATTN_SM90A 0
#endif

namespace ember::cuda {

namespace {

using bf16 = __nv_bfloat16;

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
constexpr int kRowsPerBlock = 128;  // two warpgroups of 64 rows
constexpr int kThreads = 256;

struct Strides {
  int64_t b, h, t;
};

struct Params {
  const bf16* q;
  const bf16* k;
  const bf16* v;
  bf16* o;
  float* lse;
  Strides sq, sk, sv, so;
  int heads, tq, tk;
  int bh;  // batch x heads (version 4's tile count is bh x query tiles)
  float scale_log2;
  AttentionDropout drop;  // version 2 only (its DROP kernels)
};

#if EMBER_ATTN_SM90A

using namespace sm90;  // NOLINT(google-build-using-namespace)

// S (64 x BN) = Q rows [64 wg, 64 wg + 64) times K^T, fresh accumulators.
template <int D, int BN>
__device__ __forceinline__ void qk(float (&s)[BN / 2], uint32_t q_base, uint32_t k_base) {
  ss_product<D, BN, kRowsPerBlock, BN>(s, q_base, k_base, false);
}

// O (64 x D) += P (64 x BN, registers) V (BN x D, N-major in shared memory).
template <int D, int BN>
__device__ __forceinline__ void pv(float (&o)[D / 2], const uint32_t (&pa)[BN / 16][4],
                                   uint32_t v_base) {
  rs_product<D, BN, BN>(o, pa, v_base);
}

// The scores of one key tile (s, 64 x BN accumulators) through the online softmax's
// first half: scaled to base 2, masked (keys past the end; causal: keys after the row),
// the running maximum m and sum l of this thread's two rows updated, s replaced by
// exp2(s - m), and corr the factor O must be rescaled by. Touches neither O nor P, so it
// may run while a P V product into O is in flight (forward version 5).
template <int BN, bool CAUSAL>
__device__ __forceinline__ void softmax_scores(float (&s)[BN / 2], float (&m)[2], float (&l)[2],
                                               float (&corr)[2], int k0, int wg_q0, int row_lo,
                                               const Params& p) {
  constexpr int kNT = BN / 8;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const bool masked = k0 + BN > p.tk || (CAUSAL && k0 + BN - 1 > wg_q0);
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      float x = s[nt * 4 + e] * p.scale_log2;
      if (masked) {
        const int key = k0 + nt * 8 + (lane & 3) * 2 + (e & 1);
        const int row = row_lo + (e >> 1) * 8;
        if (key >= p.tk || (CAUSAL && key > row)) x = -INFINITY;
      }
      s[nt * 4 + e] = x;
    }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float mx = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
      mx = fmaxf(mx, fmaxf(s[nt * 4 + 2 * r], s[nt * 4 + 2 * r + 1]));
    mx = quad_max(mx);
    const float m_new = fmaxf(m[r], mx);
    const float m_use = m_new == -INFINITY ? 0.f : m_new;
    corr[r] = exp2_approx(m[r] - m_use);
    m[r] = m_new;
    float sum = 0.f;
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
      s[nt * 4 + 2 * r] = exp2_approx(s[nt * 4 + 2 * r] - m_use);
      s[nt * 4 + 2 * r + 1] = exp2_approx(s[nt * 4 + 2 * r + 1] - m_use);
      sum += s[nt * 4 + 2 * r] + s[nt * 4 + 2 * r + 1];
    }
    l[r] = l[r] * corr[r] + sum;
  }
}

// The second half: O rescaled by corr, and P (the exps in s) packed as the A operand of
// P V (pa).
template <int D, int BN>
__device__ __forceinline__ void rescale_and_pack(const float (&s)[BN / 2], float (&o)[D / 2],
                                                 const float (&corr)[2],
                                                 uint32_t (&pa)[BN / 16][4]) {
  constexpr int kDT = D / 8;
#pragma unroll
  for (int r = 0; r < 2; ++r)
#pragma unroll
    for (int dt = 0; dt < kDT; ++dt) {
      o[dt * 4 + 2 * r] *= corr[r];
      o[dt * 4 + 2 * r + 1] *= corr[r];
    }
#pragma unroll
  for (int kk = 0; kk < BN / 16; ++kk) {
    pa[kk][0] = pack_bf16(s[8 * kk], s[8 * kk + 1]);
    pa[kk][1] = pack_bf16(s[8 * kk + 2], s[8 * kk + 3]);
    pa[kk][2] = pack_bf16(s[8 * kk + 4], s[8 * kk + 5]);
    pa[kk][3] = pack_bf16(s[8 * kk + 6], s[8 * kk + 7]);
  }
}

// Attention dropout on one key tile's weights (s, after softmax_scores: the row sums
// are of the undropped weights, softmax then dropout): a dropped weight becomes 0. The
// kept ones' 1 / (1 - p) is applied to O once, at the end.
// rows: the counters of this thread's two rows' key 0 (row_counter).
template <int BN>
__device__ __forceinline__ void drop_weights(float (&s)[BN / 2], int k0, const uint64_t (&rows)[2],
                                             const Params& p) {
  const int lane = static_cast<int>(threadIdx.x) % 32;
#pragma unroll
  for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int key = k0 + nt * 8 + (lane & 3) * 2 + (e & 1);
      const bool keep = keeps_at(p.drop, rows[e >> 1] + static_cast<uint64_t>(key));
      s[nt * 4 + e] = keep ? s[nt * 4 + e] : 0.f;
    }
}

// Both halves: the whole online-softmax step of one key tile.
template <int D, int BN, bool CAUSAL>
__device__ __forceinline__ void softmax_step(float (&s)[BN / 2], float (&o)[D / 2], float (&m)[2],
                                             float (&l)[2], uint32_t (&pa)[BN / 16][4], int k0,
                                             int wg_q0, int row_lo, const Params& p) {
  float corr[2];
  softmax_scores<BN, CAUSAL>(s, m, l, corr, k0, wg_q0, row_lo, p);
  rescale_and_pack<D, BN>(s, o, corr, pa);
}

// O / l as bf16 rows and lse (natural log) for this thread's two rows.
template <int D>
__device__ __forceinline__ void store_output(const Params& p, int b, int h, int row_lo,
                                             const float (&o)[D / 2], const float (&m)[2],
                                             const float (&l)[2]) {
  constexpr int kDT = D / 8;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t bh = static_cast<int64_t>(b) * p.heads + h;
  const int64_t lse_base = bh * p.tq;
  bf16* go = p.o + b * p.so.b + h * p.so.h;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float total = quad_sum(l[r]);
    const float inv = total > 0.f ? 1.f / total : 0.f;
    const int row = row_lo + 8 * r;
    if (row >= p.tq) continue;
    if ((lane & 3) == 0)
      p.lse[lse_base + row] = total > 0.f ? (m[r] + log2f(total)) * kLn2 : -INFINITY;
    bf16* dst = go + static_cast<int64_t>(row) * p.so.t + (lane & 3) * 2;
#pragma unroll
    for (int dt = 0; dt < kDT; ++dt)
      *reinterpret_cast<__nv_bfloat162*>(dst + dt * 8) =
          __floats2bfloat162_rn(o[dt * 4 + 2 * r] * inv, o[dt * 4 + 2 * r + 1] * inv);
  }
}

#endif  // EMBER_ATTN_SM90A

// DROP: attention dropout (Params::drop), drawn as version 1 draws it.
// (At head dim 64 with dropout, two blocks an SM: the keep tests' integer work wants the
// warps; 128 registers a thread.)
template <int D, int BN, bool CAUSAL, bool DROP = false>
__global__ void __launch_bounds__(kThreads, DROP&& D == 64 ? 2 : 1)
    attn_fwd_sm90_kernel(const Params p) {
#if EMBER_ATTN_SM90A
  constexpr int kM = kRowsPerBlock;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  bf16* s_q = aligned_smem(smem_raw);
  bf16* s_k = s_q + kM * D;
  bf16* s_v = s_k + 2 * BN * D;

  const int wg = static_cast<int>(threadIdx.x) / 128;
  const int warp = (static_cast<int>(threadIdx.x) / 32) % 4;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const auto [bh, b, h, q0, n_kt] = query_block<kM, BN, CAUSAL>(p.heads, p.tq, p.tk);
  const bf16* gk = p.k + b * p.sk.b + h * p.sk.h;
  const bf16* gv = p.v + b * p.sv.b + h * p.sv.h;

  load_tile<kM, D>(s_q, p.q + b * p.sq.b + h * p.sq.h, p.sq.t, q0, p.tq);
  if (n_kt > 0) {
    load_tile<BN, D>(s_k, gk, p.sk.t, 0, p.tk);
    load_tile<BN, D>(s_v, gv, p.sv.t, 0, p.tk);
  }
  cp_async_commit();

  float o[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) o[i] = 0.f;
  float m[2] = {-INFINITY, -INFINITY};
  float l[2] = {0.f, 0.f};
  const int row_lo = q0 + wg * 64 + warp * 16 + lane / 4;
  const uint32_t q_base = smem_u32(s_q) + wg * 64 * 128;
  // The lowest query row of this warpgroup: tiles entirely at or below it
  // need no causal mask.
  const int wg_q0 = q0 + wg * 64;
  // Dropout: the counters of this thread's two rows' key 0.
  [[maybe_unused]] uint64_t drop_rows[2] = {0, 0};
  if constexpr (DROP) {
    const uint64_t start = start_of(p.drop);
    drop_rows[0] = row_counter(start, bh, p.tq, p.tk, row_lo);
    drop_rows[1] = row_counter(start, bh, p.tq, p.tk, row_lo + 8);
  }

  for (int j = 0; j < n_kt; ++j) {
    const int buf = j & 1;
    if (j + 1 < n_kt) {
      load_tile<BN, D>(s_k + (buf ^ 1) * BN * D, gk, p.sk.t, (j + 1) * BN, p.tk);
      load_tile<BN, D>(s_v + (buf ^ 1) * BN * D, gv, p.sv.t, (j + 1) * BN, p.tk);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    fence_proxy_async();  // cp.async's writes, read next by wgmma (the async proxy)
    __syncthreads();
    const uint32_t k_base = smem_u32(s_k + buf * BN * D);
    const uint32_t v_base = smem_u32(s_v + buf * BN * D);

    float s[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) s[i] = 0.f;
    wgmma_fence();
    qk<D, BN>(s, q_base, k_base);
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(s);

    uint32_t pa[BN / 16][4];
    if constexpr (DROP) {
      float corr[2];
      softmax_scores<BN, CAUSAL>(s, m, l, corr, j * BN, wg_q0, row_lo, p);
      drop_weights<BN>(s, j * BN, drop_rows, p);
      rescale_and_pack<D, BN>(s, o, corr, pa);
    } else {
      softmax_step<D, BN, CAUSAL>(s, o, m, l, pa, j * BN, wg_q0, row_lo, p);
    }
    wgmma_fence();
    pv<D, BN>(o, pa, v_base);
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(o);
    fence_regs(pa);
    __syncthreads();
  }
  cp_async_wait<0>();

  if constexpr (DROP) {
#pragma unroll
    for (int i = 0; i < D / 2; ++i) o[i] *= p.drop.rscale;
  }
  store_output<D>(p, b, h, row_lo, o, m, l);
#else
  (void)p;
#endif
}

// The same forward with the next tile's S = Q K^T in flight while this tile's softmax
// runs (FlashAttention-3's intra-warpgroup overlap). Per key tile j, after one barrier:
// the loads of K(j+2) and V(j+1) start; S(j+1) is issued; the softmax of S(j) rescales
// O; P V(j) is issued; one wait retires both products at the step's end. (The first
// version let P V(j) run on into the next step, whose softmax rescales O: ptxas then
// serialized every wgmma of the kernel, C7514, and it ran 1.1-1.6x version 2's time.)
// K is double-buffered, V triple-buffered; two score arrays trade roles step by step.
template <int D, int BN, bool CAUSAL>
__global__ void __launch_bounds__(kThreads, 1) attn_fwd_sm90_pipe_kernel(const Params p) {
#if EMBER_ATTN_SM90A
  constexpr int kM = kRowsPerBlock;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  bf16* s_q = aligned_smem(smem_raw);
  bf16* s_k = s_q + kM * D;      // [2][BN * D]
  bf16* s_v = s_k + 2 * BN * D;  // [3][BN * D]

  const int wg = static_cast<int>(threadIdx.x) / 128;
  const int warp = (static_cast<int>(threadIdx.x) / 32) % 4;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const auto [bh, b, h, q0, n_kt] = query_block<kM, BN, CAUSAL>(p.heads, p.tq, p.tk);
  const bf16* gk = p.k + b * p.sk.b + h * p.sk.h;
  const bf16* gv = p.v + b * p.sv.b + h * p.sv.h;

  // Load groups: Q and K(0); then K(1) and V(0). Step j's group is K(j+2), V(j+1).
  load_tile<kM, D>(s_q, p.q + b * p.sq.b + h * p.sq.h, p.sq.t, q0, p.tq);
  if (n_kt > 0) load_tile<BN, D>(s_k, gk, p.sk.t, 0, p.tk);
  cp_async_commit();
  if (n_kt > 1) load_tile<BN, D>(s_k + BN * D, gk, p.sk.t, BN, p.tk);
  if (n_kt > 0) load_tile<BN, D>(s_v, gv, p.sv.t, 0, p.tk);
  cp_async_commit();

  float o[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) o[i] = 0.f;
  float m[2] = {-INFINITY, -INFINITY};
  float l[2] = {0.f, 0.f};
  const int row_lo = q0 + wg * 64 + warp * 16 + lane / 4;
  const uint32_t q_base = smem_u32(s_q) + wg * 64 * 128;
  const int wg_q0 = q0 + wg * 64;

  // Two score arrays that trade roles each step (the loop runs two steps at a time, so
  // each array keeps its registers: no copy, and ptxas sees which product writes which).
  float s0[BN / 2], s1[BN / 2];
  if (n_kt > 0) {
    cp_async_wait<1>();  // Q and K(0)
    fence_proxy_async();
    __syncthreads();
    wgmma_fence();
    qk<D, BN>(s0, q_base, smem_u32(s_k));
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(s0);
  }

  uint32_t pa[BN / 16][4];
  // Step j: `cur` holds S(j); MORE: S(j+1) goes into `next` (not on the last step).
  auto step = [&]<bool MORE>(int j, float(&cur)[BN / 2], float(&next)[BN / 2]) {
    cp_async_wait<0>();  // K(j+1) and V(j)
    fence_proxy_async();
    // Every warpgroup is past S(j) and P V(j-2): K(j)'s and V(j-2)'s buffers are free.
    __syncthreads();
    if (j + 2 < n_kt) load_tile<BN, D>(s_k + (j & 1) * BN * D, gk, p.sk.t, (j + 2) * BN, p.tk);
    if constexpr (MORE)
      load_tile<BN, D>(s_v + ((j + 1) % 3) * BN * D, gv, p.sv.t, (j + 1) * BN, p.tk);
    cp_async_commit();
    if constexpr (MORE) {  // S(j+1) runs while this step's softmax does
      wgmma_fence();
      qk<D, BN>(next, q_base, smem_u32(s_k + ((j + 1) & 1) * BN * D));
      wgmma_commit();
    }
    softmax_step<D, BN, CAUSAL>(cur, o, m, l, pa, j * BN, wg_q0, row_lo, p);
    wgmma_fence();
    pv<D, BN>(o, pa, smem_u32(s_v + (j % 3) * BN * D));
    wgmma_commit();
    // S(j+1) and P V(j) both retired at the step's end: had P V(j) run on into the next
    // step's softmax, which rescales O, ptxas would serialize every wgmma (C7514).
    wgmma_wait<0>();
    fence_regs(o);
    fence_regs(pa);
    if constexpr (MORE) fence_regs(next);
  };
  int j = 0;
  for (; j + 2 < n_kt; j += 2) {
    step.template operator()<true>(j, s0, s1);
    step.template operator()<true>(j + 1, s1, s0);
  }
  if (n_kt - j == 2) {
    step.template operator()<true>(j, s0, s1);
    step.template operator()<false>(j + 1, s1, s0);
  } else if (n_kt - j == 1) {
    step.template operator()<false>(j, s0, s1);
  }
  cp_async_wait<0>();

  store_output<D>(p, b, h, row_lo, o, m, l);
#else
  (void)p;
#endif
}

// ---------------------------------------------------------------------------------
// Version 4: warp-specialised, FlashAttention-3's producer/consumer split with the two
// consumer warpgroups in ping-pong. Three warpgroups: warpgroup 0 gives up its
// registers (setmaxnreg) and one of its threads loads Q once and K and V tile by tile
// with TMA into kStages stages, each completing on an mbarrier ("full"); warpgroups 1
// and 2 (64 query rows each) take the registers and, per key tile j, issue P V(j-1)
// and S(j) = Q K(j)^T as one wgmma group, hand the tensor cores to the other
// warpgroup (named barriers 1 and 2), wait for their group, free K(j)'s and V(j-1)'s
// stages ("empty" mbarriers, one arrival per consumer warp) and run the online softmax
// of S(j) while the other warpgroup's products run. So one warpgroup's exps overlap
// the other's matrix work, where in version 2 both warpgroups meet at a barrier every
// tile and do their softmax together. Ragged tails: TMA reads rows past T as zeros.
namespace ws {
constexpr int kStages = 2;
constexpr int kProducerRegs = 24;
constexpr int kTurnBarrier = 1;  // consumer warpgroup c waits on named barrier 1 + c
// NC consumer warpgroups (2, or 3 at head dim 64: 192 query rows a block, as
// FlashAttention-3 takes at 64) and the producer's. The consumers' registers after
// setmaxnreg: the launch gives each thread 65,536 / threads (168 or 128), and the
// warpgroups' new counts must fit inside that: 128 x 24 + 256 x 240 = 64,512 <=
// 384 x 168 and 128 x 24 + 384 x 160 = 64,512 <= 512 x 128.
template <int NC>
constexpr int kThreads = 128 * (NC + 1);
template <int NC>
constexpr int kConsumerRegs = NC == 2 ? 240 : 160;

// The mbarriers after the tiles: Q full and Q free, then full K, full V, empty K,
// empty V per stage.
struct Bars {
  uint32_t base;
  __device__ uint32_t q() const { return base; }
  __device__ uint32_t q_free() const { return base + 8; }
  __device__ uint32_t full_k(int s) const { return base + 8 * (2 + s); }
  __device__ uint32_t full_v(int s) const { return base + 8 * (2 + kStages + s); }
  __device__ uint32_t empty_k(int s) const { return base + 8 * (2 + 2 * kStages + s); }
  __device__ uint32_t empty_v(int s) const { return base + 8 * (2 + 3 * kStages + s); }
};
constexpr int kBarBytes = 8 * (2 + 4 * kStages);
}  // namespace ws

#if EMBER_ATTN_SM90A
// Query tile t of the version 4 grid: the longest causal tiles first (t / bh counts
// down the tiles from the last), the heads in turn; its (b, h), first row and key tiles.
struct WsTile {
  int b, h, q0, n_kt;
};
template <int ROWS, int BN, bool CAUSAL>
__device__ __forceinline__ WsTile ws_tile(int t, const Params& p, int n_qt) {
  const int bh = t % p.bh;
  const int qt = CAUSAL ? n_qt - 1 - t / p.bh : t / p.bh;
  const int q0 = qt * ROWS;
  const int kend = CAUSAL ? min(p.tk, q0 + ROWS) : p.tk;
  return {bh / p.heads, bh % p.heads, q0, (kend + BN - 1) / BN};
}

// The D / 64 boxes of (64 columns, ROWS rows) of one tile: rows [row0, row0 + ROWS) of
// head (b, h), column block c at c * ROWS * 64 elements.
template <int ROWS, int D>
__device__ __forceinline__ void tma_tile(bf16* dst, const CUtensorMap* map, uint32_t bar, int row0,
                                         int h, int b) {
#pragma unroll
  for (int c = 0; c < D / 64; ++c)
    tma_load_4d(smem_u32(dst + c * ROWS * 64), map, bar, c * 64, row0, h, b);
}
#endif  // EMBER_ATTN_SM90A

// OVERLAP (forward version 5): S(j) and P V(j-1) are committed as two groups, S(j)
// first; the first half of S(j)'s softmax (softmax_scores) runs once S(j) has retired,
// while P V(j-1) may still run, and O's rescale and P's packing wait for it
// (FlashAttention-3's intra-warpgroup overlap, on top of the turns).
template <int D, int BN, bool CAUSAL, bool OVERLAP, int NC>
__global__ void __launch_bounds__(ws::kThreads<NC>, 1)
    attn_fwd_sm90_ws_kernel(const __grid_constant__ CUtensorMap map_q,
                            const __grid_constant__ CUtensorMap map_k,
                            const __grid_constant__ CUtensorMap map_v, const Params p) {
#if EMBER_ATTN_SM90A
  using namespace ws;  // NOLINT(google-build-using-namespace)
  constexpr int kM = 64 * NC;
  constexpr int kConsumerWarps = 4 * NC;
  // qk() steps through Q's column blocks kRowsPerBlock (128) rows apart; at head dim 64
  // there is one column block, so any row count works.
  static_assert(kM == kRowsPerBlock || D == 64, "Q tiles of other than 128 rows need D 64");
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  bf16* s_q = aligned_smem(smem_raw);
  bf16* s_k = s_q + kM * D;            // [kStages][BN * D]
  bf16* s_v = s_k + kStages * BN * D;  // [kStages][BN * D]
  const Bars bars{smem_u32(s_v + kStages * BN * D)};

  const int tid = static_cast<int>(threadIdx.x);
  const int wg = tid / 128;
  const int lane = tid % 32;
  if (tid == 0) {
    mbar_init(bars.q(), 1);
    mbar_init(bars.q_free(), kConsumerWarps);  // one arrival per consumer warp
    for (int s = 0; s < kStages; ++s) {
      mbar_init(bars.full_k(s), 1);
      mbar_init(bars.full_v(s), 1);
      mbar_init(bars.empty_k(s), kConsumerWarps);
      mbar_init(bars.empty_v(s), kConsumerWarps);
    }
    fence_mbar_init();
  }
  __syncthreads();
  // The block's query tiles: t = blockIdx.x, += gridDim.x (one tile a block when the grid
  // has one block a tile). Every role walks the same sequence and counts the same key
  // tiles (kv: the block's key tiles so far, which give each stage's index and phase).
  const int n_qt = (p.tq + kM - 1) / kM;
  const int total = n_qt * p.bh;

  if (wg == 0) {  // the producer
    setmaxnreg_dec<kProducerRegs>();
    if (tid == 0) {
      prefetch_tensor_map(&map_q);
      prefetch_tensor_map(&map_k);
      prefetch_tensor_map(&map_v);
      int kv = 0, n_tiles = 0;
      for (int t = static_cast<int>(blockIdx.x); t < total; t += static_cast<int>(gridDim.x)) {
        const WsTile w = ws_tile<kM, BN, CAUSAL>(t, p, n_qt);
        if (w.n_kt == 0) continue;
        if (n_tiles > 0) mbar_wait_spin(bars.q_free(), (n_tiles - 1) & 1);
        mbar_arrive_expect_tx(bars.q(), kM * D * 2);
        tma_tile<kM, D>(s_q, &map_q, bars.q(), w.q0, w.h, w.b);
        ++n_tiles;
        for (int j = 0; j < w.n_kt; ++j, ++kv) {
          const int st = kv % kStages;
          const uint32_t free_parity = ((kv / kStages) + 1) & 1;  // the previous round's phase
          if (kv >= kStages) mbar_wait_spin(bars.empty_k(st), free_parity);
          mbar_arrive_expect_tx(bars.full_k(st), BN * D * 2);
          tma_tile<BN, D>(s_k + st * BN * D, &map_k, bars.full_k(st), j * BN, w.h, w.b);
          if (kv >= kStages) mbar_wait_spin(bars.empty_v(st), free_parity);
          mbar_arrive_expect_tx(bars.full_v(st), BN * D * 2);
          tma_tile<BN, D>(s_v + st * BN * D, &map_v, bars.full_v(st), j * BN, w.h, w.b);
        }
      }
    }
    return;
  }

  setmaxnreg_inc<kConsumerRegs<NC>>();
  const int c = wg - 1;  // this consumer warpgroup: query rows [64 c, 64 c + 64) of a tile
  const int warp = (tid / 32) % 4;
  const uint32_t q_base = smem_u32(s_q) + c * 64 * 128;
  // The turns go round the consumers in order: c waits on barrier 1 + c and hands over to
  // the next on its barrier (the last hands over to the first).
  const int my_turn = kTurnBarrier + c;
  const int their_turn = NC == 2 ? kTurnBarrier + (1 - c) : kTurnBarrier + (c + 1) % NC;
  int kv = 0, n_tiles = 0;
  for (int t = static_cast<int>(blockIdx.x); t < total; t += static_cast<int>(gridDim.x)) {
    const WsTile w = ws_tile<kM, BN, CAUSAL>(t, p, n_qt);
    float o[D / 2];
#pragma unroll
    for (int i = 0; i < D / 2; ++i) o[i] = 0.f;
    float m[2] = {-INFINITY, -INFINITY};
    float l[2] = {0.f, 0.f};
    const int row_lo = w.q0 + c * 64 + warp * 16 + lane / 4;
    const int wg_q0 = w.q0 + c * 64;
    if (w.n_kt > 0) {
      uint32_t pa[BN / 16][4];
      float s[BN / 2];
      mbar_wait_spin(bars.q(), n_tiles & 1);
      ++n_tiles;
      if (c == NC - 1) bar_arrive(their_turn, 256);  // the first consumer goes first
      // Key tile j (the block's kv-th): P V(j - 1) (none for j = 0) and S(j) as one wgmma
      // group in this warpgroup's turn, then the softmax of S(j) in the other's.
      auto step = [&]<bool FIRST>(int j) {
        const int st = (kv + j) % kStages, prev = (kv + j + kStages - 1) % kStages;
        mbar_wait_spin(bars.full_k(st), ((kv + j) / kStages) & 1);
        if constexpr (!FIRST) mbar_wait_spin(bars.full_v(prev), ((kv + j - 1) / kStages) & 1);
        bar_sync(my_turn, 256);
        wgmma_fence();
        if constexpr (OVERLAP) {
          qk<D, BN>(s, q_base, smem_u32(s_k + st * BN * D));
          wgmma_commit();
          if constexpr (!FIRST) {
            pv<D, BN>(o, pa, smem_u32(s_v + prev * BN * D));
            wgmma_commit();
          }
          bar_arrive(their_turn, 256);
          wgmma_wait<FIRST ? 0 : 1>();  // S(j); P V(j-1) may still run
          fence_regs(s);
          if (lane == 0) {
            mbar_arrive(bars.empty_k(st));
            if (j == w.n_kt - 1) mbar_arrive(bars.q_free());  // the tile's last Q K^T is done
          }
          float corr[2];
          softmax_scores<BN, CAUSAL>(s, m, l, corr, j * BN, wg_q0, row_lo, p);
          wgmma_wait<0>();
          fence_regs(o);
          fence_regs(pa);
          if constexpr (!FIRST)
            if (lane == 0) mbar_arrive(bars.empty_v(prev));
          rescale_and_pack<D, BN>(s, o, corr, pa);
        } else {
          if constexpr (!FIRST) pv<D, BN>(o, pa, smem_u32(s_v + prev * BN * D));
          qk<D, BN>(s, q_base, smem_u32(s_k + st * BN * D));
          wgmma_commit();
          bar_arrive(their_turn, 256);
          wgmma_wait<0>();
          fence_regs(s);
          fence_regs(o);
          fence_regs(pa);
          if (lane == 0) {
            mbar_arrive(bars.empty_k(st));
            if constexpr (!FIRST) mbar_arrive(bars.empty_v(prev));
            if (j == w.n_kt - 1) mbar_arrive(bars.q_free());  // the tile's last Q K^T is done
          }
          softmax_step<D, BN, CAUSAL>(s, o, m, l, pa, j * BN, wg_q0, row_lo, p);
        }
      };
      step.template operator()<true>(0);
      for (int j = 1; j < w.n_kt; ++j) step.template operator()<false>(j);
      kv += w.n_kt;
      const int last = (kv - 1) % kStages;
      mbar_wait_spin(bars.full_v(last), ((kv - 1) / kStages) & 1);
      bar_sync(my_turn, 256);
      wgmma_fence();
      pv<D, BN>(o, pa, smem_u32(s_v + last * BN * D));
      wgmma_commit();
      // The last consumer's turn ends the round.
      if (NC == 2 ? c == 0 : c != NC - 1) bar_arrive(their_turn, 256);
      wgmma_wait<0>();
      fence_regs(o);
      if (lane == 0) mbar_arrive(bars.empty_v(last));
    }
    store_output<D>(p, w.b, w.h, row_lo, o, m, l);
  }
#else
  (void)map_q, (void)map_k, (void)map_v, (void)p;
#endif
}

template <int D, int BN, int NC>
constexpr size_t ws_smem_bytes() {
  return static_cast<size_t>(64 * NC + 2 * ws::kStages * BN) * D * sizeof(bf16) + ws::kBarBytes +
         1024;
}

// Q, then K double-buffered and V double- (PIPE: triple-) buffered, and the alignment slack.
template <int D, int BN, bool PIPE>
constexpr size_t smem_bytes() {
  return static_cast<size_t>(kRowsPerBlock + (PIPE ? 5 : 4) * BN) * D * sizeof(bf16) + 1024;
}

// DROP (with dropout): only unpipelined.
template <int D, int BN, bool CAUSAL, bool PIPE, bool DROP = false>
void launch_d(const Params& prm, int64_t bh, cudaStream_t stream) {
  static_assert(!(PIPE && DROP), "the pipelined kernel has no dropout");
  auto kernel =
      PIPE ? attn_fwd_sm90_pipe_kernel<D, BN, CAUSAL> : attn_fwd_sm90_kernel<D, BN, CAUSAL, DROP>;
  constexpr size_t kSmem = smem_bytes<D, BN, PIPE>();
  EMBER_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(kSmem)));
  const dim3 grid(static_cast<unsigned>(bh),
                  static_cast<unsigned>((prm.tq + kRowsPerBlock - 1) / kRowsPerBlock));
  kernel<<<grid, kThreads, kSmem, stream>>>(prm);
  EMBER_CUDA_CHECK(cudaGetLastError());
}

template <bool PIPE>
void launch_variant(const Params& prm, int64_t bh, int64_t head_dim, int key_tile, bool causal,
                    cudaStream_t stream) {
  const bool wide = key_tile == 128;
  if (head_dim == 64) {
    if (wide)
      causal ? launch_d<64, 128, true, PIPE>(prm, bh, stream)
             : launch_d<64, 128, false, PIPE>(prm, bh, stream);
    else
      causal ? launch_d<64, 64, true, PIPE>(prm, bh, stream)
             : launch_d<64, 64, false, PIPE>(prm, bh, stream);
  } else {
    if (wide)
      causal ? launch_d<128, 128, true, PIPE>(prm, bh, stream)
             : launch_d<128, 128, false, PIPE>(prm, bh, stream);
    else
      causal ? launch_d<128, 64, true, PIPE>(prm, bh, stream)
             : launch_d<128, 64, false, PIPE>(prm, bh, stream);
  }
}

// Checks the problem and the operands for the sm_90 forwards (`op` names the caller) and
// fills prm; false when there is nothing to compute.
bool sm90_params(const char* op, const AttentionProblem& p, AttentionInput q, AttentionInput k,
                 AttentionInput v, AttentionOutput o, float* lse, Params& prm) {
  const char* why = attention_unsupported(p.dtype, p.head_dim);
  EMBER_CHECK(why == nullptr, op, ": ", why == nullptr ? "" : why);
  EMBER_CHECK(p.mask_kind == 0, op, ": reads no mask (launch_attention_forward's version 1 does)");
  EMBER_CHECK(p.dropout_p >= 0.0 && p.dropout_p < 1.0, op, ": dropout_p must be in [0, 1), got ",
              p.dropout_p);
  int device = 0, major = 0, minor = 0;
  EMBER_CUDA_CHECK(cudaGetDevice(&device));
  EMBER_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  EMBER_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  EMBER_CHECK(major == 9 && minor == 0, op, ": needs compute capability 9.0 (device ", device,
              " is ", major, ".", minor, ")");
  EMBER_CHECK(p.batch >= 0 && p.heads >= 0 && p.q_len >= 0 && p.kv_len >= 0 &&
                  p.q_len < (1LL << 30) && p.kv_len < (1LL << 30),
              op, ": bad sizes (q_len ", p.q_len, ", kv_len ", p.kv_len, ")");
  const int64_t bh = p.batch * p.heads;
  if (bh == 0 || p.q_len == 0) return false;
  auto aligned = [](const void* d, int64_t sb, int64_t sh, int64_t st) {
    return d != nullptr && reinterpret_cast<uintptr_t>(d) % 16 == 0 && sb % 8 == 0 && sh % 8 == 0 &&
           st % 8 == 0;
  };
  EMBER_CHECK(aligned(q.data, q.stride_b, q.stride_h, q.stride_t) &&
                  aligned(o.data, o.stride_b, o.stride_h, o.stride_t) && lse != nullptr &&
                  (p.kv_len == 0 || (aligned(k.data, k.stride_b, k.stride_h, k.stride_t) &&
                                     aligned(v.data, v.stride_b, v.stride_h, v.stride_t))),
              op, ": operands must be non-null, 16-byte aligned, strides multiples of 8");
  prm = Params{};
  prm.q = static_cast<const bf16*>(q.data);
  prm.k = static_cast<const bf16*>(k.data);
  prm.v = static_cast<const bf16*>(v.data);
  prm.o = static_cast<bf16*>(o.data);
  prm.lse = lse;
  prm.sq = {q.stride_b, q.stride_h, q.stride_t};
  prm.sk = {k.stride_b, k.stride_h, k.stride_t};
  prm.sv = {v.stride_b, v.stride_h, v.stride_t};
  prm.so = {o.stride_b, o.stride_h, o.stride_t};
  prm.heads = static_cast<int>(p.heads);
  prm.tq = static_cast<int>(p.q_len);
  prm.tk = static_cast<int>(p.kv_len);
  EMBER_CHECK(bh * ((p.q_len + kRowsPerBlock - 1) / kRowsPerBlock) < (int64_t{1} << 31), op,
              ": batch x heads x query tiles ", bh, " x ",
              (p.q_len + kRowsPerBlock - 1) / kRowsPerBlock, " does not fit a 32-bit grid index");
  prm.bh = static_cast<int>(bh);
  prm.scale_log2 = p.scale * kLog2e;
  prm.drop = attention_dropout_of(p);
  return true;
}

template <int D, int BN, bool CAUSAL, int NC>
void launch_ws_nc(const Params& prm, AttentionInput q, AttentionInput k, AttentionInput v,
                  const AttentionProblem& p, bool persistent, bool overlap, cudaStream_t stream) {
  auto kernel = overlap ? attn_fwd_sm90_ws_kernel<D, BN, CAUSAL, true, NC>
                        : attn_fwd_sm90_ws_kernel<D, BN, CAUSAL, false, NC>;
  constexpr int kRows = 64 * NC;
  constexpr size_t kSmem = ws_smem_bytes<D, BN, NC>();
  const CUtensorMap map_q = sm90::attention_tensor_map(p, q, p.q_len, kRows);
  // kv_len 0: no tile is loaded; Q's map stands in for K's and V's.
  CUtensorMap map_k = map_q, map_v = map_q;
  if (p.kv_len > 0) {
    map_k = sm90::attention_tensor_map(p, k, p.kv_len, BN);
    map_v = sm90::attention_tensor_map(p, v, p.kv_len, BN);
  }
  EMBER_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(kSmem)));
  // Persistent: one block an SM walking every SM-count-th tile; else one block a tile.
  const int64_t tiles = p.batch * p.heads * ceil_div(p.q_len, kRows);
  const int64_t blocks = persistent ? std::min<int64_t>(tiles, sm_count(current_device())) : tiles;
  kernel<<<static_cast<unsigned>(blocks), ws::kThreads<NC>, kSmem, stream>>>(map_q, map_k, map_v,
                                                                             prm);
  EMBER_CUDA_CHECK(cudaGetLastError());
}

// Three consumer warpgroups only at head dim 64 (at 128 their registers would not fit).
template <int D, int BN, bool CAUSAL>
void launch_ws_d(const Params& prm, AttentionInput q, AttentionInput k, AttentionInput v,
                 const AttentionProblem& p, bool persistent, bool overlap, int consumers,
                 cudaStream_t stream) {
  if constexpr (D == 64) {
    if (consumers == 3) {
      launch_ws_nc<D, BN, CAUSAL, 3>(prm, q, k, v, p, persistent, overlap, stream);
      return;
    }
  }
  launch_ws_nc<D, BN, CAUSAL, 2>(prm, q, k, v, p, persistent, overlap, stream);
}

}  // namespace

void launch_attention_forward_sm90(const AttentionProblem& p, AttentionInput q, AttentionInput k,
                                   AttentionInput v, AttentionOutput o, float* lse,
                                   cudaStream_t stream, int key_tile, bool pipelined) {
  constexpr const char* kOp = "attention_forward_sm90";
  EMBER_CHECK(key_tile == 64 || key_tile == 128, kOp, ": key_tile ", key_tile, " (64 or 128)");
  const int drop_tile = p.head_dim == 64 ? 64 : 128;
  EMBER_CHECK(p.dropout_p == 0.0 || (!pipelined && key_tile == drop_tile), kOp,
              ": dropout runs in the unpipelined kernel with ", drop_tile,
              "-key tiles at head dim ", p.head_dim, " (asked: ", pipelined ? "pipelined, " : "",
              key_tile, "-key tiles)");
  Params prm;
  if (!sm90_params(kOp, p, q, k, v, o, lse, prm)) return;
  const int64_t bh = p.batch * p.heads;
  if (p.dropout_p > 0.0) {  // version 2's kernel at its key tile (64 at head dim 64, 128 at 128)
    if (p.head_dim == 64)
      p.causal ? launch_d<64, 64, true, false, true>(prm, bh, stream)
               : launch_d<64, 64, false, false, true>(prm, bh, stream);
    else
      p.causal ? launch_d<128, 128, true, false, true>(prm, bh, stream)
               : launch_d<128, 128, false, false, true>(prm, bh, stream);
    return;
  }
  if (pipelined)
    launch_variant<true>(prm, bh, p.head_dim, key_tile, p.causal, stream);
  else
    launch_variant<false>(prm, bh, p.head_dim, key_tile, p.causal, stream);
}

bool attention_forward_ws_takes(const AttentionProblem& p, AttentionInput q, AttentionInput k,
                                AttentionInput v) {
  int64_t dims[4], strides[3];
  return sm90::attention_tma_dims(p, q, std::max<int64_t>(p.q_len, 1), dims, strides) &&
         (p.kv_len == 0 || (sm90::attention_tma_dims(p, k, p.kv_len, dims, strides) &&
                            sm90::attention_tma_dims(p, v, p.kv_len, dims, strides)));
}

void launch_attention_forward_sm90_ws(const AttentionProblem& p, AttentionInput q, AttentionInput k,
                                      AttentionInput v, AttentionOutput o, float* lse,
                                      cudaStream_t stream, int key_tile, bool persistent,
                                      bool overlap, int consumers) {
  constexpr const char* kOp = "attention_forward_sm90_ws";
  EMBER_CHECK(key_tile == 64 || key_tile == 128, kOp, ": key_tile ", key_tile, " (64 or 128)");
  EMBER_CHECK(consumers == 2 || (consumers == 3 && p.head_dim == 64), kOp, ": consumers ",
              consumers, " (2, or 3 at head dim 64)");
  EMBER_CHECK(p.dropout_p == 0.0, kOp,
              ": has no dropout (attention_forward_sm90's unpipelined kernel has)");
  Params prm;
  if (!sm90_params(kOp, p, q, k, v, o, lse, prm)) return;
  EMBER_CHECK(attention_forward_ws_takes(p, q, k, v), kOp,
              ": a stride TMA cannot take (each of a dimension longer than 1 must be a positive "
              "multiple of 8 elements; attention_forward_ws_takes says which operands fit)");
  // One instantiation a head dim and key tile, the causal mask chosen inside.
  auto launch = [&]<int D, int BN>() {
    p.causal ? launch_ws_d<D, BN, true>(prm, q, k, v, p, persistent, overlap, consumers, stream)
             : launch_ws_d<D, BN, false>(prm, q, k, v, p, persistent, overlap, consumers, stream);
  };
  const bool wide = key_tile == 128;
  if (p.head_dim == 64)
    wide ? launch.template operator()<64, 128>() : launch.template operator()<64, 64>();
  else
    wide ? launch.template operator()<128, 128>() : launch.template operator()<128, 64>();
}

namespace sm90 {

bool attention_tma_dims(const AttentionProblem& p, AttentionInput x, int64_t t_len,
                        int64_t (&dims)[4], int64_t (&strides)[3]) {
  dims[0] = p.head_dim;
  dims[1] = t_len;
  dims[2] = p.heads;
  dims[3] = p.batch;
  const int64_t given[3] = {x.stride_t, x.stride_h, x.stride_b};
  for (int i = 0; i < 3; ++i) {
    if (dims[i + 1] == 1) {
      strides[i] = 8;
    } else {
      if (given[i] <= 0 || given[i] % 8 != 0 || given[i] >= (int64_t{1} << 38)) return false;
      strides[i] = given[i];
    }
  }
  return true;
}

CUtensorMap attention_tensor_map(const AttentionProblem& p, AttentionInput x, int64_t t_len,
                                 unsigned rows) {
  int64_t dims[4], strides[3];
  EMBER_CHECK(attention_tma_dims(p, x, t_len, dims, strides),
              "attention: a stride TMA cannot take (strides t ", x.stride_t, ", h ", x.stride_h,
              ", b ", x.stride_b, ")");
  const unsigned box[4] = {64, rows, 1, 1}, ones[4] = {1, 1, 1, 1};
  return make_tensor_map_4d(DType::BFloat16, x.data, dims, strides, box, ones);
}

}  // namespace sm90

}  // namespace ember::cuda
