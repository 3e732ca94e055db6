// The convolutions' implicit GEMMs (gemm_kernel.cuh with kConv, conv_gemm_plan.h),
// bf16, in their own translation unit: kConv 1 (the forward and the input grad:
// A from the image's boxes, both operands K-major), kConv 2 (the weight grad: B from
// the boxes, both M/N-major, the K steps split) and kConv 3 (the weight grad
// transposed, A from the boxes, for 64 output channels). Cooperative schedule;
// 128x64 tiles for 64 output columns, 128x128 elsewhere.
#include "cuda/kernels/sm90/gemm_kernel.cuh"

namespace ember::cuda::sm90 {

template <int kConv>
void launch_conv(Sm90Tile tile, const CUtensorMap& map_a, const CUtensorMap& map_b, Params p,
                 const ConvParams& conv, int sms, cudaStream_t stream) {
  constexpr bool kMajor = kConv == 1;
  // The row-summing warps (a bias gradient) walk plain tiles only.
  EMBER_CHECK(p.bias_grad == nullptr && p.pre == nullptr && p.bias == nullptr,
              "sm90 conv gemm: no bias, pre-activation or bias gradient in the epilogue");
  const Sm90Tuning tuning{};
  if (tile == Sm90Tile::k128x64)
    launch_config<Config<__nv_bfloat16, 128, 64, 8, kMajor, kMajor, false, kConv>>(
        map_a, map_b, p, sms, tuning, stream, conv);
  else if (tile == Sm90Tile::k128x128)
    launch_config<Config<__nv_bfloat16, 128, 128, 6, kMajor, kMajor, false, kConv>>(
        map_a, map_b, p, sms, tuning, stream, conv);
  else
    EMBER_FAIL("sm90 conv gemm: tile ", static_cast<int>(tile), " is not built");
}

template void launch_conv<1>(Sm90Tile, const CUtensorMap&, const CUtensorMap&, Params,
                             const ConvParams&, int, cudaStream_t);
template void launch_conv<2>(Sm90Tile, const CUtensorMap&, const CUtensorMap&, Params,
                             const ConvParams&, int, cudaStream_t);
template void launch_conv<3>(Sm90Tile, const CUtensorMap&, const CUtensorMap&, Params,
                             const ConvParams&, int, cudaStream_t);

}  // namespace ember::cuda::sm90
