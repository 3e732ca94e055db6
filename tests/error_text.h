// For tests of error paths: the message an ember::Error carried, and a substring
// check, so a test can assert that the message names the problem.
#pragma once

#include <string>

#include "core/base/error.h"

namespace ember::testing {

// The message of the ember::Error that f() throws, or "(no error)".
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

inline bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

}  // namespace ember::testing
