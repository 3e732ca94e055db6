#include "parallel/nccl_communicator.h"

#include <cstdlib>
#include <mutex>
#include <thread>

#include "parallel/check.h"

namespace ember::parallel {

namespace {

using Clock = std::chrono::steady_clock;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::Float32:
      return ncclFloat32;
    case DType::Float64:
      return ncclFloat64;
    case DType::BFloat16:
      return ncclBfloat16;
    case DType::Int64:
      return ncclInt64;
    case DType::Bool:
      return ncclUint8;
  }
  EMBER_FAIL("NcclCommunicator: unknown dtype");
}

ncclRedOp_t nccl_op(ReduceOp op) {
  return op == ReduceOp::Sum ? ncclSum : ncclAvg;
}

// Bool travels as bytes in the collectives that move data; a sum of bools has no
// meaning NCCL gives (bytes would wrap at 256).
void check_summable(const char* op, DType t) {
  EMBER_CHECK(t != DType::Bool, op,
              ": NCCL cannot sum bool tensors (cast to int64 to count, "
              "or use broadcast / all_gather / all_to_all, which move bools)");
}

// NCCL connects an algorithm's channels the first time a collective needs it
// (NCCL_RUNTIME_CONNECT=1, its default since 2.22). On a blocking communicator
// that happens inside the call, which then waits for the peers with no deadline:
// a rank that skips the first collective would hang the others on the host.
// Connecting everything while the ranks join and split (under the deadline)
// avoids it, at the price of the buffers of algorithms never used. NCCL reads
// the variable once, at its first communicator, so every way into NCCL here sets
// it first; a value the user set wins. (Send/receive pairs, all_to_all's, still
// connect on first use: DDP's bfloat16 path runs one while every rank is there.)
void connect_at_init() {
  static std::once_flag once;
  std::call_once(once, [] { setenv("NCCL_RUNTIME_CONNECT", "0", /*overwrite=*/0); });
}

// Errors of the call itself that leave the communicator usable: ember's checks
// should have caught them, so they are reported, not treated as a broken link.
bool usage_error(ncclResult_t st) {
  return st == ncclInvalidArgument || st == ncclInvalidUsage;
}

}  // namespace

std::string nccl_runtime_version() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "unknown";
  // Since 2.9: major * 10000 + minor * 100 + patch.
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
         std::to_string(v % 100);
}

NcclUniqueId NcclUniqueId::create() {
  connect_at_init();  // before anything of NCCL's runs in this process
  ncclUniqueId id;
  EMBER_NCCL_CHECK(ncclGetUniqueId(&id));
  NcclUniqueId out;
  std::copy(id.internal, id.internal + NCCL_UNIQUE_ID_BYTES, out.bytes.begin());
  return out;
}

// Completion events without timing, reused: creating and destroying one per
// collective cost two runtime calls each time. Shared by the communicator and
// its Works, so a Work may outlive the communicator.
class EventPool {
 public:
  ~EventPool() {
    for (cudaEvent_t e : free_) EMBER_CUDA_CHECK_NOTHROW(cudaEventDestroy(e));
  }
  cudaEvent_t take() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!free_.empty()) {
        cudaEvent_t e = free_.back();
        free_.pop_back();
        return e;
      }
    }
    cudaEvent_t e = nullptr;
    EMBER_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return e;
  }
  void give(cudaEvent_t e) {
    std::lock_guard<std::mutex> lock(mu_);
    free_.push_back(e);
  }

 private:
  std::mutex mu_;
  std::vector<cudaEvent_t> free_;
};

// A collective queued on the communicator's stream; `done` records its end.
class NcclWork final : public Work {
  // Spin (yielding) for the first milliseconds: a sleep_for(20-50 us) really
  // sleeps 60-110 us (timer slack), a fixed cost on every small collective.
  // Past that, sleep so a long wait does not burn a core.
  static constexpr auto kSpinFor = std::chrono::milliseconds(20);

 public:
  NcclWork(NcclCommunicator* comm, std::shared_ptr<EventPool> pool, cudaEvent_t done,
           const char* op, std::string label, int64_t seq, NcclStageTimes* probe)
      : comm_(comm),
        pool_(std::move(pool)),
        done_(done),
        op_(op),
        label_(std::move(label)),
        seq_(seq),
        probe_(probe) {}
  ~NcclWork() override {
    if (done_) pool_->give(done_);
  }

  bool poll() override {
    if (finished_) return true;
    check_not_aborted();
    if (query()) {
      finished_ = true;
      return true;
    }
    check_async();
    return false;
  }

  void wait() override {
    if (!finished_) {
      // An aborted collective's event may complete without its result.
      check_not_aborted();
      const auto start = Clock::now();
      const auto deadline = start + comm_->options().timeout_;
      int64_t polls = 0;
      for (;;) {
        ++polls;
        if (query()) break;
        if (polls % 16 == 0) check_async();
        const auto now = Clock::now();
        if (now >= deadline) timed_out();
        if (now - start < kSpinFor)
          std::this_thread::yield();
        else
          std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
      finished_ = true;
      if (probe_) {
        probe_->completed = now_ns();
        probe_->polls = polls;
      }
    }
    // Later work on the caller's stream reads the result only after it is there.
    cuda::DeviceGuard guard(comm_->cuda_device_);
    cudaStream_t caller = cuda::current_stream(comm_->cuda_device_);
    if (caller != comm_->stream()) EMBER_CUDA_CHECK(cudaStreamWaitEvent(caller, done_, 0));
    if (probe_) probe_->waited = now_ns();
  }

 private:
  bool query() {
    const cudaError_t e = cudaEventQuery(done_);
    if (e == cudaSuccess) return true;
    if (e != cudaErrorNotReady) EMBER_CUDA_CHECK(e);
    return false;
  }
  void check_not_aborted() const {
    EMBER_CHECK(!comm_->broken(),
                "NcclCommunicator: ", NcclCommunicator::describe(op_, label_, seq_),
                " on a communicator aborted after: ", comm_->broken_reason_);
  }
  void check_async() {
    check_not_aborted();
    ncclResult_t st = ncclSuccess;
    EMBER_NCCL_CHECK(ncclCommGetAsyncError(comm_->comm_, &st));
    if (st != ncclSuccess && st != ncclInProgress) {
      abandon_buffers();
      comm_->abort("NCCL " + NcclCommunicator::describe(op_, label_, seq_) + " failed on rank " +
                       std::to_string(comm_->rank()) + ": " + ncclGetErrorString(st) + " (" +
                       ncclGetLastError(comm_->comm_) + ")",
                   false);
    }
  }
  [[noreturn]] void timed_out() {
    abandon_buffers();  // the aborted kernel may touch them until it has stopped
    comm_->abort("NCCL " + NcclCommunicator::describe(op_, label_, seq_) + " timed out after " +
                     std::to_string(comm_->options().timeout_.count()) + " ms on rank " +
                     std::to_string(comm_->rank()) + " of " + std::to_string(comm_->size()) +
                     " (cuda:" + std::to_string(comm_->cuda_device_) +
                     "); ranks that did not arrive: unknown to NCCL (compare the collective "
                     "numbers in the other ranks' errors); communicator aborted",
                 true);
  }

  NcclCommunicator* comm_;
  std::shared_ptr<EventPool> pool_;
  cudaEvent_t done_;
  const char* op_;
  std::string label_;
  int64_t seq_;
  NcclStageTimes* probe_;
  bool finished_ = false;
};

std::string NcclCommunicator::describe(const char* op, const std::string& label, int64_t seq) {
  std::string s = op;
  if (!label.empty()) s += " '" + label + "'";
  if (seq >= 0) s += " (collective #" + std::to_string(seq) + ")";
  return s;
}

NcclCommunicator::NcclCommunicator(ncclComm_t comm, int rank, int size, int device, bool blocking,
                                   CommOptions options)
    : Communicator(rank, size, Device::cuda(device), options),
      comm_(comm),
      cuda_device_(device),
      comm_blocking_(blocking),
      stream_(device),
      events_(std::make_shared<EventPool>()) {
  cuda::DeviceGuard guard(device);
  EMBER_CUDA_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
}

NcclCommunicator::NcclCommunicator(const NcclUniqueId& id, int rank, int size, int device,
                                   CommOptions options)
    : Communicator(rank, size, Device::cuda(device), options),
      cuda_device_(device),
      comm_blocking_(false),
      stream_(device),
      events_(std::make_shared<EventPool>()) {
  EMBER_CHECK(size >= 1 && rank >= 0 && rank < size, "NcclCommunicator: rank ", rank,
              " is not in a world of ", size);
  EMBER_CHECK(options.timeout_.count() > 0, "NcclCommunicator: timeout must be positive, got ",
              options.timeout_.count(), " ms");
  cuda::check_device(device);
  cuda::DeviceGuard guard(device);
  EMBER_CUDA_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
  connect_at_init();
  ncclUniqueId raw;
  std::copy(id.bytes.begin(), id.bytes.end(), raw.internal);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;    // calls return at once; wait_ready polls against the deadline
  config.splitShare = 1;  // the blocking communicator below reuses these buffers
  ncclResult_t st = ncclCommInitRankConfig(&parent_, size, raw, rank, &config);
  comm_ = parent_;
  if (st != ncclInProgress && st != ncclSuccess) {
    const std::string msg = std::string("NCCL ncclCommInitRankConfig failed on rank ") +
                            std::to_string(rank) + ": " + ncclGetErrorString(st);
    if (parent_) abort(msg, false);
    EMBER_FAIL(msg);
  }
  const std::string joining = "joining " + std::to_string(size) + " ranks";
  wait_ready(parent_, "ncclCommInitRankConfig", joining, -1);
  // EMBER_NCCL_NONBLOCKING=1 keeps every communicator non-blocking without a
  // rebuild (every rank must see the same value: the split is collective).
  const char* force = std::getenv("EMBER_NCCL_NONBLOCKING");
  if (options.nccl_nonblocking_ || (force && std::string(force) == "1")) return;

  // The collectives' communicator: blocking, split off under the same deadline.
  ncclConfig_t child = NCCL_CONFIG_INITIALIZER;
  child.blocking = 1;
  ncclComm_t fast = nullptr;
  st = ncclCommSplit(parent_, /*color=*/0, /*key=*/rank, &fast, &child);
  if (st != ncclInProgress && st != ncclSuccess)
    abort(std::string("NCCL ncclCommSplit failed on rank ") + std::to_string(rank) + ": " +
              ncclGetErrorString(st) +
              " (CommOptions().nccl_nonblocking(true) runs without the split)",
          false);
  wait_ready(parent_, "ncclCommSplit", joining, -1);
  // NCCL publishes the new communicator once the split has completed, which the
  // poll above saw (it also joined NCCL's thread).
  if (fast == nullptr)
    abort("NCCL ncclCommSplit returned no communicator on rank " + std::to_string(rank), false);
  comm_ = fast;
  comm_blocking_ = true;
}

std::vector<std::unique_ptr<NcclCommunicator>> NcclCommunicator::create_all(
    const std::vector<int>& devices, CommOptions options) {
  EMBER_CHECK(!devices.empty(), "NcclCommunicator::create_all: no devices given");
  for (int d : devices) cuda::check_device(d);
  connect_at_init();  // NCCL reads it once per process: set before its first communicator
  std::vector<ncclComm_t> comms(devices.size());
  EMBER_NCCL_CHECK(ncclCommInitAll(comms.data(), static_cast<int>(devices.size()), devices.data()));
  std::vector<std::unique_ptr<NcclCommunicator>> out;
  for (size_t i = 0; i < devices.size(); ++i)
    out.push_back(std::unique_ptr<NcclCommunicator>(
        new NcclCommunicator(comms[i], static_cast<int>(i), static_cast<int>(devices.size()),
                             devices[i], true, options)));
  return out;
}

NcclCommunicator::~NcclCommunicator() {
  if (ready_) EMBER_CUDA_CHECK_NOTHROW(cudaEventDestroy(ready_));
  if (!comm_) return;  // aborted
  if (!parent_) {      // create_all's: blocking, owns nothing else
    EMBER_NCCL_CHECK_NOTHROW(ncclCommDestroy(comm_));
    return;
  }
  // Let what is in flight finish (bounded by the timeout), then free; abort otherwise.
  const auto deadline = Clock::now() + options().timeout_;
  bool idle = false;
  while (Clock::now() < deadline) {
    const cudaError_t e = cudaStreamQuery(stream_.get());
    if (e == cudaSuccess) {
      idle = true;
      break;
    }
    if (e != cudaErrorNotReady) break;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  if (!idle) {
    if (comm_ != parent_) EMBER_NCCL_CHECK_NOTHROW(ncclCommAbort(comm_));
    EMBER_NCCL_CHECK_NOTHROW(ncclCommAbort(parent_));
    return;
  }
  if (comm_ != parent_) EMBER_NCCL_CHECK_NOTHROW(ncclCommDestroy(comm_));
  ncclResult_t st = ncclCommFinalize(parent_);
  while (st == ncclInProgress && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::microseconds(100));
    if (ncclCommGetAsyncError(parent_, &st) != ncclSuccess) break;
  }
  if (st == ncclSuccess)
    EMBER_NCCL_CHECK_NOTHROW(ncclCommDestroy(parent_));
  else
    EMBER_NCCL_CHECK_NOTHROW(ncclCommAbort(parent_));
}

void NcclCommunicator::wait_ready(ncclComm_t c, const char* op, const std::string& label,
                                  int64_t seq) {
  const auto start = Clock::now();
  const auto deadline = start + options().timeout_;
  for (;;) {
    ncclResult_t st = ncclSuccess;
    EMBER_NCCL_CHECK(ncclCommGetAsyncError(c, &st));
    if (st == ncclSuccess) return;
    if (st != ncclInProgress)
      abort("NCCL " + describe(op, label, seq) + " failed on rank " + std::to_string(rank()) +
                ": " + ncclGetErrorString(st) + " (" + ncclGetLastError(c) + ")",
            false);
    const auto now = Clock::now();
    if (now >= deadline)
      abort("NCCL " + describe(op, label, seq) + " timed out after " +
                std::to_string(options().timeout_.count()) + " ms on rank " +
                std::to_string(rank()) + " of " + std::to_string(size()) +
                "; the other ranks did not arrive (or their GPUs are stuck)",
            true);
    // As NcclWork::wait: a short sleep costs ~100 us per call, so spin first.
    if (now - start < std::chrono::milliseconds(20))
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

void NcclCommunicator::abort(const std::string& reason, bool timeout) {
  broken_reason_ = reason;
  if (comm_ && comm_ != parent_) EMBER_NCCL_CHECK_NOTHROW(ncclCommAbort(comm_));
  if (parent_) EMBER_NCCL_CHECK_NOTHROW(ncclCommAbort(parent_));
  comm_ = parent_ = nullptr;
  if (timeout) throw CollectiveTimeoutError(reason);
  throw Error(reason);
}

void NcclCommunicator::check_buffer(const char* op, const FlatBuffer& buf) const {
  EMBER_CHECK(buf.device == device(), "NcclCommunicator: ", op, " buffer is on ", buf.device,
              ", this communicator (rank ", rank(), ") on ", device());
  EMBER_CHECK(buf.count >= 0 && (buf.data != nullptr || buf.count == 0), "NcclCommunicator: ", op,
              ": null buffer or negative count (", buf.count, ")");
  (void)nccl_type(buf.dtype);
}

template <typename Call>
std::shared_ptr<Work> NcclCommunicator::enqueue(const char* op, const std::string& label,
                                                Call call) {
  if (broken()) [[unlikely]]
    EMBER_FAIL("NcclCommunicator: ", describe(op, label, -1),
               " on a communicator aborted after: ", broken_reason_);
  NcclStageTimes* probe = probe_;
  if (probe) {
    *probe = NcclStageTimes{};
    probe->begin = now_ns();
  }
  const int64_t seq = next_seq_++;
  cuda::DeviceGuard guard(cuda_device_);
  cudaStream_t caller = cuda::current_stream(cuda_device_);
  if (caller != stream_.get()) {
    EMBER_CUDA_CHECK(cudaEventRecord(ready_, caller));
    EMBER_CUDA_CHECK(cudaStreamWaitEvent(stream_.get(), ready_, 0));
  }
  if (probe) probe->ordered = now_ns();
  const ncclResult_t st = call(stream_.get());
  if (probe) probe->nccl_returned = now_ns();
  if (st == ncclInProgress) {
    wait_ready(comm_, op, label, seq);
    if (probe) probe->nccl_ready = now_ns();
  } else if (st != ncclSuccess) {
    const std::string msg = "NCCL " + describe(op, label, seq) + " failed on rank " +
                            std::to_string(rank()) + ": " + ncclGetErrorString(st) + " (" +
                            ncclGetLastError(comm_) + ")";
    if (usage_error(st)) EMBER_FAIL(msg);
    abort(msg, false);
  }
  cudaEvent_t done = events_->take();
  const cudaError_t rec = cudaEventRecord(done, stream_.get());
  if (rec != cudaSuccess) {
    events_->give(done);
    EMBER_CUDA_CHECK(rec);
  }
  if (probe) probe->recorded = now_ns();
  return std::make_shared<NcclWork>(this, events_, done, op, label, seq, probe);
}

std::shared_ptr<Work> NcclCommunicator::all_reduce_async(FlatBuffer buf, ReduceOp op,
                                                         const std::string& label) {
  check_buffer("all_reduce", buf);
  check_summable("all_reduce", buf.dtype);
  return enqueue("all_reduce", label, [&](cudaStream_t s) {
    return ncclAllReduce(buf.data, buf.data, static_cast<size_t>(buf.count), nccl_type(buf.dtype),
                         nccl_op(op), comm_, s);
  });
}

std::shared_ptr<Work> NcclCommunicator::broadcast_async(FlatBuffer buf, int root,
                                                        const std::string& label) {
  check_buffer("broadcast", buf);
  EMBER_CHECK(root >= 0 && root < size(), "broadcast: root ", root, " is not a rank of ", size());
  return enqueue("broadcast", label, [&](cudaStream_t s) {
    return ncclBroadcast(buf.data, buf.data, static_cast<size_t>(buf.count), nccl_type(buf.dtype),
                         root, comm_, s);
  });
}

std::shared_ptr<Work> NcclCommunicator::all_gather_async(FlatBuffer in, FlatBuffer out,
                                                         const std::string& label) {
  check_buffer("all_gather", in);
  check_buffer("all_gather", out);
  check_all_gather(in, out);
  // In place (in is this rank's block of out) is NCCL's own in-place form.
  return enqueue("all_gather", label, [&](cudaStream_t s) {
    return ncclAllGather(in.data, out.data, static_cast<size_t>(in.count), nccl_type(in.dtype),
                         comm_, s);
  });
}

std::shared_ptr<Work> NcclCommunicator::reduce_scatter_async(FlatBuffer in, FlatBuffer out,
                                                             ReduceOp op,
                                                             const std::string& label) {
  check_buffer("reduce_scatter", in);
  check_buffer("reduce_scatter", out);
  check_summable("reduce_scatter", in.dtype);
  check_reduce_scatter(in, out);
  return enqueue("reduce_scatter", label, [&](cudaStream_t s) {
    return ncclReduceScatter(in.data, out.data, static_cast<size_t>(out.count), nccl_type(in.dtype),
                             nccl_op(op), comm_, s);
  });
}

std::shared_ptr<Work> NcclCommunicator::all_to_all_async(FlatBuffer in, FlatBuffer out,
                                                         const std::string& label) {
  check_buffer("all_to_all", in);
  check_buffer("all_to_all", out);
  check_all_to_all(in, out);
  const size_t block = static_cast<size_t>(in.count / size());
  const size_t block_bytes = block * element_size(in.dtype);
  return enqueue("all_to_all", label, [&](cudaStream_t s) {
    ncclResult_t st = ncclGroupStart();
    if (st != ncclSuccess) return st;
    ncclResult_t first = ncclSuccess;
    for (int r = 0; r < size() && first == ncclSuccess; ++r) {
      const ncclResult_t a = ncclSend(static_cast<const char*>(in.data) + r * block_bytes, block,
                                      nccl_type(in.dtype), r, comm_, s);
      const ncclResult_t b = ncclRecv(static_cast<char*>(out.data) + r * block_bytes, block,
                                      nccl_type(in.dtype), r, comm_, s);
      first = a != ncclSuccess ? a : b;
    }
    // End the group even after an error, so NCCL's group state is not left open.
    const ncclResult_t end = ncclGroupEnd();
    return first != ncclSuccess ? first : end;
  });
}

std::shared_ptr<Work> NcclCommunicator::barrier_async(const std::string& label) {
  if (!barrier_buffer_.defined()) barrier_buffer_ = zeros({1}, TensorOptions().device(device()));
  auto work = all_reduce_async(FlatBuffer::of(barrier_buffer_), ReduceOp::Sum,
                               label.empty() ? "barrier" : label);
  work->keep_alive(barrier_buffer_);
  return work;
}

void NcclCommunicator::all_reduce_group(const std::vector<NcclCommunicator*>& comms,
                                        const std::vector<FlatBuffer>& bufs, ReduceOp op) {
  EMBER_CHECK(comms.size() == bufs.size(), "all_reduce_group: ", comms.size(),
              " communicators but ", bufs.size(), " buffers");
  for (size_t i = 0; i < comms.size(); ++i) {
    EMBER_CHECK(comms[i]->comm_blocking_ && comms[i]->parent_ == nullptr && !comms[i]->broken(),
                "all_reduce_group: communicator ", i,
                " is not a working one of create_all (one process, every GPU)");
    comms[i]->check_buffer("all_reduce_group", bufs[i]);
    EMBER_CHECK(bufs[i].count == bufs[0].count && bufs[i].dtype == bufs[0].dtype,
                "all_reduce_group: buffer ", i, " holds ", bufs[i].count, " ", bufs[i].dtype,
                ", buffer 0 holds ", bufs[0].count, " ", bufs[0].dtype);
  }
  if (!bufs.empty()) check_summable("all_reduce_group", bufs[0].dtype);
  EMBER_NCCL_CHECK(ncclGroupStart());
  ncclResult_t first_error = ncclSuccess;
  for (size_t i = 0; i < comms.size(); ++i) {
    const int dev = comms[i]->cuda_device_;
    ncclResult_t st = ncclAllReduce(bufs[i].data, bufs[i].data, static_cast<size_t>(bufs[i].count),
                                    nccl_type(bufs[i].dtype), nccl_op(op), comms[i]->comm_,
                                    cuda::current_stream(dev));
    if (st != ncclSuccess && first_error == ncclSuccess) first_error = st;
  }
  // End the group even after an error, so NCCL's group state is not left open.
  ncclResult_t end = ncclGroupEnd();
  EMBER_NCCL_CHECK(first_error);
  EMBER_NCCL_CHECK(end);
}

}  // namespace ember::parallel
