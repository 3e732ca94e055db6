// Replays the kept fuzz corpora of the checkpoint and safetensors readers (tests/fuzz/corpus/
// checkpoint, safetensors: seeds and every input that once crashed them) in each normal and
// sanitizer test run, so a fixed crash stays fixed. `make test-fuzz` grows it.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "fuzz/fuzz_harness.h"
#include "source_dir.h"

namespace {
std::filesystem::path corpus_dir(const char* target) {
  return ember::testing::source_dir() / "tests" / "fuzz" / "corpus" / target;
}
std::vector<uint8_t> read_all(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
}  // namespace

TEST_CASE("fuzz corpus/checkpoint: every kept input is read or refused with ember::Error") {
  const auto dir = corpus_dir("checkpoint");
  REQUIRE(std::filesystem::is_directory(dir));
  size_t inputs = 0, parsed = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    CAPTURE(entry.path().string());
    const std::vector<uint8_t> bytes = read_all(entry.path());
    bool ok = false;
    CHECK_NOTHROW(ok = ember::fuzz::checkpoint_one(bytes.data(), bytes.size()));
    ++inputs;
    parsed += ok;
    // Seeds named valid_* or payload_* are well-formed and must parse.
    const std::string name = entry.path().filename().string();
    if (name.rfind("valid_", 0) == 0 || name.rfind("payload_", 0) == 0) CHECK(ok);
  }
  CHECK(inputs >= 3);
  CHECK(parsed >= 3);
}

TEST_CASE("fuzz corpus/safetensors: every kept input is read or refused with ember::Error") {
  const auto dir = corpus_dir("safetensors");
  REQUIRE(std::filesystem::is_directory(dir));
  size_t inputs = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    CAPTURE(entry.path().string());
    const std::vector<uint8_t> bytes = read_all(entry.path());
    bool ok = false;
    CHECK_NOTHROW(ok = ember::fuzz::safetensors_one(bytes.data(), bytes.size()));
    ++inputs;
    // valid_* and payload_* seeds are well-formed, bad_* are not.
    const std::string name = entry.path().filename().string();
    if (name.rfind("valid_", 0) == 0 || name.rfind("payload_", 0) == 0) CHECK(ok);
    if (name.rfind("bad_", 0) == 0) CHECK_FALSE(ok);
  }
  CHECK(inputs >= 5);
}
