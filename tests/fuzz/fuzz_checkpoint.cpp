// libFuzzer target: the checkpoint reader (nn::parse_state_dict). See fuzz_harness.h.
#include "fuzz/fuzz_harness.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ember::fuzz::checkpoint_one(data, size);
  return 0;
}
