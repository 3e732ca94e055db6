// A process-wide on/off setting with an environment variable for its first value and a
// setter for tests and benchmarks: conv2d's implicit GEMM (EMBER_CONV_IMPLICIT), the
// element-wise vector kernels (EMBER_ELEMENTWISE_VECTORS), the tiled transpose
// (EMBER_TRANSPOSE_COPY), the row copy (EMBER_ROW_COPY), the wgmma attention backward
// (EMBER_ATTENTION_BWD_V2), the warp-per-row layer norm (EMBER_LAYER_NORM_WARP).
#pragma once

#include <atomic>
#include <cstdlib>
#include <string_view>

#include "core/base/error.h"

namespace ember {

// `state` is -1 until read, then 0 or 1. The first read takes `name` from the
// environment: "0" or "1", unset or empty giving `fallback`, anything else an
// ember::Error naming the variable. A value stored meanwhile (a setter racing the first
// read) wins.
inline bool env_switch(std::atomic<int>& state, const char* name, bool fallback) {
  int v = state.load(std::memory_order_relaxed);
  if (v < 0) [[unlikely]] {
    const char* e = std::getenv(name);
    const std::string_view s = e != nullptr ? e : "";
    EMBER_CHECK(s.empty() || s == "0" || s == "1", name, " must be 0 or 1, got \"", s, "\"");
    v = s.empty() ? (fallback ? 1 : 0) : (s == "1" ? 1 : 0);
    int expected = -1;
    state.compare_exchange_strong(expected, v, std::memory_order_relaxed);
    v = state.load(std::memory_order_relaxed);
  }
  return v == 1;
}

}  // namespace ember
