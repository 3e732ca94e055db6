#include "cuda/graph.h"

#include <cstdio>
#include <exception>
#include <utility>

#include "core/base/error.h"
#include "core/memory/caching_allocator.h"
#include "cuda/blas.h"
#include "cuda/check.h"
#include "cuda/device_allocator.h"
#include "cuda/kernels/elementwise.h"

namespace ember::cuda {

using memory::CachingAllocator;
using memory::kAllocConfEnvVar;

namespace {

// The graph capturing each device on this thread (inside Graph::capture's step), for
// the random-counter hook.
constexpr int kMaxGraphDevices = 64;
thread_local Graph* t_capturing_graph[kMaxGraphDevices] = {};

// Sets the device's capturing graph for a scope.
class ActiveGraph {
 public:
  ActiveGraph(int device, Graph* g) : device_(device) { t_capturing_graph[device_] = g; }
  ~ActiveGraph() { t_capturing_graph[device_] = nullptr; }
  ActiveGraph(const ActiveGraph&) = delete;
  ActiveGraph& operator=(const ActiveGraph&) = delete;

 private:
  int device_;
};

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
  if (words_ != nullptr && !is_capturing(device_)) {
    int previous = 0;
    EMBER_CUDA_CHECK_NOTHROW(cudaGetDevice(&previous));
    EMBER_CUDA_CHECK_NOTHROW(cudaSetDevice(device_));
    EMBER_CUDA_CHECK_NOTHROW(cudaFree(words_));  // after the last replay (release waited)
    EMBER_CUDA_CHECK_NOTHROW(cudaSetDevice(previous));
  }
}

Graph::Graph(Graph&& other) noexcept
    : device_(other.device_),
      stream_(std::move(other.stream_)),
      exec_(std::exchange(other.exec_, nullptr)),
      pool_(std::exchange(other.pool_, 0)),
      replayed_(std::exchange(other.replayed_, false)),
      words_(std::exchange(other.words_, nullptr)),
      random_(std::move(other.random_)) {
  other.stream_.reset();
  other.random_.clear();
}

Graph& Graph::operator=(Graph&& other) noexcept {
  if (this != &other) {
    Graph old(std::move(*this));  // frees this graph's words and pool on the way out
    device_ = other.device_;
    stream_ = std::move(other.stream_);
    other.stream_.reset();
    exec_ = std::exchange(other.exec_, nullptr);
    pool_ = std::exchange(other.pool_, 0);
    replayed_ = std::exchange(other.replayed_, false);
    words_ = std::exchange(other.words_, nullptr);
    random_ = std::move(other.random_);
    other.random_.clear();
  }
  return *this;
}

const uint64_t* Graph::capture_random(int device, const void* key, uint64_t* host_offset,
                                      uint64_t n, uint64_t* offset_in_step) {
  Graph* g = device >= 0 && device < kMaxGraphDevices ? t_capturing_graph[device] : nullptr;
  EMBER_CHECK(g != nullptr, "random draw: device ", device,
              " is being captured, but not by a cuda::Graph on this thread");
  RandomSlot* slot = nullptr;
  for (RandomSlot& r : g->random_)
    if (r.key == key) slot = &r;
  if (slot == nullptr) {
    EMBER_CHECK(g->random_.size() < static_cast<size_t>(kMaxStoredWords),
                "cuda::Graph::capture: the step draws random numbers from more than ",
                kMaxStoredWords, " generators");
    g->random_.push_back({key, host_offset, *host_offset, 0});
    slot = &g->random_.back();
  }
  *offset_in_step = *host_offset - slot->start;
  *host_offset += n;
  slot->consumed = *host_offset - slot->start;
  return g->words_ + (slot - g->random_.data());
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
  if (words_ == nullptr)  // the random-counter words, outside the capture
    EMBER_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&words_),
                                sizeof(uint64_t) * static_cast<size_t>(kMaxStoredWords)));
  EMBER_CHECK(device_ < kMaxGraphDevices, "cuda::Graph::capture: device ", device_, " is past the ",
              kMaxGraphDevices, " devices graphs support");
  pool_ = allocator.create_pool();
  cudaGraph_t graph = nullptr;
  // The capture ran nothing: the generators it drew from go back to where they were
  // (each replay advances them instead).
  auto restore_generators = [this] {
    for (const RandomSlot& r : random_) *r.host_offset = r.start;
  };
  try {
    CaptureScope scope(device_, stream_->get(), allocator, pool_);
    ActiveGraph active(device_, this);
    scope.begin();
    step();
    graph = scope.end();
  } catch (...) {
    restore_generators();
    random_.clear();
    release();  // what the step allocated goes back to the general cache
    throw;
  }
  restore_generators();
  cudaGraphExec_t exec = nullptr;
  const cudaError_t err = cudaGraphInstantiate(&exec, graph, 0);
  EMBER_CUDA_CHECK_NOTHROW(cudaGraphDestroy(graph));  // the executable graph is independent
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    random_.clear();
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
  const cudaStream_t stream = current_stream(device_);
  if (!random_.empty()) {
    // Each generator's word := its offset now, set in the stream before the graph.
    uint64_t values[kMaxStoredWords];
    for (size_t i = 0; i < random_.size(); ++i) values[i] = *random_[i].host_offset;
    launch_store_words(words_, values, static_cast<int>(random_.size()), stream);
  }
  EMBER_CUDA_CHECK(cudaGraphLaunch(exec_, stream));
  for (const RandomSlot& r : random_) *r.host_offset += r.consumed;
  replayed_ = true;
}

void Graph::reset() {
  release();
}

void Graph::release() noexcept {
  random_.clear();
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
