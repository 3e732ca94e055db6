// Helpers shared by the wgmma attention kernels (cuda/kernels/sm90/attention_fwd.cu and
// attention_bwd.cu): cp.async, the wgmma fences, shared-memory descriptors, the
// register-A (RS) wgmma forms, and the swizzled (ROWS, D) bf16 tiles. Include only in
// code compiled for sm_90a (under __CUDA_ARCH_FEAT_SM90_ALL).
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

#include "cuda/kernels/sm90/wgmma_ops.cuh"

namespace ember::cuda::attn_sm90 {

using bf16 = __nv_bfloat16;

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
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
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_wait0() {
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
}
// Waits until at most N committed wgmma groups of this warpgroup are pending.
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Keep the compiler from moving register reads or reuse across an async wgmma.
template <int N>
__device__ __forceinline__ void fence_regs(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N>
__device__ __forceinline__ void fence_regs(uint32_t (&r)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) asm volatile("" : "+r"(r[i][j])::"memory");
}
__device__ __forceinline__ uint64_t make_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) | (static_cast<uint64_t>(lbo >> 4) << 16) |
         (static_cast<uint64_t>(sbo >> 4) << 32) | (uint64_t{1} << 62);
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

// D (64 x 64, fp32) += A (64 x 16, bf16, registers: each warp's 16 rows in
// mma.sync's m16n8k16 A layout) B (16 x 64, bf16, shared memory descriptor);
// kTransB: 0 K-major, 1 N-major.
template <int kTransB>
__device__ __forceinline__ void wgmma_bf16_rs_m64n64k16(float (&d)[32], const uint32_t (&a)[4],
                                                        uint64_t desc_b, uint32_t scale_d) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{"
      "%0, %1, %2, %3, %4, %5, %6, %7, "
      "%8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, "
      "%24, %25, %26, %27, %28, %29, %30, %31"
      "}, "
      "{%32, %33, %34, %35}, %36, p, 1, 1, %38;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), "n"(kTransB));
}

// D (64 x 128, fp32) += A (64 x 16, bf16, registers: each warp's 16 rows in
// mma.sync's m16n8k16 A layout) B (16 x 128, bf16, shared memory descriptor);
// kTransB: 0 K-major, 1 N-major.
template <int kTransB>
__device__ __forceinline__ void wgmma_bf16_rs_m64n128k16(float (&d)[64], const uint32_t (&a)[4],
                                                         uint64_t desc_b, uint32_t scale_d) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{"
      "%0, %1, %2, %3, %4, %5, %6, %7, "
      "%8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, "
      "%24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, "
      "%40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, "
      "%56, %57, %58, %59, %60, %61, %62, %63"
      "}, "
      "{%64, %65, %66, %67}, %68, p, 1, 1, %70;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
        "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
        "+f"(d[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), "n"(kTransB));
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

}  // namespace ember::cuda::attn_sm90
