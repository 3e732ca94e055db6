// The host side of ember's Hopper GEMMs (gemm_sm90.h): checks, tensor maps, the
// choice of tile, and the launch of the kernel instantiated for the dtype and
// operand layout (cuda/kernels/sm90/, compiled for sm_90a only). Also the
// trivial k = 0 case, which needs no tensor core.
#include "cuda/kernels/gemm_sm90.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "core/base/error.h"
#include "cuda/check.h"
#include "cuda/kernels/kernel_helpers.cuh"
#include "cuda/kernels/sm90/gemm_launch.h"
#include "cuda/tensor_map.h"

namespace ember::cuda {

namespace {

using sm90::Params;

// D = epilogue(0) when k == 0: act(bias) (pre = bias), bias_grad = 0.
template <typename T, typename O>
__global__ void empty_k_kernel(Params p) {
  const int64_t total = static_cast<int64_t>(p.m) * p.n;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / p.n, c = i % p.n;
    float v = 0.f;
    if (p.bias != nullptr) v = static_cast<float>(static_cast<const T*>(p.bias)[c]);
    O* d = static_cast<O*>(p.d);
    d[r * p.ldc + c] = static_cast<O>(activation_forward<float>(p.act, v));
    if (p.pre != nullptr) static_cast<O*>(p.pre)[r * p.ldc + c] = static_cast<O>(v);
    if (c == 0 && p.bias_grad != nullptr) static_cast<O*>(p.bias_grad)[r] = static_cast<O>(0.f);
  }
}

// Auto: 128x256 while a grid of them still gives every multiprocessor a tile,
// else 128x128 for twice the blocks.
Sm90Tile choose_tile(int64_t m, int64_t n, int sms) {
  const int64_t tiles = ((m + 127) / 128) * ((n + 255) / 256);
  return tiles >= sms ? Sm90Tile::k128x256 : Sm90Tile::k128x128;
}

}  // namespace

const char* sm90_gemm_unsupported(DType dtype, int64_t m, int64_t n, int64_t k,
                                  const Sm90Operand& a, const Sm90Operand& b,
                                  const GemmEpilogue& epi, int device) {
  if (dtype != DType::BFloat16 && dtype != DType::Float32) return "dtype is not bf16 or fp32";
  if (m < 0 || n < 0 || k < 0) return "negative size";
  if (m > (int64_t{1} << 30) || n > (int64_t{1} << 30) || k > (int64_t{1} << 30))
    return "a size over 2^30";
  if (epi.out != DType::BFloat16 && epi.out != DType::Float32) return "output not bf16 or fp32";
  if (dtype == DType::Float32 && epi.out != DType::Float32) return "TF32 writes fp32 only";
  if (dtype == DType::Float32 && (!a.k_major || !b.k_major)) return "TF32 operands must be K-major";
  if (dtype == DType::BFloat16 && !a.k_major && b.k_major)
    return "an M-major A needs an N-major B (layout not built)";
  if (epi.bias_grad != nullptr && (dtype != DType::BFloat16 || a.k_major))
    return "the bias gradient needs an M-major bf16 A";
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return "no such device";
  }
  if (major != 9 || minor != 0) return "not a compute capability 9.0 device";
  static const bool loadable = sm90::kernels_loadable();
  if (!loadable) return "kernels not built for sm_90a";
  if (m == 0 || n == 0 || k == 0) return "";
  const char* why_a = a.k_major ? tensor_map_unsupported(dtype, a.data, k, m, a.ld)
                                : tensor_map_unsupported(dtype, a.data, m, k, a.ld);
  if (why_a[0] != '\0') return why_a;
  return b.k_major ? tensor_map_unsupported(dtype, b.data, k, n, b.ld)
                   : tensor_map_unsupported(dtype, b.data, n, k, b.ld);
}

void launch_sm90_gemm(DType dtype, int64_t m, int64_t n, int64_t k, const Sm90Operand& a,
                      const Sm90Operand& b, void* d, int64_t ldc, const GemmEpilogue& epi,
                      cudaStream_t stream, const Sm90Tuning& tuning) {
  int device = 0;
  EMBER_CUDA_CHECK(cudaGetDevice(&device));
  const char* why = sm90_gemm_unsupported(dtype, m, n, k, a, b, epi, device);
  EMBER_CHECK(why[0] == '\0', "sm90 gemm: ", why, " (", dtype, ", m ", m, ", n ", n, ", k ", k,
              ")");
  EMBER_CHECK(ldc >= n, "sm90 gemm: output row stride ", ldc, " below n = ", n);
  if (m == 0 || n == 0) return;
  Params p{};
  p.m = static_cast<int>(m), p.n = static_cast<int>(n), p.k = static_cast<int>(k);
  p.d = d, p.ldc = ldc, p.bias = epi.bias, p.pre = epi.pre, p.bias_grad = epi.bias_grad;
  p.act = epi.act, p.out_f32 = epi.out == DType::Float32 ? 1 : 0;
  p.watchdog = tuning.watchdog;
  p.no_epilogue = tuning.no_epilogue ? 1 : 0;
  if (k == 0) {
    const int blocks = static_cast<int>(std::min<int64_t>((m * n + 255) / 256, 4096));
    if (dtype == DType::Float32)
      empty_k_kernel<float, float><<<blocks, 256, 0, stream>>>(p);
    else if (p.out_f32)
      empty_k_kernel<__nv_bfloat16, float><<<blocks, 256, 0, stream>>>(p);
    else
      empty_k_kernel<__nv_bfloat16, __nv_bfloat16><<<blocks, 256, 0, stream>>>(p);
    EMBER_CUDA_CHECK(cudaGetLastError());
    return;
  }
  const int sms = sm_count(device);
  // Auto: ping-pong for bf16 with both operands K-major (Linear's forward) from
  // 4096 x 4096 outputs, where it measured faster than cooperative on an H200
  // (8192x4096x4096, 4096^3, 8192^3; benchmarks/NOTES.md); cooperative elsewhere.
  // Ping-pong runs 128x128 tiles only.
  const bool ping = dtype == DType::BFloat16 && a.k_major && b.k_major && m >= 4096 && n >= 4096;
  const Sm90Schedule schedule = tuning.schedule != Sm90Schedule::Auto ? tuning.schedule
                                : ping                                ? Sm90Schedule::Pingpong
                                                                      : Sm90Schedule::Cooperative;
  Sm90Tile tile = tuning.tile;
  if (tile == Sm90Tile::Auto)
    tile = schedule == Sm90Schedule::Pingpong ? Sm90Tile::k128x128 : choose_tile(m, n, sms);
  EMBER_CHECK(tile == Sm90Tile::k128x128 || schedule != Sm90Schedule::Pingpong,
              "sm90 gemm: the ping-pong schedule runs 128x128 tiles only");
  EMBER_CHECK(tile != Sm90Tile::k128x64, "sm90 gemm: 128x64 tiles run convolutions only");
  const int bm = 128, bn = tile == Sm90Tile::k128x256 ? 256 : 128;
  const int bk = 128 / static_cast<int>(element_size(dtype));
  // Boxes: K-major {bk, rows of the tile}; M/N-major {64 rows, bk} (gemm_kernel.cuh).
  const CUtensorMap ma = a.k_major ? make_tensor_map_2d(dtype, a.data, k, m, a.ld, bk, bm)
                                   : make_tensor_map_2d(dtype, a.data, m, k, a.ld, 64, bk);
  const CUtensorMap mb = b.k_major ? make_tensor_map_2d(dtype, b.data, k, n, b.ld, bk, bn)
                                   : make_tensor_map_2d(dtype, b.data, n, k, b.ld, 64, bk);
  if (dtype == DType::Float32)
    sm90::launch<float, true, true>(tile, schedule, ma, mb, p, sms, tuning, stream);
  else if (a.k_major && b.k_major)
    sm90::launch<__nv_bfloat16, true, true>(tile, schedule, ma, mb, p, sms, tuning, stream);
  else if (a.k_major)
    sm90::launch<__nv_bfloat16, true, false>(tile, schedule, ma, mb, p, sms, tuning, stream);
  else
    sm90::launch<__nv_bfloat16, false, false>(tile, schedule, ma, mb, p, sms, tuning, stream);
}

}  // namespace ember::cuda
