// A process-wide on/off setting with an environment variable for its first value and a
// setter for tests and benchmarks: conv2d's implicit GEMM (EMBER_CONV_IMPLICIT), the
// element-wise vector kernels (EMBER_ELEMENTWISE_VECTORS), the tiled transpose
// (EMBER_TRANSPOSE_COPY), the row copy (EMBER_ROW_COPY), the wgmma attention backward
// (EMBER_ATTENTION_BWD_V2), the warp-per-row layer norm (EMBER_LAYER_NORM_WARP); and
// env_setting, its small-integer form (EMBER_ATTENTION_FWD_VERSION).
#pragma once

#include <atomic>
#include <cstdlib>
#include <string_view>

#include "core/base/error.h"

namespace ember {

// A process-wide small-integer setting of the same kind: `state` is -1 until read, then
// 0 .. max (max 1 to 9). The first read takes `name` from the environment: one digit
// 0 .. max, unset or empty giving `fallback`, anything else an ember::Error naming the
// variable. A value stored meanwhile (a setter racing the first read) wins.
inline int env_setting(std::atomic<int>& state, const char* name, int fallback, int max) {
  int v = state.load(std::memory_order_relaxed);
  if (v < 0) [[unlikely]] {
    const char* e = std::getenv(name);
    const std::string_view s = e != nullptr ? e : "";
    const bool digit = s.size() == 1 && s[0] >= '0' && s[0] <= '0' + max;
    if (max == 1)
      EMBER_CHECK(s.empty() || digit, name, " must be 0 or 1, got \"", s, "\"");
    else
      EMBER_CHECK(s.empty() || digit, name, " must be one of 0 to ", max, ", got \"", s, "\"");
    v = s.empty() ? fallback : s[0] - '0';
    int expected = -1;
    state.compare_exchange_strong(expected, v, std::memory_order_relaxed);
    v = state.load(std::memory_order_relaxed);
  }
  return v;
}

// An on/off setting: env_setting over 0 and 1 ("0" or "1"; unset or empty: `fallback`).
inline bool env_switch(std::atomic<int>& state, const char* name, bool fallback) {
  return env_setting(state, name, fallback ? 1 : 0, 1) == 1;
}

}  // namespace ember
