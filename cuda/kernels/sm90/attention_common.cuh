// Helpers shared by the wgmma attention kernels (cuda/kernels/sm90/attention_fwd.cu and
// attention_bwd.cu): cp.async, the swizzled (ROWS, D) bf16 tiles and their products,
// the query blocks' coordinates (the fences and descriptors are ptx_common.cuh's, the
// wgmma forms wgmma_ops.cuh's). Include only in code compiled for sm_90a (under
// __CUDA_ARCH_FEAT_SM90_ALL).
//
// Shared tiles use the 128-byte swizzle of wgmma's layout type 1: a (rows, D) bf16 tile
// is D / 64 column blocks of (rows, 64); in a block, row r is 128 bytes at r * 128 with
// its 16-byte chunk c at c ^ (r % 8); blocks 1024-byte aligned. As wgmma's K-major
// operand (rows are M or N, D is K): start + 32 bytes per k16 step inside a block, the
// next block after 4 steps, SBO 1024 (ss_product). As the N-major B operand (rows are K,
// D is N): start + 16 rows per k16 step, LBO = one column block (rows * 128 bytes), SBO
// 1024 (rs_product). See gemm_kernel.cuh's layout notes.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "cuda/kernels/sm90/ptx_common.cuh"
#include "cuda/kernels/sm90/wgmma_ops.cuh"

namespace ember::cuda::sm90 {

using bf16 = __nv_bfloat16;

__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool pred) {
  const int n = pred ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n));
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
// fence_regs for the register-A operands of an RS wgmma (ptx_common.cuh has the
// accumulators' form).
template <int N>
__device__ __forceinline__ void fence_regs(uint32_t (&r)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) asm volatile("" : "+r"(r[i][j])::"memory");
}
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// The first of a dynamic shared-memory block, 1024-byte aligned (the swizzle atoms); the
// launchers ask for 1024 bytes more than the tiles need.
__device__ __forceinline__ bf16* aligned_smem(unsigned char* raw) {
  return reinterpret_cast<bf16*>((reinterpret_cast<uintptr_t>(raw) + 1023) &
                                 ~static_cast<uintptr_t>(1023));
}

// A block of the query-side kernels (the forwards, the backward's dQ pass): grid (B H,
// query blocks of ROWS rows), causal blocks longest first. Its b H + h, (b, h), its first
// query row, and how many BN-key tiles it walks (causal: none past its last row).
struct QueryBlock {
  int bh, b, h, q0, n_kt;
};
template <int ROWS, int BN, bool CAUSAL>
__device__ __forceinline__ QueryBlock query_block(int heads, int tq, int tk) {
  const int bh = static_cast<int>(blockIdx.x);
  const int b = bh / heads, h = bh % heads;
  const int n_qt = (tq + ROWS - 1) / ROWS;
  const int qt = CAUSAL ? n_qt - 1 - static_cast<int>(blockIdx.y) : static_cast<int>(blockIdx.y);
  const int q0 = qt * ROWS;
  const int kend = CAUSAL ? min(tk, q0 + ROWS) : tk;
  return {bh, b, h, q0, (kend + BN - 1) / BN};
}

// Element offset of (row r, 16-byte chunk c) in a swizzled (ROWS, D) tile.
template <int ROWS>
__device__ __forceinline__ int tile_off(int r, int c) {
  return ((c >> 3) * ROWS + r) * 64 + (((c & 7) ^ (r & 7)) << 3);
}

template <int ROWS, int D, int THREADS = 256>
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
    cp_async16(smem_u32(tile + tile_off<ROWS>(r, c)), src, ok);
  }
}

// acc (64 x N, fp32) = (accumulate false) or += the 64 rows at a_tile, in a K-major tile
// of A_ROWS rows of D, times the N rows at b_tile, in a K-major tile of B_ROWS rows of
// D, transposed: a product over D. a_tile and b_tile are shared addresses of a row
// inside column block 0 (the column blocks are A_ROWS and B_ROWS rows apart).
template <int D, int N, int A_ROWS, int B_ROWS>
__device__ __forceinline__ void ss_product(float (&acc)[N / 2], uint32_t a_tile, uint32_t b_tile,
                                           bool accumulate) {
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    const uint32_t a = a_tile + (kk >> 2) * A_ROWS * 128 + (kk & 3) * 32;
    const uint32_t b = b_tile + (kk >> 2) * B_ROWS * 128 + (kk & 3) * 32;
    const uint64_t da = make_desc(a, 16, 1024), db = make_desc(b, 16, 1024);
    const uint32_t scale_d = (accumulate || kk > 0) ? 1u : 0u;
    if constexpr (N == 128)
      sm90::wgmma_bf16_m64n128k16<0, 0>(acc, da, db, scale_d);
    else
      sm90::wgmma_bf16_m64n64k16<0, 0>(acc, da, db, scale_d);
  }
}

// acc (64 x D, fp32) += A (64 x K, bf16 in registers: K / 16 steps of mma.sync's A
// layout, as acc_to_a makes them) times the K rows of the N-major tile at b_tile
// (ROWS rows of D, starting at its row 0).
template <int D, int K, int ROWS>
__device__ __forceinline__ void rs_product(float (&acc)[D / 2], const uint32_t (&a)[K / 16][4],
                                           uint32_t b_tile) {
#pragma unroll
  for (int kk = 0; kk < K / 16; ++kk) {
    const uint64_t db = make_desc(b_tile + kk * 16 * 128, ROWS * 128, 1024);
    if constexpr (D == 128)
      wgmma_bf16_rs_m64n128k16<1>(acc, a[kk], db, 1u);
    else
      wgmma_bf16_rs_m64n64k16<1>(acc, a[kk], db, 1u);
  }
}

// The A operands of an RS product from fp32 accumulators of a 64 x N product (N / 16
// k-steps): wgmma's accumulator layout per warp is mma.sync's m16n8 one, which packs
// into the m16k16 A layout two n-tiles at a time. `f` maps each value first.
template <int N, typename F>
__device__ __forceinline__ void acc_to_a(const float (&s)[N / 2], uint32_t (&a)[N / 16][4], F f) {
#pragma unroll
  for (int kk = 0; kk < N / 16; ++kk) {
    a[kk][0] = pack_bf16(f(s[8 * kk]), f(s[8 * kk + 1]));
    a[kk][1] = pack_bf16(f(s[8 * kk + 2]), f(s[8 * kk + 3]));
    a[kk][2] = pack_bf16(f(s[8 * kk + 4]), f(s[8 * kk + 5]));
    a[kk][3] = pack_bf16(f(s[8 * kk + 6]), f(s[8 * kk + 7]));
  }
}

}  // namespace ember::cuda::sm90
