// One instantiation of ember's Hopper GEMM (gemm_kernel.cuh), in its own
// translation unit so builds compile the kernels in parallel: float operands,
// A K-major, B K-major (Linear's forward in TF32).
#include "cuda/kernels/sm90/gemm_kernel.cuh"

namespace ember::cuda::sm90 {

template void launch<float, true, true>(Sm90Tile, Sm90Schedule, const CUtensorMap&,
                                        const CUtensorMap&, Params, int, const Sm90Tuning&,
                                        cudaStream_t);

}  // namespace ember::cuda::sm90
