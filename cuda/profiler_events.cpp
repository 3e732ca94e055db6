#include "cuda/profiler_events.h"

#include <cmath>
#include <limits>
#include <mutex>
#include <vector>

#include <cuda_runtime_api.h>
#include <nvtx3/nvToolsExt.h>

#include "cuda/check.h"
#include "cuda/runtime.h"

namespace ember::cuda {

namespace {

struct TimingEvent {
  cudaEvent_t event = nullptr;
  int device = -1;
};

// Events are created on first need and kept: creating one costs more than
// recording it, and a profile records two per span.
struct TimingPool {
  std::mutex mutex;
  std::vector<TimingEvent> events;
  size_t used = 0;
};

TimingPool& pool() {
  static TimingPool* p = new TimingPool;  // never destroyed: events outlive static teardown
  return *p;
}

}  // namespace

int64_t record_timing_event() noexcept {
  if (device_count() == 0) return -1;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  if (is_capturing(device)) return -1;
  cudaStream_t stream = current_stream(device);
  TimingPool& p = pool();
  std::lock_guard lock(p.mutex);
  try {
    if (p.used == p.events.size()) p.events.emplace_back();
  } catch (...) {
    return -1;
  }
  TimingEvent& e = p.events[p.used];
  if (e.device != device) {
    if (e.event != nullptr) EMBER_CUDA_CHECK_NOTHROW(cudaEventDestroy(e.event));
    e.event = nullptr;
    e.device = -1;
    if (cudaEventCreate(&e.event) != cudaSuccess) {  // on the current device
      cudaGetLastError();
      e.event = nullptr;
      return -1;
    }
    e.device = device;
  }
  if (cudaEventRecord(e.event, stream) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  return static_cast<int64_t>(p.used++);
}

double timing_elapsed_ms(int64_t from, int64_t to) noexcept {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  TimingPool& p = pool();
  std::lock_guard lock(p.mutex);
  if (from < 0 || to < 0 || static_cast<size_t>(from) >= p.used ||
      static_cast<size_t>(to) >= p.used)
    return nan;
  const TimingEvent& a = p.events[static_cast<size_t>(from)];
  const TimingEvent& b = p.events[static_cast<size_t>(to)];
  if (a.device != b.device) return nan;
  float ms = 0;
  if (cudaEventSynchronize(b.event) != cudaSuccess ||
      cudaEventSynchronize(a.event) != cudaSuccess ||
      cudaEventElapsedTime(&ms, a.event, b.event) != cudaSuccess) {
    cudaGetLastError();
    return nan;
  }
  return ms;
}

void reset_timing_events() noexcept {
  TimingPool& p = pool();
  std::lock_guard lock(p.mutex);
  p.used = 0;
}

void nvtx_range_push(const char* name) noexcept {
  nvtxRangePushA(name);
}

void nvtx_range_pop() noexcept {
  nvtxRangePop();
}

}  // namespace ember::cuda
