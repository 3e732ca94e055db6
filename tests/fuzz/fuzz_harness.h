// What each fuzz target does with one input, shared by the libFuzzer entry
// points (tests/fuzz/fuzz_*.cpp, `make test-fuzz`) and the doctest that replays
// the kept corpus (tests/fuzz/corpus/) in every normal and sanitizer test run.
// Malformed input must end in ember::Error; anything else (another exception, a
// crash, a sanitizer report) is a bug.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/error.h"
#include "core/memory/alloc_config.h"
#include "core/tensor.h"
#include "nn/checkpoint.h"
#include "nn/safetensors.h"

namespace ember::fuzz {

// EMBER_CUDA_ALLOC_CONF's parser. Returns true when the text parsed.
inline bool alloc_conf_one(const uint8_t* data, size_t size) {
  try {
    memory::AllocatorOptions o = memory::AllocatorOptions::parse(
        std::string_view(reinterpret_cast<const char*>(data), size));
    // What parsed must be usable: look up every interval's divisions.
    for (size_t shift = 9; shift < 64; ++shift) (void)o.divisions_for(size_t{1} << shift);
    return true;
  } catch (const Error&) {
    return false;
  }
}

// The checkpoint reader. An input starting with the magic "EMBERCKP" is read as a
// whole file. Any other input is a payload: its first 4 bytes are the entry
// count, and a header with the right size and checksum is put in front, so the
// fuzzer reaches the entry parser instead of stopping at the checksum.
inline bool checkpoint_one(const uint8_t* data, size_t size) {
  std::vector<unsigned char> file;
  if (size >= 8 && std::memcmp(data, "EMBERCKP", 8) == 0) {
    file.assign(data, data + size);
  } else {
    uint32_t count = 0;
    std::memcpy(&count, data, size < 4 ? size : 4);
    const uint8_t* payload = data + (size < 4 ? size : 4);
    const size_t payload_size = size < 4 ? 0 : size - 4;
    uint64_t hash = 14695981039346656037ull;  // FNV-1a 64, as nn/checkpoint.cpp
    for (size_t i = 0; i < payload_size; ++i) {
      hash ^= payload[i];
      hash *= 1099511628211ull;
    }
    const uint32_t version = 1;
    const uint64_t bytes = payload_size, reserved = 0;
    file.assign({'E', 'M', 'B', 'E', 'R', 'C', 'K', 'P'});
    auto put = [&](const void* p, size_t n) {
      const auto* b = static_cast<const unsigned char*>(p);
      file.insert(file.end(), b, b + n);
    };
    put(&version, 4);
    put(&count, 4);
    put(&bytes, 8);
    put(&hash, 8);
    put(&reserved, 8);
    file.insert(file.end(), payload, payload + payload_size);
  }
  try {
    StateDict sd = nn::parse_state_dict(file.data(), file.size(), "fuzz");
    // Every tensor read must be whole: touch each byte.
    for (const auto& [name, t] : sd) {
      const auto* p = static_cast<const unsigned char*>(t.raw_data());
      unsigned sum = 0;
      for (size_t i = 0; i < t.nbytes(); ++i) sum += p[i];
      (void)sum;
    }
    return true;
  } catch (const Error&) {
    return false;
  }
}

// The safetensors reader. An input whose first 8 bytes are a header size that
// fits the rest is read as a whole file; any other input is a header alone (its
// size put in front), so the fuzzer reaches the JSON parser and the format's
// rules without having to find the length first.
inline bool safetensors_one(const uint8_t* data, size_t size) {
  std::vector<unsigned char> file;
  uint64_t n = 0;
  if (size >= 8) std::memcpy(&n, data, 8);
  if (size >= 8 && n <= size - 8) {
    file.assign(data, data + size);
  } else {
    n = size;
    file.resize(8);
    std::memcpy(file.data(), &n, 8);
    file.insert(file.end(), data, data + size);
  }
  try {
    nn::SafetensorsFile f = nn::parse_safetensors(file.data(), file.size(), "fuzz");
    for (const auto& [name, t] : f.tensors) {
      const auto* p = static_cast<const unsigned char*>(t.raw_data());
      unsigned sum = 0;
      for (size_t i = 0; i < t.nbytes(); ++i) sum += p[i];
      (void)sum;
    }
    return true;
  } catch (const Error&) {
    return false;
  }
}

}  // namespace ember::fuzz
