// The CUDA runtime as ember sees it: how many devices there are (zero, said once,
// when there is no driver), the current device and stream per host thread, and
// RAII guards that restore them. Streams and events are move-only owners.
#pragma once

#include <cuda_runtime_api.h>

namespace ember::cuda {

// Number of usable devices. Any error from cudaGetDeviceCount (no driver, no
// device) counts as zero; the reason is printed once to stderr.
int device_count();
inline bool is_available() {
  return device_count() > 0;
}
// Throws ember::Error naming the index when it is not a usable device.
void check_device(int device);

int current_device();
void set_device(int device);

// The stream ember launches on for `device` from this thread (default: the
// legacy default stream, nullptr).
cudaStream_t current_stream(int device);
void set_current_stream(int device, cudaStream_t stream);
// Waits for all work on `device`. Throws ember::Error while a CUDA graph is being
// captured on it (is_capturing).
void synchronize(int device);

// --- CUDA graph capture (cuda/graph.h) ---
// True while a cuda::Graph captures `device`'s work on this thread: ops then
// record into the graph instead of running, so none may wait for the device.
bool is_capturing(int device);
// Throws ember::Error when is_capturing(device), naming `what` (an op, "item()")
// and `action`: "<what>: cannot <action> while a CUDA graph is being captured
// (cuda::Graph::capture); move it outside the captured step". For ops that
// synchronise with the host or whose effect a replay could not repeat.
void check_not_capturing(int device, const char* what,
                         const char* action = "synchronise with the host");
namespace detail {
void set_capturing(int device, bool capturing);  // cuda::Graph only
}  // namespace detail

// Sets this thread's stream-capture mode (cudaThreadExchangeStreamCaptureMode)
// for the guard's lifetime. The allocator relaxes it around cudaMalloc, which a
// capture in the stricter modes forbids but which is safe there: the graph keeps
// the new memory for its replays.
class CaptureModeGuard {
 public:
  explicit CaptureModeGuard(cudaStreamCaptureMode mode);
  ~CaptureModeGuard();
  CaptureModeGuard(const CaptureModeGuard&) = delete;
  CaptureModeGuard& operator=(const CaptureModeGuard&) = delete;

 private:
  cudaStreamCaptureMode previous_;
};

// Makes `device` current while it lives, then restores the previous device.
// Makes no runtime call when `device` is already current and it is the only one.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;  // the device to restore; -1: it was not changed
};

class StreamGuard {
 public:
  StreamGuard(int device, cudaStream_t stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  int device_;
  cudaStream_t previous_;
};

// An owned, non-blocking stream on one device.
class Stream {
 public:
  explicit Stream(int device);
  ~Stream();
  Stream(Stream&& other) noexcept;
  Stream& operator=(Stream&& other) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return stream_; }
  int device() const { return device_; }
  void synchronize() const;

 private:
  int device_ = 0;
  cudaStream_t stream_ = nullptr;
};

// An owned event (timing enabled unless asked otherwise).
class Event {
 public:
  explicit Event(bool timing = true);
  ~Event();
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  void record(cudaStream_t stream);
  void synchronize() const;
  bool query() const;  // true when the work before record() has finished
  // Milliseconds from this event to `end`; both must have completed.
  float elapsed_ms(const Event& end) const;
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

}  // namespace ember::cuda
