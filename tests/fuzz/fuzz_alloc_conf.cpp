// libFuzzer target: EMBER_CUDA_ALLOC_CONF's parser. See fuzz_harness.h.
#include "fuzz/fuzz_harness.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ember::fuzz::alloc_conf_one(data, size);
  return 0;
}
