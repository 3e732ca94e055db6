// libFuzzer target: the safetensors reader (nn::parse_safetensors, its JSON
// header parser included). See fuzz_harness.h.
#include "fuzz/fuzz_harness.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ember::fuzz::safetensors_one(data, size);
  return 0;
}
