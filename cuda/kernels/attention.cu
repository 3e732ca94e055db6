// Fused attention, version 1 (see attention.h): FlashAttention-2's tiling on
// warp-level bf16 MMAs (mma.sync m16n8k16, fp32 accumulators).
//
// Forward: a block owns 16 W query rows (16 per warp), keeps its Q fragments in
// registers and walks 64-key tiles of K and V, double-buffered in shared memory
// by cp.async; scores stay in registers, an online softmax (base 2, running
// maximum and sum per row) rescales the output accumulator, P goes from the
// score accumulators straight into the A operand of P V.
// Backward: a pre-pass rowsum(dO * O); a block per 64 keys keeps dK and dV in
// registers (16 keys per warp) and walks 64-query tiles, recomputing
// P^T = exp(S^T - lse) from K Q^T; dQ either goes through shared memory and
// float atomics into a float32 accumulator, or in a separate pass per 64 queries
// walking the key tiles (deterministic; measured faster, the callers' default).
// Causal tiles past the diagonal are skipped; ragged tails load as zeros and
// are masked. Shared tiles are (rows, D) bf16 with 16-byte chunks XOR-swizzled
// by row so that ldmatrix and cp.async hit distinct banks.
#include <cuda_bf16.h>

#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>

#include "core/base/env_switch.h"
#include "core/base/error.h"
#include "core/base/random.h"
#include "cuda/check.h"
#include "cuda/kernels/attention.h"
#include "cuda/kernels/attention_dropout.cuh"
#include "cuda/kernels/registration.h"
#include "cuda/runtime.h"

namespace ember::cuda {

namespace {

using bf16 = __nv_bfloat16;

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
constexpr int kBlockN = 64;     // keys per tile (forward, dQ pass); keys per block (dK dV)
constexpr int kBwdBlockM = 64;  // queries per tile in backward
constexpr int kBwdWarps = 4;

struct Strides {
  int64_t b, h, t;
};

using Dropout = AttentionDropout;  // cuda/kernels/attention_dropout.cuh

// An attention mask read by the kernels (AttentionProblem::mask): element (b, h, i, j)
// at data[b sb + h sh + i si + j sj] (strides in elements, 0 where it broadcasts);
// kBoolMask: uint8, nonzero = take part (PyTorch's bool mask); kAddMask: bfloat16,
// added to the scaled score. The kernels take it when their MK parameter says so.
enum MaskKind : int { kNoMask = 0, kBoolMask = 1, kAddMask = 2 };
struct Mask {
  const void* data;
  int64_t sb, sh, si, sj;
};

// The mask's (b, h) plane, found once per block.
template <int MK>
__device__ __forceinline__ const void* mask_plane(const Mask& m, int b, int h) {
  if constexpr (MK == kNoMask) return nullptr;
  const int64_t at = b * m.sb + h * m.sh;
  if constexpr (MK == kBoolMask)
    return static_cast<const uint8_t*>(m.data) + at;
  else
    return static_cast<const bf16*>(m.data) + at;
}

// The mask's term for score (i, j) of `plane` in the kernels' base-2 domain: 0 or -inf
// (bool), the additive value times log2(e).
template <int MK>
__device__ __forceinline__ float mask_term(const void* plane, const Mask& m, int i, int j) {
  const int64_t at = i * m.si + j * m.sj;
  if constexpr (MK == kBoolMask)
    return static_cast<const uint8_t*>(plane)[at] != 0 ? 0.f : -INFINITY;
  else
    return __bfloat162float(static_cast<const bf16*>(plane)[at]) * kLog2e;
}

struct FwdParams {
  const bf16* q;
  const bf16* k;
  const bf16* v;
  bf16* o;
  float* lse;  // (B, H, Tq)
  Strides sq, sk, sv, so;
  int heads, tq, tk;
  float scale_log2;  // scale * log2(e)
  Dropout drop;
  Mask mask;
};

struct BwdParams {
  const bf16* q;
  const bf16* k;
  const bf16* v;
  const bf16* o;
  const bf16* dout;
  const float* lse;  // (B, H, Tq)
  float* delta;      // (B, H, Tq): rowsum(dO * O)
  float* dq_acc;     // (B, H, Tq, D) float32, atomic mode only
  bf16* dq;
  bf16* dk;
  bf16* dv;
  Strides sq, sk, sv, so, sdo, sdq, sdk, sdv;
  int heads, tq, tk;
  float scale, scale_log2;
  Dropout drop;
  Mask mask;
};

// ---- PTX wrappers --------------------------------------------------------------
// cp.async, ldmatrix and bf16 mma.sync need sm_80; a build for an older target
// compiles these to a trap, and the launchers refuse such a device.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#define EMBER_ATTN_ASM(...) __trap()
#define EMBER_ATTN_PURE_ASM(...) __trap()
#else
#define EMBER_ATTN_ASM(...) asm volatile(__VA_ARGS__)
#define EMBER_ATTN_PURE_ASM(...) asm(__VA_ARGS__)
#endif

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared; zero-filled (nothing read) when !pred.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool pred) {
  const int n = pred ? 16 : 0;
  EMBER_ATTN_ASM("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n));
}
__device__ __forceinline__ void cp_async_commit() {
  EMBER_ATTN_ASM("cp.async.commit_group;\n" ::);
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  EMBER_ATTN_ASM("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldsm_x4(uint32_t addr, uint32_t (&r)[4]) {
  EMBER_ATTN_ASM("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t addr, uint32_t (&r)[4]) {
  EMBER_ATTN_ASM("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

// c += a (16x16, row) * b (16x8, col), bf16 in, fp32 accumulate.
__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  EMBER_ATTN_ASM(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ float exp2_approx(float x) {
  float y = 0.f;
  EMBER_ATTN_PURE_ASM("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// ---- shared tiles ---------------------------------------------------------------

// Element offset of (row r, 16-byte chunk c) in a shared tile of LEN-element rows.
template <int LEN>
__device__ __forceinline__ int swz(int r, int c) {
  return r * LEN + ((c ^ (r & 7)) << 3);
}

// Rows row0 .. row0 + ROWS - 1 of a (T, D) matrix with row stride `st` into a
// swizzled shared tile; rows at or past `valid` become zeros.
template <int ROWS, int D, int THREADS>
__device__ __forceinline__ void load_tile(bf16* tile, const bf16* g, int64_t st, int row0,
                                          int valid) {
  constexpr int kChunks = D / 8;
  constexpr int kTotal = ROWS * kChunks;
  static_assert(kTotal % THREADS == 0, "tile chunks must divide among the threads");
#pragma unroll
  for (int i = 0; i < kTotal / THREADS; ++i) {
    const int idx = i * THREADS + static_cast<int>(threadIdx.x);
    const int r = idx / kChunks;
    const int c = idx % kChunks;
    const int gr = row0 + r;
    const bool ok = gr < valid;
    const bf16* src = ok ? g + static_cast<int64_t>(gr) * st + c * 8 : g;
    cp_async16(smem_u32(tile + swz<D>(r, c)), src, ok);
  }
}

// Fragment loads. Lane l of a warp supplies one row address of the four 8x8
// matrices of an x4 ldmatrix (matrix l / 8).
// A operand (16 rows m, 16 k) from a tile stored (m, k): regs a0..a3.
template <int LEN>
__device__ __forceinline__ void load_a(const bf16* tile, int m0, int kc, int lane,
                                       uint32_t (&a)[4]) {
  ldsm_x4(smem_u32(tile + swz<LEN>(m0 + (lane & 15), kc + (lane >> 4))), a);
}
// A operand (16 m, 16 k) from a tile stored (k, m) (transposed).
template <int LEN>
__device__ __forceinline__ void load_a_t(const bf16* tile, int k0, int mc, int lane,
                                         uint32_t (&a)[4]) {
  ldsm_x4_t(smem_u32(tile + swz<LEN>(k0 + (lane >> 4) * 8 + (lane & 7), mc + ((lane >> 3) & 1))),
            a);
}
// B operands of two n-tiles (16 n, 16 k) from a tile stored (n, k):
// r0, r1 for n-tile 0 and r2, r3 for n-tile 1.
template <int LEN>
__device__ __forceinline__ void load_b(const bf16* tile, int n0, int kc, int lane,
                                       uint32_t (&b)[4]) {
  ldsm_x4(smem_u32(tile + swz<LEN>(n0 + (lane >> 4) * 8 + (lane & 7), kc + ((lane >> 3) & 1))), b);
}
// B operands of two n-tiles (16 k, 16 n) from a tile stored (k, n) (transposed).
template <int LEN>
__device__ __forceinline__ void load_b_t(const bf16* tile, int k0, int nc, int lane,
                                         uint32_t (&b)[4]) {
  ldsm_x4_t(smem_u32(tile + swz<LEN>(k0 + ((lane >> 3) & 1) * 8 + (lane & 7), nc + (lane >> 4))),
            b);
}

// The A operand of k-step `kk` (16 columns) from fp32 accumulators of n-tiles
// 2 kk and 2 kk + 1 (the C layout of m16n8 equals the A layout of m16k16).
template <int NT>
__device__ __forceinline__ void acc_to_a(const float (&s)[NT][4], int kk, uint32_t (&a)[4]) {
  a[0] = pack_bf16(s[2 * kk][0], s[2 * kk][1]);
  a[1] = pack_bf16(s[2 * kk][2], s[2 * kk][3]);
  a[2] = pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]);
  a[3] = pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3]);
}

// acc (16 x 8 NT) += A rows [m0, m0+16) of `a_tile` (stored (m, D)) times the rows
// [n0, n0 + 8 NT) of `b_tile` (stored (n, D)) transposed: a product over D.
template <int D, int NT>
__device__ __forceinline__ void mma_rows_by_rows(float (&acc)[NT][4], const bf16* a_tile, int m0,
                                                 const bf16* b_tile, int n0, int lane) {
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    uint32_t a[4];
    load_a<D>(a_tile, m0, kk * 2, lane, a);
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
      uint32_t b[4];
      load_b<D>(b_tile, n0 + np * 16, kk * 2, lane, b);
      mma_bf16(acc[2 * np], a, b[0], b[1]);
      mma_bf16(acc[2 * np + 1], a, b[2], b[3]);
    }
  }
}

// acc_to_a of the kept entries of a dropout-signed P^T (dropped ones stored negated,
// so P >= 0 kept and P <= 0 dropped), each times `rscale`; dropped ones as 0.
template <int NT>
__device__ __forceinline__ void kept_to_a(const float (&s)[NT][4], int kk, float rscale,
                                          uint32_t (&a)[4]) {
  auto k = [rscale](float x) { return fmaxf(x, 0.f) * rscale; };
  a[0] = pack_bf16(k(s[2 * kk][0]), k(s[2 * kk][1]));
  a[1] = pack_bf16(k(s[2 * kk][2]), k(s[2 * kk][3]));
  a[2] = pack_bf16(k(s[2 * kk + 1][0]), k(s[2 * kk + 1][1]));
  a[3] = pack_bf16(k(s[2 * kk + 1][2]), k(s[2 * kk + 1][3]));
}

// acc (16 x D) += P (16 x 16 KT, fp32 accumulators) times rows [0, 16 KT) of
// `tile` (stored (k, D)). KEPT: P dropout-signed (kept_to_a), its kept part scaled.
template <int D, int NT, bool KEPT = false>
__device__ __forceinline__ void mma_acc_by_tile(float (&acc)[D / 8][4], const float (&p)[NT][4],
                                                const bf16* tile, int lane, float rscale = 1.f) {
#pragma unroll
  for (int kk = 0; kk < NT / 2; ++kk) {
    uint32_t a[4];
    if constexpr (KEPT)
      kept_to_a(p, kk, rscale, a);
    else
      acc_to_a(p, kk, a);
#pragma unroll
    for (int dp = 0; dp < D / 16; ++dp) {
      uint32_t b[4];
      load_b_t<D>(tile, kk * 16, dp * 2, lane, b);
      mma_bf16(acc[2 * dp], a, b[0], b[1]);
      mma_bf16(acc[2 * dp + 1], a, b[2], b[3]);
    }
  }
}

template <int NT>
__device__ __forceinline__ void zero(float (&acc)[NT][4]) {
#pragma unroll
  for (int i = 0; i < NT; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[i][e] = 0.f;
}

__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// Writes a warp's (16, D) fp32 accumulator rows `row_lo` and row_lo + 8 (this
// lane's two rows) as bf16 times `mul[r]`, rows at or past `valid` skipped.
template <int D>
__device__ __forceinline__ void store_rows(bf16* g, int64_t st, int row_lo, int valid,
                                           const float (&acc)[D / 8][4], const float (&mul)[2],
                                           int lane) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = row_lo + 8 * r;
    if (row >= valid) continue;
    bf16* dst = g + static_cast<int64_t>(row) * st + (lane & 3) * 2;
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt)
      *reinterpret_cast<__nv_bfloat162*>(dst + dt * 8) =
          __floats2bfloat162_rn(acc[dt][2 * r] * mul[r], acc[dt][2 * r + 1] * mul[r]);
  }
}

// ---- forward --------------------------------------------------------------------

// grid (B H, query tiles); causal: tiles longest first.
template <int D, int W, bool CAUSAL, bool DROP, int MK>
__global__ void __launch_bounds__(W * 32) attn_fwd_kernel(const FwdParams p) {
  constexpr int kM = 16 * W;
  constexpr int kThreads = W * 32;
  constexpr int kNT = kBlockN / 8;
  constexpr int kDT = D / 8;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  bf16* s_q = reinterpret_cast<bf16*>(smem_raw);
  bf16* s_k = s_q + kM * D;
  bf16* s_v = s_k + 2 * kBlockN * D;

  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int bh = static_cast<int>(blockIdx.x);
  const int b = bh / p.heads, h = bh % p.heads;
  [[maybe_unused]] const uint64_t drop_start = DROP ? start_of(p.drop) : 0;  // dropout: 1st counter
  [[maybe_unused]] const void* mplane = mask_plane<MK>(p.mask, b, h);
  const int n_qt = (p.tq + kM - 1) / kM;
  const int qt = CAUSAL ? n_qt - 1 - static_cast<int>(blockIdx.y) : static_cast<int>(blockIdx.y);
  const int q0 = qt * kM;
  const bf16* gq = p.q + b * p.sq.b + h * p.sq.h;
  const bf16* gk = p.k + b * p.sk.b + h * p.sk.h;
  const bf16* gv = p.v + b * p.sv.b + h * p.sv.h;
  const int kend = CAUSAL ? min(p.tk, q0 + kM) : p.tk;
  const int n_kt = (kend + kBlockN - 1) / kBlockN;

  load_tile<kM, D, kThreads>(s_q, gq, p.sq.t, q0, p.tq);
  if (n_kt > 0) {
    load_tile<kBlockN, D, kThreads>(s_k, gk, p.sk.t, 0, p.tk);
    load_tile<kBlockN, D, kThreads>(s_v, gv, p.sv.t, 0, p.tk);
  }
  cp_async_commit();

  float acc[kDT][4];
  zero(acc);
  float m[2] = {-INFINITY, -INFINITY};
  float l[2] = {0.f, 0.f};
  uint32_t qf[D / 16][4];
  const int row_lo = q0 + warp * 16 + lane / 4;

  for (int j = 0; j < n_kt; ++j) {
    const int buf = j & 1;
    if (j + 1 < n_kt) {
      load_tile<kBlockN, D, kThreads>(s_k + (buf ^ 1) * kBlockN * D, gk, p.sk.t, (j + 1) * kBlockN,
                                      p.tk);
      load_tile<kBlockN, D, kThreads>(s_v + (buf ^ 1) * kBlockN * D, gv, p.sv.t, (j + 1) * kBlockN,
                                      p.tk);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    if (j == 0) {
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) load_a<D>(s_q, warp * 16, kk * 2, lane, qf[kk]);
    }
    const bf16* tk = s_k + buf * kBlockN * D;
    const bf16* tv = s_v + buf * kBlockN * D;

    float s[kNT][4];
    zero(s);
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
#pragma unroll
      for (int np = 0; np < kNT / 2; ++np) {
        uint32_t bq[4];
        load_b<D>(tk, np * 16, kk * 2, lane, bq);
        mma_bf16(s[2 * np], qf[kk], bq[0], bq[1]);
        mma_bf16(s[2 * np + 1], qf[kk], bq[2], bq[3]);
      }
    }

    const int k0 = j * kBlockN;
    const bool masked = k0 + kBlockN > p.tk || (CAUSAL && k0 + kBlockN - 1 > q0);
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float x = s[nt][e] * p.scale_log2;
        if constexpr (MK != kNoMask) {
          const int key = k0 + nt * 8 + (lane & 3) * 2 + (e & 1);
          const int row = row_lo + (e >> 1) * 8;
          if (row < p.tq && key < p.tk) x += mask_term<MK>(mplane, p.mask, row, key);
        }
        if (masked) {
          const int key = k0 + nt * 8 + (lane & 3) * 2 + (e & 1);
          const int row = row_lo + (e >> 1) * 8;
          if (key >= p.tk || (CAUSAL && key > row)) x = -INFINITY;
        }
        s[nt][e] = x;
      }

#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) mx = fmaxf(mx, fmaxf(s[nt][2 * r], s[nt][2 * r + 1]));
      mx = quad_max(mx);
      const float m_new = fmaxf(m[r], mx);
      const float m_use = m_new == -INFINITY ? 0.f : m_new;
      const float corr = exp2_approx(m[r] - m_use);
      m[r] = m_new;
      float sum = 0.f;
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
        s[nt][2 * r] = exp2_approx(s[nt][2 * r] - m_use);
        s[nt][2 * r + 1] = exp2_approx(s[nt][2 * r + 1] - m_use);
        sum += s[nt][2 * r] + s[nt][2 * r + 1];
      }
      l[r] = l[r] * corr + sum;
#pragma unroll
      for (int dt = 0; dt < kDT; ++dt) {
        acc[dt][2 * r] *= corr;
        acc[dt][2 * r + 1] *= corr;
      }
    }
    if constexpr (DROP) {
      // The row sums above are of the undropped weights (softmax, then dropout).
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = k0 + nt * 8 + (lane & 3) * 2 + (e & 1);
          const int row = row_lo + (e >> 1) * 8;
          if (row < p.tq && key < p.tk)
            s[nt][e] = keeps(p.drop, drop_start, bh, p.tq, p.tk, row, key)
                           ? s[nt][e] * p.drop.rscale
                           : 0.f;
        }
    }

    mma_acc_by_tile<D, kNT>(acc, s, tv, lane);
    __syncthreads();
  }
  cp_async_wait<0>();

  float inv[2];
  const int64_t lse_base = static_cast<int64_t>(bh) * p.tq;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float total = quad_sum(l[r]);
    inv[r] = total > 0.f ? 1.f / total : 0.f;
    const int row = row_lo + 8 * r;
    if ((lane & 3) == 0 && row < p.tq)
      p.lse[lse_base + row] = total > 0.f ? (m[r] + log2f(total)) * kLn2 : -INFINITY;
  }
  store_rows<D>(p.o + b * p.so.b + h * p.so.h, p.so.t, row_lo, p.tq, acc, inv, lane);
}

// ---- backward -------------------------------------------------------------------

// delta[bh, i] = sum_d dO[i, d] O[i, d]: a warp per row.
template <int D>
__global__ void attn_bwd_delta_kernel(const BwdParams p, int64_t rows) {
  const int64_t row = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  if (row >= rows) return;
  const int64_t bh = row / p.tq;
  const int i = static_cast<int>(row % p.tq);
  const int64_t b = bh / p.heads, h = bh % p.heads;
  const bf16* o = p.o + b * p.so.b + h * p.so.h + i * p.so.t;
  const bf16* d = p.dout + b * p.sdo.b + h * p.sdo.h + i * p.sdo.t;
  float sum = 0.f;
#pragma unroll
  for (int c = lane * 2; c < D; c += 64) {
    const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(o + c));
    const float2 g = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(d + c));
    sum += a.x * g.x + a.y * g.y;
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  if (lane == 0) p.delta[row] = sum;
}

// The same with 16-byte loads: D / 8 lanes a row (8 values each), 32 / (D / 8) rows a
// warp, 32-bit divisions (rows < 2^31). Under ncu on an H100 the kernel above took
// 47 us for GPT-2's 196,608 rows of 64 (50 MB read: 1.1 TB/s) with the SMs 75% busy, on
// its 64-bit divisions per lane and 4-byte loads. Needs every row of o and dO 16-byte
// aligned (delta_vectors_fit).
template <int D>
__global__ void attn_bwd_delta_vec_kernel(const BwdParams p, int rows) {
  constexpr int kLanes = D / 8;
  const int t = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  const int row = t / kLanes, part = t % kLanes;
  float sum = 0.f;
  if (row < rows) {
    const int bh = row / p.tq, i = row - bh * p.tq;
    const int b = bh / p.heads, h = bh - b * p.heads;
    const bf16* o = p.o + b * p.so.b + h * p.so.h + i * p.so.t + part * 8;
    const bf16* d = p.dout + b * p.sdo.b + h * p.sdo.h + i * p.sdo.t + part * 8;
    const uint4 ov = *reinterpret_cast<const uint4*>(o);
    const uint4 dv = *reinterpret_cast<const uint4*>(d);
    const uint32_t ow[4] = {ov.x, ov.y, ov.z, ov.w}, dw[4] = {dv.x, dv.y, dv.z, dv.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&ow[k]));
      const float2 g = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&dw[k]));
      sum += a.x * g.x + a.y * g.y;
    }
  }
  // Every lane takes part (full mask); a row's kLanes lanes are aligned in the warp.
#pragma unroll
  for (int off = kLanes / 2; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  if (row < rows && part == 0) p.delta[row] = sum;
}

// Query-row side data of one backward tile: lse in base 2 (+inf past the end, so
// that P = 0 there) and delta.
__device__ __forceinline__ void load_row_stats(float* s_lse, float* s_delta, const BwdParams& p,
                                               int64_t base, int q0, int n) {
  for (int i = static_cast<int>(threadIdx.x); i < n; i += static_cast<int>(blockDim.x)) {
    const int q = q0 + i;
    // +inf past the end and for rows that saw no key (lse -inf: a mask took every
    // key), so that P = 0 there.
    const float l = q < p.tq ? p.lse[base + q] : -INFINITY;
    s_lse[i] = l > -INFINITY ? l * kLog2e : INFINITY;
    s_delta[i] = q < p.tq ? p.delta[base + q] : 0.f;
  }
}

// dK, dV (and with ATOMIC_DQ, dQ added into the float32 accumulator) for 64 keys.
// grid (B H, key tiles); causal: key tile 0 (the most queries) first.
// M query rows per tile: 64, or 32 (deterministic only: the atomic dQ gives each
// warp 16 of the tile's query rows); at D 128 the 64-row tile's P^T and dP^T
// (2 x 32 floats) on top of dK and dV (2 x 64) exceed 255 registers.
template <int D, int M, bool CAUSAL, bool ATOMIC_DQ, bool DROP, int MK>
__global__ void __launch_bounds__(kBwdWarps * 32) attn_bwd_dkdv_kernel(const BwdParams p) {
  constexpr int kM = M;
  constexpr int kN = kBlockN;
  constexpr int kThreads = kBwdWarps * 32;
  constexpr int kMT = kM / 8;  // n-tiles over queries
  constexpr int kDT = D / 8;
  static_assert(kN == 16 * kBwdWarps, "a warp per 16 keys");
  static_assert(kM % 32 == 0 && kN % kM == 0, "query tiles of 32 or 64 rows");
  static_assert(!ATOMIC_DQ || kM == 16 * kBwdWarps, "atomic dQ: a warp per 16 query rows");
  extern __shared__ __align__(128) unsigned char smem_raw[];
  bf16* s_k = reinterpret_cast<bf16*>(smem_raw);
  bf16* s_v = s_k + kN * D;
  bf16* s_q = s_v + kN * D;        // [2][kM * D]
  bf16* s_do = s_q + 2 * kM * D;   // [2][kM * D]
  bf16* s_ds = s_do + 2 * kM * D;  // [kN * kM], ATOMIC_DQ only
  float* s_lse = reinterpret_cast<float*>(s_ds + (ATOMIC_DQ ? kN * kM : 0));  // [2][kM]
  float* s_delta = s_lse + 2 * kM;                                            // [2][kM]

  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int bh = static_cast<int>(blockIdx.x);
  const int b = bh / p.heads, h = bh % p.heads;
  [[maybe_unused]] const uint64_t drop_start = DROP ? start_of(p.drop) : 0;  // dropout: 1st counter
  [[maybe_unused]] const void* mplane = mask_plane<MK>(p.mask, b, h);
  const int k0 = static_cast<int>(blockIdx.y) * kN;
  const bf16* gq = p.q + b * p.sq.b + h * p.sq.h;
  const bf16* gk = p.k + b * p.sk.b + h * p.sk.h;
  const bf16* gv = p.v + b * p.sv.b + h * p.sv.h;
  const bf16* gdo = p.dout + b * p.sdo.b + h * p.sdo.h;
  const int64_t row_base = static_cast<int64_t>(bh) * p.tq;
  const int qt_begin = CAUSAL ? k0 / kM : 0;
  const int n_qt = (p.tq + kM - 1) / kM;

  load_tile<kN, D, kThreads>(s_k, gk, p.sk.t, k0, p.tk);
  load_tile<kN, D, kThreads>(s_v, gv, p.sv.t, k0, p.tk);
  if (qt_begin < n_qt) {
    load_tile<kM, D, kThreads>(s_q, gq, p.sq.t, qt_begin * kM, p.tq);
    load_tile<kM, D, kThreads>(s_do, gdo, p.sdo.t, qt_begin * kM, p.tq);
    load_row_stats(s_lse, s_delta, p, row_base, qt_begin * kM, kM);
  }
  cp_async_commit();

  float dk[kDT][4], dv[kDT][4];
  zero(dk);
  zero(dv);
  const int key_lo = k0 + warp * 16 + lane / 4;

  for (int it = qt_begin; it < n_qt; ++it) {
    const int buf = (it - qt_begin) & 1;
    const int q0 = it * kM;
    if (it + 1 < n_qt) {
      const int nb = buf ^ 1;
      load_tile<kM, D, kThreads>(s_q + nb * kM * D, gq, p.sq.t, q0 + kM, p.tq);
      load_tile<kM, D, kThreads>(s_do + nb * kM * D, gdo, p.sdo.t, q0 + kM, p.tq);
      load_row_stats(s_lse + nb * kM, s_delta + nb * kM, p, row_base, q0 + kM, kM);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const bf16* tq = s_q + buf * kM * D;
    const bf16* tdo = s_do + buf * kM * D;
    const float* lse2 = s_lse + buf * kM;
    const float* dl = s_delta + buf * kM;

    // P^T (16 keys x kM queries) = exp2(scale log2e K Q^T - lse2).
    float pt[kMT][4];
    zero(pt);
    mma_rows_by_rows<D, kMT>(pt, s_k, warp * 16, tq, 0, lane);
    const bool masked = k0 + kN > p.tk || (CAUSAL && k0 + kN - 1 > q0);
#pragma unroll
    for (int nt = 0; nt < kMT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int qq = nt * 8 + (lane & 3) * 2 + (e & 1);
        float t = pt[nt][e] * p.scale_log2;
        if constexpr (MK != kNoMask) {
          const int key = key_lo + (e >> 1) * 8, q = q0 + qq;
          if (q < p.tq && key < p.tk) t += mask_term<MK>(mplane, p.mask, q, key);
        }
        float x = exp2_approx(t - lse2[qq]);
        if (masked) {
          const int key = key_lo + (e >> 1) * 8;
          if (key >= p.tk || (CAUSAL && key > q0 + qq)) x = 0.f;
        }
        if constexpr (DROP) {
          // Dropped weights negated (P >= 0): one draw serves dV and dS.
          const int key = key_lo + (e >> 1) * 8, q = q0 + qq;
          if (q < p.tq && key < p.tk && !keeps(p.drop, drop_start, bh, p.tq, p.tk, q, key)) x = -x;
        }
        pt[nt][e] = x;
      }

    // dP^T = V dO^T (with dropout: the gradient of the dropped weights Z P).
    float dpt[kMT][4];
    zero(dpt);
    mma_rows_by_rows<D, kMT>(dpt, s_v, warp * 16, tdo, 0, lane);

    // dV += P^T dO (with dropout: (Z P)^T dO).
    if constexpr (DROP)
      mma_acc_by_tile<D, kMT, true>(dv, pt, tdo, lane, p.drop.rscale);
    else
      mma_acc_by_tile<D, kMT>(dv, pt, tdo, lane);

      // dS^T = P^T (dP^T - delta); with dropout P^T (Z dP^T - delta), delta being
      // rowsum(dO O) of the dropped output either way: a dropped weight (stored -P)
      // gives -P delta = pt delta.
#pragma unroll
    for (int nt = 0; nt < kMT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int qq = nt * 8 + (lane & 3) * 2 + (e & 1);
        if constexpr (DROP)
          dpt[nt][e] = pt[nt][e] > 0.f ? pt[nt][e] * (dpt[nt][e] * p.drop.rscale - dl[qq])
                                       : pt[nt][e] * dl[qq];
        else
          dpt[nt][e] = pt[nt][e] * (dpt[nt][e] - dl[qq]);
      }

    // dK += dS^T Q.
    mma_acc_by_tile<D, kMT>(dk, dpt, tq, lane);

    if constexpr (ATOMIC_DQ) {
      // dS^T to shared (keys, queries), then each warp takes 16 query rows:
      // dQ (16 x D) = dS (16 x kN) K (kN x D).
#pragma unroll
      for (int nt = 0; nt < kMT; ++nt)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int row = warp * 16 + lane / 4 + 8 * r;
          *reinterpret_cast<uint32_t*>(s_ds + swz<kM>(row, nt) + (lane & 3) * 2) =
              pack_bf16(dpt[nt][2 * r], dpt[nt][2 * r + 1]);
        }
      __syncthreads();
      float dq[kDT][4];
      zero(dq);
#pragma unroll
      for (int kk = 0; kk < kN / 16; ++kk) {
        uint32_t a[4];
        load_a_t<kM>(s_ds, kk * 16, warp * 2, lane, a);
#pragma unroll
        for (int dp = 0; dp < D / 16; ++dp) {
          uint32_t bk[4];
          load_b_t<D>(s_k, kk * 16, dp * 2, lane, bk);
          mma_bf16(dq[2 * dp], a, bk[0], bk[1]);
          mma_bf16(dq[2 * dp + 1], a, bk[2], bk[3]);
        }
      }
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int q = q0 + warp * 16 + lane / 4 + 8 * r;
        if (q >= p.tq) continue;
        float* dst = p.dq_acc + (row_base + q) * D + (lane & 3) * 2;
#pragma unroll
        for (int dt = 0; dt < kDT; ++dt) {
          atomicAdd(dst + dt * 8, dq[dt][2 * r]);
          atomicAdd(dst + dt * 8 + 1, dq[dt][2 * r + 1]);
        }
      }
    }
    __syncthreads();
  }
  cp_async_wait<0>();

  const float kmul[2] = {p.scale, p.scale};
  const float vmul[2] = {1.f, 1.f};
  store_rows<D>(p.dk + b * p.sdk.b + h * p.sdk.h, p.sdk.t, key_lo, p.tk, dk, kmul, lane);
  store_rows<D>(p.dv + b * p.sdv.b + h * p.sdv.h, p.sdv.t, key_lo, p.tk, dv, vmul, lane);
}

// Deterministic dQ for 64 query rows: walks the key tiles as the forward does.
// grid (B H, query tiles); causal: longest first.
template <int D, bool CAUSAL, bool DROP, int MK>
__global__ void __launch_bounds__(kBwdWarps * 32) attn_bwd_dq_kernel(const BwdParams p) {
  constexpr int kM = kBwdBlockM;
  constexpr int kThreads = kBwdWarps * 32;
  constexpr int kNT = kBlockN / 8;
  constexpr int kDT = D / 8;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  bf16* s_q = reinterpret_cast<bf16*>(smem_raw);
  bf16* s_do = s_q + kM * D;
  bf16* s_k = s_do + kM * D;          // [2][kBlockN * D]
  bf16* s_v = s_k + 2 * kBlockN * D;  // [2][kBlockN * D]

  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int bh = static_cast<int>(blockIdx.x);
  const int b = bh / p.heads, h = bh % p.heads;
  [[maybe_unused]] const uint64_t drop_start = DROP ? start_of(p.drop) : 0;  // dropout: 1st counter
  [[maybe_unused]] const void* mplane = mask_plane<MK>(p.mask, b, h);
  const int n_qt = (p.tq + kM - 1) / kM;
  const int qt = CAUSAL ? n_qt - 1 - static_cast<int>(blockIdx.y) : static_cast<int>(blockIdx.y);
  const int q0 = qt * kM;
  const bf16* gk = p.k + b * p.sk.b + h * p.sk.h;
  const bf16* gv = p.v + b * p.sv.b + h * p.sv.h;
  const int kend = CAUSAL ? min(p.tk, q0 + kM) : p.tk;
  const int n_kt = (kend + kBlockN - 1) / kBlockN;
  const int64_t row_base = static_cast<int64_t>(bh) * p.tq;

  load_tile<kM, D, kThreads>(s_q, p.q + b * p.sq.b + h * p.sq.h, p.sq.t, q0, p.tq);
  load_tile<kM, D, kThreads>(s_do, p.dout + b * p.sdo.b + h * p.sdo.h, p.sdo.t, q0, p.tq);
  if (n_kt > 0) {
    load_tile<kBlockN, D, kThreads>(s_k, gk, p.sk.t, 0, p.tk);
    load_tile<kBlockN, D, kThreads>(s_v, gv, p.sv.t, 0, p.tk);
  }
  cp_async_commit();

  const int row_lo = q0 + warp * 16 + lane / 4;
  float lse2[2], dl[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int q = row_lo + 8 * r;
    const float l = q < p.tq ? p.lse[row_base + q] : -INFINITY;
    lse2[r] = l > -INFINITY ? l * kLog2e : INFINITY;  // P = 0 past the end and in keyless rows
    dl[r] = q < p.tq ? p.delta[row_base + q] : 0.f;
  }
  float dq[kDT][4];
  zero(dq);

  for (int j = 0; j < n_kt; ++j) {
    const int buf = j & 1;
    if (j + 1 < n_kt) {
      load_tile<kBlockN, D, kThreads>(s_k + (buf ^ 1) * kBlockN * D, gk, p.sk.t, (j + 1) * kBlockN,
                                      p.tk);
      load_tile<kBlockN, D, kThreads>(s_v + (buf ^ 1) * kBlockN * D, gv, p.sv.t, (j + 1) * kBlockN,
                                      p.tk);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const bf16* tk = s_k + buf * kBlockN * D;
    const bf16* tv = s_v + buf * kBlockN * D;

    float s[kNT][4];
    zero(s);
    mma_rows_by_rows<D, kNT>(s, s_q, warp * 16, tk, 0, lane);
    const int k0 = j * kBlockN;
    const bool masked = k0 + kBlockN > p.tk || (CAUSAL && k0 + kBlockN - 1 > q0);
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float t = s[nt][e] * p.scale_log2;
        if constexpr (MK != kNoMask) {
          const int key = k0 + nt * 8 + (lane & 3) * 2 + (e & 1), row = row_lo + (e >> 1) * 8;
          if (row < p.tq && key < p.tk) t += mask_term<MK>(mplane, p.mask, row, key);
        }
        float x = exp2_approx(t - lse2[e >> 1]);
        if (masked) {
          const int key = k0 + nt * 8 + (lane & 3) * 2 + (e & 1);
          if (key >= p.tk || (CAUSAL && key > row_lo + (e >> 1) * 8)) x = 0.f;
        }
        s[nt][e] = x;
      }
    float dp[kNT][4];
    zero(dp);
    mma_rows_by_rows<D, kNT>(dp, s_do, warp * 16, tv, 0, lane);
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        if constexpr (DROP) {
          // dS = P (Z dP - delta): a dropped weight gives -P delta.
          const int key = k0 + nt * 8 + (lane & 3) * 2 + (e & 1), row = row_lo + (e >> 1) * 8;
          const bool kept =
              row >= p.tq || key >= p.tk || keeps(p.drop, drop_start, bh, p.tq, p.tk, row, key);
          dp[nt][e] =
              kept ? s[nt][e] * (dp[nt][e] * p.drop.rscale - dl[e >> 1]) : -s[nt][e] * dl[e >> 1];
        } else {
          dp[nt][e] = s[nt][e] * (dp[nt][e] - dl[e >> 1]);
        }
      }
    mma_acc_by_tile<D, kNT>(dq, dp, tk, lane);
    __syncthreads();
  }
  cp_async_wait<0>();
  const float mul[2] = {p.scale, p.scale};
  store_rows<D>(p.dq + b * p.sdq.b + h * p.sdq.h, p.sdq.t, row_lo, p.tq, dq, mul, lane);
}

// dQ = scale * accumulator, as bf16 into its strided layout: 8 elements a thread.
template <int D>
__global__ void attn_bwd_dq_convert_kernel(const BwdParams p, int64_t rows) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  constexpr int kPerRow = D / 8;
  if (idx >= rows * kPerRow) return;
  const int64_t row = idx / kPerRow;
  const int c = static_cast<int>(idx % kPerRow) * 8;
  const int64_t bh = row / p.tq;
  const int64_t i = row % p.tq;
  const int64_t b = bh / p.heads, h = bh % p.heads;
  const float4* src = reinterpret_cast<const float4*>(p.dq_acc + row * D + c);
  const float4 x0 = src[0], x1 = src[1];
  uint4 out;
  out.x = pack_bf16(x0.x * p.scale, x0.y * p.scale);
  out.y = pack_bf16(x0.z * p.scale, x0.w * p.scale);
  out.z = pack_bf16(x1.x * p.scale, x1.y * p.scale);
  out.w = pack_bf16(x1.z * p.scale, x1.w * p.scale);
  *reinterpret_cast<uint4*>(p.dq + b * p.sdq.b + h * p.sdq.h + i * p.sdq.t + c) = out;
}

// ---- launchers ------------------------------------------------------------------

constexpr size_t fwd_smem(int d, int warps) {
  return static_cast<size_t>(16 * warps + 4 * kBlockN) * d * sizeof(bf16);
}
constexpr size_t dkdv_smem(int d, int m, bool atomic_dq) {
  return static_cast<size_t>(2 * kBlockN + 4 * m) * d * sizeof(bf16) +
         (atomic_dq ? kBlockN * m * sizeof(bf16) : 0) + 4 * m * sizeof(float);
}
constexpr size_t dq_smem(int d) {
  return static_cast<size_t>(2 * kBwdBlockM + 4 * kBlockN) * d * sizeof(bf16);
}

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

template <typename Kernel>
void launch(Kernel kernel, dim3 grid, int threads, size_t smem, cudaStream_t stream,
            const auto& params) {
  if (smem > 48 * 1024)
    EMBER_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(smem)));
  kernel<<<grid, threads, smem, stream>>>(params);
  EMBER_CUDA_CHECK(cudaGetLastError());
}

Strides strides_of(const AttentionInput& t) {
  return {t.stride_b, t.stride_h, t.stride_t};
}
Strides strides_of(const AttentionOutput& t) {
  return {t.stride_b, t.stride_h, t.stride_t};
}

void check_operand(const char* op, const char* name, const void* data, Strides s) {
  EMBER_CHECK(data != nullptr, op, ": ", name, " is null");
  EMBER_CHECK(reinterpret_cast<uintptr_t>(data) % 16 == 0, op, ": ", name,
              " must be 16-byte aligned");
  EMBER_CHECK(s.b % 8 == 0 && s.h % 8 == 0 && s.t % 8 == 0, op, ": ", name, " strides (", s.b, ", ",
              s.h, ", ", s.t, ") must be multiples of 8 elements");
}

// Checks the problem and the current device; returns the device's compute capability,
// major * 10 + minor (the launchers pick their versions by it).
int check_problem(const char* op, const AttentionProblem& p) {
  const char* why = attention_unsupported(p.dtype, p.head_dim);
  EMBER_CHECK(why == nullptr, op, ": ", why == nullptr ? "" : why, " (got ", dtype_name(p.dtype),
              ", head_dim ", p.head_dim, ")");
  int device = 0, major = 0, minor = 0;
  EMBER_CUDA_CHECK(cudaGetDevice(&device));
  EMBER_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  EMBER_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  EMBER_CHECK(major >= 8, op, ": needs compute capability 8.0 or later (device ", device, " is ",
              major, ".", minor, ")");
  EMBER_CHECK(p.batch >= 0 && p.heads >= 0 && p.q_len >= 0 && p.kv_len >= 0, op,
              ": negative size (batch ", p.batch, ", heads ", p.heads, ", q_len ", p.q_len,
              ", kv_len ", p.kv_len, ")");
  EMBER_CHECK(p.q_len < (1LL << 30) && p.kv_len < (1LL << 30), op, ": sequence length ", p.q_len,
              " / ", p.kv_len, " too long");
  EMBER_CHECK(p.batch * p.heads < (1LL << 31), op, ": batch x heads ", p.batch * p.heads,
              " too large");
  EMBER_CHECK(std::isfinite(p.scale), op, ": scale must be finite");
  EMBER_CHECK(p.dropout_p >= 0.0 && p.dropout_p < 1.0, op, ": dropout_p must be in [0, 1), got ",
              p.dropout_p);
  EMBER_CHECK(p.mask_kind >= 0 && p.mask_kind <= 2, op, ": mask_kind ", p.mask_kind,
              " (0 none, 1 bool, 2 additive bfloat16)");
  EMBER_CHECK(p.mask_kind == 0 || p.mask != nullptr, op, ": mask_kind ", p.mask_kind,
              " with a null mask");
  EMBER_CHECK(p.mask_kind == 0 || !p.causal, op,
              ": a mask and causal together (give one, as PyTorch requires)");
  return major * 10 + minor;
}

template <int D, int W, bool CAUSAL, bool DROP, int MK>
void forward_w(const FwdParams& fp, int64_t bh, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(bh), static_cast<unsigned>(ceil_div(fp.tq, 16 * W)));
  launch(attn_fwd_kernel<D, W, CAUSAL, DROP, MK>, grid, W * 32, fwd_smem(D, W), stream, fp);
}

template <int D, bool CAUSAL, bool DROP, int MK>
void forward_d(const FwdParams& fp, int64_t bh, int warps, cudaStream_t stream) {
  if (warps == 8)
    forward_w<D, 8, CAUSAL, DROP, MK>(fp, bh, stream);
  else
    forward_w<D, 4, CAUSAL, DROP, MK>(fp, bh, stream);
}

// Calls f.template operator()<D, CAUSAL, DROP, MK>() for the runtime choices; a mask
// excludes causal (the op refuses both), so the masked kernels exist non-causal only.
template <typename F>
void dispatch_variant(int64_t head_dim, bool causal, bool drop, int mask_kind, F&& f) {
  auto with_d = [&]<int D>() {
    auto with_drop = [&]<bool DROP>() {
      if (mask_kind == kBoolMask)
        f.template operator()<D, false, DROP, kBoolMask>();
      else if (mask_kind == kAddMask)
        f.template operator()<D, false, DROP, kAddMask>();
      else if (causal)
        f.template operator()<D, true, DROP, kNoMask>();
      else
        f.template operator()<D, false, DROP, kNoMask>();
    };
    if (drop)
      with_drop.template operator()<true>();
    else
      with_drop.template operator()<false>();
  };
  if (head_dim == 64)
    with_d.template operator()<64>();
  else
    with_d.template operator()<128>();
}

// Whether attn_bwd_delta_vec_kernel takes the rows: 16-byte aligned rows of o and dO,
// and fewer than 2^31 rows * (D / 8) threads.
bool delta_vectors_fit(const BwdParams& bp, int64_t rows, int64_t head_dim) {
  auto aligned = [](const bf16* base, const Strides& s) {
    return reinterpret_cast<uintptr_t>(base) % 16 == 0 && s.b % 8 == 0 && s.h % 8 == 0 &&
           s.t % 8 == 0;
  };
  return aligned(bp.o, bp.so) && aligned(bp.dout, bp.sdo) &&
         rows * (head_dim / 8) < (int64_t{1} << 31);
}

// delta = rowsum(dO * O), the pre-pass of both backward versions: D / 8 lanes a row
// with 16-byte loads where the rows allow, else a warp per row.
void launch_delta(const BwdParams& bp, int64_t bh, int64_t head_dim, cudaStream_t stream) {
  const int64_t rows = bh * bp.tq;
  if (delta_vectors_fit(bp, rows, head_dim)) {
    const auto vec_blocks = static_cast<unsigned>(ceil_div(rows * (head_dim / 8), 256));
    if (head_dim == 64)
      attn_bwd_delta_vec_kernel<64><<<vec_blocks, 256, 0, stream>>>(bp, static_cast<int>(rows));
    else
      attn_bwd_delta_vec_kernel<128><<<vec_blocks, 256, 0, stream>>>(bp, static_cast<int>(rows));
    EMBER_CUDA_CHECK(cudaGetLastError());
    return;
  }
  const auto blocks = static_cast<unsigned>(ceil_div(rows, 8));
  if (head_dim == 64)
    attn_bwd_delta_kernel<64><<<blocks, 256, 0, stream>>>(bp, rows);
  else
    attn_bwd_delta_kernel<128><<<blocks, 256, 0, stream>>>(bp, rows);
  EMBER_CUDA_CHECK(cudaGetLastError());
}

// The atomic mode's dQ (backward versions 1 and 4): zero the float32 accumulator, let
// `accumulate` launch the kernels that add every key block's shares into it, then scale
// and convert it into d_q.
template <int D, typename Accumulate>
void atomic_dq(const BwdParams& bp, int64_t rows, cudaStream_t stream, Accumulate&& accumulate) {
  EMBER_CUDA_CHECK(
      cudaMemsetAsync(bp.dq_acc, 0, static_cast<size_t>(rows) * D * sizeof(float), stream));
  accumulate();
  attn_bwd_dq_convert_kernel<D>
      <<<static_cast<unsigned>(ceil_div(rows * (D / 8), 256)), 256, 0, stream>>>(bp, rows);
  EMBER_CUDA_CHECK(cudaGetLastError());
}

// Version 1's matrix kernels, after the delta pre-pass.
template <int D, bool CAUSAL, bool DROP, int MK>
void backward_d(const BwdParams& bp, int64_t bh, bool deterministic, int query_tile,
                cudaStream_t stream) {
  const int64_t rows = bh * bp.tq;
  const dim3 key_grid(static_cast<unsigned>(bh), static_cast<unsigned>(ceil_div(bp.tk, kBlockN)));
  if (deterministic) {
    if (query_tile == 32)
      launch(attn_bwd_dkdv_kernel<D, 32, CAUSAL, false, DROP, MK>, key_grid, kBwdWarps * 32,
             dkdv_smem(D, 32, false), stream, bp);
    else
      launch(attn_bwd_dkdv_kernel<D, 64, CAUSAL, false, DROP, MK>, key_grid, kBwdWarps * 32,
             dkdv_smem(D, 64, false), stream, bp);
    const dim3 q_grid(static_cast<unsigned>(bh),
                      static_cast<unsigned>(ceil_div(bp.tq, kBwdBlockM)));
    launch(attn_bwd_dq_kernel<D, CAUSAL, DROP, MK>, q_grid, kBwdWarps * 32, dq_smem(D), stream, bp);
  } else {
    atomic_dq<D>(bp, rows, stream, [&] {
      launch(attn_bwd_dkdv_kernel<D, kBwdBlockM, CAUSAL, true, DROP, MK>, key_grid, kBwdWarps * 32,
             dkdv_smem(D, kBwdBlockM, true), stream, bp);
    });
  }
}

Mask mask_of(const AttentionProblem& p) {
  Mask m{};
  if (p.mask_kind != 0) {
    m.data = p.mask;
    m.sb = p.mask_stride_b;
    m.sh = p.mask_stride_h;
    m.si = p.mask_stride_q;
    m.sj = p.mask_stride_k;
  }
  return m;
}

size_t align256(size_t n) {
  return (n + 255) / 256 * 256;
}

}  // namespace

namespace {
std::atomic<int> g_backward_v2{-1};    // -1: EMBER_ATTENTION_BWD_V2 not read yet
std::atomic<int> g_dropout_wgmma{-1};  // -1: EMBER_ATTENTION_DROPOUT_WGMMA not read yet
}  // namespace

bool attention_dropout_wgmma() {
  return env_switch(g_dropout_wgmma, "EMBER_ATTENTION_DROPOUT_WGMMA", true);
}

void set_attention_dropout_wgmma(bool on) {
  g_dropout_wgmma.store(on ? 1 : 0, std::memory_order_relaxed);
}

bool attention_backward_v2() {
  return env_switch(g_backward_v2, "EMBER_ATTENTION_BWD_V2", true);
}

void set_attention_backward_v2(bool on) {
  g_backward_v2.store(on ? 1 : 0, std::memory_order_relaxed);
}

namespace {
std::atomic<int> g_backward_pingpong{-1};  // -1: EMBER_ATTENTION_BWD_PINGPONG not read yet
}  // namespace

bool attention_backward_pingpong() {
  return env_switch(g_backward_pingpong, "EMBER_ATTENTION_BWD_PINGPONG", true);
}

void set_attention_backward_pingpong(bool on) {
  g_backward_pingpong.store(on ? 1 : 0, std::memory_order_relaxed);
}

namespace {
std::atomic<int> g_forward_version{-1};  // -1: EMBER_ATTENTION_FWD_VERSION not read yet
}  // namespace

int attention_forward_version() {
  return env_setting(g_forward_version, "EMBER_ATTENTION_FWD_VERSION", 0, 6);
}

void set_attention_forward_version(int version) {
  EMBER_CHECK(version >= 0 && version <= 6, "set_attention_forward_version: version ", version,
              " (0 to 6)");
  g_forward_version.store(version, std::memory_order_relaxed);
}

const char* attention_unsupported(DType dtype, int64_t head_dim) {
  if (dtype != DType::BFloat16) return "the fused attention takes bfloat16 only";
  if (head_dim != 64 && head_dim != 128) return "the fused attention takes head_dim 64 or 128";
  return nullptr;
}

bool attention_supported(DType dtype, int64_t head_dim) {
  return attention_unsupported(dtype, head_dim) == nullptr;
}

void launch_attention_forward(const AttentionProblem& p, AttentionInput q, AttentionInput k,
                              AttentionInput v, AttentionOutput o, float* lse, cudaStream_t stream,
                              const AttentionTuning& tuning) {
  constexpr const char* kOp = "attention_forward";
  const int capability = check_problem(kOp, p);
  EMBER_CHECK(tuning.forward_warps == 0 || tuning.forward_warps == 4 || tuning.forward_warps == 8,
              kOp, ": forward_warps ", tuning.forward_warps, " (0, 4 or 8)");
  EMBER_CHECK(tuning.forward_version >= 0 && tuning.forward_version <= 6, kOp, ": forward_version ",
              tuning.forward_version, " (0 to 6)");
  const bool drop = p.dropout_p > 0.0;
  const bool v1_only = p.mask_kind != 0;  // what version 2 does not read
  EMBER_CHECK(!(v1_only && tuning.forward_version >= 2), kOp,
              ": forward versions 2 to 6 read no mask (version 1 does)");
  EMBER_CHECK(!(drop && tuning.forward_version >= 3), kOp,
              ": forward versions 3 to 6 have no dropout (versions 1 and 2 have)");
  int version = tuning.forward_version;
  const int asked = version == 0 && tuning.forward_warps == 0 ? attention_forward_version() : 0;
  if (asked == 1 || (asked >= 2 && !v1_only && !(drop && asked >= 3) && capability == 90 &&
                     (asked < 4 || attention_forward_ws_takes(p, q, k, v)))) {
    version = asked;  // EMBER_ATTENTION_FWD_VERSION where that version takes the problem
  } else if (version == 0) {
    // With dropout version 2 where attention_dropout_wgmma() (on by default: the char GPT's
    // step took 0.926x [0.925-0.927] version 1's time graphed, one H100, 2026-12-06).
    version = tuning.forward_warps == 0 && !v1_only && (!drop || attention_dropout_wgmma()) &&
                      capability == 90
                  ? 2
                  : 1;
    // Version 4 where it measured faster than version 2 (one H100, 2026-12-06, the probe's
    // --fwd-only rows, benchmarks/NOTES.md "Flash attention forward, version 4"): head dim
    // 128 (0.62-0.80x version 2's time); with the causal mask at head dim 64 version 2's
    // 64-key tiles stay (at GPT-2's shape version 5 took 1.02x their time and version 6
    // 1.15-1.20x; at the two other causal shapes version 5 0.99x, version 6 1.11x at T 1024
    // and 0.98x at 4096: NOTES, "versions 5 and 6"). Head dim 64 without the mask: version
    // 6 with 128-key tiles, 0.84-0.94x version 4's time by the medians of the same rounds
    // (twelfth session, the probe).
    // With dropout version 2 stays (the others have none).
    if (version == 2 && !drop && (p.head_dim == 128 || !p.causal) &&
        attention_forward_ws_takes(p, q, k, v))
      version = p.head_dim == 64 ? 6 : 4;
  }
  if (version >= 4) {
    // 128-key tiles at both head dims (64-key ones took 1.16-1.18x their time at 64);
    // persistent up to 4096 queries (0.90-1.00x one block a tile there, 1.07-1.09x at 8192).
    // Version 6 at head dim 64: three consumers, 128-key tiles too (ptxas spills 100 bytes
    // of their 160 registers, yet they took 0.93-0.94x the 64-key tiles' time without the
    // mask by the medians, the probe, twelfth session).
    const bool three = version == 6 && p.head_dim == 64;
    launch_attention_forward_sm90_ws(p, q, k, v, o, lse, stream, 128, p.q_len <= 4096, version >= 5,
                                     three ? 3 : 2);
    return;
  }
  if (version >= 2) {
    // The key tile that was faster at each head dim in the first H200 run.
    launch_attention_forward_sm90(p, q, k, v, o, lse, stream, p.head_dim == 64 ? 64 : 128,
                                  version == 3);
    return;
  }
  // 8 warps by default where a mask is read at head dim 128: with 4, the masked kernels
  // spill 80-344 bytes (ptxas, sm_90a), with 8 none (64 with dropout too).
  const int warps = tuning.forward_warps != 0               ? tuning.forward_warps
                    : p.mask_kind != 0 && p.head_dim == 128 ? 8
                                                            : 4;
  const int64_t bh = p.batch * p.heads;
  if (bh == 0 || p.q_len == 0) return;
  check_operand(kOp, "q", q.data, strides_of(q));
  check_operand(kOp, "o", o.data, strides_of(o));
  EMBER_CHECK(lse != nullptr, kOp, ": lse is null");
  if (p.kv_len > 0) {
    check_operand(kOp, "k", k.data, strides_of(k));
    check_operand(kOp, "v", v.data, strides_of(v));
  }
  FwdParams fp{};
  fp.q = static_cast<const bf16*>(q.data);
  fp.k = static_cast<const bf16*>(k.data);
  fp.v = static_cast<const bf16*>(v.data);
  fp.o = static_cast<bf16*>(o.data);
  fp.lse = lse;
  fp.sq = strides_of(q);
  fp.sk = strides_of(k);
  fp.sv = strides_of(v);
  fp.so = strides_of(o);
  fp.heads = static_cast<int>(p.heads);
  fp.tq = static_cast<int>(p.q_len);
  fp.tk = static_cast<int>(p.kv_len);
  fp.scale_log2 = p.scale * kLog2e;
  fp.drop = attention_dropout_of(p);
  fp.mask = mask_of(p);
  dispatch_variant(p.head_dim, p.causal, drop, p.mask_kind,
                   [&]<int D, bool CAUSAL, bool DROP, int MK>() {
                     forward_d<D, CAUSAL, DROP, MK>(fp, bh, warps, stream);
                   });
}

size_t attention_backward_workspace_bytes(const AttentionProblem& p, bool deterministic) {
  const size_t rows = static_cast<size_t>(p.batch * p.heads * p.q_len);
  size_t bytes = align256(rows * sizeof(float));
  if (!deterministic) bytes += align256(rows * static_cast<size_t>(p.head_dim) * sizeof(float));
  return bytes;
}

void launch_attention_backward(const AttentionProblem& p, AttentionInput q, AttentionInput k,
                               AttentionInput v, AttentionInput o, AttentionInput d_out,
                               const float* lse, AttentionOutput d_q, AttentionOutput d_k,
                               AttentionOutput d_v, bool deterministic, void* workspace,
                               size_t workspace_bytes, cudaStream_t stream,
                               const AttentionTuning& tuning) {
  constexpr const char* kOp = "attention_backward";
  const int capability = check_problem(kOp, p);
  EMBER_CHECK(tuning.backward_query_tile == 0 || tuning.backward_query_tile == 32 ||
                  tuning.backward_query_tile == 64,
              kOp, ": backward_query_tile ", tuning.backward_query_tile, " (0, 32 or 64)");
  const int query_tile = tuning.backward_query_tile != 0 ? tuning.backward_query_tile
                         : p.head_dim == 128             ? 32
                                                         : 64;
  EMBER_CHECK(tuning.backward_version >= 0 && tuning.backward_version <= 4, kOp,
              ": backward_version ", tuning.backward_version, " (0, 1, 2, 3 or 4)");
  const bool plain = p.dropout_p == 0.0 && p.mask_kind == 0;
  const bool v2_applies = deterministic && p.mask_kind == 0;
  EMBER_CHECK(tuning.backward_version < 2 || tuning.backward_version > 3 || v2_applies, kOp,
              ": backward versions 2 and 3 are deterministic and read no mask "
              "(version 1 has the atomic mode and masks)");
  EMBER_CHECK(tuning.backward_version != 3 || plain, kOp,
              ": backward version 3 has no dropout (versions 1 and 2 have)");
  EMBER_CHECK(tuning.backward_version != 4 || (!deterministic && plain), kOp,
              ": backward version 4 is the atomic mode (deterministic false), with no dropout "
              "and no mask");
  int version = tuning.backward_version;
  if (version == 0) {
    const bool sm90 =
        tuning.backward_query_tile == 0 && attention_backward_v2() && capability == 90;
    const bool drop_ok = p.dropout_p == 0.0 || attention_dropout_wgmma();
    version = v2_applies && drop_ok && sm90 ? 2 : !deterministic && plain && sm90 ? 4 : 1;
    // Version 3 (the warp-specialised dK/dV kernel) where it measured faster: head dim 128,
    // 0.91-0.95x version 2's forward + backward time, 1.00x [0.92-1.04] at T 2048 without
    // the mask (one H100, 2026-12-06, the probe;
    // benchmarks/NOTES.md "Flash attention backward, version 3"); at 64 it was 1.02-1.12x.
    if (version == 2 && plain && p.head_dim == 128 &&
        attention_backward_ws_takes(p, q, k, v, d_out))
      version = 3;
  }
  const int64_t bh = p.batch * p.heads;
  if (bh == 0 || (p.q_len == 0 && p.kv_len == 0)) return;
  EMBER_CHECK(p.q_len > 0 && p.kv_len > 0, kOp, ": q_len ", p.q_len, " and kv_len ", p.kv_len,
              " must both be positive (or both zero)");
  check_operand(kOp, "q", q.data, strides_of(q));
  check_operand(kOp, "k", k.data, strides_of(k));
  check_operand(kOp, "v", v.data, strides_of(v));
  check_operand(kOp, "o", o.data, strides_of(o));
  check_operand(kOp, "d_out", d_out.data, strides_of(d_out));
  check_operand(kOp, "d_q", d_q.data, strides_of(d_q));
  check_operand(kOp, "d_k", d_k.data, strides_of(d_k));
  check_operand(kOp, "d_v", d_v.data, strides_of(d_v));
  EMBER_CHECK(lse != nullptr, kOp, ": lse is null");
  const size_t need = attention_backward_workspace_bytes(p, deterministic);
  EMBER_CHECK(workspace != nullptr && workspace_bytes >= need, kOp, ": workspace of ",
              workspace_bytes, " bytes, needs ", need);
  EMBER_CHECK(reinterpret_cast<uintptr_t>(workspace) % 256 == 0, kOp,
              ": workspace must be 256-byte aligned");
  BwdParams bp{};
  bp.q = static_cast<const bf16*>(q.data);
  bp.k = static_cast<const bf16*>(k.data);
  bp.v = static_cast<const bf16*>(v.data);
  bp.o = static_cast<const bf16*>(o.data);
  bp.dout = static_cast<const bf16*>(d_out.data);
  bp.lse = lse;
  bp.delta = static_cast<float*>(workspace);
  bp.dq_acc =
      deterministic
          ? nullptr
          : reinterpret_cast<float*>(static_cast<char*>(workspace) +
                                     align256(static_cast<size_t>(bh * p.q_len) * sizeof(float)));
  bp.dq = static_cast<bf16*>(d_q.data);
  bp.dk = static_cast<bf16*>(d_k.data);
  bp.dv = static_cast<bf16*>(d_v.data);
  bp.sq = strides_of(q);
  bp.sk = strides_of(k);
  bp.sv = strides_of(v);
  bp.so = strides_of(o);
  bp.sdo = strides_of(d_out);
  bp.sdq = strides_of(d_q);
  bp.sdk = strides_of(d_k);
  bp.sdv = strides_of(d_v);
  bp.heads = static_cast<int>(p.heads);
  bp.tq = static_cast<int>(p.q_len);
  bp.tk = static_cast<int>(p.kv_len);
  bp.scale = p.scale;
  bp.scale_log2 = p.scale * kLog2e;
  bp.drop = attention_dropout_of(p);
  bp.mask = mask_of(p);
  launch_delta(bp, bh, p.head_dim, stream);
  if (version == 4) {
    const auto shares = [&] {
      launch_attention_backward_sm90(p, q, k, v, d_out, lse, bp.delta, d_q, d_k, d_v, stream, false,
                                     bp.dq_acc);
    };
    if (p.head_dim == 64)
      atomic_dq<64>(bp, bh * p.q_len, stream, shares);
    else
      atomic_dq<128>(bp, bh * p.q_len, stream, shares);
    return;
  }
  if (version >= 2) {
    launch_attention_backward_sm90(p, q, k, v, d_out, lse, bp.delta, d_q, d_k, d_v, stream,
                                   version == 3);
    return;
  }
  dispatch_variant(p.head_dim, p.causal, p.dropout_p > 0.0, p.mask_kind,
                   [&]<int D, bool CAUSAL, bool DROP, int MK>() {
                     backward_d<D, CAUSAL, DROP, MK>(bp, bh, deterministic, query_tile, stream);
                   });
}

// ------------------------------------------------------------------ registration

namespace {
namespace entry {

AttentionProblem problem_of(DType dtype, int64_t batch, int64_t heads, int64_t q_len,
                            int64_t kv_len, int64_t head_dim, double scale, bool causal) {
  AttentionProblem p;
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
// The problem of the forward's or the backward's arguments (kernel_families.h's
// AttentionArgs, AttentionBackwardArgs: the same sizes, dropout and mask fields).
template <typename Args>
AttentionProblem problem_of(const Args& a) {
  AttentionProblem p =
      problem_of(a.dtype, a.batch, a.heads, a.q_len, a.kv_len, a.head_dim, a.scale, a.causal);
  p.dropout_p = a.dropout_p;
  p.dropout_seed = a.dropout_seed;
  p.dropout_offset = a.dropout_offset;
  p.dropout_base = a.dropout_base;
  p.mask_kind = a.mask_kind;
  p.mask = a.mask;
  p.mask_stride_b = a.mask_strides[0];
  p.mask_stride_h = a.mask_strides[1];
  p.mask_stride_q = a.mask_strides[2];
  p.mask_stride_k = a.mask_strides[3];
  return p;
}
AttentionInput in(const kernels::AttentionOperand& a) {
  return {a.data, a.stride_b, a.stride_h, a.stride_t};
}
// A (B, H, T, D) output at `strides` (b, h, t), or contiguous where they are all 0.
AttentionOutput out(void* data, int64_t heads, int64_t t, int64_t d, const int64_t* strides) {
  if (strides[0] == 0 && strides[1] == 0 && strides[2] == 0) return {data, heads * t * d, t * d, d};
  return {data, strides[0], strides[1], strides[2]};
}

// Whether `device` runs the kernels (compute capability 8.0 or later), asked once
// per device. Without any CUDA device (the meta device predicting CUDA on a machine
// without one) it answers true, as the GPUs ember is measured on would.
bool device_runs_kernels(int device) {
  constexpr int kMaxDevices = 64;
  static std::array<std::atomic<int>, kMaxDevices> known{};  // 0 unknown, 1 yes, 2 no
  if (device_count() == 0) return true;
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

bool attention_fused_supported(const kernels::AttentionQuery& q) {
  return attention_supported(q.dtype, q.head_dim) && q.q_len > 0 && q.kv_len > 0 &&
         q.q_len < (int64_t{1} << 30) && q.kv_len < (int64_t{1} << 30) &&
         q.batch * q.heads < (int64_t{1} << 31) && device_runs_kernels(q.device.index);
}

void attention_fused(const kernels::AttentionArgs& a) {
  DeviceGuard guard(a.device.index);
  const AttentionProblem p = problem_of(a);
  launch_attention_forward(p, in(a.q), in(a.k), in(a.v),
                           out(a.o, a.heads, a.q_len, a.head_dim, a.o_strides),
                           static_cast<float*>(a.lse), current_stream(a.device.index));
}

void attention_backward_fused(const kernels::AttentionBackwardArgs& a) {
  DeviceGuard guard(a.device.index);
  const AttentionProblem p = problem_of(a);
  launch_attention_backward(
      p, in(a.q), in(a.k), in(a.v), in(a.o), in(a.d_o), static_cast<const float*>(a.lse),
      out(a.d_q, a.heads, a.q_len, a.head_dim, a.d_q_strides),
      out(a.d_k, a.heads, a.kv_len, a.head_dim, a.d_k_strides),
      out(a.d_v, a.heads, a.kv_len, a.head_dim, a.d_v_strides), a.deterministic, a.workspace,
      a.workspace_bytes, current_stream(a.device.index));
}

// Sizes alone (no device call): the meta device asks it as CUDA would.
size_t attention_workspace_bytes(const kernels::AttentionQuery& q) {
  return attention_backward_workspace_bytes(
      problem_of(q.dtype, q.batch, q.heads, q.q_len, q.kv_len, q.head_dim, 1.0, false),
      q.deterministic);
}

}  // namespace entry
}  // namespace

void register_attention(kernels::KernelFamilies& t) {
  t.attention_fused_supported = &entry::attention_fused_supported;
  t.attention_fused = &entry::attention_fused;
  t.attention_backward_fused = &entry::attention_backward_fused;
  t.attention_workspace_bytes = &entry::attention_workspace_bytes;
}

}  // namespace ember::cuda
