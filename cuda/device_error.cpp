#include "cuda/device_error.h"

#include <array>
#include <atomic>
#include <mutex>

#include "core/base/error.h"
#include "cuda/check.h"
#include "cuda/runtime.h"

namespace ember::cuda {

namespace {

constexpr int kMaxDevices = 64;
std::array<std::atomic<DeviceErrorRecord*>, kMaxDevices> g_records{};
std::mutex g_make_mutex;

}  // namespace

DeviceErrorRecord* device_error_record(int device) {
  EMBER_CHECK(device >= 0 && device < kMaxDevices, "cuda: device index ", device, " out of range");
  DeviceErrorRecord* r = g_records[device].load(std::memory_order_acquire);
  if (r != nullptr) return r;
  std::lock_guard<std::mutex> lock(g_make_mutex);
  r = g_records[device].load(std::memory_order_acquire);
  if (r != nullptr) return r;
  DeviceGuard guard(device);
  // Allocating host memory is not a stream operation: allowed even when the
  // first use happens while a graph is being captured.
  CaptureModeGuard relaxed(cudaStreamCaptureModeRelaxed);
  void* host = nullptr;
  EMBER_CUDA_CHECK(
      cudaHostAlloc(&host, sizeof(DeviceErrorRecord), cudaHostAllocMapped | cudaHostAllocPortable));
  *static_cast<DeviceErrorRecord*>(host) = DeviceErrorRecord{0, 0, nullptr, 0, 0};
  void* dev = nullptr;
  EMBER_CUDA_CHECK(cudaHostGetDevicePointer(&dev, host, 0));
  // With unified addressing (every 64-bit platform CUDA 13 supports) the two
  // pointers are equal; the host reads through `host`, kernels write through `dev`.
  EMBER_CHECK(dev == host,
              "cuda: mapped host memory has a different device address; "
              "ember's device error record needs unified addressing");
  r = static_cast<DeviceErrorRecord*>(host);
  g_records[device].store(r, std::memory_order_release);
  return r;  // kept for the life of the process, as the device's streams are
}

void check_device_errors(int device) {
  if (device < 0 || device >= kMaxDevices) return;
  DeviceErrorRecord* r = g_records[device].load(std::memory_order_acquire);
  if (r == nullptr) return;
  volatile DeviceErrorRecord* v = r;
  if (v->set == 0) return;
  const char* op = v->op;
  const int kind = v->kind;
  const int64_t value = v->value, bound = v->bound;
  v->set = 0;
  EMBER_FAIL(op != nullptr ? op : "a CUDA kernel", ": ", kind == kBadTarget ? "target " : "index ",
             value, " is out of range [0, ", bound, ") (found on cuda:", device,
             " by a kernel launched earlier and reported at this synchronisation; ",
             kind == kBadTarget ? "that row counted as ignored" : "it read zeros there", ")");
}

}  // namespace ember::cuda
