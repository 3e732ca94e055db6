#include "core/memory/alloc_config.h"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cstdlib>
#include <vector>

#include "core/base/error.h"

namespace ember::memory {

namespace {

constexpr size_t kMiB = size_t{1} << 20;
// PyTorch refuses a split limit at or below the large segment size (20 MiB): such
// a limit would forbid splitting the very segments the large pool carves from.
constexpr size_t kMinMaxSplitMb = 20;
constexpr size_t kRoundupFirstLog2 = 20;  // interval 0 ends at 2 MiB; see divisions_for

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

[[noreturn]] void fail(std::string_view key, std::string_view value, std::string_view why) {
  EMBER_FAIL(kAllocConfEnvVar, ": invalid value \"", value, "\" for ", key, ": ", why);
}

size_t parse_unsigned(std::string_view key, std::string_view value) {
  size_t out = 0;
  auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), out);
  if (value.empty() || ec != std::errc{} || end != value.data() + value.size())
    fail(key, value, "expected a non-negative integer");
  return out;
}

bool parse_bool(std::string_view key, std::string_view value) {
  if (value == "True" || value == "true" || value == "1") return true;
  if (value == "False" || value == "false" || value == "0") return false;
  fail(key, value, "expected True or False");
}

uint32_t parse_divisions(std::string_view key, std::string_view value) {
  size_t d = parse_unsigned(key, value);
  if (d > (size_t{1} << 31) || (d != 0 && !std::has_single_bit(d)))
    fail(key, value, "divisions must be 0 or a power of 2");
  return static_cast<uint32_t>(d);
}

// Interval index of a size given in MiB (a power of two): its log2, so 1 MiB -> 0,
// 2 MiB -> 1, 64 GiB and up -> 16, the same intervals divisions_for() looks up.
size_t interval_of_mb(size_t mb) {
  mb = std::clamp<size_t>(mb, 1, size_t{64} << 10);
  return std::min<size_t>(std::bit_width(mb) - 1, AllocatorOptions::kRoundupIntervals - 1);
}

void parse_roundup(std::string_view key, std::string_view value, AllocatorOptions& o) {
  auto& div = o.roundup_power2_divisions;
  if (value.empty() || value.front() != '[') {
    div.fill(parse_divisions(key, value));
    return;
  }
  if (value.back() != ']') fail(key, value, "a list must end with ']'");
  std::string_view list = value.substr(1, value.size() - 2);
  if (trim(list).empty()) fail(key, value, "the list is empty");
  bool first = true;
  size_t last = 0;
  while (!list.empty()) {
    size_t comma = list.find(',');
    std::string_view item = trim(list.substr(0, comma));
    list = comma == std::string_view::npos ? std::string_view{} : list.substr(comma + 1);
    size_t colon = item.find(':');
    if (colon == std::string_view::npos)
      fail(key, value, "each list entry must be size_mb:divisions or >:divisions");
    std::string_view where = trim(item.substr(0, colon));
    uint32_t d = parse_divisions(key, trim(item.substr(colon + 1)));
    if (where == ">") {
      // Everything above the last named interval.
      for (size_t i = first ? 0 : last + 1; i < div.size(); ++i) div[i] = d;
      continue;
    }
    size_t mb = parse_unsigned(key, where);
    if (mb == 0 || !std::has_single_bit(mb)) fail(key, value, "interval sizes must be powers of 2");
    size_t index = interval_of_mb(mb);
    // The first entry also covers every interval below it.
    if (first) std::fill(div.begin(), div.begin() + static_cast<ptrdiff_t>(index), d);
    div[index] = d;
    first = false;
    last = index;
  }
}

// Splits at commas outside brackets, so that roundup_power2_divisions' list survives.
std::vector<std::string_view> split_entries(std::string_view text) {
  std::vector<std::string_view> out;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    if (i == text.size() || (text[i] == ',' && depth == 0)) {
      out.push_back(trim(text.substr(start, i - start)));
      start = i + 1;
    } else if (text[i] == '[') {
      ++depth;
    } else if (text[i] == ']') {
      --depth;
    }
  }
  return out;
}

}  // namespace

AllocatorOptions AllocatorOptions::parse(std::string_view text) {
  AllocatorOptions o;
  if (trim(text).empty()) return o;
  for (std::string_view entry : split_entries(text)) {
    EMBER_CHECK(!entry.empty(), kAllocConfEnvVar, ": empty entry in \"", text, "\"");
    size_t colon = entry.find(':');
    EMBER_CHECK(colon != std::string_view::npos, kAllocConfEnvVar, ": entry \"", entry,
                "\" is not key:value");
    std::string_view key = trim(entry.substr(0, colon));
    std::string_view value = trim(entry.substr(colon + 1));
    if (key == "max_split_size_mb") {
      size_t mb = parse_unsigned(key, value);
      if (mb <= kMinMaxSplitMb) fail(key, value, "must be > 20 (MiB)");
      o.max_split_size = std::min(mb, kNoMaxSplit / kMiB) * kMiB;
    } else if (key == "max_non_split_rounding_mb") {
      o.max_non_split_rounding = std::min(parse_unsigned(key, value), kNoMaxSplit / kMiB) * kMiB;
    } else if (key == "roundup_power2_divisions") {
      parse_roundup(key, value, o);
    } else if (key == "garbage_collection_threshold") {
      double t = 0.0;
      auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), t);
      if (value.empty() || ec != std::errc{} || end != value.data() + value.size())
        fail(key, value, "expected a number");
      if (!(t > 0.0 && t < 1.0)) fail(key, value, "must be between 0.0 and 1.0 (exclusive)");
      o.garbage_collection_threshold = t;
    } else if (key == "sanitize") {
      o.sanitize = parse_bool(key, value);
    } else if (key == "sanitize_quarantine_blocks") {
      o.quarantine_blocks = parse_unsigned(key, value);
    } else if (key == "sanitize_quarantine_mb") {
      o.quarantine_bytes = std::min(parse_unsigned(key, value), kNoMaxSplit / kMiB) * kMiB;
    } else if (key == "expandable_segments") {
      o.expandable_segments = parse_bool(key, value);
    } else {
      EMBER_FAIL(kAllocConfEnvVar, ": unknown option \"", key,
                 "\" (known: max_split_size_mb, max_non_split_rounding_mb, "
                 "roundup_power2_divisions, garbage_collection_threshold, expandable_segments, "
                 "sanitize, sanitize_quarantine_blocks, sanitize_quarantine_mb)");
    }
  }
  return o;
}

AllocatorOptions AllocatorOptions::from_env() {
  const char* text = std::getenv(kAllocConfEnvVar);
  return text == nullptr ? AllocatorOptions{} : parse(text);
}

uint32_t AllocatorOptions::divisions_for(size_t bytes) const {
  size_t log2 = static_cast<size_t>(std::bit_width(bytes)) - 1;
  size_t index = log2 > kRoundupFirstLog2 ? log2 - kRoundupFirstLog2 : 0;
  return roundup_power2_divisions[std::min(index, kRoundupIntervals - 1)];
}

}  // namespace ember::memory
