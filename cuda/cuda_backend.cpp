// cudaMalloc/cudaFree and CUDA events under the caching allocator: the backend of
// every CUDA device's allocator (cuda/device_allocator.h).
#include "cuda/cuda_backend.h"

#include <optional>

#include "cuda/check.h"
#include "cuda/runtime.h"

namespace ember::cuda {

CudaBackend::CudaBackend(int device, size_t limit_bytes) : device_(device), limit_(limit_bytes) {}

void* CudaBackend::raw_alloc(size_t bytes) {
  if (limit_ != 0 && held_ + bytes > limit_) return nullptr;
  DeviceGuard guard(device_);
  // A capture on this thread forbids cudaMalloc unless relaxed; the new segment
  // is then the private pool's, never freed while the graph may replay it.
  std::optional<CaptureModeGuard> relaxed;
  if (is_capturing(device_)) relaxed.emplace(cudaStreamCaptureModeRelaxed);
  void* ptr = nullptr;
  cudaError_t err = cudaMalloc(&ptr, bytes);
  if (err == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();  // out of memory is not sticky; clear it for the retry
    return nullptr;
  }
  EMBER_CUDA_CHECK(err);
  held_ += bytes;
  sizes_.emplace(ptr, bytes);
  return ptr;
}

void CudaBackend::raw_free(void* ptr) noexcept {
  auto it = sizes_.find(ptr);
  if (it != sizes_.end()) {
    held_ -= it->second;
    sizes_.erase(it);
  }
  int previous = 0;
  EMBER_CUDA_CHECK_NOTHROW(cudaGetDevice(&previous));
  EMBER_CUDA_CHECK_NOTHROW(cudaSetDevice(device_));
  EMBER_CUDA_CHECK_NOTHROW(cudaFree(ptr));
  EMBER_CUDA_CHECK_NOTHROW(cudaSetDevice(previous));
}

void CudaBackend::fill(void* ptr, unsigned char value, size_t bytes, cudaStream_t stream) {
  DeviceGuard guard(device_);
  EMBER_CUDA_CHECK(cudaMemsetAsync(ptr, value, bytes, stream));
}

void CudaBackend::read(void* host_dst, const void* ptr, size_t bytes, cudaStream_t stream) {
  DeviceGuard guard(device_);
  EMBER_CUDA_CHECK(cudaMemcpyAsync(host_dst, ptr, bytes, cudaMemcpyDeviceToHost, stream));
  EMBER_CUDA_CHECK(cudaStreamSynchronize(stream));
}

memory::Backend::MemoryInfo CudaBackend::memory_info() {
  DeviceGuard guard(device_);
  MemoryInfo info;
  EMBER_CUDA_CHECK(cudaMemGetInfo(&info.free, &info.total));
  if (limit_ != 0) {
    info.total = limit_;
    info.free = std::min(info.free, limit_ - std::min(limit_, held_));
  }
  return info;
}

memory::Backend::EventHandle CudaBackend::create_event() {
  DeviceGuard guard(device_);
  cudaEvent_t event = nullptr;
  EMBER_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  return event;
}

void CudaBackend::record_event(EventHandle event, cudaStream_t stream) {
  DeviceGuard guard(device_);
  EMBER_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(event), stream));
}

bool CudaBackend::query_event(EventHandle event) {
  cudaError_t err = cudaEventQuery(static_cast<cudaEvent_t>(event));
  if (err == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  EMBER_CUDA_CHECK(err);
  return true;
}

void CudaBackend::synchronize_event(EventHandle event) {
  EMBER_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event)));
}

void CudaBackend::destroy_event(EventHandle event) noexcept {
  EMBER_CUDA_CHECK_NOTHROW(cudaEventDestroy(static_cast<cudaEvent_t>(event)));
}

}  // namespace ember::cuda
