// The kernel of ember's Hopper GEMMs (see cuda/kernels/gemm_sm90.h): wgmma +
// TMA, warp-specialised, persistent. Included only by the translation units
// beside it (gemm_*.cu), which CMakeLists.txt compiles for sm_90a alone; a device
// pass for any other target compiles the kernel's body away (EMBER_SM90A), and
// the launcher refuses devices other than compute capability 9.0.
//
// One block = 3 warpgroups (384 threads), one block per multiprocessor:
//   warpgroup 0, the producer: one thread issues the TMA copies of each K step
//     into a ring of kStages shared-memory stages; when a bias gradient is asked
//     for, warps 2 and 3 sum the rows of A from the same stages.
//   warpgroups 1 and 2, the consumers, on one of two schedules:
//     cooperative: each owns BM/2 rows of every tile of the block and all BN
//       columns; both issue wgmma from every stage, then run the epilogue;
//     ping-pong: each owns whole tiles, taking turns (the block's tiles 0, 2,
//       4, ... and 1, 3, 5, ...), so one's epilogue runs under the other's MMAs.
//   The epilogue goes straight from the accumulator registers to global memory
//   (through a small per-warp scratch, see park_chunk).
// Every role walks the block's tile sequence (tile = blockIdx.x, += gridDim.x)
// and the ring of stages in the same order, so they stay in step without talking.
//
// The ring: full[o][s] completes when stage s's bytes have landed for a tile of
// consumer warpgroup o (always o = 0 when cooperative; the producer arms it with
// arrive.expect_tx, TMA's complete_tx finishes it); empty[s] completes when
// every consumer warp reading the stage (and each summing warp) is done with it.
// A waiter's n-th wait (n = 0, 1, ...) on a barrier is for phase parity n & 1;
// the producer waits on empty[s] of round r for parity (r & 1) ^ 1: a fresh
// barrier is in phase 0, and a wait for the parity of the phase before it
// returns at once, so the first round finds every stage free.
//
// Shared memory layout of a stage, 128-byte swizzle (TMA's SWIZZLE_128B, the
// descriptors' layout type 1): rows of 128 bytes, the 16-byte chunk c of row r
// stored at chunk c ^ (r % 8); 8 rows (1024 bytes) form a swizzle atom, so every
// tile starts 1024-byte aligned.
//   K-major operand (R rows x BK k, BK * size = 128 bytes): row r at r * 128.
//     One TMA box {BK, R}. Descriptor: start + 32 bytes per k16 (bf16) / k8
//     (tf32) step, SBO = 1024 (8 rows to the next 8), LBO unused (1).
//   M/N-major operand (BK k x R rows, 64 bf16 of r contiguous per 128-byte row):
//     R / 64 boxes {64, BK}, box i (r in [64 i, 64 i + 64)) at i * BK * 128, its
//     k-th row at k * 128. Descriptor: start + 16 * 128 bytes per k16 step,
//     LBO = BK * 128 (one 64-wide block of r to the next), SBO = 1024 (8 k to
//     the next 8). (PTX ISA, "Shared Memory Matrix Layout"; CUTLASS's canonical
//     GMMA layouts say the same.)
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "core/base/error.h"
#include "cuda/check.h"
#include "cuda/kernels/sm90/gemm_launch.h"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define EMBER_SM90A 1
#include "cuda/kernels/sm90/ptx_common.cuh"
#include "cuda/kernels/sm90/wgmma_ops.cuh"
#else
#define EMBER_SM90A 0
#endif

#ifndef EMBER_GEMM_WATCHDOG
#define EMBER_GEMM_WATCHDOG 0
#endif

namespace ember::cuda::sm90 {

constexpr int kThreads = 384;      // 3 warpgroups
constexpr int kConsumerWarps = 8;  // warpgroups 1 and 2
constexpr int kProducerRegs = 40;  // setmaxnreg: 128 * 40 + 256 * 232 <= 65536
constexpr int kConsumerRegs = 232;
// The epilogue's per-warp scratch (see park_chunk).
constexpr int kChunk = 32;              // columns per pass
constexpr int kScratchLd = kChunk + 8;  // floats per scratch row
constexpr int kScratchWarpBytes = 16 * kScratchLd * 4;
constexpr int kScratchBytes = kConsumerWarps * kScratchWarpBytes;

// Compile-time shape of one kernel. kPing_: the ping-pong schedule (each
// consumer warpgroup owns whole tiles, the two taking turns; see the kernel)
// rather than the cooperative one (both share each tile, BM / 2 rows each).
// kConv_: a convolution's implicit GEMM (conv_gemm_plan.h): 1, operand A read as
// 4-D boxes of an NHWC image (the forward and the input grad); 2, operand B so (the
// weight grad), with the K steps split across blocks (ConvParams::splits); 3, the
// weight grad transposed (A the boxes, M-major; for 64 output channels, which fill
// half of a 128-row tile as kConv 2's M), its D stored transposed.
template <typename T_, int BM_, int BN_, int kStages_, bool kAK_, bool kBK_, bool kPing_ = false,
          int kConv_ = 0>
struct Config {
  using T = T_;
  static constexpr int BM = BM_, BN = BN_, kStages = kStages_;
  static constexpr bool kAK = kAK_, kBK = kBK_;  // operand is K-major
  static constexpr bool kPing = kPing_;
  static constexpr int kConv = kConv_;
  static constexpr int kEsize = sizeof(T);
  static constexpr int BK = 128 / kEsize;                 // one 128-byte swizzle row of k
  static constexpr int kMmaK = 32 / kEsize;               // k per wgmma: 16 bf16, 8 tf32
  static constexpr int kWM = kPing ? BM / 64 : BM / 128;  // m64 slices per consumer warpgroup
  static constexpr int kWgRows = kWM * 64;                // rows of a tile per consumer warpgroup
  // Consumer warps that read each stage (and arrive on its empty barrier).
  static constexpr int kReaders = kPing ? kConsumerWarps / 2 : kConsumerWarps;
  static constexpr int kABytes = BM * 128, kBBytes = BN * 128;
  static constexpr int kStageBytes = kABytes + kBBytes;
  // stages, the epilogue's scratch, the barriers (full: one set per consumer
  // warpgroup, see the kernel; empty), slack to align the base to 1024
  static constexpr int kSmemBytes = kStages * kStageBytes + kScratchBytes + 3 * kStages * 8 + 1024;
  static_assert(BM % 128 == 0 && (BN == 64 || BN == 128 || BN == 256), "tile");
  static_assert(kWM * BN / 2 <= 128, "at most 128 accumulators per consumer thread");
  static_assert(sizeof(T) == 2 || (kAK && kBK), "TF32 operands are K-major only");
  static_assert(kConv == 0 || (sizeof(T) == 2 && !kPing && BM == kConvTilePixels),
                "the implicit GEMM: bf16, cooperative, 128-pixel row tiles");
  static_assert(kConv != 1 || (kAK && kBK), "conv A boxes: both operands K-major");
  static_assert(kConv < 2 || (!kAK && !kBK), "conv weight grad: both operands M/N-major");
};

__host__ __device__ constexpr int ceil_div_i(int a, int b) {
  return (a + b - 1) / b;
}

// Tile t -> (row block, column block): groups of group_m row blocks, each group
// walked down its rows first, then across all column blocks, so the blocks
// running at once share a few row blocks of A and sweep B together.
__host__ __device__ inline void tile_coords(int t, int num_m, int num_n, int group_m, int& mb,
                                            int& nb) {
  const int per_group = group_m * num_n;
  const int first = (t / per_group) * group_m;
  const int rows = min(group_m, num_m - first);
  const int in = t % per_group;
  mb = first + in % rows;
  nb = in / rows;
}

// Work unit t of the persistent loop -> its tile (mb, nb) and K steps [kb0, kb1):
// the whole K of tile t, or with the weight grad's split (kConv 2, 3) split t % splits
// of tile t / splits.
// The plain GEMM's (kConv 0) code is left as it was: only the weight grad decodes.
__host__ __device__ __forceinline__ void split_coords(int t, int splits, int kper, int kblocks,
                                                      int& tile, int& split, int& kb0, int& kb1) {
  tile = t / splits;
  split = t - tile * splits;
  kb0 = split * kper;
  kb1 = kb0 + kper < kblocks ? kb0 + kper : kblocks;
}

#if EMBER_SM90A
// ---------------------------------------------------------------- PTX wrappers
// (those the fused attention issues too are in ptx_common.cuh)

// Waits until the phase of parity `parity` of `bar` has completed. With the
// watchdog, a wait of more than ~2 s (4e9 cycles) records who was stuck where
// (role, block, tile, K step) in host-visible memory and traps, so a broken
// pipeline fails the probe instead of hanging the GPU.
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity, int* watchdog, int role,
                                          int tile, int kb) {
#if EMBER_GEMM_WATCHDOG
  if (mbar_try_wait(bar, parity)) return;
  const long long start = clock64();
  while (!mbar_try_wait(bar, parity)) {
    if (clock64() - start > 4000000000ll) {
      if (watchdog != nullptr) {
        volatile int* w = watchdog;
        w[1] = static_cast<int>(blockIdx.x);
        w[2] = tile;
        w[3] = kb;
        w[4] = static_cast<int>(threadIdx.x);
        w[5] = static_cast<int>(parity);
        __threadfence_system();
        w[0] = role;
        __threadfence_system();
      }
      __trap();
    }
  }
#else
  (void)watchdog, (void)role, (void)tile, (void)kb;
  while (!mbar_try_wait(bar, parity)) {
  }
#endif
}

// One 4-D TMA copy (c0 innermost) of the implicit GEMM's image boxes (ptx_common.cuh's
// tma_load_4d with a BoxStart).
__device__ __forceinline__ void tma_load_4d(uint32_t dst, const CUtensorMap* map, uint32_t bar,
                                            BoxStart c) {
  tma_load_4d(dst, map, bar, c.c, c.w, c.h, c.n);
}

// acc (64 x BN per warpgroup) += A (64 x kMmaK) B (kMmaK x BN).
template <typename C, int kBN>
__device__ __forceinline__ void wgmma_step(float (&acc)[kBN / 2], uint64_t da, uint64_t db) {
  using namespace sm90;
  if constexpr (sizeof(typename C::T) == 2) {
    constexpr int ta = C::kAK ? 0 : 1, tb = C::kBK ? 0 : 1;
    if constexpr (kBN == 256)
      wgmma_bf16_m64n256k16<ta, tb>(acc, da, db, 1);
    else if constexpr (kBN == 128)
      wgmma_bf16_m64n128k16<ta, tb>(acc, da, db, 1);
    else
      wgmma_bf16_m64n64k16<ta, tb>(acc, da, db, 1);
  } else {
    if constexpr (kBN == 256)
      wgmma_tf32_m64n256k8(acc, da, db, 1);
    else if constexpr (kBN == 128)
      wgmma_tf32_m64n128k8(acc, da, db, 1);
    else
      wgmma_tf32_m64n64k8(acc, da, db, 1);
  }
}

__device__ __forceinline__ float load_f(const __nv_bfloat16* p) {
  return __bfloat162float(*p);
}
__device__ __forceinline__ float load_f(const float* p) {
  return *p;
}

// Stores two adjacent outputs (columns col, col + 1 of one row).
template <typename O>
__device__ __forceinline__ void store2(O* p, float v0, float v1, bool both, bool paired) {
  if constexpr (sizeof(O) == 2) {
    if (both && paired) {
      *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(v0, v1);
    } else {
      p[0] = __float2bfloat16_rn(v0);
      if (both) p[1] = __float2bfloat16_rn(v1);
    }
  } else {
    if (both && paired) {
      *reinterpret_cast<float2*>(p) = make_float2(v0, v1);
    } else {
      p[0] = v0;
      if (both) p[1] = v1;
    }
  }
}

// The epilogue goes through a small per-warp scratch in shared memory, 32
// columns at a time: the warp parks its 16 rows x 32 columns of accumulators
// there (wgmma's fragment layout: warp w of a warpgroup holds rows 16 w +
// lane / 4 and + 8, register 4 j + i is column 8 j + 2 (lane % 4) + (i % 2),
// row + 8 for i >= 2), then reads them back row-wise, two adjacent columns per
// lane, and stores with bias, pre-activation and activation applied: 64 or 128
// contiguous bytes per half-warp instead of 16-byte fragments, and a rolled
// loop instead of one copy of the epilogue per register (which made ptxas
// minutes slow). Rows are 40 floats apart: row r starts on bank 8 r, so the
// parking stores and the row reads are conflict-free.

// Parks the 16 x 32 chunk `c` of one m64 slice's accumulators.
template <int kBN>
__device__ __forceinline__ void park_chunk(const float (&acc)[kBN / 2], int c, float* scratch) {
  const int lane = threadIdx.x % 32;
  float* row0 = scratch + (lane / 4) * kScratchLd + 2 * (lane % 4);
  float* row8 = row0 + 8 * kScratchLd;
#pragma unroll
  for (int cc = 0; cc < kBN / kChunk; ++cc) {
    if (cc != c) continue;  // static register indices inside, one branch taken
#pragma unroll
    for (int jj = 0; jj < kChunk / 8; ++jj) {
      const int j = cc * (kChunk / 8) + jj;
      *reinterpret_cast<float2*>(row0 + 8 * jj) = make_float2(acc[4 * j], acc[4 * j + 1]);
      *reinterpret_cast<float2*>(row8 + 8 * jj) = make_float2(acc[4 * j + 2], acc[4 * j + 3]);
    }
  }
}

// Stores one parked chunk: rows row0 .. row0 + 15, columns col0 .. col0 + 31;
// lane l covers row 2 i + l / 16, columns col0 + 2 (l % 16) and + 1.
// d_offset: elements past p.d where this tile's output starts (the weight grad's
// split partials; 0 elsewhere).
template <typename T, typename O, Activation kAct>
__device__ __forceinline__ void store_chunk(const float* scratch, const Params& p, int row0,
                                            int col0, bool paired, int64_t d_offset) {
  const int lane = threadIdx.x % 32;
  const int cl = 2 * (lane % 16), col = col0 + cl;
  if (col >= p.n) return;
  const bool both = col + 1 < p.n;
  const T* bias = static_cast<const T*>(p.bias);
  float b0 = 0.f, b1 = 0.f;
  if (bias != nullptr) {
    b0 = load_f(bias + col);
    if (both) b1 = load_f(bias + col + 1);
  }
  O* d = static_cast<O*>(p.d) + d_offset;
  O* pre = static_cast<O*>(p.pre);
#pragma unroll 1
  for (int i = 0; i < 8; ++i) {
    const int r = 2 * i + lane / 16, row = row0 + r;
    if (row >= p.m) break;
    const float2 v = *reinterpret_cast<const float2*>(scratch + r * kScratchLd + cl);
    const float v0 = v.x + b0, v1 = v.y + b1;
    const int64_t off = static_cast<int64_t>(row) * p.ldc + col;
    if (pre != nullptr) store2(pre + off, v0, v1, both, paired);
    store2(d + off, activation_forward<float>(kAct, v0), activation_forward<float>(kAct, v1), both,
           paired);
  }
}

// The implicit GEMM's forward and input grad (kConv 1): the parked chunk stored
// channels-first (conv_out_offset; `pixels` per image), no bias or activation. Lane l
// covers row l % 16 and every other column from col0 + l / 16, so each store writes
// two runs of 16 consecutive pixels (32 bytes in bf16) of two channels.
// The transposed weight grad (kConv 3) stores this way too, with pixels = m: D(r, o)
// at o m + r, plus its split's offset.
template <typename O>
__device__ __forceinline__ void store_chunk_nchw(const float* scratch, const Params& p, int row0,
                                                 int col0, int pixels, int64_t d_offset = 0) {
  const int lane = threadIdx.x % 32;
  const int r = lane % 16, row = row0 + r;
  if (row >= p.m) return;
  O* d = static_cast<O*>(p.d) + d_offset;
  const int64_t base = conv_out_offset(row, 0, p.n, pixels);
#pragma unroll 4
  for (int j = 0; j < kChunk / 2; ++j) {
    const int cl = 2 * j + lane / 16, col = col0 + cl;
    if (col >= p.n) break;
    const float v = scratch[r * kScratchLd + cl];
    if constexpr (sizeof(O) == 2)
      d[base + static_cast<int64_t>(col) * pixels] = __float2bfloat16_rn(v);
    else
      d[base + static_cast<int64_t>(col) * pixels] = v;
  }
}

// Calls f(std::integral_constant<Activation, act>) with `act` as a compile-time
// value, so each epilogue is compiled for one activation (its formula folds to
// straight-line code) and every Activation of the list has one.
template <int I = 0, typename F>
__device__ __forceinline__ void with_activation(Activation act, F&& f) {
  if constexpr (I < kActivationCount) {
    if (static_cast<int>(act) == I)
      f(std::integral_constant<Activation, static_cast<Activation>(I)>{});
    else
      with_activation<I + 1>(act, f);
  }
}
#endif  // EMBER_SM90A

template <typename C>
__global__ void __launch_bounds__(kThreads, 1)
    sm90_gemm_kernel(const __grid_constant__ CUtensorMap map_a,
                     const __grid_constant__ CUtensorMap map_b, const Params p,
                     const __grid_constant__ ConvParams cp) {
#if EMBER_SM90A
  using T = typename C::T;
  constexpr int BM = C::BM, BN = C::BN, BK = C::BK, S = C::kStages;
  extern __shared__ uint8_t smem_raw[];
  // The 128-byte swizzle is a function of the address bits, and the descriptors
  // assume tiles start on 1024-byte boundaries: align the base ourselves.
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  uint8_t* const smem = smem_raw + (base - raw);
  const uint32_t bars = base + S * C::kStageBytes + kScratchBytes;
  auto a_tile = [&](int s) { return base + static_cast<uint32_t>(s * C::kStageBytes); };
  auto b_tile = [&](int s) { return a_tile(s) + C::kABytes; };
  // full_bar(o, s): stage s has landed for a tile of consumer warpgroup o (0 when
  // cooperative: both read every tile); empty_bar(s): stage s may be refilled.
  auto full_bar = [&](int o, int s) { return bars + 8u * (o * S + s); };
  auto empty_bar = [&](int s) { return bars + 8u * (2 * S + s); };

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, wg = threadIdx.x / 128;
  const bool sum_rows = p.bias_grad != nullptr;
  if (threadIdx.x == 0) {
    prefetch_tensor_map(&map_a);
    prefetch_tensor_map(&map_b);
    for (int s = 0; s < S; ++s) {
      mbar_init(full_bar(0, s), 1);
      mbar_init(full_bar(1, s), 1);
      mbar_init(empty_bar(s), C::kReaders + (sum_rows ? 2 : 0));
    }
    fence_mbar_init();
  }
  __syncthreads();

  const int num_m = ceil_div_i(p.m, BM), num_n = ceil_div_i(p.n, BN);
  const int kblocks = ceil_div_i(p.k, BK);

  if (wg == 0) {
    // ------------------------------------------------------------ producer
    setmaxnreg_dec<kProducerRegs>();
    if (warp == 0 && lane == 0) {
      int stage = 0;
      uint32_t phase = 0;
      for (int ti = 0, t = blockIdx.x; t < p.num_tiles; ++ti, t += gridDim.x) {
        int mb, nb, tile = t, split = 0, kb0 = 0, kb1 = kblocks;
        if constexpr (C::kConv >= 2)
          split_coords(t, cp.splits, cp.kper, kblocks, tile, split, kb0, kb1);
        tile_coords(tile, num_m, num_n, p.group_m, mb, nb);
        const int owner = C::kPing ? ti & 1 : 0;  // whose full barriers this tile's stages arm
        for (int kb = kb0; kb < kb1; ++kb) {
          mbar_wait(empty_bar(stage), phase ^ 1u, p.watchdog, 1, t, kb);
          const uint32_t fb = full_bar(owner, stage);
          mbar_arrive_expect_tx(fb, C::kStageBytes);
          if constexpr (C::kConv == 1) {
            tma_load_4d(a_tile(stage), &map_a, fb, conv_a_box(cp.boxes, mb, BM, kb));
          } else if constexpr (C::kConv == 3) {
#pragma unroll
            for (int i = 0; i < BM / 64; ++i)
              tma_load_4d(a_tile(stage) + i * BK * 128, &map_a, fb,
                          conv_b_box(cp.boxes, mb * BM + 64 * i, kb));
          } else if constexpr (C::kAK) {
            tma_load_2d(a_tile(stage), &map_a, fb, kb * BK, mb * BM);
          } else {
#pragma unroll
            for (int i = 0; i < BM / 64; ++i)
              tma_load_2d(a_tile(stage) + i * BK * 128, &map_a, fb, mb * BM + 64 * i, kb * BK);
          }
          if constexpr (C::kConv == 2) {
#pragma unroll
            for (int i = 0; i < BN / 64; ++i)
              tma_load_4d(b_tile(stage) + i * BK * 128, &map_b, fb,
                          conv_b_box(cp.boxes, nb * BN + 64 * i, kb));
          } else if constexpr (C::kBK) {
            tma_load_2d(b_tile(stage), &map_b, fb, kb * BK, nb * BN);
          } else {
#pragma unroll
            for (int i = 0; i < BN / 64; ++i)
              tma_load_2d(b_tile(stage) + i * BK * 128, &map_b, fb, nb * BN + 64 * i, kb * BK);
          }
          if (++stage == S) stage = 0, phase ^= 1u;
        }
      }
    } else if (C::kConv == 0 && sum_rows && warp >= 2) {  // (conv launches refuse bias_grad)
      // Row sums of A (M-major bf16, checked by the launcher) for the bias
      // gradient, computed by the tiles of column block 0 only, so each row is
      // summed by one block: lane pairs of rows r = 64 i + 2 lane (+1), i = warp - 2,
      // warp, warp + 2, ... Row r of box i sits in chunk (r % 64) / 8 of each
      // 128-byte k row, swizzled by k % 8.
      constexpr int kSlots = BM / 128;  // 64-row boxes per summing warp
      int stage = 0;
      uint64_t phases = 0;  // bit 32 o + s: parity of the next wait on owner o's stage s
      for (int ti = 0, t = blockIdx.x; t < p.num_tiles; ++ti, t += gridDim.x) {
        int mb, nb;
        tile_coords(t, num_m, num_n, p.group_m, mb, nb);
        const int owner = C::kPing ? ti & 1 : 0;
        const bool mine = nb == 0;
        float s0[kSlots], s1[kSlots];
#pragma unroll
        for (int i = 0; i < kSlots; ++i) s0[i] = s1[i] = 0.f;
        for (int kb = 0; kb < kblocks; ++kb) {
          const int bit = 32 * owner + stage;
          mbar_wait(full_bar(owner, stage), static_cast<uint32_t>(phases >> bit) & 1u, p.watchdog,
                    2, t, kb);
          phases ^= uint64_t{1} << bit;
          if (mine) {
            const uint8_t* tile = smem + (a_tile(stage) - base);
#pragma unroll
            for (int i = 0; i < kSlots; ++i) {
              const uint8_t* box = tile + (2 * i + (warp - 2)) * BK * 128;
              const int chunk = lane / 4, within = (lane % 4) * 4;
#pragma unroll 8
              for (int kk = 0; kk < BK; ++kk) {
                const __nv_bfloat162 v = *reinterpret_cast<const __nv_bfloat162*>(
                    box + kk * 128 + ((chunk ^ (kk & 7)) << 4) + within);
                s0[i] += __low2float(v);
                s1[i] += __high2float(v);
              }
            }
            fence_proxy_async();
          }
          __syncwarp();
          if (lane == 0) mbar_arrive(empty_bar(stage));
          if (++stage == S) stage = 0;
        }
        if (mine) {
#pragma unroll
          for (int i = 0; i < kSlots; ++i) {
            const int r = mb * BM + 64 * (2 * i + (warp - 2)) + 2 * lane;
            if (p.out_f32) {
              float* g = static_cast<float*>(p.bias_grad);
              if (r < p.m) g[r] = s0[i];
              if (r + 1 < p.m) g[r + 1] = s1[i];
            } else {
              __nv_bfloat16* g = static_cast<__nv_bfloat16*>(p.bias_grad);
              if (r < p.m) g[r] = __float2bfloat16_rn(s0[i]);
              if (r + 1 < p.m) g[r + 1] = __float2bfloat16_rn(s1[i]);
            }
          }
        }
      }
    }
  } else {
    // ------------------------------------------------------------ consumers
    // Cooperative: both warpgroups run every tile of the block, warpgroup cw
    // rows [cw * BM / 2, (cw + 1) * BM / 2), and walk every stage of the ring.
    // Ping-pong: warpgroup cw runs the block's tiles cw, cw + 2, ... whole (all
    // BM rows) and skips the other's stages (the stage of the block's i-th
    // tile's first K step is i * kblocks mod S). The producer fills the ring in
    // tile order, so one warpgroup's MMAs run while the other's epilogue does,
    // and their MMAs overlap only at tile boundaries. A warpgroup that skips
    // ahead must not wait on a barrier whose previous phase is still pending: a
    // parity wait only compares parities, so a wait for phase r would return at
    // once, taking phase r - 1's pending state for r's completion. Hence one set
    // of full barriers per warpgroup, waited on only by its owner (and the
    // summing warps, which walk every tile in order), whose phases it tracks
    // in a bit mask (bit s: the parity of its next wait on stage s).
    setmaxnreg_inc<kConsumerRegs>();
    const int cw = wg - 1;
    const int wg_row0 = C::kPing ? 0 : cw * C::kWgRows;  // first row of this warpgroup's part
    // Descriptor constants (see the file comment).
    constexpr uint32_t kALbo = C::kAK ? 16 : BK * 128, kBLbo = C::kBK ? 16 : BK * 128;
    constexpr uint32_t kSbo = 1024;
    constexpr uint32_t kAStep = C::kAK ? 32 : C::kMmaK * 128;  // bytes per wgmma k step
    constexpr uint32_t kBStep = C::kBK ? 32 : C::kMmaK * 128;
    // Start of m64 slice w of this warpgroup within an A tile.
    auto a_slice = [&](int w) -> uint32_t {
      const int r = wg_row0 + 64 * w;
      return C::kAK ? static_cast<uint32_t>(r * 128) : static_cast<uint32_t>((r / 64) * BK * 128);
    };
    const int first = C::kPing ? cw : 0, every = C::kPing ? 2 : 1;
    uint32_t phases = 0;  // bit s: the parity of this warpgroup's next wait on stage s
    static_assert(S <= 32, "one phase bit per stage");
    long long steps = 0;  // K steps of the block's earlier units (cooperative: all of them)
    for (int i = first, t = blockIdx.x + first * gridDim.x; t < p.num_tiles;
         i += every, t += every * gridDim.x) {
      int mb, nb, tile = t, split = 0, kb0 = 0, kb1 = kblocks;
      if constexpr (C::kConv >= 2)
        split_coords(t, cp.splits, cp.kper, kblocks, tile, split, kb0, kb1);
      tile_coords(tile, num_m, num_n, p.group_m, mb, nb);
      // The stage of the unit's first K step: units of unequal K (the weight grad's
      // last split) need the running count; elsewhere every tile has kblocks steps.
      int stage;
      if constexpr (C::kConv != 0) {
        stage = static_cast<int>(steps % S);
        steps += kb1 - kb0;
      } else {
        stage = static_cast<int>(static_cast<long long>(i) * kblocks % S);
      }
      float acc[C::kWM][BN / 2];
#pragma unroll
      for (int w = 0; w < C::kWM; ++w)
#pragma unroll
        for (int j = 0; j < BN / 2; ++j) acc[w][j] = 0.f;
      int prev_stage = -1;
      for (int kb = kb0; kb < kb1; ++kb) {
        mbar_wait(full_bar(C::kPing ? cw : 0, stage), (phases >> stage) & 1u, p.watchdog, 3, t, kb);
        phases ^= 1u << stage;
#pragma unroll
        for (int w = 0; w < C::kWM; ++w) fence_regs(acc[w]);
        wgmma_fence();
#pragma unroll
        for (int w = 0; w < C::kWM; ++w) {
#pragma unroll
          for (int j = 0; j < BK / C::kMmaK; ++j) {
            const uint64_t da = make_desc(a_tile(stage) + a_slice(w) + j * kAStep, kALbo, kSbo);
            const uint64_t db = make_desc(b_tile(stage) + j * kBStep, kBLbo, kSbo);
            wgmma_step<C, BN>(acc[w], da, db);
          }
        }
        wgmma_commit();
#pragma unroll
        for (int w = 0; w < C::kWM; ++w) fence_regs(acc[w]);
        // Keep this step's MMAs in flight; the previous step's are done after
        // this wait, so its stage goes back to the producer.
        wgmma_wait<1>();
        if (prev_stage >= 0 && lane == 0) mbar_arrive(empty_bar(prev_stage));
        prev_stage = stage;
        if (++stage == S) stage = 0;
      }
      wgmma_wait<0>();
      if (prev_stage >= 0 && lane == 0) mbar_arrive(empty_bar(prev_stage));
#pragma unroll
      for (int w = 0; w < C::kWM; ++w) fence_regs(acc[w]);
      if (p.no_epilogue) continue;  // measuring the main loop alone (Sm90Tuning)
      // Epilogue (see park_chunk): this warp's 16 rows of each m64 slice.
      float* scratch = reinterpret_cast<float*>(smem + S * C::kStageBytes) +
                       (warp - 4) * (kScratchWarpBytes / 4);
      // Two columns go as one vector store where ldc is even and d, pre are
      // aligned to a pair of the output type.
      const size_t pair_bytes = p.out_f32 ? 8 : 4;
      const bool paired = (p.ldc % 2) == 0 && reinterpret_cast<uintptr_t>(p.d) % pair_bytes == 0 &&
                          reinterpret_cast<uintptr_t>(p.pre) % pair_bytes == 0;
      const int64_t d_offset = C::kConv >= 2 ? split * cp.split_stride : 0;
#pragma unroll
      for (int w = 0; w < C::kWM; ++w) {
        const int row0 = mb * BM + wg_row0 + 64 * w + 16 * (warp % 4);
#pragma unroll 1
        for (int c = 0; c < BN / kChunk; ++c) {
          park_chunk<BN>(acc[w], c, scratch);
          __syncwarp();
          if constexpr (C::kConv == 1) {
            const int pixels = cp.boxes.grid_h * cp.boxes.grid_w;
            if (p.out_f32)
              store_chunk_nchw<float>(scratch, p, row0, nb * BN + c * kChunk, pixels);
            else
              store_chunk_nchw<__nv_bfloat16>(scratch, p, row0, nb * BN + c * kChunk, pixels);
          } else if constexpr (C::kConv == 3) {  // D (r, o) at o m + r: float32 parts
            store_chunk_nchw<float>(scratch, p, row0, nb * BN + c * kChunk, p.m, d_offset);
          } else {
            with_activation(p.act, [&](auto act) {
              if (p.out_f32)
                store_chunk<T, float, decltype(act)::value>(scratch, p, row0, nb * BN + c * kChunk,
                                                            paired, d_offset);
              else
                store_chunk<T, __nv_bfloat16, decltype(act)::value>(
                    scratch, p, row0, nb * BN + c * kChunk, paired, d_offset);
            });
          }
          __syncwarp();
        }
      }
    }
  }
#else
  (void)map_a, (void)map_b, (void)p, (void)cp;
#endif
}

// ---------------------------------------------------------------- launch

// Row blocks per rasterisation group: the smallest footprint of the blocks
// running at once (group row blocks of A, ceil(ctas / group) column blocks of B).
inline int choose_group_m(int num_m, int ctas, int bm, int bn) {
  int best = 1;
  int64_t best_cost = INT64_MAX;
  for (int g : {1, 2, 4, 8, 16}) {
    if (g > num_m && g > 1) break;
    const int64_t cost = int64_t{g} * bm + int64_t{(ctas + g - 1) / g} * bn;
    if (cost < best_cost) best_cost = cost, best = g;
  }
  return best;
}

template <typename C>
void launch_config(const CUtensorMap& map_a, const CUtensorMap& map_b, Params p, int sms,
                   const Sm90Tuning& tuning, cudaStream_t stream, const ConvParams& cp = {}) {
  const int num_m = ceil_div_i(p.m, C::BM), num_n = ceil_div_i(p.n, C::BN);
  // Work units: tiles, times the K splits of the weight grad's implicit GEMM.
  const int total = num_m * num_n * (C::kConv >= 2 ? cp.splits : 1);
  p.num_tiles = tuning.max_tiles > 0 ? std::min(total, tuning.max_tiles) : total;
  int ctas = tuning.max_ctas > 0 ? tuning.max_ctas : sms;
  ctas = std::max(1, std::min(ctas, p.num_tiles));
  p.group_m = tuning.group_m > 0 ? tuning.group_m : choose_group_m(num_m, ctas, C::BM, C::BN);
  auto kernel = sm90_gemm_kernel<C>;
  EMBER_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmemBytes));
  kernel<<<ctas, kThreads, C::kSmemBytes, stream>>>(map_a, map_b, p, cp);
  EMBER_CUDA_CHECK(cudaGetLastError());
}

// Stages fill ~200 KB of the 227 KB of shared memory a block may have.
template <typename T, bool kAK, bool kBK>
void launch(Sm90Tile tile, Sm90Schedule schedule, const CUtensorMap& map_a,
            const CUtensorMap& map_b, Params p, int sms, const Sm90Tuning& tuning,
            cudaStream_t stream) {
  if (schedule == Sm90Schedule::Pingpong && tile == Sm90Tile::k128x128) {
    launch_config<Config<T, 128, 128, 6, kAK, kBK, true>>(map_a, map_b, p, sms, tuning, stream);
  } else if (schedule == Sm90Schedule::Cooperative && tile == Sm90Tile::k128x128) {
    launch_config<Config<T, 128, 128, 6, kAK, kBK>>(map_a, map_b, p, sms, tuning, stream);
  } else if (schedule == Sm90Schedule::Cooperative && tile == Sm90Tile::k128x256) {
    launch_config<Config<T, 128, 256, 4, kAK, kBK>>(map_a, map_b, p, sms, tuning, stream);
  } else {
    EMBER_FAIL("sm90 gemm: tile ", static_cast<int>(tile), " with schedule ",
               static_cast<int>(schedule), " is not built");
  }
}

}  // namespace ember::cuda::sm90
