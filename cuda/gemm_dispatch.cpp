#include "cuda/gemm_dispatch.h"

#include <cstdlib>
#include <cstring>

#include "core/base/error.h"
#include "cuda/blas.h"

namespace ember::cuda {

namespace {
// Below this many FLOPs (2mnk) ours runs. Measured on the H200 (bench_linear,
// benchmarks/RESULTS.md): at 32x10->10 (6.4e3 FLOPs) ours is 1.47x faster than
// cuBLASLt forward in f32 (one launch, no heuristic query); at 256x1024->1024
// (5.4e8) cuBLASLt is 3.8x faster. The crossover lies between; 2^21 is the
// conservative end (the 64x128->128 row of the sweep sits at 2.1e6).
constexpr double kOursBelowFlops = double{1 << 21};
}  // namespace

const char* to_string(GemmBackend b) {
  return b == GemmBackend::Ours ? "ours" : "cublas";
}

// The rule (see benchmarks/NOTES.md for the measurements behind it): cuBLASLt
// wherever it was measured faster. It is faster for every large shape in every
// dtype (our fp32 SGEMM and mma.sync bf16 kernel trail its Hopper kernels), and
// TF32 runs only through it; ours is kept for tiny problems, where a single
// launch of ours beats cuBLASLt's heuristic-selected kernel plus its setup.
GemmBackend choose_linear_backend(DType dtype, int64_t m, int64_t n, int64_t k) {
  if (const char* env = std::getenv("EMBER_GEMM")) {
    if (std::strcmp(env, "ours") == 0) return GemmBackend::Ours;
    if (std::strcmp(env, "cublas") == 0) return GemmBackend::Cublas;
    EMBER_CHECK(std::strcmp(env, "auto") == 0 || env[0] == '\0', "EMBER_GEMM=", env,
                ": expected ours, cublas or auto");
  }
  (void)dtype;
  const double flops =
      2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  return flops < kOursBelowFlops ? GemmBackend::Ours : GemmBackend::Cublas;
}

bool fuse_bias_grad(DType dtype) {
  (void)dtype;
  return true;
}

GemmBackend linear_forward(DType dtype, int64_t m, int64_t n, int64_t k, const void* x, int64_t ldx,
                           const void* w, int64_t ldw, const void* b, void* y, void* pre,
                           Activation act, int device, cudaStream_t stream) {
  const GemmBackend want = choose_linear_backend(dtype, m, n, k);
  if (want == GemmBackend::Cublas &&
      lt_linear_forward(dtype, m, n, k, x, ldx, w, ldw, b, y, pre, act, device, stream))
    return GemmBackend::Cublas;
  launch_linear_gemm(dtype, x, ldx, w, ldw, b, y, pre, m, n, k, act, stream);
  return GemmBackend::Ours;
}

}  // namespace ember::cuda
