// Replays the kept fuzz corpus of EMBER_CUDA_ALLOC_CONF's parser (tests/fuzz/
// corpus/alloc_conf: seeds and every input that once crashed it) in each normal
// and sanitizer test run. `make test-fuzz` grows it.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "fuzz/fuzz_harness.h"
#include "source_dir.h"

TEST_CASE("fuzz corpus/alloc_conf: every kept input parses or is refused with ember::Error") {
  const auto dir = ember::testing::source_dir() / "tests" / "fuzz" / "corpus" / "alloc_conf";
  REQUIRE(std::filesystem::is_directory(dir));
  size_t inputs = 0, parsed = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    CAPTURE(entry.path().string());
    std::ifstream in(entry.path(), std::ios::binary);
    const std::vector<uint8_t> bytes{std::istreambuf_iterator<char>(in),
                                     std::istreambuf_iterator<char>()};
    bool ok = false;
    CHECK_NOTHROW(ok = ember::fuzz::alloc_conf_one(bytes.data(), bytes.size()));
    ++inputs;
    parsed += ok;
    if (entry.path().filename().string().rfind("bad_", 0) == 0) CHECK(!ok);
  }
  CHECK(inputs >= 4);
  CHECK(parsed >= 4);
}
