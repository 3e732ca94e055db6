// The two-backend harness of the allocator's behavioural tests: each test is
// written once against a Harness and registered twice by ALLOCATOR_TEST, on the
// simulated backend (every machine) and on CudaBackend with a capacity limit (suite
// "cuda", skipped without a GPU). Shared by the tests in tests/memory.
#pragma once

#include <doctest/doctest.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>

#include "core/memory/caching_allocator.h"
#include "cuda/cuda_backend.h"
#include "cuda/runtime.h"

namespace ember::testing {

using namespace ember;
using namespace ember::memory;
using ember::cuda::set_device;
using ember::cuda::Stream;

constexpr size_t kKiB = 1024;
constexpr size_t kMiB = 1024 * 1024;

// Makes allocators over one kind of backend and controls its streams.
class Harness {
 public:
  virtual ~Harness() = default;
  // A fresh allocator whose backend holds at most `capacity` bytes.
  virtual CachingAllocator& make(size_t capacity, AllocatorOptions options = {}) = 0;
  // Distinct streams; 0 is the default stream.
  virtual cudaStream_t stream(int i) = 0;
  // Work queued on `s` after hold() does not finish before release(s).
  virtual void hold(cudaStream_t s) = 0;
  virtual void release(cudaStream_t s) = 0;
};

class SimHarness final : public Harness {
 public:
  CachingAllocator& make(size_t capacity, AllocatorOptions options) override {
    auto backend = std::make_unique<SimulatedBackend>(capacity);
    sim_ = backend.get();
    allocators_.push_back(std::make_unique<CachingAllocator>(std::move(backend), options));
    return *allocators_.back();
  }
  cudaStream_t stream(int i) override {
    return reinterpret_cast<cudaStream_t>(static_cast<uintptr_t>(i) * 0x1000);
  }
  void hold(cudaStream_t s) override { sim_->hold(s); }
  void release(cudaStream_t s) override { sim_->release(s); }

 private:
  SimulatedBackend* sim_ = nullptr;  // the latest allocator's
  std::vector<std::unique_ptr<CachingAllocator>> allocators_;
};

// Holds a real stream with a host function that waits for a flag, so the test
// decides when events recorded behind it complete.
class CudaHarness final : public Harness {
 public:
  CudaHarness() { set_device(0); }
  ~CudaHarness() override {
    // Open every gate before the allocators free memory (cudaFree waits for the device).
    for (auto& [s, gate] : held_) gate->open = true;
    (void)cudaDeviceSynchronize();
    allocators_.clear();
  }
  CachingAllocator& make(size_t capacity, AllocatorOptions options) override {
    allocators_.push_back(std::make_unique<CachingAllocator>(
        std::make_unique<ember::cuda::CudaBackend>(0, capacity), options));
    return *allocators_.back();
  }
  cudaStream_t stream(int i) override {
    if (i == 0) return nullptr;
    while (static_cast<int>(streams_.size()) < i) streams_.emplace_back(0);
    return streams_[static_cast<size_t>(i - 1)].get();
  }
  void hold(cudaStream_t s) override {
    auto gate = std::make_unique<Gate>();
    REQUIRE(cudaLaunchHostFunc(s, &Gate::wait, gate.get()) == cudaSuccess);
    held_[s] = std::move(gate);
  }
  void release(cudaStream_t s) override {
    held_.at(s)->open = true;
    REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
    held_.erase(s);
  }

 private:
  struct Gate {
    std::atomic<bool> open{false};
    static void CUDART_CB wait(void* self) {
      while (!static_cast<Gate*>(self)->open.load()) std::this_thread::yield();
    }
  };
  std::vector<Stream> streams_;
  std::map<cudaStream_t, std::unique_ptr<Gate>> held_;
  std::vector<std::unique_ptr<CachingAllocator>> allocators_;
};

inline int64_t stat(const CachingAllocator& a, const std::string& key) {
  auto stats = a.memory_stats();
  auto it = stats.find(key);
  REQUIRE_MESSAGE(it != stats.end(), "no statistic named ", key);
  return it->second;
}

inline int64_t i64(size_t v) {
  return static_cast<int64_t>(v);
}
inline uintptr_t addr(const void* p) {
  return reinterpret_cast<uintptr_t>(p);
}

// Offsets and states of the blocks of the segment holding `p`.
inline std::vector<std::pair<size_t, BlockState>> blocks_of(const CachingAllocator& a,
                                                            const void* p) {
  for (const SegmentSnapshot& s : a.memory_snapshot().segments) {
    if (addr(p) < s.address || addr(p) >= s.address + s.total_size) continue;
    std::vector<std::pair<size_t, BlockState>> out;
    for (const BlockSnapshot& b : s.blocks) out.emplace_back(b.size, b.state);
    return out;
  }
  FAIL("no segment holds the pointer");
  return {};
}

}  // namespace ember::testing

// Registers `body` twice: on the simulated backend and, in suite "cuda", on CUDA.
#define ALLOCATOR_TEST(name, body)                          \
  static void body(Harness& h);                             \
  TEST_CASE(name) {                                         \
    SimHarness h;                                           \
    body(h);                                                \
  }                                                         \
  TEST_CASE(name " [cuda]" * doctest::test_suite("cuda")) { \
    CudaHarness h;                                          \
    body(h);                                                \
  }                                                         \
  static void body(Harness& h)
