// The source tree the tests were built from (set by tests/CMakeLists.txt), for
// tests that read committed data such as the fuzz corpora. Not __FILE__: compiler
// caches may make it relative.
#pragma once

#include <filesystem>

namespace ember::testing {
inline std::filesystem::path source_dir() {
  return EMBER_TEST_SOURCE_DIR;
}
}  // namespace ember::testing
