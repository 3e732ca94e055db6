// Planted bugs that compute-sanitizer must catch (issue 33): the sanitize stage
// (tools/gpu_sanitize.sh) runs `oob` under memcheck and `race` under racecheck
// and fails unless each is reported, in its own kernel; `clean` runs the same
// two kernels without their bugs and must be clean under both tools, so a catch
// is the bug's and not the harness's. Not a CTest test: natively the bugs go
// unnoticed (the write lands in the allocation's rounding, the race in a value
// nobody checks), which is the point of running them under the tools.
//
// Two more for initcheck and what gpu_sanitize.sh sets apart there (cuda/blas.cpp,
// EMBER_SANITIZE_PREFILL_BLAS_OUTPUTS): `uninit` reads device memory nothing wrote,
// and must be reported with the pre-fill on; `blas-output` runs one TF32 Linear
// through cuBLASLt (ember's cuda::lt_linear_forward, the shape of the probe's
// evidence) into an output with 64 floats of slack, then reads the output
// (planted_read_output) and the slack (planted_uninit_read): with the pre-fill
// on, only the slack must be reported, so the pre-fill covers exactly what cuBLASLt
// is told to write. Without the pre-fill, reports in planted_read_output are the
// tool not seeing cuBLASLt's stores (the probe shows the same with no ember code).
// Usage: ember_sanitizer_planted oob|race|clean|uninit|blas-output
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <exception>

#include "cuda/blas.h"

namespace {

constexpr int kN = 256;

// Writes out[i] for i in [0, n + extra): extra = 1 writes one float past the end.
__global__ void planted_oob_write(float* out, int n, int extra) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n + extra) out[i] = static_cast<float>(i);
}

// Each thread reads its neighbour's shared slot; without the barrier that read
// races with the neighbour's write (threads of different warps).
__global__ void planted_shared_race(const float* in, float* out, int barrier) {
  __shared__ float slot[kN];
  const int t = static_cast<int>(threadIdx.x);
  slot[t] = in[t];
  if (barrier) __syncthreads();
  out[t] = slot[(t + 64) % kN];
}

// Sums in[0, n) into *out: every element is read. Also reads the slack past a
// cuBLASLt output (blas-output), which nothing wrote either.
__global__ void planted_uninit_read(const float* in, int n, float* out) {
  float s = 0.f;
  for (int i = static_cast<int>(threadIdx.x); i < n; i += static_cast<int>(blockDim.x)) s += in[i];
  atomicAdd(out, s);
}
__global__ void planted_read_output(const float* in, long long n, float* out) {
  float s = 0.f;
  for (long long i = blockIdx.x * 256LL + threadIdx.x; i < n; i += 256LL * gridDim.x) s += in[i];
  atomicAdd(out, s);
}

int check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return 0;
  std::fprintf(stderr, "ember_sanitizer_planted: %s: %s\n", what, cudaGetErrorString(e));
  return 1;
}

int run_uninit() {
  float *in = nullptr, *sum = nullptr;
  if (check(cudaMalloc(&in, kN * sizeof(float)), "cudaMalloc") ||
      check(cudaMalloc(&sum, sizeof(float)), "cudaMalloc") ||
      check(cudaMemset(sum, 0, sizeof(float)), "cudaMemset"))
    return 1;
  planted_uninit_read<<<1, kN>>>(in, kN, sum);
  if (check(cudaGetLastError(), "launch") || check(cudaDeviceSynchronize(), "kernel")) return 1;
  cudaFree(in);
  cudaFree(sum);
  std::printf("ember_sanitizer_planted: uninit ran\n");
  return 0;
}

int run_blas_output() {
  constexpr long long m = 1024, n = 1024, k = 1024, slack = 64;
  float *x = nullptr, *w = nullptr, *y = nullptr, *sum = nullptr;
  if (check(cudaMalloc(&x, m * k * sizeof(float)), "cudaMalloc") ||
      check(cudaMalloc(&w, n * k * sizeof(float)), "cudaMalloc") ||
      check(cudaMalloc(&y, (m * n + slack) * sizeof(float)), "cudaMalloc") ||
      check(cudaMalloc(&sum, sizeof(float)), "cudaMalloc") ||
      check(cudaMemset(x, 0, m * k * sizeof(float)), "cudaMemset") ||
      check(cudaMemset(w, 0, n * k * sizeof(float)), "cudaMemset") ||
      check(cudaMemset(sum, 0, sizeof(float)), "cudaMemset"))
    return 1;
  try {
    ember::cuda::set_allow_tf32(true);
    if (!ember::cuda::lt_linear_forward(ember::DType::Float32, m, n, k, x, k, w, k, nullptr, y,
                                        nullptr, ember::Activation::None, 0, nullptr)) {
      std::fprintf(stderr, "ember_sanitizer_planted: cuBLASLt offered no algorithm\n");
      return 1;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ember_sanitizer_planted: %s\n", e.what());
    return 1;
  }
  planted_read_output<<<264, 256>>>(y, m * n, sum);
  planted_uninit_read<<<1, 64>>>(y + m * n, static_cast<int>(slack), sum);
  if (check(cudaGetLastError(), "launch") || check(cudaDeviceSynchronize(), "kernel")) return 1;
  cudaFree(x);
  cudaFree(w);
  cudaFree(y);
  cudaFree(sum);
  std::printf("ember_sanitizer_planted: blas-output ran\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const char* mode = argc == 2 ? argv[1] : "";
  const bool oob = std::strcmp(mode, "oob") == 0, race = std::strcmp(mode, "race") == 0,
             clean = std::strcmp(mode, "clean") == 0, uninit = std::strcmp(mode, "uninit") == 0,
             blas = std::strcmp(mode, "blas-output") == 0;
  if (!oob && !race && !clean && !uninit && !blas) {
    std::fprintf(stderr, "usage: ember_sanitizer_planted oob|race|clean|uninit|blas-output\n");
    return 2;
  }
  if (uninit || blas) return uninit ? run_uninit() : run_blas_output();
  float *in = nullptr, *out = nullptr;
  if (check(cudaMalloc(&in, kN * sizeof(float)), "cudaMalloc") ||
      check(cudaMalloc(&out, kN * sizeof(float)), "cudaMalloc") ||
      check(cudaMemset(in, 0, kN * sizeof(float)), "cudaMemset"))
    return 1;
  if (oob || clean) planted_oob_write<<<2, kN>>>(out, kN, oob ? 1 : 0);
  if (race || clean) planted_shared_race<<<1, kN>>>(in, out, race ? 0 : 1);
  if (check(cudaGetLastError(), "launch") || check(cudaDeviceSynchronize(), "kernel")) return 1;
  cudaFree(in);
  cudaFree(out);
  std::printf("ember_sanitizer_planted: %s ran\n", mode);
  return 0;
}
