// The doctest main shared by every test binary. Test cases that need a GPU carry
// `* doctest::test_suite("cuda")`, those that need a compute capability 9.0 GPU
// (the Hopper GEMMs) `* doctest::test_suite("cuda_sm90")`; where the device is
// missing they are filtered out here, and doctest counts them as skipped (never
// as passed).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

#include "cuda/kernels/gemm_sm90.h"
#include "cuda/runtime.h"

int main(int argc, char** argv) {
  doctest::Context context;
  const bool have_gpu = ember::cuda::is_available();
  if (!have_gpu) {
    context.addFilter("test-suite-exclude", "cuda,cuda_sm90");
    std::printf(
        "ember tests: no CUDA device, test cases in suites 'cuda' and 'cuda_sm90' are skipped\n");
  } else if (const char* why =
                 ember::cuda::sm90_gemm_unsupported(ember::DType::BFloat16, 0, 0, 0, {}, {}, {}, 0);
             why[0] != '\0') {
    context.addFilter("test-suite-exclude", "cuda_sm90");
    std::printf(
        "ember tests: device 0 cannot run the Hopper GEMMs (%s), suite 'cuda_sm90' is skipped\n",
        why);
  }
  context.applyCommandLine(argc, argv);
  return context.run();
}
