// What the caching allocator reports: statistics under PyTorch's key names, the
// memory_summary() table compared whole against hand-written expectations, the
// options parser's errors, and the Chrome trace export. Simulated backend only.
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/base/error.h"
#include "core/memory.h"
#include "core/memory/caching_allocator.h"
#include "cuda/device_allocator.h"
#include "cuda/runtime.h"

namespace {

using namespace ember;
using namespace ember::memory;

constexpr size_t kMiB = 1024 * 1024;

std::unique_ptr<CachingAllocator> simulated(size_t capacity, SimulatedBackend** sim = nullptr,
                                            AllocatorOptions options = {}) {
  auto backend = std::make_unique<SimulatedBackend>(capacity);
  if (sim != nullptr) *sim = backend.get();
  return std::make_unique<CachingAllocator>(std::move(backend), options);
}

// The message of the ember::Error that parsing `text` throws ("" if none).
std::string parse_error(const std::string& text) {
  try {
    AllocatorOptions::parse(text);
  } catch (const ember::Error& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// A strict JSON syntax check (objects, arrays, strings, numbers, literals), enough
// to tell that a trace file will load; returns false on the first error.
class JsonChecker {
 public:
  explicit JsonChecker(const std::string& text) : s_(text) {}
  bool valid() {
    skip();
    if (!value()) return false;
    skip();
    return i_ == s_.size();
  }

 private:
  void skip() {
    while (i_ < s_.size() && std::strchr(" \t\r\n", s_[i_]) != nullptr) ++i_;
  }
  bool eat(char c) {
    skip();
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  bool value() {
    skip();
    if (i_ >= s_.size()) return false;
    char c = s_[i_];
    if (c == '{') return object();
    if (c == '[') return array();
    if (c == '"') return string();
    if (c == '-' || (c >= '0' && c <= '9')) return number();
    for (const char* lit : {"true", "false", "null"}) {
      if (s_.compare(i_, std::strlen(lit), lit) == 0) {
        i_ += std::strlen(lit);
        return true;
      }
    }
    return false;
  }
  bool object() {
    ++i_;
    if (eat('}')) return true;
    do {
      skip();
      if (!string() || !eat(':') || !value()) return false;
    } while (eat(','));
    return eat('}');
  }
  bool array() {
    ++i_;
    if (eat(']')) return true;
    do {
      if (!value()) return false;
    } while (eat(','));
    return eat(']');
  }
  bool string() {
    if (i_ >= s_.size() || s_[i_] != '"') return false;
    for (++i_; i_ < s_.size(); ++i_) {
      unsigned char c = static_cast<unsigned char>(s_[i_]);
      if (c == '"') {
        ++i_;
        return true;
      }
      if (c < 0x20) return false;
      if (c == '\\') ++i_;
    }
    return false;
  }
  bool number() {
    size_t start = i_;
    if (s_[i_] == '-') ++i_;
    while (i_ < s_.size() && std::strchr("0123456789.eE+-", s_[i_]) != nullptr) ++i_;
    return i_ > start && s_[i_ - 1] >= '0' && s_[i_ - 1] <= '9';
  }

  const std::string& s_;
  size_t i_ = 0;
};

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("allocator/stats: memory_stats has exactly PyTorch's keys and ember's three gauges") {
  std::set<std::string> expected;
  for (const char* metric :
       {"allocation", "segment", "active", "inactive_split", "allocated_bytes", "reserved_bytes",
        "active_bytes", "inactive_split_bytes", "requested_bytes"})
    for (const char* pool : {"all", "large_pool", "small_pool"})
      for (const char* field : {"current", "peak", "allocated", "freed"})
        expected.insert(std::string(metric) + "." + pool + "." + field);
  for (const char* metric : {"oversize_allocations", "oversize_segments"})
    for (const char* field : {"current", "peak", "allocated", "freed"})
      expected.insert(std::string(metric) + "." + field);
  for (const char* key : {"max_split_size", "num_alloc_retries", "num_device_alloc",
                          "num_device_free", "num_ooms", "num_sync_all_streams"})
    expected.insert(key);
  REQUIRE(expected.size() == 122);  // PyTorch's
  for (const char* gauge :
       {"largest_free_block_bytes", "reserved_unallocated_bytes", "address_space_bytes"})
    for (const char* pool : {"all", "large_pool", "small_pool"})
      expected.insert(std::string(gauge) + "." + pool);

  auto a = simulated(64 * kMiB);
  auto stats = a->memory_stats();
  std::set<std::string> keys;
  for (const auto& [key, value] : stats) keys.insert(key);
  CHECK(keys == expected);
  CHECK(stats.at("max_split_size") == -1);  // unlimited, as PyTorch reports SIZE_MAX
}

TEST_CASE("allocator/summary: the table matches a known state line for line") {
  SimulatedBackend* sim = nullptr;
  auto a = simulated(size_t{1} << 30, &sim);
  void* p = a->allocate(1000, nullptr);      // small: 1024 of a 2 MiB segment
  void* q = a->allocate(3 * kMiB, nullptr);  // large: 3 MiB of a 20 MiB segment
  void* r = a->allocate(102400, nullptr);    // small: next to p
  a->deallocate(p);
  CHECK_THROWS_AS(a->allocate(size_t{2} << 30, nullptr), ember::OutOfMemoryError);

  const std::string expected =
      "|===========================================================================|\n"
      "|                   ember CUDA memory summary, device ID 0                  |\n"
      "|---------------------------------------------------------------------------|\n"
      "|            CUDA OOMs: 1            |        cudaMalloc retries: 1         |\n"
      "|===========================================================================|\n"
      "|        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  |\n"
      "|---------------------------------------------------------------------------|\n"
      "| Allocated memory      |   3172 KiB |   3173 KiB |   3173 KiB |   1024 B   |\n"
      "|       from large pool |   3072 KiB |   3072 KiB |   3072 KiB |      0 B   |\n"
      "|       from small pool |    100 KiB |    101 KiB |    101 KiB |   1024 B   |\n"
      "|---------------------------------------------------------------------------|\n"
      "| Active memory         |   3172 KiB |   3173 KiB |   3173 KiB |   1024 B   |\n"
      "|       from large pool |   3072 KiB |   3072 KiB |   3072 KiB |      0 B   |\n"
      "|       from small pool |    100 KiB |    101 KiB |    101 KiB |   1024 B   |\n"
      "|---------------------------------------------------------------------------|\n"
      "| Requested memory      |   3172 KiB |   3172 KiB |   3172 KiB |   1000 B   |\n"
      "|       from large pool |   3072 KiB |   3072 KiB |   3072 KiB |      0 B   |\n"
      "|       from small pool |    100 KiB |    100 KiB |    100 KiB |   1000 B   |\n"
      "|---------------------------------------------------------------------------|\n"
      "| GPU reserved memory   |  22528 KiB |  22528 KiB |  22528 KiB |      0 B   |\n"
      "|       from large pool |  20480 KiB |  20480 KiB |  20480 KiB |      0 B   |\n"
      "|       from small pool |   2048 KiB |   2048 KiB |   2048 KiB |      0 B   |\n"
      "|---------------------------------------------------------------------------|\n"
      "| Non-releasable memory |  19356 KiB |  19455 KiB |  19456 KiB | 102400 B   |\n"
      "|       from large pool |  17408 KiB |  17408 KiB |  17408 KiB |      0 B   |\n"
      "|       from small pool |   1948 KiB |   2047 KiB |   2048 KiB | 102400 B   |\n"
      "|---------------------------------------------------------------------------|\n"
      "| Allocations           |       2    |       3    |       3    |       1    |\n"
      "|       from large pool |       1    |       1    |       1    |       0    |\n"
      "|       from small pool |       1    |       2    |       2    |       1    |\n"
      "|---------------------------------------------------------------------------|\n"
      "| Active allocs         |       2    |       3    |       3    |       1    |\n"
      "|       from large pool |       1    |       1    |       1    |       0    |\n"
      "|       from small pool |       1    |       2    |       2    |       1    |\n"
      "|---------------------------------------------------------------------------|\n"
      "| GPU reserved segments |       2    |       2    |       2    |       0    |\n"
      "|       from large pool |       1    |       1    |       1    |       0    |\n"
      "|       from small pool |       1    |       1    |       1    |       0    |\n"
      "|---------------------------------------------------------------------------|\n"
      "| Non-releasable allocs |       3    |       3    |       3    |       0    |\n"
      "|       from large pool |       1    |       1    |       1    |       0    |\n"
      "|       from small pool |       2    |       2    |       2    |       0    |\n"
      "|---------------------------------------------------------------------------|\n"
      "| Oversize allocations  |       0    |       0    |       0    |       0    |\n"
      "|---------------------------------------------------------------------------|\n"
      "| Oversize GPU segments |       0    |       0    |       0    |       0    |\n"
      "|===========================================================================|\n";
  // ember's one line below PyTorch's table: the large pool's free 17 MiB block; the
  // small segment's 1948 KiB remainder after r; 22 MiB reserved - 3172 KiB allocated.
  const std::string fragmentation =
      "Fragmentation: largest free block 17.00 MiB (large pool 17.00 MiB, small pool "
      "1.90 MiB); reserved but unallocated 18.90 MiB.\n";
  const std::string summary = a->memory_summary();
  CHECK(summary == expected + fragmentation);

  // Abbreviated: the same table without the per-pool rows, and the same line.
  std::string without_pools;
  std::istringstream lines(expected);
  for (std::string line; std::getline(lines, line);)
    if (!contains(line, "from large pool") && !contains(line, "from small pool"))
      without_pools += line + "\n";
  CHECK(a->memory_summary(true) == without_pools + fragmentation);

  a->deallocate(q);
  a->deallocate(r);
  (void)sim;
}

TEST_CASE("allocator/summary: the layout of PyTorch's reference table, value for value") {
  // The statistics behind ../shared/reference/pytorch-memory-summary.txt (all
  // byte values there are whole KiB), so the two tables must agree line by line.
  MemoryStats s;
  auto set = [](StatArray& a, size_t type, int64_t cur, int64_t peak, int64_t alloc,
                int64_t freed) {
    a[type] = Stat{cur, peak, alloc, freed};
  };
  auto kib = [&set](StatArray& a, size_t type, int64_t cur, int64_t peak, int64_t alloc,
                    int64_t freed) {
    set(a, type, cur * 1024, peak * 1024, alloc * 1024, freed * 1024);
  };
  for (StatArray* a : {&s.allocated_bytes, &s.active_bytes}) {
    kib(*a, kAggregate, 199680, 199680, 207317, 7637);
    kib(*a, kLargePool, 196608, 196608, 196608, 0);
    kib(*a, kSmallPool, 3072, 3072, 10709, 7637);
  }
  kib(s.requested_bytes, kAggregate, 199680, 199680, 205229, 5549);
  kib(s.requested_bytes, kLargePool, 196608, 196608, 196608, 0);
  kib(s.requested_bytes, kSmallPool, 3072, 3072, 8621, 5549);
  kib(s.reserved_bytes, kAggregate, 204800, 204800, 204800, 0);
  kib(s.reserved_bytes, kLargePool, 196608, 196608, 196608, 0);
  kib(s.reserved_bytes, kSmallPool, 8192, 8192, 8192, 0);
  kib(s.inactive_split_bytes, kAggregate, 3072, 3072, 15824, 12752);
  kib(s.inactive_split_bytes, kLargePool, 0, 0, 0, 0);
  kib(s.inactive_split_bytes, kSmallPool, 3072, 3072, 15824, 12752);
  for (StatArray* a : {&s.allocation, &s.active}) {
    set(*a, kAggregate, 9, 9, 7327, 7318);
    set(*a, kLargePool, 6, 6, 6, 0);
    set(*a, kSmallPool, 3, 3, 7321, 7318);
  }
  set(s.segment, kAggregate, 10, 10, 10, 0);
  set(s.segment, kLargePool, 6, 6, 6, 0);
  set(s.segment, kSmallPool, 4, 4, 4, 0);
  set(s.inactive_split, kAggregate, 6, 6, 2657, 2651);
  set(s.inactive_split, kLargePool, 0, 0, 0, 0);
  set(s.inactive_split, kSmallPool, 6, 6, 2657, 2651);

  const std::string reference =
      "|===========================================================================|\n"
      "|                   ember CUDA memory summary, device ID 0                  |\n"
      "|---------------------------------------------------------------------------|\n"
      "|            CUDA OOMs: 0            |        cudaMalloc retries: 0         |\n"
      "|===========================================================================|\n"
      "|        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  |\n"
      "|---------------------------------------------------------------------------|\n"
      "| Allocated memory      | 199680 KiB | 199680 KiB | 207317 KiB |   7637 KiB |\n"
      "|       from large pool | 196608 KiB | 196608 KiB | 196608 KiB |      0 KiB |\n"
      "|       from small pool |   3072 KiB |   3072 KiB |  10709 KiB |   7637 KiB |\n"
      "|---------------------------------------------------------------------------|\n"
      "| Active memory         | 199680 KiB | 199680 KiB | 207317 KiB |   7637 KiB |\n"
      "|       from large pool | 196608 KiB | 196608 KiB | 196608 KiB |      0 KiB |\n"
      "|       from small pool |   3072 KiB |   3072 KiB |  10709 KiB |   7637 KiB |\n"
      "|---------------------------------------------------------------------------|\n"
      "| Requested memory      | 199680 KiB | 199680 KiB | 205229 KiB |   5549 KiB |\n"
      "|       from large pool | 196608 KiB | 196608 KiB | 196608 KiB |      0 KiB |\n"
      "|       from small pool |   3072 KiB |   3072 KiB |   8621 KiB |   5549 KiB |\n"
      "|---------------------------------------------------------------------------|\n"
      "| GPU reserved memory   | 204800 KiB | 204800 KiB | 204800 KiB |      0 B   |\n"
      "|       from large pool | 196608 KiB | 196608 KiB | 196608 KiB |      0 B   |\n"
      "|       from small pool |   8192 KiB |   8192 KiB |   8192 KiB |      0 B   |\n"
      "|---------------------------------------------------------------------------|\n"
      "| Non-releasable memory |   3072 KiB |   3072 KiB |  15824 KiB |  12752 KiB |\n"
      "|       from large pool |      0 KiB |      0 KiB |      0 KiB |      0 KiB |\n"
      "|       from small pool |   3072 KiB |   3072 KiB |  15824 KiB |  12752 KiB |\n"
      "|---------------------------------------------------------------------------|\n"
      "| Allocations           |       9    |       9    |    7327    |    7318    |\n"
      "|       from large pool |       6    |       6    |       6    |       0    |\n"
      "|       from small pool |       3    |       3    |    7321    |    7318    |\n"
      "|---------------------------------------------------------------------------|\n"
      "| Active allocs         |       9    |       9    |    7327    |    7318    |\n"
      "|       from large pool |       6    |       6    |       6    |       0    |\n"
      "|       from small pool |       3    |       3    |    7321    |    7318    |\n"
      "|---------------------------------------------------------------------------|\n"
      "| GPU reserved segments |      10    |      10    |      10    |       0    |\n"
      "|       from large pool |       6    |       6    |       6    |       0    |\n"
      "|       from small pool |       4    |       4    |       4    |       0    |\n"
      "|---------------------------------------------------------------------------|\n"
      "| Non-releasable allocs |       6    |       6    |    2657    |    2651    |\n"
      "|       from large pool |       0    |       0    |       0    |       0    |\n"
      "|       from small pool |       6    |       6    |    2657    |    2651    |\n"
      "|---------------------------------------------------------------------------|\n"
      "| Oversize allocations  |       0    |       0    |       0    |       0    |\n"
      "|---------------------------------------------------------------------------|\n"
      "| Oversize GPU segments |       0    |       0    |       0    |       0    |\n"
      "|===========================================================================|\n";
  CHECK(format_memory_summary(s, "ember CUDA memory summary, device ID 0", false, false) ==
        reference);
}

TEST_CASE("allocator/summary: units scale with the column's total") {
  MemoryStats s;
  s.allocated_bytes[kAggregate] = Stat{int64_t{5} << 30, int64_t{900} << 30, 786431, 786432};
  s.allocated_bytes[kLargePool] = Stat{int64_t{3} << 30, 0, 786431, 786432};
  s.allocation[kAggregate] = Stat{1234567, 749999, 750000, 0};
  s.num_ooms = 12345678901;
  const std::string table = format_memory_summary(s, "t", false, false);
  // 5 GiB in MiB (5120 KiB would be >= 768 * 1024 KiB); 900 GiB in GiB; just under
  // 768 KiB stays in bytes; 768 KiB itself switches to KiB.
  CHECK(contains(
      table, "| Allocated memory      |   5120 MiB |    900 GiB | 786431 B   |    768 KiB |\n"));
  CHECK(contains(
      table, "|       from large pool |   3072 MiB |      0 GiB | 786431 B   |    768 KiB |\n"));
  CHECK(contains(
      table, "| Allocations           |    1234 K  |  749999    |     750 K  |       0    |\n"));
  CHECK(contains(table, "|            CUDA OOMs: 12345678901  |"));
  CHECK(contains(
      table, "\n|                                     t                                     |\n"));

  CHECK(format_bytes(0) == "0 bytes");
  CHECK(format_bytes(1024) == "1024 bytes");
  CHECK(format_bytes(1536) == "1.50 KiB");
  CHECK(format_bytes(20 * kMiB) == "20.00 MiB");
  CHECK(format_bytes((size_t{1} << 30) + 1) == "1.00 GiB");
}

TEST_CASE("allocator/summary: the host allocator titles itself CPU") {
  CachingAllocator& host = host_caching_allocator();
  const int64_t before = host.memory_allocated();
  void* p = host_allocator().allocate(100, nullptr);
  CHECK(host.memory_allocated() == before + 512);
  host_allocator().deallocate(p);
  CHECK(host.memory_allocated() == before);
  const std::string summary = host.memory_summary(true);
  CHECK(contains(summary, "\n|" + std::string(26, ' ') + "ember CPU memory summary" +
                              std::string(25, ' ') + "|\n"));
  CHECK(contains(summary, "\n|             CPU OOMs: "));
  CHECK(contains(summary, "|            malloc retries: "));
  CHECK(contains(summary, "| CPU reserved memory   |"));
  CHECK(contains(summary, "| Oversize CPU segments |"));
}

TEST_CASE("allocator/options: well-formed settings parse") {
  AllocatorOptions o = AllocatorOptions::parse(
      "max_split_size_mb:100, roundup_power2_divisions:4,garbage_collection_threshold:0.6");
  CHECK(o.max_split_size == 100 * kMiB);
  CHECK(o.garbage_collection_threshold == doctest::Approx(0.6));
  for (uint32_t d : o.roundup_power2_divisions) CHECK(d == 4);

  AllocatorOptions list = AllocatorOptions::parse(
      "roundup_power2_divisions:[256:1,512:2,1024:4,>:8],max_non_split_rounding_mb:64,"
      "expandable_segments:False");
  const std::vector<uint32_t> expected = {1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 4, 8, 8, 8, 8, 8, 8};
  CHECK(std::vector<uint32_t>(list.roundup_power2_divisions.begin(),
                              list.roundup_power2_divisions.end()) == expected);
  CHECK(list.max_non_split_rounding == 64 * kMiB);
  CHECK(list.divisions_for(300 * kMiB) == 1);  // 256 MiB interval
  CHECK(list.divisions_for(600 * kMiB) == 2);
  CHECK(list.divisions_for(size_t{100} << 30) == 8);

  CHECK_FALSE(list.expandable_segments);
  CHECK(AllocatorOptions::parse("expandable_segments:True").expandable_segments);
  CHECK(AllocatorOptions::parse("garbage_collection_threshold:0.8,expandable_segments:true")
            .expandable_segments);

  AllocatorOptions defaults = AllocatorOptions::parse("  ");
  CHECK(defaults.max_split_size == AllocatorOptions::kNoMaxSplit);
  CHECK(defaults.garbage_collection_threshold == 0.0);
  CHECK_FALSE(defaults.expandable_segments);
}

TEST_CASE("allocator/options: each malformed setting is an error that names it") {
  struct Case {
    const char* text;
    const char* mentions;
  };
  const Case cases[] = {
      {"max_split_size_mb", "\"max_split_size_mb\" is not key:value"},
      {"max_split_size_mb:abc", "invalid value \"abc\" for max_split_size_mb"},
      {"max_split_size_mb:-5", "invalid value \"-5\" for max_split_size_mb"},
      {"max_split_size_mb:20", "must be > 20"},
      {"max_split_size_mb:", "invalid value \"\" for max_split_size_mb"},
      {"max_split_size_mb:64MB", "invalid value \"64MB\""},
      {"garbage_collection_threshold:1.5", "between 0.0 and 1.0"},
      {"garbage_collection_threshold:0", "between 0.0 and 1.0"},
      {"garbage_collection_threshold:half", "invalid value \"half\" for garbage_collection"},
      {"roundup_power2_divisions:3", "power of 2"},
      {"roundup_power2_divisions:[256:2", "must end with ']'"},
      {"roundup_power2_divisions:[]", "the list is empty"},
      {"roundup_power2_divisions:[256]", "size_mb:divisions"},
      {"roundup_power2_divisions:[300:2]", "interval sizes must be powers of 2"},
      {"roundup_power2_divisions:[256:x]", "invalid value \"x\""},
      {"max_non_split_rounding_mb:lots", "invalid value \"lots\""},
      {"expandable_segments:maybe",
       "invalid value \"maybe\" for expandable_segments: expected "
       "True or False"},
      {"max_split_size_mb:100,,garbage_collection_threshold:0.5", "empty entry"},
      {"max_split_size_mb:100,", "empty entry"},
      {"max_split_mb:100", "unknown option \"max_split_mb\""},
  };
  for (const Case& c : cases) {
    CAPTURE(c.text);
    const std::string message = parse_error(c.text);
    CHECK_MESSAGE(contains(message, c.mentions), message);
    CHECK(contains(message, "EMBER_CUDA_ALLOC_CONF"));
  }
}

TEST_CASE("allocator/options: the environment variable is read") {
  ::setenv(kAllocConfEnvVar, "max_split_size_mb:64", 1);
  CHECK(AllocatorOptions::from_env().max_split_size == 64 * kMiB);
  ::setenv(kAllocConfEnvVar, "max_split_size_mb:tiny", 1);
  CHECK_THROWS_AS(AllocatorOptions::from_env(), ember::Error);
  ::unsetenv(kAllocConfEnvVar);
  CHECK(AllocatorOptions::from_env().max_split_size == AllocatorOptions::kNoMaxSplit);
}

TEST_CASE("allocator/simulated: the failure schedule and capacity are obeyed") {
  SimulatedBackend sim(10 * kMiB);
  sim.fail_nth_alloc(2);
  void* a = sim.raw_alloc(kMiB);
  CHECK(a != nullptr);
  CHECK(sim.raw_alloc(kMiB) == nullptr);  // the 2nd
  void* b = sim.raw_alloc(kMiB);
  CHECK(b != nullptr);
  sim.set_failure_schedule({false, true});
  void* c = sim.raw_alloc(kMiB);
  CHECK(c != nullptr);
  CHECK(sim.raw_alloc(kMiB) == nullptr);
  sim.fail_allocs_above(2 * kMiB);
  CHECK(sim.raw_alloc(3 * kMiB) == nullptr);
  CHECK(sim.raw_alloc(8 * kMiB) == nullptr);  // above the limit and the capacity
  CHECK(sim.used() == 3 * kMiB);
  CHECK(sim.memory_info().free == 7 * kMiB);
  for (void* p : {a, b, c}) sim.raw_free(p);
  CHECK(sim.used() == 0);
  CHECK(sim.raw_alloc_calls() == 7);

  cudaStream_t s = reinterpret_cast<cudaStream_t>(uintptr_t{0x40});
  auto e = sim.create_event();
  sim.hold(s);
  sim.record_event(e, s);
  CHECK_FALSE(sim.query_event(e));
  sim.release(s);
  CHECK(sim.query_event(e));
  sim.destroy_event(e);
  CHECK(sim.live_events() == 0);
}

TEST_CASE("allocator/oom: a scripted backend failure is retried once") {
  SimulatedBackend* sim = nullptr;
  auto a = simulated(size_t{1} << 30, &sim);
  sim->set_failure_schedule({true});  // the first raw_alloc fails, the retry succeeds
  void* p = a->allocate(kMiB, nullptr);
  CHECK(p != nullptr);
  CHECK(a->memory_stats().at("num_alloc_retries") == 1);
  CHECK(sim->raw_alloc_calls() == 2);
  a->deallocate(p);
}

TEST_CASE("allocator/oom: events are waited for before the retry") {
  SimulatedBackend* sim = nullptr;
  auto a = simulated(20 * kMiB, &sim);
  cudaStream_t other = reinterpret_cast<cudaStream_t>(uintptr_t{0x80});
  void* p = a->allocate(20 * kMiB, nullptr);
  a->record_stream(p, other);
  sim->hold(other);
  a->deallocate(p);                           // pending on an event
  void* q = a->allocate(12 * kMiB, nullptr);  // the pending segment is synced, returned, retried
  CHECK(q != nullptr);
  CHECK(sim->event_syncs() == 1);
  auto stats = a->memory_stats();
  CHECK(stats.at("num_alloc_retries") == 1);
  CHECK(stats.at("num_sync_all_streams") == 1);
  CHECK(stats.at("reserved_bytes.all.current") == int64_t{12} * int64_t{kMiB});
  a->deallocate(q);
}

TEST_CASE("allocator/trace: the history exports as well-formed Chrome trace JSON") {
  SimulatedBackend* sim = nullptr;
  auto a = simulated(64 * kMiB, &sim);
  a->record_memory_history(true);
  void* p = nullptr;
  {
    AllocationTag tag("tag with \"quotes\" and \\ and \n");
    p = a->allocate(4 * kMiB, nullptr);
    CHECK_THROWS_AS(a->allocate(100 * kMiB, nullptr), ember::OutOfMemoryError);
  }
  a->deallocate(p);
  a->empty_cache();

  const MemorySnapshot snap = a->memory_snapshot();
  // segment_alloc, alloc, oom, free_requested, free_completed, segment_free
  REQUIRE(snap.trace.size() == 6);
  std::ostringstream out;
  write_chrome_trace(snap, out);
  const std::string json = out.str();
  CHECK(JsonChecker(json).valid());
  CHECK(json.rfind("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[", 0) == 0);
  CHECK(count(json, "\"ph\":\"C\"") == 4);
  CHECK(count(json, "\"name\":\"reserved\"") == 2);
  CHECK(count(json, "\"name\":\"allocated\"") == 2);
  CHECK(count(json, "\"ph\":\"i\"") == 1);
  CHECK(contains(json, "\"requested_bytes\":104857600"));
  CHECK(contains(json, "\"tag\":\"tag with \\\"quotes\\\" and \\\\ and \\u000a\""));
  CHECK(contains(json, "{\"name\":\"reserved\",\"ph\":\"C\",\"pid\":0,\"tid\":0,\"ts\":"));
  CHECK(contains(json, "\"args\":{\"bytes\":4194304}"));
  CHECK_FALSE(JsonChecker("{\"traceEvents\":[1,]}").valid());  // the checker does check
  (void)sim;
}

TEST_CASE("allocator/trace: write_chrome_trace writes a file and rejects a bad path") {
  auto a = simulated(64 * kMiB);
  a->record_memory_history(true);
  a->deallocate(a->allocate(kMiB, nullptr));
  const std::string path = "ember_test_allocator_trace.json";
  write_chrome_trace(a->memory_snapshot(), path);
  std::ifstream in(path);
  const std::string json((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(JsonChecker(json).valid());
  CHECK(count(json, "\"ph\":\"C\"") == 3);  // segment_alloc, alloc, free_requested
  std::remove(path.c_str());
  CHECK_THROWS_AS(write_chrome_trace(a->memory_snapshot(), "/nonexistent-dir/trace.json"),
                  ember::Error);
}

TEST_CASE("allocator/misuse: null and foreign pointers are ignored, not fatal") {
  auto a = simulated(64 * kMiB);
  a->deallocate(nullptr);
  int not_ours = 0;
  a->deallocate(&not_ours);  // logged to stderr
  CHECK_THROWS_AS(a->record_stream(&not_ours, nullptr), ember::Error);
  CHECK(a->memory_stats().at("allocation.all.freed") == 0);
  CHECK_THROWS_AS(a->record_memory_history(true, 0), ember::Error);
}

TEST_CASE("allocator/device: ember::memory_* dispatch on the device") {
  const int64_t before = ember::memory_allocated(ember::kCPU);
  void* p = host_allocator().allocate(3000, nullptr);
  CHECK(ember::memory_allocated(ember::kCPU) == before + 3072);
  CHECK(ember::memory_stats(ember::kCPU).at("allocated_bytes.all.current") == before + 3072);
  CHECK(&ember::caching_allocator(ember::kCPU) == &host_caching_allocator());
  host_allocator().deallocate(p);
  CHECK(ember::memory_allocated(ember::kCPU) == before);
  // A device one past the last (cuda:0 without a GPU) is refused everywhere.
  CHECK_THROWS_AS(ember::memory_allocated(ember::Device::cuda(ember::cuda::device_count())),
                  ember::Error);
}
