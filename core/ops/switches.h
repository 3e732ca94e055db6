// Internal to core/ops: the environment switches that send an op to its composed path
// (EMBER_ATTENTION_DROPOUT, EMBER_ATTENTION_MASK, EMBER_LINEAR_CROSS_ENTROPY).
#pragma once

#include <cstdlib>
#include <string_view>

#include "core/base/error.h"

namespace ember::detail {

// Whether the variable `name` leaves `op` on its own path: true when unset, empty or
// `own` ("fused", "chunked"), false for "composed", anything else an ember::Error
// naming the op, the variable and both values. Callers keep the answer in a
// function-local static (read once per process).
inline bool own_path_unless_composed(const char* op, const char* name, const char* own) {
  const char* e = std::getenv(name);
  if (e == nullptr || *e == '\0') return true;
  const std::string_view v(e);
  EMBER_CHECK(v == own || v == "composed", op, ": ", name, "=", v, " (expected ", own,
              " or composed)");
  return v == own;
}

}  // namespace ember::detail
