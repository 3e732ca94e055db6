#include "cuda/replay_policies.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "core/base/error.h"
#include "core/memory/caching_allocator.h"
#include "cuda/check.h"
#include "cuda/cuda_backend.h"
#include "cuda/runtime.h"

namespace ember::cuda {

namespace {

using memory::ReplayOpKind;
using memory::ReplayProgram;
using memory::ReplayResult;
using memory::RunSettings;

std::string no_gpu_reason(int device) {
  const int n = device_count();
  if (n == 0) return "no GPU here";
  if (device >= n) return "no CUDA device " + std::to_string(device);
  return {};
}

// One real stream per trace stream: trace stream 0 is the default stream, as in
// the recording; the others are created (and destroyed with this object).
class ReplayStreams {
 public:
  ReplayStreams(const ReplayProgram& program, int device) : device_(device) {
    DeviceGuard guard(device);
    for (uint64_t id : program.streams()) {
      cudaStream_t s = nullptr;
      if (id != 0) {
        EMBER_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        owned_.push_back(s);
      }
      streams_.push_back(s);
    }
  }
  ~ReplayStreams() {
    DeviceGuard guard(device_);
    for (cudaStream_t s : owned_) EMBER_CUDA_CHECK_NOTHROW(cudaStreamDestroy(s));
  }
  ReplayStreams(const ReplayStreams&) = delete;
  ReplayStreams& operator=(const ReplayStreams&) = delete;
  const std::vector<cudaStream_t>& get() const { return streams_; }

 private:
  int device_;
  std::vector<cudaStream_t> streams_;
  std::vector<cudaStream_t> owned_;
};

class CudaCachingPolicy final : public memory::ReplayPolicy {
 public:
  explicit CudaCachingPolicy(int device) : device_(device) {}
  std::string name() const override { return "native on cudaMalloc (GPU)"; }
  std::string unavailable() const override { return no_gpu_reason(device_); }
  bool simulated() const override { return false; }

  ReplayResult run(const ReplayProgram& program, const RunSettings& settings) override {
    EMBER_CHECK(unavailable().empty(), "replay: ", name(), ": ", unavailable());
    DeviceGuard guard(device_);
    ReplayStreams streams(program, device_);
    const size_t limit =
        settings.capacity >= RunSettings::kUnlimitedCapacity ? 0 : settings.capacity;
    ReplayResult r;
    {
      memory::CachingAllocator a(std::make_unique<CudaBackend>(device_, limit));
      r = memory::replay_through(program, a, streams.get(), nullptr, settings);
      EMBER_CUDA_CHECK(cudaDeviceSynchronize());
    }
    r.policy = name();
    r.capacity = settings.capacity;
    if (settings.measure_fragmentation && r.peak_reserved > 0) {
      memory::CachingAllocator again(std::make_unique<CudaBackend>(device_, limit));
      RunSettings partial = settings;
      partial.stop_at_first_oom = false;
      memory::replay_through(program, again, streams.get(), nullptr, partial,
                             r.peak_reserved_event);
      auto [largest, cached] = memory::free_cache_shape(again);
      r.largest_free_at_peak = largest;
      r.free_cached_at_peak = cached;
      r.fragmentation =
          cached > 0 ? 1.0 - static_cast<double>(largest) / static_cast<double>(cached) : 0.0;
      EMBER_CUDA_CHECK(cudaDeviceSynchronize());
    }
    r.min_capacity_note = "n/a (real device)";
    return r;
  }

 private:
  int device_;
};

class MallocAsyncPolicy final : public memory::ReplayPolicy {
 public:
  explicit MallocAsyncPolicy(int device) : device_(device) {}
  std::string name() const override { return "cudaMallocAsync (GPU)"; }
  std::string unavailable() const override { return no_gpu_reason(device_); }
  bool simulated() const override { return false; }

  ReplayResult run(const ReplayProgram& program, const RunSettings& settings) override {
    EMBER_CHECK(unavailable().empty(), "replay: ", name(), ": ", unavailable());
    DeviceGuard guard(device_);
    ReplayStreams streams(program, device_);
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device_;
    if (settings.capacity < RunSettings::kUnlimitedCapacity) props.maxSize = settings.capacity;
    struct Pool {
      cudaMemPool_t handle = nullptr;
      ~Pool() {
        if (handle == nullptr) return;
        EMBER_CUDA_CHECK_NOTHROW(cudaDeviceSynchronize());
        EMBER_CUDA_CHECK_NOTHROW(cudaMemPoolDestroy(handle));
      }
    } owner;
    EMBER_CUDA_CHECK(cudaMemPoolCreate(&owner.handle, &props));
    cudaMemPool_t pool = owner.handle;
    // Keep everything the pool was given, as PyTorch's cudaMallocAsync backend does:
    // the pool then behaves as a cache, and its reserved high-water mark is comparable.
    uint64_t keep = UINT64_MAX;
    EMBER_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));

    ReplayResult r;
    r.policy = name();
    r.capacity = settings.capacity;
    const auto& ops = program.ops();
    std::vector<void*> ptrs(program.slots(), nullptr);
    uint64_t live_requested = 0;
    const auto t0 = std::chrono::steady_clock::now();
    const double cpu0 = memory::thread_cpu_seconds();
    size_t i = 0;
    for (; i < ops.size(); ++i) {
      const memory::ReplayOp& op = ops[i];
      cudaStream_t s = streams.get()[op.stream];
      if (op.kind == ReplayOpKind::alloc) {
        void* p = nullptr;
        const cudaError_t err = cudaMallocFromPoolAsync(&p, op.size, pool, s);
        if (err == cudaErrorMemoryAllocation) {
          (void)cudaGetLastError();  // clears the sticky-free error state
          ptrs[op.slot] = nullptr;
          ++r.ooms;
          if (!r.first_failure) {
            memory::ReplayFailure f;
            f.event = i;
            f.size = op.size;
            f.stream = program.streams()[op.stream];
            f.live_requested = live_requested;
            f.allocated = -1;
            f.reserved = -1;
            f.message = cudaGetErrorString(err);
            r.first_failure = f;
          }
          if (settings.stop_at_first_oom) {
            ++i;
            break;
          }
          continue;
        }
        EMBER_CUDA_CHECK(err);
        ptrs[op.slot] = p;
        live_requested += op.size;
      } else if (op.kind == ReplayOpKind::free || op.kind == ReplayOpKind::complete) {
        if (void* p = ptrs[op.slot]) {
          EMBER_CUDA_CHECK(cudaFreeAsync(p, s));
          ptrs[op.slot] = nullptr;
          if (op.kind == ReplayOpKind::free) live_requested -= op.size;
        }
      } else if (op.kind == ReplayOpKind::free_deferred) {
        if (ptrs[op.slot] != nullptr) live_requested -= op.size;  // freed at `complete`
      } else if (op.kind == ReplayOpKind::empty_cache) {
        EMBER_CUDA_CHECK(cudaDeviceSynchronize());
        EMBER_CUDA_CHECK(cudaMemPoolTrimTo(pool, 0));
      }
    }
    EMBER_CUDA_CHECK(cudaDeviceSynchronize());
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    r.cpu_seconds = memory::thread_cpu_seconds() - cpu0;
    r.events = i;
    uint64_t reserved_high = 0, used_high = 0;
    EMBER_CUDA_CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &reserved_high));
    EMBER_CUDA_CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &used_high));
    r.peak_reserved = static_cast<int64_t>(reserved_high);
    r.peak_allocated = static_cast<int64_t>(used_high);
    for (void* p : ptrs)
      if (p != nullptr) EMBER_CUDA_CHECK_NOTHROW(cudaFreeAsync(p, nullptr));
    r.min_capacity_note = "n/a (real device)";
    return r;
  }

 private:
  int device_;
};

}  // namespace

std::unique_ptr<memory::ReplayPolicy> make_cuda_caching_policy(int device) {
  return std::make_unique<CudaCachingPolicy>(device);
}

std::unique_ptr<memory::ReplayPolicy> make_cuda_malloc_async_policy(int device) {
  return std::make_unique<MallocAsyncPolicy>(device);
}

}  // namespace ember::cuda
