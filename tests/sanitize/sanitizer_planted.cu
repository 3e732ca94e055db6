// Planted bugs that compute-sanitizer must catch (issue 33): the sanitize stage
// (tools/gpu_sanitize.sh) runs `oob` under memcheck and `race` under racecheck
// and fails unless each is reported, in its own kernel; `clean` runs the same
// two kernels without their bugs and must be clean under both tools, so a catch
// is the bug's and not the harness's. Not a CTest test: natively the bugs go
// unnoticed (the write lands in the allocation's rounding, the race in a value
// nobody checks), which is the point of running them under the tools.
// Usage: ember_sanitizer_planted oob|race|clean
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>

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

int check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return 0;
  std::fprintf(stderr, "ember_sanitizer_planted: %s: %s\n", what, cudaGetErrorString(e));
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  const char* mode = argc == 2 ? argv[1] : "";
  const bool oob = std::strcmp(mode, "oob") == 0, race = std::strcmp(mode, "race") == 0,
             clean = std::strcmp(mode, "clean") == 0;
  if (!oob && !race && !clean) {
    std::fprintf(stderr, "usage: ember_sanitizer_planted oob|race|clean\n");
    return 2;
  }
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
