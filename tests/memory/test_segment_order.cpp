// The caching allocator's tie-break between equally good cached blocks: the oldest
// segment first, whatever addresses the backend gave the segments, so the
// allocator's choices follow from the request sequence alone (what lets the meta
// device, core/meta.h, predict a GPU's figures byte for byte).
#include <doctest/doctest.h>

#include <memory>

#include "core/base/error.h"
#include "core/memory/caching_allocator.h"

using namespace ember;
using namespace ember::memory;

namespace {

// Segments at falling addresses (a device may place a new segment below an
// older one); no memory behind them, events complete at once.
class FallingBackend final : public Backend {
 public:
  void* raw_alloc(size_t bytes) override {
    next_ -= bytes;
    return reinterpret_cast<void*>(next_);
  }
  void raw_free(void*) noexcept override {}
  MemoryInfo memory_info() override { return {size_t{1} << 40, size_t{1} << 40}; }
  EventHandle create_event() override { return nullptr; }
  void record_event(EventHandle, cudaStream_t) override {}
  bool query_event(EventHandle) override { return true; }
  void synchronize_event(EventHandle) override {}
  void destroy_event(EventHandle) noexcept override {}
  void fill(void*, unsigned char, size_t, cudaStream_t) override { EMBER_FAIL("no memory"); }
  void read(void*, const void*, size_t, cudaStream_t) override { EMBER_FAIL("no memory"); }

 private:
  uintptr_t next_ = uintptr_t{1} << 50;
};

}  // namespace

TEST_CASE("allocator/best fit: a tie goes to the older segment, not the lower address") {
  CachingAllocator a(std::make_unique<FallingBackend>());
  constexpr size_t kMiB = size_t{1} << 20;
  void* first = a.allocate(kMiB, nullptr);   // segment 1 (2 MiB), front half
  void* second = a.allocate(kMiB, nullptr);  // segment 1, back half
  void* third = a.allocate(kMiB, nullptr);   // segment 2, below segment 1
  void* fourth = a.allocate(kMiB, nullptr);
  REQUIRE(reinterpret_cast<uintptr_t>(third) < reinterpret_cast<uintptr_t>(first));
  CHECK(a.stats().num_device_alloc == 2);
  a.deallocate(first);
  a.deallocate(third);  // two free 1 MiB blocks; third's address is lower
  void* again = a.allocate(kMiB, nullptr);
  CHECK(again == first);
  a.deallocate(again);
  a.deallocate(second);
  a.deallocate(fourth);
}
