// The CUDA device allocator (cuda/device_allocator.h): one caching allocator per
// device, reached by ember::memory_*(Device) too.
#include <doctest/doctest.h>

#include <string>

#include <cuda_runtime_api.h>

#include "core/memory.h"
#include "cuda/device_allocator.h"
#include "cuda/runtime.h"
#include "error_text.h"

using namespace ember;
using ember::testing::contains;

TEST_CASE("allocator/device: the CUDA device allocator is a caching allocator" *
          doctest::test_suite("cuda")) {
  memory::CachingAllocator& dev = cuda::device_caching_allocator(0);
  CHECK(&ember::caching_allocator(kCUDA) == &dev);
  const int64_t before = memory_allocated(kCUDA);
  void* p = dev.allocate(1000, nullptr);
  REQUIRE(p != nullptr);
  CHECK(memory_allocated(kCUDA) == before + 1024);
  CHECK(dev.memory_allocated() == before + 1024);
  CHECK(cudaMemset(p, 0, 1000) == cudaSuccess);  // real device memory
  CHECK(cudaDeviceSynchronize() == cudaSuccess);
  dev.deallocate(p);
  CHECK(memory_allocated(kCUDA) == before);
  const std::string summary = memory_summary(kCUDA);
  CHECK(contains(summary, "\n|                   ember CUDA memory summary, device ID 0"));
  CHECK_THROWS_AS(cuda::device_caching_allocator(cuda::device_count()), Error);
  CHECK_THROWS_AS(memory_allocated(Device::cuda(cuda::device_count())), Error);
}
