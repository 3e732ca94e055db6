#include "cuda/runtime.h"

#include <array>
#include <cstdio>
#include <mutex>
#include <utility>

#include "cuda/check.h"
#include "cuda/device_error.h"

namespace ember::cuda {

namespace {
constexpr int kMaxDevices = 64;
thread_local std::array<cudaStream_t, kMaxDevices> t_current_streams{};
thread_local std::array<bool, kMaxDevices> t_capturing{};
}  // namespace

int device_count() {
  static const int count = [] {
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
      cudaGetLastError();  // clear the sticky-free error so later calls start clean
      std::fprintf(stderr, "ember: no CUDA device (cudaGetDeviceCount: %s); running on CPU only\n",
                   cudaGetErrorString(err));
      return 0;
    }
    if (n == 0) std::fprintf(stderr, "ember: no CUDA device found; running on CPU only\n");
    return n < kMaxDevices ? n : kMaxDevices;
  }();
  return count;
}

void check_device(int device) {
  int n = device_count();
  EMBER_CHECK(device >= 0 && device < n, "cuda: device index ", device,
              " is not available (this machine has ", n, " CUDA device", n == 1 ? "" : "s", ")");
}

int current_device() {
  int d = 0;
  EMBER_CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

void set_device(int device) {
  check_device(device);
  EMBER_CUDA_CHECK(cudaSetDevice(device));
}

cudaStream_t current_stream(int device) {
  EMBER_CHECK(device >= 0 && device < kMaxDevices, "cuda: device index ", device, " out of range");
  return t_current_streams[device];
}

void set_current_stream(int device, cudaStream_t stream) {
  EMBER_CHECK(device >= 0 && device < kMaxDevices, "cuda: device index ", device, " out of range");
  t_current_streams[device] = stream;
}

void synchronize(int device) {
  check_not_capturing(device, "cuda::synchronize()");
  DeviceGuard guard(device);
  EMBER_CUDA_CHECK(cudaDeviceSynchronize());
  check_device_errors(device);  // what kernels found in their input (cuda/device_error.h)
}

bool is_capturing(int device) {
  return device >= 0 && device < kMaxDevices && t_capturing[static_cast<size_t>(device)];
}

void check_not_capturing(int device, const char* what, const char* action) {
  EMBER_CHECK(!is_capturing(device), what, ": cannot ", action,
              " while a CUDA graph is being captured (cuda::Graph::capture); move it outside "
              "the captured step");
}

void detail::set_capturing(int device, bool capturing) {
  EMBER_CHECK(device >= 0 && device < kMaxDevices, "cuda: device index ", device, " out of range");
  t_capturing[static_cast<size_t>(device)] = capturing;
}

CaptureModeGuard::CaptureModeGuard(cudaStreamCaptureMode mode) : previous_(mode) {
  EMBER_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&previous_));
}

CaptureModeGuard::~CaptureModeGuard() {
  EMBER_CUDA_CHECK_NOTHROW(cudaThreadExchangeStreamCaptureMode(&previous_));
}

// Every CUDA op takes one of these, so it makes as few runtime calls as it can:
// none with a single visible device (device 0 is then always current), else one
// cudaGetDevice, and cudaSetDevice only when the device changes (and back).
DeviceGuard::DeviceGuard(int device) {
  if (device == 0 && device_count() == 1) return;
  const int current = current_device();
  if (current == device) return;
  set_device(device);
  previous_ = current;
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0) EMBER_CUDA_CHECK_NOTHROW(cudaSetDevice(previous_));
}

StreamGuard::StreamGuard(int device, cudaStream_t stream)
    : device_(device), previous_(current_stream(device)) {
  set_current_stream(device, stream);
}

StreamGuard::~StreamGuard() {
  t_current_streams[device_] = previous_;
}

Stream::Stream(int device) : device_(device) {
  DeviceGuard guard(device);
  EMBER_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
}

Stream::~Stream() {
  if (stream_ != nullptr) EMBER_CUDA_CHECK_NOTHROW(cudaStreamDestroy(stream_));
}

Stream::Stream(Stream&& other) noexcept
    : device_(other.device_), stream_(std::exchange(other.stream_, nullptr)) {}

Stream& Stream::operator=(Stream&& other) noexcept {
  if (this != &other) {
    if (stream_ != nullptr) EMBER_CUDA_CHECK_NOTHROW(cudaStreamDestroy(stream_));
    device_ = other.device_;
    stream_ = std::exchange(other.stream_, nullptr);
  }
  return *this;
}

void Stream::synchronize() const {
  EMBER_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

Event::Event(bool timing) {
  EMBER_CUDA_CHECK(
      cudaEventCreateWithFlags(&event_, timing ? cudaEventDefault : cudaEventDisableTiming));
}

Event::~Event() {
  if (event_ != nullptr) EMBER_CUDA_CHECK_NOTHROW(cudaEventDestroy(event_));
}

Event::Event(Event&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    if (event_ != nullptr) EMBER_CUDA_CHECK_NOTHROW(cudaEventDestroy(event_));
    event_ = std::exchange(other.event_, nullptr);
  }
  return *this;
}

void Event::record(cudaStream_t stream) {
  EMBER_CUDA_CHECK(cudaEventRecord(event_, stream));
}
void Event::synchronize() const {
  EMBER_CUDA_CHECK(cudaEventSynchronize(event_));
}

bool Event::query() const {
  cudaError_t err = cudaEventQuery(event_);
  if (err == cudaErrorNotReady) return false;
  EMBER_CUDA_CHECK(err);
  return true;
}

float Event::elapsed_ms(const Event& end) const {
  float ms = 0.f;
  EMBER_CUDA_CHECK(cudaEventElapsedTime(&ms, event_, end.event_));
  return ms;
}

}  // namespace ember::cuda
