// One instantiation of ember's Hopper GEMM (gemm_kernel.cuh), in its own
// translation unit so builds compile the kernels in parallel: __nv_bfloat16 operands,
// A K-major, B N-major (Linear's d_x product).
#include "cuda/kernels/sm90/gemm_kernel.cuh"

namespace ember::cuda::sm90 {

template void launch<__nv_bfloat16, true, false>(Sm90Tile, Sm90Schedule, const CUtensorMap&,
                                                 const CUtensorMap&, Params, int, const Sm90Tuning&,
                                                 cudaStream_t);

}  // namespace ember::cuda::sm90
