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

// Launches the persistent kernel of one dtype (__nv_bfloat16 or float = TF32)
// and operand layout (kAK / kBK: A / B K-major) with tile `tile` and schedule
// `schedule` (neither Auto) on `sms` multiprocessors.
template <typename T, bool kAK, bool kBK>
void launch(Sm90Tile tile, Sm90Schedule schedule, const CUtensorMap& map_a,
            const CUtensorMap& map_b, Params p, int sms, const Sm90Tuning& tuning,
            cudaStream_t stream);

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
extern template void launch<float, true, true>(Sm90Tile, Sm90Schedule, const CUtensorMap&,
                                               const CUtensorMap&, Params, int, const Sm90Tuning&,
                                               cudaStream_t);

}  // namespace ember::cuda::sm90
