// The caching allocator on a real device where a simulation cannot stand in: two
// CUDA graph captures at once on two streams (each freed block back in its own
// graph's pool, both graphs replaying correctly), and expandable segments handing
// unmapped pages back to the device (cudaMemGetInfo sees them). Suite "cuda".
#include <doctest/doctest.h>

#include <cstdint>
#include <memory>
#include <vector>

#include <cuda_runtime_api.h>

#include "core/memory/caching_allocator.h"
#include "cuda/cuda_backend.h"
#include "cuda/runtime.h"

using namespace ember;
using namespace ember::memory;

namespace {

constexpr size_t kMiB = size_t{1} << 20;

BlockState state_at(const CachingAllocator& a, const void* p) {
  for (const SegmentSnapshot& s : a.memory_snapshot().segments)
    for (const BlockSnapshot& b : s.blocks)
      if (b.address == reinterpret_cast<uintptr_t>(p)) return b.state;
  FAIL("no block starts at the pointer");
  return BlockState::inactive;
}

// Every byte of [p, p + bytes) on the device equals `value`.
bool all_bytes(const void* p, size_t bytes, unsigned char value) {
  std::vector<unsigned char> host(bytes);
  REQUIRE(cudaMemcpy(host.data(), p, bytes, cudaMemcpyDeviceToHost) == cudaSuccess);
  for (unsigned char c : host)
    if (c != value) return false;
  return true;
}

size_t device_free() {
  size_t free = 0, total = 0;
  REQUIRE(cudaMemGetInfo(&free, &total) == cudaSuccess);
  return free;
}

}  // namespace

TEST_CASE(
    "allocator/pool: two real captures on two streams: each freed block goes back to its "
    "own graph's pool" *
    doctest::test_suite("cuda")) {
  cuda::set_device(0);
  CachingAllocator a(std::make_unique<cuda::CudaBackend>(0, 256 * kMiB));
  cuda::Stream s0(0), s1(0), s2(0);
  void* g = a.allocate(kMiB, s0.get());  // an input made before the captures
  REQUIRE(cudaMemsetAsync(g, 7, kMiB, s0.get()) == cudaSuccess);
  s0.synchronize();

  const auto pool_a = a.create_pool(), pool_b = a.create_pool();
  a.begin_allocate_to_pool(pool_a, s1.get());
  a.begin_allocate_to_pool(pool_b, s2.get());
  REQUIRE(cudaStreamBeginCapture(s1.get(), cudaStreamCaptureModeRelaxed) == cudaSuccess);
  REQUIRE(cudaStreamBeginCapture(s2.get(), cudaStreamCaptureModeRelaxed) == cudaSuccess);
  void* a1 = a.allocate(kMiB, s1.get());
  void* b1 = a.allocate(kMiB, s2.get());
  REQUIRE(cudaMemsetAsync(b1, 1, kMiB, s2.get()) == cudaSuccess);
  a.deallocate(b1);  // back to B's pool, during both captures
  void* a2 = a.allocate(kMiB, s1.get());
  CHECK(a2 != b1);
  void* b2 = a.allocate(kMiB, s2.get());
  CHECK(b2 == b1);
  REQUIRE(cudaMemcpyAsync(a1, g, kMiB, cudaMemcpyDeviceToDevice, s1.get()) == cudaSuccess);
  REQUIRE(cudaMemcpyAsync(b2, g, kMiB, cudaMemcpyDeviceToDevice, s2.get()) == cudaSuccess);
  REQUIRE(cudaMemsetAsync(a2, 3, kMiB, s1.get()) == cudaSuccess);
  a.deallocate(g);  // both graphs read it: held until both pools are released
  cudaGraph_t graph_a = nullptr, graph_b = nullptr;
  REQUIRE(cudaStreamEndCapture(s2.get(), &graph_b) == cudaSuccess);
  REQUIRE(cudaStreamEndCapture(s1.get(), &graph_a) == cudaSuccess);
  a.end_allocate_to_pool(pool_b);
  a.end_allocate_to_pool(pool_a);

  cudaGraphExec_t exec_a = nullptr, exec_b = nullptr;
  REQUIRE(cudaGraphInstantiate(&exec_a, graph_a, 0) == cudaSuccess);
  REQUIRE(cudaGraphInstantiate(&exec_b, graph_b, 0) == cudaSuccess);
  REQUIRE(cudaGraphLaunch(exec_a, s1.get()) == cudaSuccess);
  REQUIRE(cudaGraphLaunch(exec_b, s2.get()) == cudaSuccess);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  CHECK(all_bytes(a1, kMiB, 7));  // graph A copied the input
  CHECK(all_bytes(a2, kMiB, 3));
  CHECK(all_bytes(b2, kMiB, 7));  // graph B: its memset, then the copy over it

  void* x = a.allocate(kMiB, s0.get());
  CHECK(x != g);  // still held for the graphs
  a.release_pool(pool_a, s0.get());
  CHECK(state_at(a, g) == BlockState::active_pending_free);  // graph B may replay
  REQUIRE(cudaGraphLaunch(exec_b, s2.get()) == cudaSuccess);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  CHECK(all_bytes(b2, kMiB, 7));
  a.release_pool(pool_b, s0.get());
  CHECK(state_at(a, g) == BlockState::inactive);

  REQUIRE(cudaGraphExecDestroy(exec_a) == cudaSuccess);
  REQUIRE(cudaGraphExecDestroy(exec_b) == cudaSuccess);
  REQUIRE(cudaGraphDestroy(graph_a) == cudaSuccess);
  REQUIRE(cudaGraphDestroy(graph_b) == cudaSuccess);
  for (void* p : {a1, a2, b2, x}) a.deallocate(p);
  a.empty_cache();
  CHECK(a.memory_reserved() == 0);
}

TEST_CASE(
    "allocator/expandable: on the device, pages map on demand and empty_cache gives them "
    "back" *
    doctest::test_suite("cuda")) {
  cuda::set_device(0);
  CachingAllocator a(std::make_unique<cuda::CudaBackend>(0),
                     AllocatorOptions::parse("expandable_segments:True"));
  REQUIRE_MESSAGE(a.expandable_segments(), "the driver has no virtual memory management");
  const size_t page = a.backend().granularity();
  CHECK(page == 2 * kMiB);  // Hopper's minimum granularity
  const size_t before = device_free();
  // 64 tensors of 4 MiB + 1 KiB: they tile one segment back to back.
  std::vector<void*> live;
  for (int i = 0; i < 64; ++i) live.push_back(a.allocate(4 * kMiB + 1024, nullptr));
  for (size_t i = 1; i < live.size(); ++i)
    CHECK(reinterpret_cast<uintptr_t>(live[i]) ==
          reinterpret_cast<uintptr_t>(live[i - 1]) + 4 * kMiB + 1024);
  const int64_t mapped = a.memory_reserved();
  CHECK(mapped == static_cast<int64_t>((64 * (4 * kMiB + 1024) + page - 1) / page * page));
  CHECK(a.memory_stats().at("segment.all.current") == 1);
  // A kernel writes across every page boundary.
  REQUIRE(cudaMemset(live.front(), 9, 64 * (4 * kMiB + 1024)) == cudaSuccess);
  CHECK(all_bytes(live.back(), 4 * kMiB + 1024, 9));
  CHECK(before - device_free() >= static_cast<size_t>(mapped));

  // Free the upper half: empty_cache unmaps it, and the device has it back.
  for (size_t i = 32; i < live.size(); ++i) a.deallocate(live[i]);
  live.resize(32);
  const size_t free_before_unmap = device_free();
  a.empty_cache();
  const int64_t unmapped = mapped - a.memory_reserved();
  CHECK(unmapped >= static_cast<int64_t>(31 * 4 * kMiB));
  CHECK(device_free() - free_before_unmap >= static_cast<size_t>(unmapped));
  CHECK(all_bytes(live.back(), 4 * kMiB + 1024, 9));  // what stays mapped is intact
  for (void* p : live) a.deallocate(p);
  a.empty_cache();
  CHECK(a.memory_reserved() == 0);
  CHECK(a.memory_stats().at("address_space_bytes.all") == 0);
}
