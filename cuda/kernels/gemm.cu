// ember's own GEMM kernels for Linear's forward (see gemm.h), and the activation
// derivative its backward applies.
//
// Floors (8192x4096 -> 4096, the benchmark's shape): 2*M*N*K = 275 GFLOP; at
// ~51 TFLOP/s of plain fp32 (cuBLAS SGEMM on the H200) 5.4 ms; at ~640-790
// TFLOP/s of dense bf16, 0.35-0.43 ms. Bytes (x, w read once, y written once)
// are 0.25 GB fp32: 0.06 ms at 4.1 TB/s, so both are arithmetic-bound.
//
// sgemm_kernel: a 128x128 tile per 256-thread block, 8x8 outputs per thread
// (two 4x4 quadrants 64 apart, so fragments load as float4 from shared memory
// without bank conflicts), K in steps of 8, the next step's tiles fetched into
// registers while the current one computes (double-buffered shared memory, one
// barrier per step).
//
// bf16_gemm_kernel: a 128x128 tile per 8 warps (each 64x32 as 4x4 mma.sync
// m16n8k16 tiles), K in steps of 32, a 3-stage cp.async pipeline, ldmatrix
// fragments from XOR-swizzled shared memory (conflict-free), fp32 accumulators.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "cuda/check.h"
#include "cuda/kernels/gemm.h"
#include "cuda/kernels/kernel_helpers.cuh"

namespace ember::cuda {

namespace {

__device__ __forceinline__ float apply_act(float v, Activation act) {
  return activation_forward<float>(act, v);
}

// ----------------------------------------------------------------------------
// fp32 SGEMM. x: (M, K) row stride ldx, w: (N, K) row stride ldw, y: (M, N).
constexpr int kSgBM = 128, kSgBN = 128, kSgThreads = 256;
constexpr int kSgPad = 4;  // shared rows of 132 floats: the transposing stores are conflict-free

template <bool kVec>
__device__ __forceinline__ float4 sg_load(const float* __restrict__ src, int64_t ld, int64_t row,
                                          int64_t rows, int64_t k, int64_t kdim) {
  // Four consecutive k of one row, zero past the edges.
  if (row >= rows) return make_float4(0.f, 0.f, 0.f, 0.f);
  const float* p = src + row * ld + k;
  if constexpr (kVec) {
    if (k + 3 < kdim) return __ldg(reinterpret_cast<const float4*>(p));
  }
  float4 v;
  v.x = k + 0 < kdim ? __ldg(p + 0) : 0.f;
  v.y = k + 1 < kdim ? __ldg(p + 1) : 0.f;
  v.z = k + 2 < kdim ? __ldg(p + 2) : 0.f;
  v.w = k + 3 < kdim ? __ldg(p + 3) : 0.f;
  return v;
}

// kBK: the K step (8 or 16); each thread stages kBK / 8 float4 of x and of w.
template <int kBK, bool kVec>
__global__ void __launch_bounds__(kSgThreads, 2)
    sgemm_kernel(const float* __restrict__ x, int64_t ldx, const float* __restrict__ w, int64_t ldw,
                 const float* __restrict__ b, float* __restrict__ y, float* __restrict__ pre,
                 int64_t M, int64_t N, int64_t K, Activation act) {
  __shared__ __align__(16) float xs[2][kBK][kSgBM + kSgPad];  // xs[k][m]
  __shared__ __align__(16) float ws[2][kBK][kSgBN + kSgPad];  // ws[k][n]
  constexpr int kLoads = kBK / 8, kQuads = kBK / 4;  // float4 per thread; float4 per tile row
  const int tid = threadIdx.x;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * kSgBM;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kSgBN;
  // Loader: load i of a thread -> (row c / kQuads, k offset (c % kQuads) * 4), c = tid + 256 i.
  int lrow[kLoads], lk[kLoads];
#pragma unroll
  for (int i = 0; i < kLoads; ++i) {
    const int c = tid + i * kSgThreads;
    lrow[i] = c / kQuads;
    lk[i] = (c % kQuads) * 4;
  }
  // Compute: thread -> rows ty*4 + {0..3, 64..67}, cols tx*4 + {0..3, 64..67}.
  const int tx = tid % 16, ty = tid / 16;

  float acc[8][8] = {};
  float4 xr[kLoads], wr[kLoads];
  auto fetch = [&](int64_t k0) {
#pragma unroll
    for (int i = 0; i < kLoads; ++i) {
      xr[i] = sg_load<kVec>(x, ldx, m0 + lrow[i], M, k0 + lk[i], K);
      wr[i] = sg_load<kVec>(w, ldw, n0 + lrow[i], N, k0 + lk[i], K);
    }
  };
  auto stash = [&](int buf) {
#pragma unroll
    for (int i = 0; i < kLoads; ++i) {
      xs[buf][lk[i] + 0][lrow[i]] = xr[i].x;
      xs[buf][lk[i] + 1][lrow[i]] = xr[i].y;
      xs[buf][lk[i] + 2][lrow[i]] = xr[i].z;
      xs[buf][lk[i] + 3][lrow[i]] = xr[i].w;
      ws[buf][lk[i] + 0][lrow[i]] = wr[i].x;
      ws[buf][lk[i] + 1][lrow[i]] = wr[i].y;
      ws[buf][lk[i] + 2][lrow[i]] = wr[i].z;
      ws[buf][lk[i] + 3][lrow[i]] = wr[i].w;
    }
  };
  const int ktiles = static_cast<int>(ceil_div(K, kBK));
  fetch(0);
  stash(0);
  __syncthreads();
  for (int kt = 0; kt < ktiles; ++kt) {
    const int buf = kt & 1;
    if (kt + 1 < ktiles) fetch(static_cast<int64_t>(kt + 1) * kBK);  // in flight during compute
#pragma unroll
    for (int kk = 0; kk < kBK; ++kk) {
      float a[8], c[8];
      *reinterpret_cast<float4*>(a) = *reinterpret_cast<const float4*>(&xs[buf][kk][ty * 4]);
      *reinterpret_cast<float4*>(a + 4) =
          *reinterpret_cast<const float4*>(&xs[buf][kk][ty * 4 + 64]);
      *reinterpret_cast<float4*>(c) = *reinterpret_cast<const float4*>(&ws[buf][kk][tx * 4]);
      *reinterpret_cast<float4*>(c + 4) =
          *reinterpret_cast<const float4*>(&ws[buf][kk][tx * 4 + 64]);
#pragma unroll
      for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(a[i], c[j], acc[i][j]);
    }
    if (kt + 1 < ktiles) {
      stash(buf ^ 1);  // the other buffer was last read before the previous barrier
      __syncthreads();
    }
  }
  // Epilogue: bias, pre-activation, activation; float4 stores where aligned.
  const bool vec_out = (N % 4 == 0);
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int64_t row = m0 + ty * 4 + (i % 4) + (i / 4) * 64;
    if (row >= M) continue;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t col = n0 + tx * 4 + h * 64;
      float v[4], o[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        v[j] = acc[i][h * 4 + j] + ((b != nullptr && col + j < N) ? __ldg(b + col + j) : 0.f);
        o[j] = apply_act(v[j], act);
      }
      if (vec_out && col + 3 < N) {
        *reinterpret_cast<float4*>(y + row * N + col) = make_float4(o[0], o[1], o[2], o[3]);
        if (pre != nullptr)
          *reinterpret_cast<float4*>(pre + row * N + col) = make_float4(v[0], v[1], v[2], v[3]);
      } else {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          if (col + j >= N) break;
          y[row * N + col + j] = o[j];
          if (pre != nullptr) pre[row * N + col + j] = v[j];
        }
      }
    }
  }
}

// ----------------------------------------------------------------------------
// bf16 tensor-core GEMM. x: (M, K) row stride ldx, w: (N, K) row stride ldw,
// y: (M, N). Shared tiles are 128 rows x 32 k (64 bytes: four 16-byte chunks);
// chunk c of row r lives at chunk c ^ ((r >> 1) & 3), so the 8 rows an ldmatrix
// phase reads fall in 8 different 16-byte bank groups.
constexpr int kBfBM = 128, kBfBK = 32, kBfThreads = 256;
constexpr int kBfRowBytes = kBfBK * 2;  // 64 bytes: four 16-byte chunks

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ int swz(int row, int chunk) {
  return row * 64 + ((chunk ^ ((row >> 1) & 3)) << 4);  // byte offset in the tile
}

// Copies 16 bytes (8 bf16) global -> shared, zero-filling past src_bytes.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}
__device__ __forceinline__ void ldmatrix_x4(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2,
                                            uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}
__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// One kRows x 32 tile of src (rows from row0, k from k0) into swizzled shared
// memory: kRows * 4 chunks of 8 bf16, kRows / 64 per thread. kVec: cp.async
// (K % 8 == 0, aligned rows); otherwise element-wise loads with bounds checks and
// a 16-byte shared store.
template <int kRows, bool kVec>
__device__ __forceinline__ void bf_load_tile(unsigned char* tile, const __nv_bfloat16* src,
                                             int64_t ld, int64_t row0, int64_t rows, int64_t k0,
                                             int64_t kdim) {
#pragma unroll
  for (int i = 0; i < kRows * 4 / kBfThreads; ++i) {
    const int c = threadIdx.x + i * kBfThreads;
    const int r = c / 4, chunk = c % 4;
    const int64_t grow = row0 + r, gk = k0 + chunk * 8;
    unsigned char* dst = tile + swz(r, chunk);
    if constexpr (kVec) {
      const bool ok = grow < rows && gk < kdim;
      const __nv_bfloat16* p = ok ? src + grow * ld + gk : src;
      cp_async16(smem_addr(dst), p, ok ? 16 : 0);
    } else {
      alignas(16) __nv_bfloat16 v[8];
#pragma unroll
      for (int j = 0; j < 8; ++j)
        v[j] = (grow < rows && gk + j < kdim) ? src[grow * ld + gk + j] : __float2bfloat16(0.f);
      *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(v);
    }
  }
}

// kBN: 128 (warps of 64x32, 2 blocks per SM) or 256 (warps of 64x64, 1 block per
// SM, twice the reuse of each x tile); kStages-deep cp.async pipeline.
template <int kBN, int kStages, bool kVec>
__global__ void __launch_bounds__(kBfThreads, kBN == 128 ? 2 : 1)
    bf16_gemm_kernel(const __nv_bfloat16* __restrict__ x, int64_t ldx,
                     const __nv_bfloat16* __restrict__ w, int64_t ldw,
                     const __nv_bfloat16* __restrict__ b, __nv_bfloat16* __restrict__ y,
                     __nv_bfloat16* __restrict__ pre, int64_t M, int64_t N, int64_t K,
                     Activation act) {
  extern __shared__ __align__(128) unsigned char smem[];  // [stage][x tile, w tile]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  constexpr int kWN = kBN / 4;  // warp tile: 64 x kWN
  constexpr int kNT = kWN / 8;  // n8 tiles per warp
  constexpr int kStageBytes = (kBfBM + kBN) * kBfRowBytes;
  const int warp_m = warp / 4, warp_n = warp % 4;  // 2 x 4 warps
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * kBfBM;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kBN;
  const int ktiles = static_cast<int>(ceil_div(K, kBfBK));
  auto x_tile = [&](int s) { return smem + s * kStageBytes; };
  auto w_tile = [&](int s) { return smem + s * kStageBytes + kBfBM * kBfRowBytes; };
  auto load_stage = [&](int s, int kt) {
    const int64_t k0 = static_cast<int64_t>(kt) * kBfBK;
    bf_load_tile<kBfBM, kVec>(x_tile(s), x, ldx, m0, M, k0, K);
    bf_load_tile<kBN, kVec>(w_tile(s), w, ldw, n0, N, k0, K);
  };

  float acc[4][kNT][4] = {};  // [m16 tile][n8 tile][fragment]
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < ktiles) load_stage(s, s);
    cp_async_commit();
  }
  for (int kt = 0; kt < ktiles; ++kt) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // stage kt landed for all; stage kt-1 is no longer read
    {
      const int next = kt + kStages - 1;
      if (next < ktiles) load_stage(next % kStages, next);
      cp_async_commit();
    }
    const unsigned char* xt = x_tile(kt % kStages);
    const unsigned char* wt = w_tile(kt % kStages);
#pragma unroll
    for (int ks = 0; ks < kBfBK / 16; ++ks) {
      uint32_t af[4][4], bfr[kNT][2];
#pragma unroll
      for (int mi = 0; mi < 4; ++mi) {
        const int r = warp_m * 64 + mi * 16 + (lane % 16);
        ldmatrix_x4(smem_addr(xt + swz(r, ks * 2 + lane / 16)), af[mi][0], af[mi][1], af[mi][2],
                    af[mi][3]);
      }
#pragma unroll
      for (int nj = 0; nj < kNT / 2; ++nj) {
        const int r = warp_n * kWN + nj * 16 + (lane % 8) + (lane / 16) * 8;
        ldmatrix_x4(smem_addr(wt + swz(r, ks * 2 + (lane / 8) % 2)), bfr[nj * 2][0], bfr[nj * 2][1],
                    bfr[nj * 2 + 1][0], bfr[nj * 2 + 1][1]);
      }
#pragma unroll
      for (int mi = 0; mi < 4; ++mi)
#pragma unroll
        for (int ni = 0; ni < kNT; ++ni) mma_bf16(acc[mi][ni], af[mi], bfr[ni][0], bfr[ni][1]);
    }
  }
  cp_async_wait<0>();
  // Epilogue: fragment c0,c1 at (row g, cols 2q, 2q+1), c2,c3 at row g + 8.
  const int g = lane / 4, q = lane % 4;
  const bool paired = (N % 2 == 0);
#pragma unroll
  for (int mi = 0; mi < 4; ++mi)
#pragma unroll
    for (int ni = 0; ni < kNT; ++ni)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t row = m0 + warp_m * 64 + mi * 16 + g + h * 8;
        const int64_t col = n0 + warp_n * kWN + ni * 8 + q * 2;
        if (row >= M || col >= N) continue;
        float v0 = acc[mi][ni][h * 2], v1 = acc[mi][ni][h * 2 + 1];
        if (b != nullptr) {
          v0 += __bfloat162float(b[col]);
          if (col + 1 < N) v1 += __bfloat162float(b[col + 1]);
        }
        __nv_bfloat16* out = y + row * N + col;
        __nv_bfloat16* pout = pre != nullptr ? pre + row * N + col : nullptr;
        if (paired) {
          *reinterpret_cast<__nv_bfloat162*>(out) =
              __floats2bfloat162_rn(apply_act(v0, act), apply_act(v1, act));
          if (pout != nullptr)
            *reinterpret_cast<__nv_bfloat162*>(pout) = __floats2bfloat162_rn(v0, v1);
        } else {
          out[0] = __float2bfloat16_rn(apply_act(v0, act));
          if (pout != nullptr) pout[0] = __float2bfloat16_rn(v0);
          if (col + 1 < N) {
            out[1] = __float2bfloat16_rn(apply_act(v1, act));
            if (pout != nullptr) pout[1] = __float2bfloat16_rn(v1);
          }
        }
      }
}

// ----------------------------------------------------------------------------
template <typename T>
__device__ __forceinline__ float to_f(T v) {
  return static_cast<float>(v);
}
template <>
__device__ __forceinline__ float to_f<__nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}

// Chosen by measurement (benchmarks/NOTES.md, run 1's "Decisions"): the 128x128 bf16
// tile with 4 stages, and the SGEMM's K step of 8.
constexpr GemmTile kDefaultLargeTile = GemmTile::k128x128s4;
constexpr bool kDefaultSgemmBk16 = false;

bool aligned(const void* p, int bytes) {
  return p == nullptr || reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(bytes) == 0;
}

}  // namespace

void launch_linear_gemm(DType dtype, const void* x, int64_t ldx, const void* w, int64_t ldw,
                        const void* b, void* y, void* pre, int64_t m, int64_t n, int64_t k,
                        Activation act, cudaStream_t stream, GemmTile tile) {
  if (m == 0 || n == 0) return;
  EMBER_CHECK(ceil_div(m, 128) <= 65535, "linear: ", m, " rows exceed the kernel's grid");
  if (dtype == DType::Float32) {
    const dim3 grid(static_cast<unsigned>(ceil_div(n, kSgBN)),
                    static_cast<unsigned>(ceil_div(m, kSgBM)));
    const bool vec = k % 4 == 0 && ldx % 4 == 0 && ldw % 4 == 0 && aligned(x, 16) && aligned(w, 16);
    const bool out_ok = aligned(y, 16) && aligned(pre, 16);
    EMBER_CHECK(out_ok, "linear: output not 16-byte aligned");
    auto* xf = static_cast<const float*>(x);
    auto* wf = static_cast<const float*>(w);
    auto* bf = static_cast<const float*>(b);
    auto* yf = static_cast<float*>(y);
    auto* pf = static_cast<float*>(pre);
    const bool bk16 = tile == GemmTile::kF32Bk16 || (tile == GemmTile::Auto && kDefaultSgemmBk16);
    if (bk16)
      (vec ? sgemm_kernel<16, true> : sgemm_kernel<16, false>)<<<grid, kSgThreads, 0, stream>>>(
          xf, ldx, wf, ldw, bf, yf, pf, m, n, k, act);
    else
      (vec ? sgemm_kernel<8, true> : sgemm_kernel<8, false>)<<<grid, kSgThreads, 0, stream>>>(
          xf, ldx, wf, ldw, bf, yf, pf, m, n, k, act);
    EMBER_CUDA_CHECK(cudaGetLastError());
    return;
  }
  EMBER_CHECK(dtype == DType::BFloat16, "linear: our GEMM supports float32 and bfloat16, not ",
              dtype);
  const bool vec = k % 8 == 0 && ldx % 8 == 0 && ldw % 8 == 0 && aligned(x, 16) && aligned(w, 16);
  EMBER_CHECK(aligned(y, 4) && aligned(pre, 4), "linear: output not 4-byte aligned");
  auto* xb = static_cast<const __nv_bfloat16*>(x);
  auto* wb = static_cast<const __nv_bfloat16*>(w);
  auto* bb = static_cast<const __nv_bfloat16*>(b);
  auto* yb = static_cast<__nv_bfloat16*>(y);
  auto* pb = static_cast<__nv_bfloat16*>(pre);
  // Tile: 128x256 once the 128x256 grid still has a block for every SM (about
  // 132 * 128 * 256 outputs), else 128x128 for more blocks (see NOTES.md).
  if (tile == GemmTile::Auto)
    tile = m * n >= int64_t{132} * 128 * 256 ? kDefaultLargeTile : GemmTile::k128x128s3;
  auto launch = [&](auto kernel_vec, auto kernel_scalar, int bn, int stages) {
    const dim3 grid(static_cast<unsigned>(ceil_div(n, bn)),
                    static_cast<unsigned>(ceil_div(m, kBfBM)));
    const int smem = stages * (kBfBM + bn) * kBfRowBytes;
    auto kernel = vec ? kernel_vec : kernel_scalar;
    EMBER_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    kernel<<<grid, kBfThreads, smem, stream>>>(xb, ldx, wb, ldw, bb, yb, pb, m, n, k, act);
  };
  switch (tile) {
    case GemmTile::k128x256s3:
      launch(bf16_gemm_kernel<256, 3, true>, bf16_gemm_kernel<256, 3, false>, 256, 3);
      break;
    case GemmTile::k128x256s4:
      launch(bf16_gemm_kernel<256, 4, true>, bf16_gemm_kernel<256, 4, false>, 256, 4);
      break;
    case GemmTile::k128x128s4:
      launch(bf16_gemm_kernel<128, 4, true>, bf16_gemm_kernel<128, 4, false>, 128, 4);
      break;
    default:
      launch(bf16_gemm_kernel<128, 3, true>, bf16_gemm_kernel<128, 3, false>, 128, 3);
      break;
  }
  EMBER_CUDA_CHECK(cudaGetLastError());
}

}  // namespace ember::cuda
