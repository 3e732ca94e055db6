// The doctest main shared by every test binary. Test cases that need a GPU carry
// `* doctest::test_suite("cuda")`; on a machine without one they are filtered out
// here, and doctest counts them as skipped (never as passed).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

#include "cuda/runtime.h"

int main(int argc, char** argv) {
  doctest::Context context;
  const bool have_gpu = ember::cuda::is_available();
  if (!have_gpu) {
    context.addFilter("test-suite-exclude", "cuda");
    std::printf("ember tests: no CUDA device, test cases in suite 'cuda' are skipped\n");
  }
  context.applyCommandLine(argc, argv);
  return context.run();
}
