// One instantiation of ember's Hopper GEMM (gemm_kernel.cuh), in its own
// translation unit so builds compile the kernels in parallel: __nv_bfloat16 operands,
// A K-major, B K-major (Linear's forward product).
#include "cuda/kernels/sm90/gemm_kernel.cuh"

namespace ember::cuda::sm90 {

template void launch<__nv_bfloat16, true, true>(Sm90Tile, Sm90Schedule, const CUtensorMap&,
                                                const CUtensorMap&, Params, int, const Sm90Tuning&,
                                                cudaStream_t);

}  // namespace ember::cuda::sm90

namespace ember::cuda::sm90 {

// The kernels' SASS exists for sm_90a only: cudaFuncGetAttributes fails
// (cudaErrorInvalidDeviceFunction) on a device no image fits.
bool kernels_loadable() {
  cudaFuncAttributes attr{};
  const cudaError_t e = cudaFuncGetAttributes(
      &attr, sm90_gemm_kernel<Config<__nv_bfloat16, 128, 256, 4, true, true>>);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return true;
}

}  // namespace ember::cuda::sm90
