// Fused attention backward, version 2 (see cuda/kernels/attention.h,
// launch_attention_backward_sm90): the deterministic backward of version 1 (a dK/dV
// kernel over key tiles, then a dQ pass over query tiles, no atomics) with its matrix
// products on the warpgroup MMA (wgmma, sm_90a). Attention dropout too (the DROP kernels);
// no mask (version 1 reads them); the rowsum(dO * O) pre-pass is the caller's (attention.cu).
//
// dK/dV: a block of two warpgroups owns 128 keys (64 each; K and V loaded once) and
// walks 64-query tiles of Q and dO, double-buffered in shared memory by cp.async. Per
// tile and warpgroup, in the transposed orientation (keys are wgmma's M):
//   S^T  (64 x 64) = K Q^T      wgmma, both operands from shared memory (K-major)
//   dP^T (64 x 64) = V dO^T     the same
//   P^T = exp2(scale log2e S^T - lse), masked; dS^T = P^T (dP^T - delta)
//   dV (64 x D) += P^T dO       wgmma with P^T from registers, dO N-major in shared
//   dK (64 x D) += dS^T Q       the same
// The dV product runs while the warpgroup forms dS^T (none of its registers are the
// product's). Causal: the block's first key tile of queries is k0 / 64; a warpgroup
// skips the tiles wholly above its keys (it still meets the block's barriers).
//
// dQ: a block of two warpgroups owns 128 query rows (as the forward) and walks 64-key
// tiles of K and V, double-buffered: S = Q K^T and dP = dO V^T from shared memory,
// dS = P (dP - delta), dQ (64 x D) += dS K with dS from registers. Causal: the longest
// query tiles first.
//
// Shared tiles and descriptors: cuda/kernels/sm90/attention_common.cuh.
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "core/base/error.h"
#include "cuda/check.h"
#include "cuda/kernels/attention.h"
#include "cuda/kernels/attention_dropout.cuh"
#include "cuda/kernels/sm90/attention_tma.h"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define EMBER_ATTN_BWD_SM90A 1
#include "cuda/kernels/sm90/attention_common.cuh"
#else
#define EMBER_ATTN_BWD_SM90A 0
#endif

namespace ember::cuda {

namespace {

using bf16 = __nv_bfloat16;

constexpr float kLog2e = 1.4426950408889634f;
constexpr int kThreads = 256;       // two warpgroups
constexpr int kKeysPerBlock = 128;  // dK/dV: 64 keys a warpgroup
constexpr int kQueryTile = 64;      // dK/dV: query rows per step
constexpr int kRowsPerBlock = 128;  // dQ: 64 query rows a warpgroup
constexpr int kKeyTile = 64;        // dQ: keys per step

struct Strides {
  int64_t b, h, t;
};

struct Params {
  const bf16* q;
  const bf16* k;
  const bf16* v;
  const bf16* dout;
  const float* lse;    // (B, H, Tq), natural log
  const float* delta;  // (B, H, Tq): rowsum(dO * O)
  bf16* dq;
  bf16* dk;
  bf16* dv;
  float* dq_acc;  // version 4: (B, H, Tq, D) float32 that dQ's shares are added into
  Strides sq, sk, sv, sdo, sdq, sdk, sdv;
  int heads, tq, tk;
  float scale, scale_log2;
  bool pingpong;          // version 3: the consumer warpgroups take turns on their first products
  AttentionDropout drop;  // version 2 only (its DROP kernels)
};

#if EMBER_ATTN_BWD_SM90A

using namespace sm90;  // NOLINT(google-build-using-namespace)

// lse (natural log) and delta of query rows q0 .. q0 + n into shared memory by cp.async,
// in the caller's group: rows past the end read as 0, which is harmless there (their
// Q and dO rows are zeros, so P^T dO and dS^T are 0 whatever P is). Version 2 has no
// masks, so no row's lse is -inf.
__device__ __forceinline__ void load_row_stats(float* s_lse, float* s_delta, const Params& p,
                                               int64_t base, int q0, int n) {
  for (int i = static_cast<int>(threadIdx.x); i < n; i += kThreads) {
    const bool ok = q0 + i < p.tq;
    const int64_t at = ok ? base + q0 + i : 0;
    const int bytes = ok ? 4 : 0;
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_u32(s_lse + i)),
                 "l"(p.lse + at), "r"(bytes));
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_u32(s_delta + i)),
                 "l"(p.delta + at), "r"(bytes));
  }
}

// A warpgroup's (64, D) fp32 accumulator as bf16 rows row0 + (its rows) times `mul`,
// rows at or past `valid` skipped. Row of accumulator element (dt, e): warp 16 + lane / 4
// + 8 (e / 2); column dt 8 + (lane % 4) 2 + e % 2.
template <int D>
__device__ __forceinline__ void store_acc(bf16* g, int64_t st, int row0, int valid,
                                          const float (&acc)[D / 2], float mul) {
  const int warp = (static_cast<int>(threadIdx.x) / 32) % 4;
  const int lane = static_cast<int>(threadIdx.x) % 32;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = row0 + warp * 16 + lane / 4 + 8 * r;
    if (row >= valid) continue;
    bf16* dst = g + static_cast<int64_t>(row) * st + (lane & 3) * 2;
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt)
      *reinterpret_cast<__nv_bfloat162*>(dst + dt * 8) =
          __floats2bfloat162_rn(acc[dt * 4 + 2 * r] * mul, acc[dt * 4 + 2 * r + 1] * mul);
  }
}

// Version 4's dS^T tile: a warpgroup's 64 keys (rows row0 ..) of dS^T, bf16, from the
// A operands of its dK product (acc_to_a's packing of the 64 x 64 accumulator), into a
// swizzled (128 keys, 64 queries) tile, which the dQ product reads M-major. Each quad of
// lanes writes one 16-byte chunk of a row; the swizzle spreads a warp's eight rows over
// all 32 banks.
__device__ __forceinline__ void store_ds(bf16* s_ds, int row0,
                                         const uint32_t (&a)[kQueryTile / 16][4]) {
  const int warp = (static_cast<int>(threadIdx.x) / 32) % 4;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int r = row0 + warp * 16 + lane / 4;
  const int in = (lane & 3) * 2;
#pragma unroll
  for (int kk = 0; kk < kQueryTile / 16; ++kk) {
    *reinterpret_cast<uint32_t*>(s_ds + tile_off<kKeysPerBlock>(r, 2 * kk) + in) = a[kk][0];
    *reinterpret_cast<uint32_t*>(s_ds + tile_off<kKeysPerBlock>(r + 8, 2 * kk) + in) = a[kk][1];
    *reinterpret_cast<uint32_t*>(s_ds + tile_off<kKeysPerBlock>(r, 2 * kk + 1) + in) = a[kk][2];
    *reinterpret_cast<uint32_t*>(s_ds + tile_off<kKeysPerBlock>(r + 8, 2 * kk + 1) + in) = a[kk][3];
  }
}

// Version 4's dQ share of a query tile, this warpgroup's half of its columns:
// acc (64 queries x D / 2) = dS (64 x 128 keys: the s_ds tile, M-major) times K (128 keys
// x columns wg D / 2 .., N-major in the block's (128, D) K tile), then added into
// dq_acc's rows q0 .. (rows past tq skipped) with vector reductions (red.global.add.v2.f32).
template <int D>
__device__ __forceinline__ void dq_share(const Params& p, uint32_t ds_tile, uint32_t k_tile, int wg,
                                         int64_t row_base, int q0) {
  float acc[D / 4];
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < kKeysPerBlock / 16; ++kk) {
    const uint64_t da = make_desc(ds_tile + kk * 16 * 128, kKeysPerBlock * 128, 1024);
    // D 128: the warpgroup's column block; D 64: its 32 columns (64 bytes) of block 0.
    const uint32_t b = k_tile + (D == 128 ? wg * kKeysPerBlock * 128 : wg * 64) + kk * 16 * 128;
    const uint64_t db = make_desc(b, kKeysPerBlock * 128, 1024);
    if constexpr (D == 128)
      wgmma_bf16_m64n64k16<1, 1>(acc, da, db, kk > 0 ? 1u : 0u);
    else
      wgmma_bf16_m64n32k16<1, 1>(acc, da, db, kk > 0 ? 1u : 0u);
  }
  wgmma_commit();
  wgmma_wait<0>();
  fence_regs(acc);
  const int warp = (static_cast<int>(threadIdx.x) / 32) % 4;
  const int lane = static_cast<int>(threadIdx.x) % 32;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = q0 + warp * 16 + lane / 4 + 8 * r;
    if (row >= p.tq) continue;
    float* dst = p.dq_acc + (row_base + row) * D + wg * (D / 2) + (lane & 3) * 2;
#pragma unroll
    for (int nt = 0; nt < D / 16; ++nt)
      asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(dst + nt * 8),
                   "f"(acc[nt * 4 + 2 * r]), "f"(acc[nt * 4 + 2 * r + 1])
                   : "memory");
  }
}

#endif  // EMBER_ATTN_BWD_SM90A

// grid (B H, key blocks of 128); causal: key block 0 (the most queries) first.
// ATOMIC_DQ (backward version 4): also each query tile's dQ share, from dS^T staged in
// shared memory, added into p.dq_acc (no dQ pass).
// DROP: attention dropout (Params::drop; not with ATOMIC_DQ), drawn as the forward draws
// it: a dropped weight's P^T is kept negated, so P^T >= 0 is kept and P^T <= 0 dropped
// (one draw serves dV and dS^T, as version 1's backward).
template <int D, bool CAUSAL, bool ATOMIC_DQ, bool DROP = false>
__global__ void __launch_bounds__(kThreads, 1) attn_bwd_dkdv_sm90_kernel(const Params p) {
  static_assert(!(DROP && ATOMIC_DQ), "dropout runs with the dQ pass only");
#if EMBER_ATTN_BWD_SM90A
  constexpr int kN = kKeysPerBlock;
  constexpr int kM = kQueryTile;
  constexpr int kMT = kM / 8;  // n-tiles over the tile's queries
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  bf16* s_k = aligned_smem(smem_raw);
  bf16* s_v = s_k + kN * D;
  bf16* s_q = s_v + kN * D;                                    // [2][kM * D]
  bf16* s_do = s_q + 2 * kM * D;                               // [2][kM * D]
  float* s_lse = reinterpret_cast<float*>(s_do + 2 * kM * D);  // [2][kM]
  float* s_delta = s_lse + 2 * kM;                             // [2][kM]
  bf16* s_ds = reinterpret_cast<bf16*>(s_delta + 2 * kM);      // ATOMIC_DQ: [kN * kM]

  const int wg = static_cast<int>(threadIdx.x) / 128;
  const int warp = (static_cast<int>(threadIdx.x) / 32) % 4;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int bh = static_cast<int>(blockIdx.x);
  const int b = bh / p.heads, h = bh % p.heads;
  const int k0 = static_cast<int>(blockIdx.y) * kN;
  const int wk0 = k0 + wg * 64;  // this warpgroup's first key
  const bf16* gq = p.q + b * p.sq.b + h * p.sq.h;
  const bf16* gdo = p.dout + b * p.sdo.b + h * p.sdo.h;
  const int64_t row_base = static_cast<int64_t>(bh) * p.tq;
  const int qt_begin = CAUSAL ? k0 / kM : 0;
  const int n_qt = (p.tq + kM - 1) / kM;

  load_tile<kN, D>(s_k, p.k + b * p.sk.b + h * p.sk.h, p.sk.t, k0, p.tk);
  load_tile<kN, D>(s_v, p.v + b * p.sv.b + h * p.sv.h, p.sv.t, k0, p.tk);
  if (qt_begin < n_qt) {
    load_tile<kM, D>(s_q, gq, p.sq.t, qt_begin * kM, p.tq);
    load_tile<kM, D>(s_do, gdo, p.sdo.t, qt_begin * kM, p.tq);
    load_row_stats(s_lse, s_delta, p, row_base, qt_begin * kM, kM);
  }
  cp_async_commit();

  float dk[D / 2], dv[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) dk[i] = dv[i] = 0.f;
  const int key_lo = wk0 + warp * 16 + lane / 4;  // this thread's keys: key_lo, key_lo + 8
  // Dropout: the counters of query 0 at this thread's two keys; query q's is this plus
  // q tk.
  [[maybe_unused]] uint64_t drop_keys[2] = {0, 0};
  if constexpr (DROP) {
    const uint64_t first = row_counter(start_of(p.drop), bh, p.tq, p.tk, 0);
    drop_keys[0] = first + static_cast<uint64_t>(key_lo);
    drop_keys[1] = first + static_cast<uint64_t>(key_lo + 8);
  }
  // Columns 64 wg onward of column block 0: this warpgroup's 64 rows of K and V.
  const uint32_t k_base = smem_u32(s_k) + wg * 64 * 128;
  const uint32_t v_base = smem_u32(s_v) + wg * 64 * 128;

  for (int it = qt_begin; it < n_qt; ++it) {
    const int buf = (it - qt_begin) & 1;
    const int q0 = it * kM;
    if (it + 1 < n_qt) {
      const int nb = buf ^ 1;
      load_tile<kM, D>(s_q + nb * kM * D, gq, p.sq.t, q0 + kM, p.tq);
      load_tile<kM, D>(s_do + nb * kM * D, gdo, p.sdo.t, q0 + kM, p.tq);
      load_row_stats(s_lse + nb * kM, s_delta + nb * kM, p, row_base, q0 + kM, kM);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    fence_proxy_async();  // cp.async's writes, read next by wgmma (the async proxy)
    __syncthreads();
    // Causal: a tile whose last query precedes this warpgroup's first key adds nothing.
    // ATOMIC_DQ runs it all the same (masked to zeros: its rows of dS^T are the dQ
    // product's), so that both warpgroups meet the one barrier below at the same place.
    if (ATOMIC_DQ || !(CAUSAL && q0 + kM - 1 < wk0)) {
      const uint32_t q_tile = smem_u32(s_q + buf * kM * D);
      const uint32_t do_tile = smem_u32(s_do + buf * kM * D);
      const float* lse = s_lse + buf * kM;
      const float* dl = s_delta + buf * kM;

      float st[kM / 2], dpt[kM / 2];
      wgmma_fence();
      ss_product<D, kM, kN, kM>(st, k_base, q_tile, false);  // S^T = K Q^T
      wgmma_commit();
      ss_product<D, kM, kN, kM>(dpt, v_base, do_tile, false);  // dP^T = V dO^T
      wgmma_commit();
      wgmma_wait<1>();  // S^T; P^T is formed while dP^T's product runs
      fence_regs(st);
      const bool masked = wk0 + 64 > p.tk || (CAUSAL && wk0 + 63 > q0);
#pragma unroll
      for (int nt = 0; nt < kMT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int qq = nt * 8 + (lane & 3) * 2 + (e & 1);
          float x = exp2_approx(st[nt * 4 + e] * p.scale_log2 - lse[qq] * kLog2e);
          if (masked) {
            const int key = key_lo + (e >> 1) * 8;
            if (key >= p.tk || (CAUSAL && key > q0 + qq)) x = 0.f;
          }
          if constexpr (DROP) {
            const uint64_t c =
                drop_keys[e >> 1] + static_cast<uint64_t>(q0 + qq) * static_cast<uint64_t>(p.tk);
            x = keeps_at(p.drop, c) ? x : -x;
          }
          st[nt * 4 + e] = x;
        }
      uint32_t pa[kM / 16][4];
      // With dropout the kept weights only (their 1 / (1 - p) is applied to dV at the end).
      acc_to_a<kM>(st, pa, [](float x) { return DROP ? fmaxf(x, 0.f) : x; });
      wgmma_fence();
      rs_product<D, kM, kM>(dv, pa, do_tile);  // dV += P^T dO
      wgmma_commit();
      wgmma_wait<1>();  // dP^T (the dV product may still run)
      fence_regs(dpt);
      // dS^T = P^T (dP^T - delta), formed while the dV product runs; with dropout
      // P^T (Z dP^T - delta), delta being rowsum(dO O) of the dropped output either way:
      // a dropped weight (kept as -P^T) gives -P^T delta.
#pragma unroll
      for (int nt = 0; nt < kMT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int qq = nt * 8 + (lane & 3) * 2 + (e & 1);
          const float pt = st[nt * 4 + e];
          if constexpr (DROP)
            dpt[nt * 4 + e] =
                pt > 0.f ? pt * (dpt[nt * 4 + e] * p.drop.rscale - dl[qq]) : pt * dl[qq];
          else
            dpt[nt * 4 + e] = pt * (dpt[nt * 4 + e] - dl[qq]);
        }
      uint32_t da[kM / 16][4];
      acc_to_a<kM>(dpt, da, [](float x) { return x; });
      if constexpr (ATOMIC_DQ) store_ds(s_ds, wg * 64, da);
      wgmma_fence();
      rs_product<D, kM, kM>(dk, da, q_tile);  // dK += dS^T Q
      wgmma_commit();
      if constexpr (ATOMIC_DQ) {  // dQ's share while dV's and dK's products run
        fence_proxy_async();      // the dS^T stores, read next by wgmma
        bar_sync(1, kThreads);    // both warpgroups' rows of dS^T written
        dq_share<D>(p, smem_u32(s_ds), smem_u32(s_k), wg, row_base, q0);
      }
      wgmma_wait<0>();
      fence_regs(dv);
      fence_regs(dk);
      fence_regs(pa);
      fence_regs(da);
    }
    __syncthreads();  // the buffers read here (and s_ds) are refilled next step
  }
  cp_async_wait<0>();

  store_acc<D>(p.dk + b * p.sdk.b + h * p.sdk.h, p.sdk.t, wk0, p.tk, dk, p.scale);
  store_acc<D>(p.dv + b * p.sdv.b + h * p.sdv.h, p.sdv.t, wk0, p.tk, dv,
               DROP ? p.drop.rscale : 1.f);
#else
  (void)p;
#endif
}

// The dK/dV kernel warp-specialised (backward version 3; the forward's version 4 is the
// model): warpgroup 0 gives up its registers; its thread 0 loads the block's K and V
// once and each query tile's Q and dO with TMA into kStages stages, and its warp 1 copies
// the tile's lse and delta into the stage with plain loads; a stage is full when both
// have arrived on its mbarrier. Warpgroups 1 and 2 (64 keys each, as version 2) take
// turns issuing a tile's S^T and dP^T products (named barriers 1 and 2), so one's
// element-wise work runs under the other's products, and free the stage (one arrival
// per consumer warp) when its last product has retired. The products and the
// element-wise steps are version 2's.
namespace wsb {
constexpr int kThreads = 384;
constexpr int kStages = 2;
constexpr int kProducerRegs = 24;  // setmaxnreg: 128 * 24 + 256 * 240 <= 65536
constexpr int kConsumerRegs = 240;
constexpr int kTurnBarrier = 1;
}  // namespace wsb

template <int D>
constexpr size_t dkdv_ws_smem() {
  return static_cast<size_t>(2 * kKeysPerBlock + 2 * wsb::kStages * kQueryTile) * D * sizeof(bf16) +
         2 * wsb::kStages * kQueryTile * sizeof(float) + 8 * (1 + 2 * wsb::kStages) + 1024;
}

template <int D, bool CAUSAL>
__global__ void __launch_bounds__(wsb::kThreads, 1)
    attn_bwd_dkdv_sm90_ws_kernel(const __grid_constant__ CUtensorMap map_q,
                                 const __grid_constant__ CUtensorMap map_k,
                                 const __grid_constant__ CUtensorMap map_v,
                                 const __grid_constant__ CUtensorMap map_do, const Params p) {
#if EMBER_ATTN_BWD_SM90A
  using namespace wsb;  // NOLINT(google-build-using-namespace)
  constexpr int kN = kKeysPerBlock;
  constexpr int kM = kQueryTile;
  constexpr int kMT = kM / 8;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  bf16* s_k = aligned_smem(smem_raw);
  bf16* s_v = s_k + kN * D;
  bf16* s_q = s_v + kN * D;                                          // [kStages][kM * D]
  bf16* s_do = s_q + kStages * kM * D;                               // [kStages][kM * D]
  float* s_lse = reinterpret_cast<float*>(s_do + kStages * kM * D);  // [kStages][kM]
  float* s_delta = s_lse + kStages * kM;                             // [kStages][kM]
  const uint32_t bar_base = smem_u32(s_delta + kStages * kM);
  const uint32_t kv_full = bar_base;
  auto full = [&](int s) { return bar_base + 8 * (1 + s); };
  auto empty = [&](int s) { return bar_base + 8 * (1 + kStages + s); };

  const int tid = static_cast<int>(threadIdx.x);
  const int wg = tid / 128;
  const int warp = (tid / 32) % 4;
  const int lane = tid % 32;
  const int bh = static_cast<int>(blockIdx.x);
  const int b = bh / p.heads, h = bh % p.heads;
  const int k0 = static_cast<int>(blockIdx.y) * kN;
  const int qt_begin = CAUSAL ? k0 / kM : 0;
  const int n_steps = (p.tq + kM - 1) / kM - qt_begin;  // may be <= 0: dK = dV = 0
  if (tid == 0) {
    mbar_init(kv_full, 1);
    for (int s = 0; s < kStages; ++s) {
      // Every thread that wrote (the statistics warp) or read (the consumers) a stage's
      // lse and delta arrives itself, so each one's plain shared accesses are ordered by
      // its own arrival: the TMA thread's and the statistics warp's 32; the consumers' 256.
      mbar_init(full(s), 1 + 32);
      mbar_init(empty(s), 256);
    }
    fence_mbar_init();
  }
  __syncthreads();

  if (wg == 0) {
    setmaxnreg_dec<kProducerRegs>();
    if (tid == 0 && n_steps > 0) {
      prefetch_tensor_map(&map_q);
      prefetch_tensor_map(&map_do);
      mbar_arrive_expect_tx(kv_full, 2 * kN * D * 2);
#pragma unroll
      for (int c = 0; c < D / 64; ++c) {
        tma_load_4d(smem_u32(s_k + c * kN * 64), &map_k, kv_full, c * 64, k0, h, b);
        tma_load_4d(smem_u32(s_v + c * kN * 64), &map_v, kv_full, c * 64, k0, h, b);
      }
      for (int i = 0; i < n_steps; ++i) {
        const int st = i % kStages;
        const int q0 = (qt_begin + i) * kM;
        if (i >= kStages) mbar_wait_spin(empty(st), ((i / kStages) + 1) & 1);
        mbar_arrive_expect_tx(full(st), 2 * kM * D * 2);
#pragma unroll
        for (int c = 0; c < D / 64; ++c) {
          tma_load_4d(smem_u32(s_q + st * kM * D + c * kM * 64), &map_q, full(st), c * 64, q0, h,
                      b);
          tma_load_4d(smem_u32(s_do + st * kM * D + c * kM * 64), &map_do, full(st), c * 64, q0, h,
                      b);
        }
      }
    } else if (tid / 32 == 1) {  // the statistics warp
      const int64_t row_base = static_cast<int64_t>(bh) * p.tq;
      for (int i = 0; i < n_steps; ++i) {
        const int st = i % kStages;
        const int q0 = (qt_begin + i) * kM;
        if (i >= kStages) mbar_wait_spin(empty(st), ((i / kStages) + 1) & 1);
        // Rows past the end read as 0: harmless (their Q and dO rows are zeros).
        for (int r = lane; r < kM; r += 32) {
          const bool ok = q0 + r < p.tq;
          s_lse[st * kM + r] = ok ? p.lse[row_base + q0 + r] : 0.f;
          s_delta[st * kM + r] = ok ? p.delta[row_base + q0 + r] : 0.f;
        }
        mbar_arrive(full(st));
      }
    }
    return;
  }

  setmaxnreg_inc<kConsumerRegs>();
  // Warp-uniform as far as ptxas can tell (a value from lane 0): a wgmma under a branch on
  // a per-thread value is serialized (C7518).
  const int c = __shfl_sync(0xffffffffu, wg - 1, 0);
  const int wk0 = k0 + c * 64;  // this warpgroup's first key
  const int key_lo = wk0 + warp * 16 + lane / 4;
  const uint32_t k_base = smem_u32(s_k) + c * 64 * 128;
  const uint32_t v_base = smem_u32(s_v) + c * 64 * 128;
  const int my_turn = kTurnBarrier + c, their_turn = kTurnBarrier + (1 - c);
  float dk[D / 2], dv[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) dk[i] = dv[i] = 0.f;
  if (n_steps > 0) {
    mbar_wait_spin(kv_full, 0);
    if (c == 1 && p.pingpong) bar_arrive(their_turn, 256);  // warpgroup 1 goes first
    for (int i = 0; i < n_steps; ++i) {
      const int st = i % kStages;
      const int q0 = (qt_begin + i) * kM;
      mbar_wait_spin(full(st), (i / kStages) & 1);
      // Causal: a tile whose last query precedes this warpgroup's first key adds nothing
      // (the warpgroup still takes its turn).
      const bool skip = CAUSAL && q0 + kM - 1 < wk0;
      const uint32_t q_tile = smem_u32(s_q + st * kM * D);
      const uint32_t do_tile = smem_u32(s_do + st * kM * D);
      float st_acc[kM / 2], dpt[kM / 2];
      const bool hand_over = p.pingpong && !(c == 1 && i == n_steps - 1);  // the other's turn
      if (p.pingpong) bar_sync(my_turn, 256);
      if (skip) {
        if (hand_over) bar_arrive(their_turn, 256);
      } else {
        wgmma_fence();
        ss_product<D, kM, kN, kM>(st_acc, k_base, q_tile, false);  // S^T = K Q^T
        wgmma_commit();
        ss_product<D, kM, kN, kM>(dpt, v_base, do_tile, false);  // dP^T = V dO^T
        wgmma_commit();
        if (hand_over) bar_arrive(their_turn, 256);
        const float* lse = s_lse + st * kM;
        const float* dl = s_delta + st * kM;
        wgmma_wait<1>();  // S^T; P^T is formed while dP^T's product runs
        fence_regs(st_acc);
        const bool masked = wk0 + 64 > p.tk || (CAUSAL && wk0 + 63 > q0);
#pragma unroll
        for (int nt = 0; nt < kMT; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int qq = nt * 8 + (lane & 3) * 2 + (e & 1);
            float x = exp2_approx(st_acc[nt * 4 + e] * p.scale_log2 - lse[qq] * kLog2e);
            if (masked) {
              const int key = key_lo + (e >> 1) * 8;
              if (key >= p.tk || (CAUSAL && key > q0 + qq)) x = 0.f;
            }
            st_acc[nt * 4 + e] = x;
          }
        uint32_t pa[kM / 16][4];
        acc_to_a<kM>(st_acc, pa, [](float x) { return x; });
        wgmma_fence();
        rs_product<D, kM, kM>(dv, pa, do_tile);  // dV += P^T dO
        wgmma_commit();
        wgmma_wait<1>();  // dP^T (the dV product may still run)
        fence_regs(dpt);
#pragma unroll
        for (int nt = 0; nt < kMT; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int qq = nt * 8 + (lane & 3) * 2 + (e & 1);
            dpt[nt * 4 + e] = st_acc[nt * 4 + e] * (dpt[nt * 4 + e] - dl[qq]);
          }
        uint32_t da[kM / 16][4];
        acc_to_a<kM>(dpt, da, [](float x) { return x; });
        wgmma_fence();
        rs_product<D, kM, kM>(dk, da, q_tile);  // dK += dS^T Q
        wgmma_commit();
        wgmma_wait<0>();
        fence_regs(dv);
        fence_regs(dk);
        fence_regs(pa);
        fence_regs(da);
      }
      mbar_arrive(empty(st));
    }
  }
  store_acc<D>(p.dk + b * p.sdk.b + h * p.sdk.h, p.sdk.t, wk0, p.tk, dk, p.scale);
  store_acc<D>(p.dv + b * p.sdv.b + h * p.sdv.h, p.sdv.t, wk0, p.tk, dv, 1.f);
#else
  (void)map_q, (void)map_k, (void)map_v, (void)map_do, (void)p;
#endif
}

// grid (B H, query blocks of 128); causal: the longest first.
// DROP: attention dropout (Params::drop): dS = P (Z dP - delta), Z drawn as the forward.
template <int D, bool CAUSAL, bool DROP = false>
__global__ void __launch_bounds__(kThreads, 1) attn_bwd_dq_sm90_kernel(const Params p) {
#if EMBER_ATTN_BWD_SM90A
  constexpr int kM = kRowsPerBlock;
  constexpr int kBN = kKeyTile;
  constexpr int kNT = kBN / 8;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  bf16* s_q = aligned_smem(smem_raw);
  bf16* s_do = s_q + kM * D;
  bf16* s_k = s_do + kM * D;      // [2][kBN * D]
  bf16* s_v = s_k + 2 * kBN * D;  // [2][kBN * D]

  const int wg = static_cast<int>(threadIdx.x) / 128;
  const int warp = (static_cast<int>(threadIdx.x) / 32) % 4;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const auto [bh, b, h, q0, n_kt] = query_block<kM, kBN, CAUSAL>(p.heads, p.tq, p.tk);
  const int wq0 = q0 + wg * 64;  // this warpgroup's first query row
  const bf16* gk = p.k + b * p.sk.b + h * p.sk.h;
  const bf16* gv = p.v + b * p.sv.b + h * p.sv.h;
  const int64_t row_base = static_cast<int64_t>(bh) * p.tq;

  load_tile<kM, D>(s_q, p.q + b * p.sq.b + h * p.sq.h, p.sq.t, q0, p.tq);
  load_tile<kM, D>(s_do, p.dout + b * p.sdo.b + h * p.sdo.h, p.sdo.t, q0, p.tq);
  if (n_kt > 0) {
    load_tile<kBN, D>(s_k, gk, p.sk.t, 0, p.tk);
    load_tile<kBN, D>(s_v, gv, p.sv.t, 0, p.tk);
  }
  cp_async_commit();

  const int row_lo = wq0 + warp * 16 + lane / 4;  // this thread's rows: row_lo, row_lo + 8
  // Dropout: the counters of this thread's two rows' key 0.
  [[maybe_unused]] uint64_t drop_rows[2] = {0, 0};
  if constexpr (DROP) {
    const uint64_t start = start_of(p.drop);
    drop_rows[0] = row_counter(start, bh, p.tq, p.tk, row_lo);
    drop_rows[1] = row_counter(start, bh, p.tq, p.tk, row_lo + 8);
  }
  float lse2[2], dl[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int q = row_lo + 8 * r;
    const float l = q < p.tq ? p.lse[row_base + q] : -INFINITY;
    lse2[r] = l > -INFINITY ? l * kLog2e : INFINITY;  // P = 0 past the end
    dl[r] = q < p.tq ? p.delta[row_base + q] : 0.f;
  }
  float dq[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) dq[i] = 0.f;
  const uint32_t q_base = smem_u32(s_q) + wg * 64 * 128;
  const uint32_t do_base = smem_u32(s_do) + wg * 64 * 128;

  for (int j = 0; j < n_kt; ++j) {
    const int buf = j & 1;
    if (j + 1 < n_kt) {
      load_tile<kBN, D>(s_k + (buf ^ 1) * kBN * D, gk, p.sk.t, (j + 1) * kBN, p.tk);
      load_tile<kBN, D>(s_v + (buf ^ 1) * kBN * D, gv, p.sv.t, (j + 1) * kBN, p.tk);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    fence_proxy_async();
    __syncthreads();
    const int k0 = j * kBN;
    // Causal: a key tile wholly after this warpgroup's last row adds nothing.
    if (!(CAUSAL && k0 > wq0 + 63)) {
      const uint32_t k_tile = smem_u32(s_k + buf * kBN * D);
      const uint32_t v_tile = smem_u32(s_v + buf * kBN * D);
      float s[kBN / 2], dp[kBN / 2];
      wgmma_fence();
      ss_product<D, kBN, kM, kBN>(s, q_base, k_tile, false);  // S = Q K^T
      wgmma_commit();
      ss_product<D, kBN, kM, kBN>(dp, do_base, v_tile, false);  // dP = dO V^T
      wgmma_commit();
      wgmma_wait<1>();  // S; P is formed while dP's product runs
      fence_regs(s);
      const bool masked = k0 + kBN > p.tk || (CAUSAL && k0 + kBN - 1 > wq0);
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float x = exp2_approx(s[nt * 4 + e] * p.scale_log2 - lse2[e >> 1]);
          if (masked) {
            const int key = k0 + nt * 8 + (lane & 3) * 2 + (e & 1);
            if (key >= p.tk || (CAUSAL && key > row_lo + (e >> 1) * 8)) x = 0.f;
          }
          if constexpr (DROP) {  // dropped: kept negated, as in the dK/dV kernel
            const int key = k0 + nt * 8 + (lane & 3) * 2 + (e & 1);
            x = keeps_at(p.drop, drop_rows[e >> 1] + static_cast<uint64_t>(key)) ? x : -x;
          }
          s[nt * 4 + e] = x;
        }
      wgmma_wait<0>();
      fence_regs(dp);
#pragma unroll
      for (int i = 0; i < kBN / 2; ++i) {
        const float dl_i = dl[(i >> 1) & 1];
        if constexpr (DROP)
          dp[i] = s[i] > 0.f ? s[i] * (dp[i] * p.drop.rscale - dl_i) : s[i] * dl_i;
        else
          dp[i] = s[i] * (dp[i] - dl_i);
      }
      uint32_t da[kBN / 16][4];
      acc_to_a<kBN>(dp, da, [](float x) { return x; });
      wgmma_fence();
      rs_product<D, kBN, kBN>(dq, da, k_tile);  // dQ += dS K
      wgmma_commit();
      wgmma_wait<0>();
      fence_regs(dq);
      fence_regs(da);
    }
    __syncthreads();
  }
  cp_async_wait<0>();
  store_acc<D>(p.dq + b * p.sdq.b + h * p.sdq.h, p.sdq.t, wq0, p.tq, dq, p.scale);
#else
  (void)p;
#endif
}

template <int D, bool ATOMIC_DQ = false>
constexpr size_t dkdv_smem() {
  return static_cast<size_t>(2 * kKeysPerBlock + 4 * kQueryTile) * D * sizeof(bf16) +
         4 * kQueryTile * sizeof(float) +
         (ATOMIC_DQ ? static_cast<size_t>(kKeysPerBlock) * kQueryTile * sizeof(bf16) : 0) + 1024;
}
template <int D>
constexpr size_t dq_smem() {
  return static_cast<size_t>(2 * kRowsPerBlock + 4 * kKeyTile) * D * sizeof(bf16) + 1024;
}

template <typename Kernel>
void launch(Kernel kernel, dim3 grid, size_t smem, cudaStream_t stream, const Params& prm) {
  EMBER_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(smem)));
  kernel<<<grid, kThreads, smem, stream>>>(prm);
  EMBER_CUDA_CHECK(cudaGetLastError());
}

template <int D, bool CAUSAL>
void launch_d(const Params& prm, int64_t bh, const AttentionProblem& p, AttentionInput q,
              AttentionInput k, AttentionInput v, AttentionInput d_out, bool warp_specialised,
              cudaStream_t stream) {
  const dim3 key_grid(static_cast<unsigned>(bh),
                      static_cast<unsigned>((prm.tk + kKeysPerBlock - 1) / kKeysPerBlock));
  const dim3 q_grid(static_cast<unsigned>(bh),
                    static_cast<unsigned>((prm.tq + kRowsPerBlock - 1) / kRowsPerBlock));
  if (p.dropout_p > 0.0) {  // version 2's kernels with dropout (checked by the caller)
    launch(attn_bwd_dkdv_sm90_kernel<D, CAUSAL, false, true>, key_grid, dkdv_smem<D>(), stream,
           prm);
    launch(attn_bwd_dq_sm90_kernel<D, CAUSAL, true>, q_grid, dq_smem<D>(), stream, prm);
    return;
  }
  if (warp_specialised) {
    auto kernel = attn_bwd_dkdv_sm90_ws_kernel<D, CAUSAL>;
    constexpr size_t kSmem = dkdv_ws_smem<D>();
    const CUtensorMap map_q = sm90::attention_tensor_map(p, q, p.q_len, kQueryTile);
    const CUtensorMap map_do = sm90::attention_tensor_map(p, d_out, p.q_len, kQueryTile);
    const CUtensorMap map_k = sm90::attention_tensor_map(p, k, p.kv_len, kKeysPerBlock);
    const CUtensorMap map_v = sm90::attention_tensor_map(p, v, p.kv_len, kKeysPerBlock);
    EMBER_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(kSmem)));
    kernel<<<key_grid, wsb::kThreads, kSmem, stream>>>(map_q, map_k, map_v, map_do, prm);
    EMBER_CUDA_CHECK(cudaGetLastError());
  } else if (prm.dq_acc != nullptr) {  // version 4: no dQ pass
    launch(attn_bwd_dkdv_sm90_kernel<D, CAUSAL, true>, key_grid, dkdv_smem<D, true>(), stream, prm);
    return;
  } else {
    launch(attn_bwd_dkdv_sm90_kernel<D, CAUSAL, false>, key_grid, dkdv_smem<D>(), stream, prm);
  }
  launch(attn_bwd_dq_sm90_kernel<D, CAUSAL>, q_grid, dq_smem<D>(), stream, prm);
}

bool aligned(const void* d, int64_t sb, int64_t sh, int64_t st) {
  return d != nullptr && reinterpret_cast<uintptr_t>(d) % 16 == 0 && sb % 8 == 0 && sh % 8 == 0 &&
         st % 8 == 0;
}

}  // namespace

void launch_attention_backward_sm90(const AttentionProblem& p, AttentionInput q, AttentionInput k,
                                    AttentionInput v, AttentionInput d_out, const float* lse,
                                    const float* delta, AttentionOutput d_q, AttentionOutput d_k,
                                    AttentionOutput d_v, cudaStream_t stream, bool warp_specialised,
                                    float* dq_acc) {
  constexpr const char* kOp = "attention_backward_sm90";
  const char* why = attention_unsupported(p.dtype, p.head_dim);
  EMBER_CHECK(why == nullptr, kOp, ": ", why == nullptr ? "" : why);
  EMBER_CHECK(p.mask_kind == 0, kOp,
              ": reads no mask (launch_attention_backward's version 1 does)");
  EMBER_CHECK(p.dropout_p >= 0.0 && p.dropout_p < 1.0, kOp, ": dropout_p must be in [0, 1), got ",
              p.dropout_p);
  EMBER_CHECK(p.dropout_p == 0.0 || (!warp_specialised && dq_acc == nullptr), kOp,
              ": dropout runs in version 2's kernels only (not the warp-specialised dK/dV "
              "kernel, nor the atomic dQ)");
  int device = 0, major = 0, minor = 0;
  EMBER_CUDA_CHECK(cudaGetDevice(&device));
  EMBER_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  EMBER_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  EMBER_CHECK(major == 9 && minor == 0, kOp, ": needs compute capability 9.0 (device ", device,
              " is ", major, ".", minor, ")");
  EMBER_CHECK(p.batch >= 0 && p.heads >= 0 && p.q_len > 0 && p.kv_len > 0 &&
                  p.q_len < (1LL << 30) && p.kv_len < (1LL << 30) &&
                  p.batch * p.heads < (1LL << 31),
              kOp, ": bad sizes (batch ", p.batch, ", heads ", p.heads, ", q_len ", p.q_len,
              ", kv_len ", p.kv_len, ")");
  const int64_t bh = p.batch * p.heads;
  if (bh == 0) return;
  EMBER_CHECK(aligned(q.data, q.stride_b, q.stride_h, q.stride_t) &&
                  aligned(k.data, k.stride_b, k.stride_h, k.stride_t) &&
                  aligned(v.data, v.stride_b, v.stride_h, v.stride_t) &&
                  aligned(d_out.data, d_out.stride_b, d_out.stride_h, d_out.stride_t) &&
                  aligned(d_q.data, d_q.stride_b, d_q.stride_h, d_q.stride_t) &&
                  aligned(d_k.data, d_k.stride_b, d_k.stride_h, d_k.stride_t) &&
                  aligned(d_v.data, d_v.stride_b, d_v.stride_h, d_v.stride_t),
              kOp, ": operands must be non-null, 16-byte aligned, strides multiples of 8");
  EMBER_CHECK(lse != nullptr && delta != nullptr, kOp, ": lse and delta must be non-null");
  Params prm{};
  prm.q = static_cast<const bf16*>(q.data);
  prm.k = static_cast<const bf16*>(k.data);
  prm.v = static_cast<const bf16*>(v.data);
  prm.dout = static_cast<const bf16*>(d_out.data);
  prm.lse = lse;
  prm.delta = delta;
  prm.dq = static_cast<bf16*>(d_q.data);
  prm.dk = static_cast<bf16*>(d_k.data);
  prm.dv = static_cast<bf16*>(d_v.data);
  prm.sq = {q.stride_b, q.stride_h, q.stride_t};
  prm.sk = {k.stride_b, k.stride_h, k.stride_t};
  prm.sv = {v.stride_b, v.stride_h, v.stride_t};
  prm.sdo = {d_out.stride_b, d_out.stride_h, d_out.stride_t};
  prm.sdq = {d_q.stride_b, d_q.stride_h, d_q.stride_t};
  prm.sdk = {d_k.stride_b, d_k.stride_h, d_k.stride_t};
  prm.sdv = {d_v.stride_b, d_v.stride_h, d_v.stride_t};
  prm.heads = static_cast<int>(p.heads);
  prm.tq = static_cast<int>(p.q_len);
  prm.tk = static_cast<int>(p.kv_len);
  prm.scale = p.scale;
  prm.scale_log2 = p.scale * kLog2e;
  prm.pingpong = attention_backward_pingpong();
  prm.dq_acc = dq_acc;
  prm.drop = attention_dropout_of(p);
  EMBER_CHECK(!(warp_specialised && dq_acc != nullptr), kOp,
              ": the atomic dQ (version 4) is version 2's dK/dV kernel, not the "
              "warp-specialised one");
  EMBER_CHECK(dq_acc == nullptr || reinterpret_cast<uintptr_t>(dq_acc) % 16 == 0, kOp,
              ": dq_acc must be 16-byte aligned");
  if (warp_specialised)
    EMBER_CHECK(attention_backward_ws_takes(p, q, k, v, d_out), kOp,
                ": a stride TMA cannot take (each of a dimension longer than 1 must be a "
                "positive multiple of 8 elements)");
  if (p.head_dim == 64)
    p.causal ? launch_d<64, true>(prm, bh, p, q, k, v, d_out, warp_specialised, stream)
             : launch_d<64, false>(prm, bh, p, q, k, v, d_out, warp_specialised, stream);
  else
    p.causal ? launch_d<128, true>(prm, bh, p, q, k, v, d_out, warp_specialised, stream)
             : launch_d<128, false>(prm, bh, p, q, k, v, d_out, warp_specialised, stream);
}

bool attention_backward_ws_takes(const AttentionProblem& p, AttentionInput q, AttentionInput k,
                                 AttentionInput v, AttentionInput d_out) {
  int64_t dims[4], strides[3];
  return sm90::attention_tma_dims(p, q, p.q_len, dims, strides) &&
         sm90::attention_tma_dims(p, d_out, p.q_len, dims, strides) &&
         sm90::attention_tma_dims(p, k, p.kv_len, dims, strides) &&
         sm90::attention_tma_dims(p, v, p.kv_len, dims, strides);
}

}  // namespace ember::cuda
