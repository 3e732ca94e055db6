// Between the Hopper GEMM's host launcher (cuda/kernels/gemm_sm90.cu) and its
// kernels (cuda/kernels/sm90/gemm_kernel.cuh), which are compiled for sm_90a
// only, one translation unit per dtype and operand layout (gemm_*.cu beside
// this) so that a build compiles them in parallel.
#pragma once

#include <cstdint>

#include <cuda.h>  // CUtensorMap
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include "cuda/kernels/gemm_sm90.h"
#include "cuda/kernels/sm90/conv_gemm_plan.h"

namespace ember::cuda::sm90 {

// What the kernel needs besides the two tensor maps.
struct Params {
  int m, n, k;
  void* d;
  int64_t ldc;
  const void* bias;
  void* pre;
  void* bias_grad;
  Activation act;
  int out_f32;    // 1: the output (pre, bias_grad) is fp32, else bf16
  int group_m;    // rasterisation group (row blocks); set by launch
  int num_tiles;  // tiles to run (the debug limit applied); set by launch
  int* watchdog;
  int no_epilogue;  // 1: skip the epilogue (Sm90Tuning::no_epilogue)
};

// What the implicit GEMM of a convolution adds (Config::kConv != 0;
// conv_gemm_plan.h), a kernel parameter of its own so that the plain GEMMs' Params
// (and their code) stay as they were: the image's boxes, and for the weight grad the
// K split, `splits` parts of `kper` K steps, part s writing D at d + s * split_stride
// elements.
struct ConvParams {
  ConvBoxes boxes;
  int splits;
  int kper;
  int64_t split_stride;
};

// Launches the persistent kernel of one dtype (__nv_bfloat16 or float = TF32)
// and operand layout (kAK / kBK: A / B K-major) with tile `tile` and schedule
// `schedule` (neither Auto) on `sms` multiprocessors.
template <typename T, bool kAK, bool kBK>
void launch(Sm90Tile tile, Sm90Schedule schedule, const CUtensorMap& map_a,
            const CUtensorMap& map_b, Params p, int sms, const Sm90Tuning& tuning,
            cudaStream_t stream);

// The implicit GEMM of a convolution (conv_gemm_plan.h), bf16: kConv 1 with map_a
// 4-D over the image and map_b 2-D K-major; kConv 2 with map_a 2-D M-major and map_b
// 4-D; kConv 3 with map_a 4-D (read M-major) and map_b 2-D N-major. tile: k128x128 or
// k128x64 (cooperative).
template <int kConv>
void launch_conv(Sm90Tile tile, const CUtensorMap& map_a, const CUtensorMap& map_b, Params p,
                 const ConvParams& conv, int sms, cudaStream_t stream);

// Whether the kernels' sm_90a image loads on the current device.
bool kernels_loadable();

extern template void launch<__nv_bfloat16, true, true>(Sm90Tile, Sm90Schedule, const CUtensorMap&,
                                                       const CUtensorMap&, Params, int,
                                                       const Sm90Tuning&, cudaStream_t);
extern template void launch<__nv_bfloat16, true, false>(Sm90Tile, Sm90Schedule, const CUtensorMap&,
                                                        const CUtensorMap&, Params, int,
                                                        const Sm90Tuning&, cudaStream_t);
extern template void launch<__nv_bfloat16, false, false>(Sm90Tile, Sm90Schedule, const CUtensorMap&,
                                                         const CUtensorMap&, Params, int,
                                                         const Sm90Tuning&, cudaStream_t);
extern template void launch_conv<1>(Sm90Tile, const CUtensorMap&, const CUtensorMap&, Params,
                                    const ConvParams&, int, cudaStream_t);
extern template void launch_conv<2>(Sm90Tile, const CUtensorMap&, const CUtensorMap&, Params,
                                    const ConvParams&, int, cudaStream_t);
extern template void launch_conv<3>(Sm90Tile, const CUtensorMap&, const CUtensorMap&, Params,
                                    const ConvParams&, int, cudaStream_t);
extern template void launch<float, true, true>(Sm90Tile, Sm90Schedule, const CUtensorMap&,
                                               const CUtensorMap&, Params, int, const Sm90Tuning&,
                                               cudaStream_t);

}  // namespace ember::cuda::sm90
