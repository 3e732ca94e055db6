#include "cuda/graph.h"

#include <cstdio>
#include <exception>
#include <utility>

#include "core/base/error.h"
#include "core/memory/caching_allocator.h"
#include "cuda/blas.h"
#include "cuda/check.h"
#include "cuda/device_allocator.h"

namespace ember::cuda {

using memory::CachingAllocator;
using memory::kAllocConfEnvVar;

namespace {

// The span of one capture on this thread: the capture stream is the device's
// current stream, is_capturing(device) is true and the stream allocates from the
// graph's pool. On the way out (normally or by an exception) a capture still open
// is ended and its graph discarded, so the thread and the device are left as they
// were.
class CaptureScope {
 public:
  CaptureScope(int device, cudaStream_t stream, CachingAllocator& allocator, uint64_t pool)
      : device_(device),
        stream_(stream),
        allocator_(allocator),
        pool_(pool),
        current_(device, stream) {
    allocator_.begin_allocate_to_pool(pool_, stream_);
    detail::set_capturing(device_, true);
  }

  ~CaptureScope() {
    if (open_) {
      cudaGraph_t graph = nullptr;
      if (cudaStreamEndCapture(stream_, &graph) == cudaSuccess && graph != nullptr)
        EMBER_CUDA_CHECK_NOTHROW(cudaGraphDestroy(graph));
      (void)cudaGetLastError();  // an invalidated capture's error is reported, not sticky
    }
    detail::set_capturing(device_, false);
    try {
      allocator_.end_allocate_to_pool(pool_);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "ember: cuda::Graph: ending the capture's pool failed: %s\n", e.what());
    }
  }

  CaptureScope(const CaptureScope&) = delete;
  CaptureScope& operator=(const CaptureScope&) = delete;

  void begin() {
    EMBER_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    open_ = true;
  }

  // Ends the capture; returns its graph, or throws when CUDA could not record it.
  cudaGraph_t end() {
    open_ = false;
    cudaGraph_t graph = nullptr;
    const cudaError_t err = cudaStreamEndCapture(stream_, &graph);
    if (err == cudaSuccess && graph != nullptr) return graph;
    if (graph != nullptr) EMBER_CUDA_CHECK_NOTHROW(cudaGraphDestroy(graph));
    (void)cudaGetLastError();
    EMBER_FAIL("cuda::Graph::capture: CUDA could not record the step (", cudaGetErrorString(err),
               "): it did something a graph cannot hold, such as a synchronisation, a copy from "
               "pageable host memory or work that waits on another stream");
  }

 private:
  int device_;
  cudaStream_t stream_;
  CachingAllocator& allocator_;
  uint64_t pool_;
  StreamGuard current_;
  bool open_ = false;
};

}  // namespace

Graph::Graph(int device) : device_(device) {
  const int n = device_count();
  // Asked before any other runtime call, whose error would speak of drivers.
  EMBER_CHECK(n > 0,
              "cuda::Graph: this machine has no CUDA device; CUDA graphs capture GPU "
              "work and need one (on the CPU, run the step eagerly)");
  if (device == -1) device_ = device = current_device();  // -1: the current device
  EMBER_CHECK(device >= 0 && device < n, "cuda::Graph: device ", device,
              " is not a CUDA device (this machine has ", n, " CUDA device", n == 1 ? "" : "s",
              ")");
}

Graph::~Graph() {
  release();
}

Graph::Graph(Graph&& other) noexcept
    : device_(other.device_),
      stream_(std::move(other.stream_)),
      exec_(std::exchange(other.exec_, nullptr)),
      pool_(std::exchange(other.pool_, 0)),
      replayed_(std::exchange(other.replayed_, false)) {
  other.stream_.reset();
}

Graph& Graph::operator=(Graph&& other) noexcept {
  if (this != &other) {
    release();
    device_ = other.device_;
    stream_ = std::move(other.stream_);
    other.stream_.reset();
    exec_ = std::exchange(other.exec_, nullptr);
    pool_ = std::exchange(other.pool_, 0);
    replayed_ = std::exchange(other.replayed_, false);
  }
  return *this;
}

void Graph::capture(const std::function<void()>& step) {
  EMBER_CHECK(static_cast<bool>(step), "cuda::Graph::capture: the step is empty");
  EMBER_CHECK(!is_capturing(device_), "cuda::Graph::capture: device ", device_,
              " is already being captured on this thread (captures do not nest)");
  CachingAllocator& allocator = device_caching_allocator(device_);
  EMBER_CHECK(!allocator.options().sanitize,
              "cuda::Graph::capture: not available in the "
              "allocator's sanitizer mode (",
              kAllocConfEnvVar,
              "=sanitize:True), whose checks "
              "read device memory synchronously");
  reset();
  DeviceGuard device_guard(device_);
  create_handles(device_);  // creating them mid-capture would allocate and synchronise
  if (!stream_) stream_.emplace(device_);
  pool_ = allocator.create_pool();
  cudaGraph_t graph = nullptr;
  try {
    CaptureScope scope(device_, stream_->get(), allocator, pool_);
    scope.begin();
    step();
    graph = scope.end();
  } catch (...) {
    release();  // what the step allocated goes back to the general cache
    throw;
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t err = cudaGraphInstantiate(&exec, graph, 0);
  EMBER_CUDA_CHECK_NOTHROW(cudaGraphDestroy(graph));  // the executable graph is independent
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    release();
    EMBER_FAIL("cuda::Graph::capture: instantiating the captured graph failed: ",
               cudaGetErrorString(err));
  }
  exec_ = exec;
}

void Graph::replay() {
  EMBER_CHECK(captured(), "cuda::Graph::replay: nothing captured (call capture first)");
  EMBER_CHECK(!is_capturing(device_), "cuda::Graph::replay: device ", device_,
              " is being captured on this thread; replay after the capture");
  DeviceGuard guard(device_);
  EMBER_CUDA_CHECK(cudaGraphLaunch(exec_, current_stream(device_)));
  replayed_ = true;
}

void Graph::reset() {
  release();
}

void Graph::release() noexcept {
  if (exec_ == nullptr && pool_ == 0) return;
  int previous = 0;
  EMBER_CUDA_CHECK_NOTHROW(cudaGetDevice(&previous));
  EMBER_CUDA_CHECK_NOTHROW(cudaSetDevice(device_));
  bool idle = !replayed_;
  if (!idle && !is_capturing(device_)) {
    // A replay may still be running, on any stream: the pool's memory may join
    // the general cache only once it is done.
    const cudaError_t err = cudaDeviceSynchronize();
    idle = err == cudaSuccess;
    if (!idle)
      std::fprintf(stderr, "ember: cuda::Graph: waiting for the last replay failed (%s)\n",
                   cudaGetErrorString(err));
  }
  if (exec_ != nullptr) EMBER_CUDA_CHECK_NOTHROW(cudaGraphExecDestroy(exec_));
  exec_ = nullptr;
  if (pool_ != 0) {
    if (idle) {
      try {
        device_caching_allocator(device_).release_pool(pool_, current_stream(device_));
      } catch (const std::exception& e) {
        std::fprintf(stderr, "ember: cuda::Graph: releasing the private pool failed: %s\n",
                     e.what());
      }
    } else {
      // Destroyed during another capture on this thread (which forbids waiting):
      // the pool's memory stays reserved rather than be reused under a replay.
      std::fprintf(stderr,
                   "ember: cuda::Graph destroyed while device %d is being captured: "
                   "its private pool stays reserved\n",
                   device_);
    }
    pool_ = 0;
  }
  replayed_ = false;
  EMBER_CUDA_CHECK_NOTHROW(cudaSetDevice(previous));
}

}  // namespace ember::cuda
