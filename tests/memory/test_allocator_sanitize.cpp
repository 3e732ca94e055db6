// The caching allocator's sanitizer mode (sanitize:True): guard bytes around each
// block, poison and quarantine for freed blocks. Each test plants a bug that
// compute-sanitizer could not see (the segment stays allocated from the driver's
// point of view) and checks that it is caught and named with its allocation site.
// All on the simulated backend, whose segments are host memory a test can write.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/base/error.h"
#include "core/memory/allocator.h"
#include "core/memory/caching_allocator.h"
#include "core/ops.h"
#include "nn/nn.h"
#include "optim/optim.h"

namespace {

using namespace ember;
using namespace ember::memory;
constexpr size_t kMiB = size_t{1} << 20;

AllocatorOptions sanitizing(size_t quarantine_blocks = 4) {
  AllocatorOptions o;
  o.sanitize = true;
  o.quarantine_blocks = quarantine_blocks;
  return o;
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// Allocates `bytes` as if from inside model.fc1's forward, in op "linear".
unsigned char* allocate_tagged(CachingAllocator& a, size_t bytes) {
  AllocationScope scope("model.fc1.forward");
  AllocationTag tag("linear");
  return static_cast<unsigned char*>(a.allocate(bytes, nullptr));
}

}  // namespace

TEST_CASE("allocator/sanitize: a write past the end is caught on free, with its site") {
  CachingAllocator a(std::make_unique<SimulatedBackend>(64 * kMiB), sanitizing());
  unsigned char* p = allocate_tagged(a, 100);
  std::memset(p, 7, 100);  // the whole block is the user's: no report
  p[100] = 0x11;           // one byte past the end, still inside the cached segment
  p[103] = 0x11;
  a.deallocate(p);
  const std::vector<SanitizerReport> reports = a.sanitizer_reports();
  REQUIRE(reports.size() == 1);
  const SanitizerReport& r = reports[0];
  CHECK(r.kind == SanitizerReport::Kind::overrun);
  CHECK(r.offset == 100);
  CHECK(r.bad_bytes == 2);
  CHECK(r.requested_size == 100);
  CHECK(r.address == reinterpret_cast<uintptr_t>(p));
  CHECK(contains(r.message, "write past the end"));
  CHECK(contains(r.message, "byte 100 of a 100-byte block"));
  CHECK(contains(r.message, "allocated at model.fc1.forward / linear"));
  CHECK_THROWS_WITH_AS(a.check_sanitizer_reports(),
                       doctest::Contains("allocated at model.fc1.forward / linear"), ember::Error);
}

TEST_CASE("allocator/sanitize: a write before the start is caught on free") {
  CachingAllocator a(std::make_unique<SimulatedBackend>(64 * kMiB), sanitizing());
  unsigned char* p = allocate_tagged(a, 4096);
  p[-1] = 0x22;
  a.deallocate(p);
  const auto reports = a.sanitizer_reports();
  REQUIRE(reports.size() == 1);
  CHECK(reports[0].kind == SanitizerReport::Kind::underrun);
  CHECK(reports[0].offset == -1);
  CHECK(contains(reports[0].message, "write before the start"));
  CHECK(contains(reports[0].message, "model.fc1.forward / linear"));
}

TEST_CASE("allocator/sanitize: a write after free is caught when the block leaves quarantine") {
  CachingAllocator a(std::make_unique<SimulatedBackend>(64 * kMiB), sanitizing(4));
  unsigned char* p = allocate_tagged(a, 256);
  a.deallocate(p);
  CHECK(p[0] == kPoisonByte);  // freed memory reads as poison, not stale data
  CHECK(p[255] == kPoisonByte);
  p[10] = 0x33;                          // use after free
  CHECK(a.sanitizer_reports().empty());  // not seen yet: still in quarantine
  for (int i = 0; i < 5; ++i) a.deallocate(a.allocate(256, nullptr));  // pushes it out
  auto reports = a.sanitizer_reports();
  REQUIRE(reports.size() == 1);
  CHECK(reports[0].kind == SanitizerReport::Kind::write_after_free);
  CHECK(reports[0].offset == 10);
  CHECK(contains(reports[0].message, "write after free"));
  CHECK(contains(reports[0].message, "model.fc1.forward / linear"));

  // empty_cache() checks what is still in quarantine too.
  unsigned char* q = allocate_tagged(a, 512);
  a.deallocate(q);
  q[511] = 0x44;
  a.empty_cache();
  reports = a.sanitizer_reports();
  REQUIRE(reports.size() == 2);
  CHECK(reports[1].kind == SanitizerReport::Kind::write_after_free);
  CHECK(reports[1].offset == 511);
}

TEST_CASE("allocator/sanitize: quarantine delays reuse; a clean program reports nothing") {
  CachingAllocator a(std::make_unique<SimulatedBackend>(64 * kMiB), sanitizing(2));
  void* first = a.allocate(1000, nullptr);
  a.deallocate(first);
  void* second = a.allocate(1000, nullptr);
  CHECK(second != first);  // the freed block is quarantined, not handed out again
  a.deallocate(second);
  void* third = a.allocate(1000, nullptr);
  a.deallocate(third);
  CHECK(a.memory_allocated() == 0);
  a.empty_cache();
  CHECK(a.stats().requested_bytes[kAggregate].current == 0);
  CHECK(a.memory_reserved() == 0);  // quarantine drained, every segment returned
  CHECK(a.sanitizer_reports().empty());
  CHECK_NOTHROW(a.check_sanitizer_reports());
  // Out of memory drains the quarantine before giving up.
  CachingAllocator small(std::make_unique<SimulatedBackend>(4 * kMiB), sanitizing(1000));
  for (int i = 0; i < 16; ++i) small.deallocate(small.allocate(512 * 1024, nullptr));
  CHECK(small.sanitizer_reports().empty());
}

TEST_CASE("allocator/sanitize: training on a sanitized allocator finds no bug in ember") {
  // Every CPU tensor of a few training steps on a sanitizing allocator: any
  // kernel writing outside its tensor, or into freed memory, would be reported.
  CachingAllocator memory(std::make_unique<HostBackend>(), sanitizing(16));
  {
    HostAllocatorOverride use(memory);
    using namespace ember;
    manual_seed(1);
    auto model =
        std::make_shared<nn::Sequential>(nn::Linear(10, 16), nn::ReLU(), nn::Linear(16, 10));
    optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
    Tensor x = randn({32, 10}), y = randn({32, 10});
    for (int step = 0; step < 5; ++step) {
      opt.zero_grad();
      Tensor loss = nn::functional::mse_loss(model->forward(x), y);
      loss.backward();
      opt.step();
      (void)cat({x.t(), x.t()}, 1).sum(0).max(0);  // strided reads and writes too
    }
  }
  memory.empty_cache();
  CHECK(memory.sanitizer_reports().empty());
  CHECK(memory.memory_allocated() == 0);
}

TEST_CASE("allocator/sanitize: the options parse and refuse bad values") {
  AllocatorOptions o = AllocatorOptions::parse(
      "sanitize:True,sanitize_quarantine_blocks:8,sanitize_quarantine_mb:2");
  CHECK(o.sanitize);
  CHECK(o.quarantine_blocks == 8);
  CHECK(o.quarantine_bytes == 2 * kMiB);
  CHECK(!AllocatorOptions::parse("sanitize:False").sanitize);
  CHECK_THROWS_WITH_AS(
      AllocatorOptions::parse("sanitize:maybe"),
      doctest::Contains("invalid value \"maybe\" for sanitize: expected True or False"),
      ember::Error);
  CHECK_THROWS_WITH_AS(AllocatorOptions::parse("sanitize_quarantine_blocks:-1"),
                       doctest::Contains("sanitize_quarantine_blocks"), ember::Error);
}
