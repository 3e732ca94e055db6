// ember::cuda::thrust_policy and ember::cuda::TempBuffer: Thrust's and CUB's scratch comes from
// ember's caching allocator, so it is counted and named like any tensor's.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include <thrust/sort.h>
#include <cub/device/device_reduce.cuh>

#include "core/memory.h"
#include "core/ops.h"
#include "cuda/thrust_policy.h"

// No `using namespace ember`: with CCCL's namespace ::cuda in scope, "cuda::"
// would be ambiguous (and nvcc's generated stubs stop compiling).
using ember::kCUDA;
using ember::Tensor;
namespace memory = ember::memory;

namespace {

// Bytes of blocks allocated under `tag` in the allocator's recorded history.
size_t bytes_tagged(const memory::MemorySnapshot& snap, const char* tag) {
  size_t bytes = 0;
  for (const memory::TraceEntry& e : snap.trace)
    if (e.action == memory::TraceAction::alloc && e.tag != nullptr && std::strcmp(e.tag, tag) == 0)
      bytes += e.size;
  return bytes;
}

}  // namespace

TEST_CASE("cuda/thrust: sort's scratch comes from the caching allocator, named 'thrust'" *
          doctest::test_suite("cuda")) {
  ember::manual_seed(1);
  const int64_t n = 1 << 20;
  Tensor x = ember::randn({n}, kCUDA);
  std::vector<float> want = x.to_vector<float>();
  std::sort(want.begin(), want.end());

  ember::cuda::synchronize(0);
  ember::record_memory_history(kCUDA, true);
  const int64_t allocs_before = ember::memory_stats(kCUDA).at("allocation.all.allocated");
  const int64_t bytes_before = ember::memory_allocated(kCUDA);
  float* p = x.data_ptr<float>();
  thrust::sort(ember::cuda::thrust_policy(), p, p + n);
  const memory::MemorySnapshot snap = ember::memory_snapshot(kCUDA);
  ember::record_memory_history(kCUDA, false);

  CHECK(x.to_vector<float>() == want);
  // A radix sort of 4 MiB of keys needs at least as much scratch again.
  CHECK(bytes_tagged(snap, "thrust") >= static_cast<size_t>(n) * sizeof(float));
  CHECK(ember::memory_stats(kCUDA).at("allocation.all.allocated") > allocs_before);
  CHECK(ember::memory_allocated(kCUDA) == bytes_before);  // all of it returned to the cache
}

TEST_CASE("cuda/thrust: CUB's temp storage through TempBuffer, named 'cub'" *
          doctest::test_suite("cuda")) {
  Tensor x = ember::arange(1000, ember::TensorOptions().device(kCUDA));
  Tensor out = ember::zeros({1}, ember::TensorOptions().device(kCUDA));
  const float* in = x.data_ptr<float>();
  float* o = out.data_ptr<float>();
  cudaStream_t stream = ember::cuda::current_stream(0);
  size_t bytes = 0;
  cub::DeviceReduce::Sum(nullptr, bytes, in, o, 1000, stream);
  ember::record_memory_history(kCUDA, true);
  {
    ember::cuda::TempBuffer scratch(bytes);
    CHECK(scratch.size() == bytes);
    cub::DeviceReduce::Sum(scratch.data(), bytes, in, o, 1000, stream);
  }
  const memory::MemorySnapshot snap = ember::memory_snapshot(kCUDA);
  ember::record_memory_history(kCUDA, false);
  CHECK(out.item() == 999.0 * 1000.0 / 2.0);
  CHECK(bytes_tagged(snap, "cub") >= bytes);
}
