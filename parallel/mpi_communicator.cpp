#include "parallel/mpi_communicator.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <thread>

#include "parallel/check.h"

namespace ember::parallel {

namespace {

constexpr int kQueryTag = 1;
constexpr int kAnswerTag = 2;
using Clock = std::chrono::steady_clock;

// bfloat16 travels as 16-bit words and bool as bytes in the collectives that only
// move data; MPI has no bfloat16 sum, and a sum of bools means nothing.
MPI_Datatype mpi_type(DType t, bool reduce = false) {
  switch (t) {
    case DType::Float32:
      return MPI_FLOAT;
    case DType::Float64:
      return MPI_DOUBLE;
    case DType::Int64:
      return MPI_INT64_T;
    case DType::BFloat16:
      EMBER_CHECK(!reduce,
                  "MpiCommunicator: MPI cannot sum bfloat16 (reductions take float32, "
                  "float64 or int64; broadcast, all_gather and all_to_all take bfloat16 too)");
      return MPI_UINT16_T;
    case DType::Bool:
      EMBER_CHECK(!reduce,
                  "MpiCommunicator: bool tensors cannot be summed (cast to int64 to "
                  "count; broadcast, all_gather and all_to_all move bools)");
      return MPI_UINT8_T;
  }
  EMBER_FAIL("MpiCommunicator: unknown dtype");
}

std::string describe(const char* op, const std::string& label, int64_t seq) {
  std::string s = std::string(op);
  if (!label.empty()) s += " '" + label + "'";
  return s + " (collective #" + std::to_string(seq) + ")";
}

// Average = sum, then a division once the sum has arrived.
void divide(FlatBuffer buf, int size) {
  if (buf.dtype == DType::Float32) {
    float* p = static_cast<float*>(buf.data);
    for (int64_t i = 0; i < buf.count; ++i) p[i] /= static_cast<float>(size);
  } else {
    double* p = static_cast<double*>(buf.data);
    for (int64_t i = 0; i < buf.count; ++i) p[i] /= size;
  }
}

}  // namespace

void ensure_mpi_initialized() {
  int initialized = 0;
  EMBER_MPI_CHECK(MPI_Initialized(&initialized));
  if (initialized) return;
  int provided = 0;
  EMBER_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided));
  std::atexit([] {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  });
}

class MpiWork final : public Work {
 public:
  MpiWork(MpiCommunicator* comm, MPI_Request request, int64_t seq, const char* op,
          std::string label, std::optional<FlatBuffer> divide_after)
      : comm_(comm),
        request_(request),
        seq_(seq),
        op_(op),
        label_(std::move(label)),
        divide_after_(divide_after) {}

  bool poll() override {
    if (done_) return true;
    int flag = 0;
    EMBER_MPI_CHECK(MPI_Test(&request_, &flag, MPI_STATUS_IGNORE));
    if (flag)
      finish();
    else
      comm_->serve_queries();
    return done_;
  }

  void wait() override {
    if (done_) return;
    try {
      comm_->wait(request_, seq_, op_, label_);
    } catch (const CollectiveTimeoutError&) {
      abandon_buffers();  // the request stays posted: MPI may still write into them
      throw;
    }
    finish();
  }

 private:
  void finish() {
    done_ = true;
    if (divide_after_) divide(*divide_after_, comm_->size());
  }

  MpiCommunicator* comm_;
  MPI_Request request_;
  int64_t seq_;
  const char* op_;
  std::string label_;
  std::optional<FlatBuffer> divide_after_;
  bool done_ = false;
};

MpiCommunicator::MpiCommunicator(MPI_Comm parent, CommOptions options)
    : Communicator(
          [&] {
            ensure_mpi_initialized();
            int r = 0;
            EMBER_MPI_CHECK(MPI_Comm_rank(parent, &r));
            return r;
          }(),
          [&] {
            int s = 0;
            EMBER_MPI_CHECK(MPI_Comm_size(parent, &s));
            return s;
          }(),
          kCPU, options) {
  EMBER_CHECK(options.timeout_.count() > 0, "MpiCommunicator: timeout must be positive, got ",
              options.timeout_.count(), " ms");
  EMBER_MPI_CHECK(MPI_Comm_dup(parent, &comm_));
  EMBER_MPI_CHECK(MPI_Comm_dup(parent, &control_));
  // Errors come back as codes (and become ember::Error) instead of aborting the job.
  EMBER_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
  EMBER_MPI_CHECK(MPI_Comm_set_errhandler(control_, MPI_ERRORS_RETURN));
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  for (MPI_Request& r : pending_sends_) {
    int flag = 0;
    MPI_Test(&r, &flag, MPI_STATUS_IGNORE);
    if (!flag) MPI_Request_free(&r);
  }
  if (broken()) {
    // Collectives that never matched are still posted on comm_: leave both
    // communicators (and the answer buffers) to the end of the process. The
    // buffers stay reachable from here (not leaked: LeakSanitizer checks).
    static std::mutex keep_mutex;
    static auto* keep = new std::vector<std::unique_ptr<Position>>();
    std::lock_guard lock(keep_mutex);
    for (auto& b : send_buffers_) keep->push_back(std::move(b));
    return;
  }
  EMBER_MPI_CHECK_NOTHROW(MPI_Comm_free(&control_));
  EMBER_MPI_CHECK_NOTHROW(MPI_Comm_free(&comm_));
}

int64_t MpiCommunicator::begin(const char* op, const std::string& label, const FlatBuffer* buf,
                               bool reduce) {
  EMBER_CHECK(!broken(), "MpiCommunicator: ", op, (label.empty() ? "" : " '" + label + "'"),
              " on a communicator that is unusable since ", broken_reason_);
  if (buf) {
    EMBER_CHECK(buf->device.is_cpu(), "MpiCommunicator: ", op, " needs CPU buffers, got one on ",
                buf->device);
    (void)mpi_type(buf->dtype, reduce);
    EMBER_CHECK(buf->count >= 0 && buf->count <= INT32_MAX, "MpiCommunicator: ", op, " of ",
                buf->count, " elements (MPI counts are int)");
    EMBER_CHECK(!reduce || buf->data != nullptr || buf->count == 0, "MpiCommunicator: ", op,
                ": null buffer");
  }
  return next_seq_++;
}

std::shared_ptr<Work> MpiCommunicator::all_reduce_async(FlatBuffer buf, ReduceOp op,
                                                        const std::string& label) {
  int64_t seq = begin("all_reduce", label, &buf, true);
  EMBER_CHECK(op == ReduceOp::Sum || buf.dtype != DType::Int64,
              "MpiCommunicator: all_reduce average needs a floating dtype, got ", buf.dtype);
  MPI_Request req;
  EMBER_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buf.data, static_cast<int>(buf.count),
                                 mpi_type(buf.dtype), MPI_SUM, comm_, &req));
  std::optional<FlatBuffer> after;
  if (op == ReduceOp::Average) after = buf;
  return std::make_shared<MpiWork>(this, req, seq, "all_reduce", label, after);
}

std::shared_ptr<Work> MpiCommunicator::broadcast_async(FlatBuffer buf, int root,
                                                       const std::string& label) {
  int64_t seq = begin("broadcast", label, &buf, false);
  EMBER_CHECK(root >= 0 && root < size(), "broadcast: root ", root, " is not a rank of ", size());
  MPI_Request req;
  EMBER_MPI_CHECK(
      MPI_Ibcast(buf.data, static_cast<int>(buf.count), mpi_type(buf.dtype), root, comm_, &req));
  return std::make_shared<MpiWork>(this, req, seq, "broadcast", label, std::nullopt);
}

std::shared_ptr<Work> MpiCommunicator::all_gather_async(FlatBuffer in, FlatBuffer out,
                                                        const std::string& label) {
  int64_t seq = begin("all_gather", label, &in, false);
  check_all_gather(in, out);
  EMBER_CHECK(out.count <= INT32_MAX, "MpiCommunicator: all_gather of ", out.count,
              " elements (MPI counts are int)");
  // In place: this rank's block of `out` already holds its input.
  const bool in_place =
      in.count > 0 && static_cast<char*>(in.data) ==
                          static_cast<char*>(out.data) +
                              rank() * in.count * static_cast<int64_t>(element_size(in.dtype));
  MPI_Request req;
  EMBER_MPI_CHECK(MPI_Iallgather(in_place ? MPI_IN_PLACE : in.data, static_cast<int>(in.count),
                                 mpi_type(in.dtype), out.data, static_cast<int>(in.count),
                                 mpi_type(in.dtype), comm_, &req));
  return std::make_shared<MpiWork>(this, req, seq, "all_gather", label, std::nullopt);
}

std::shared_ptr<Work> MpiCommunicator::reduce_scatter_async(FlatBuffer in, FlatBuffer out,
                                                            ReduceOp op, const std::string& label) {
  int64_t seq = begin("reduce_scatter", label, &in, true);
  check_reduce_scatter(in, out);
  EMBER_CHECK(op == ReduceOp::Sum || in.dtype != DType::Int64,
              "MpiCommunicator: reduce_scatter average needs a floating dtype, got ", in.dtype);
  MPI_Request req;
  EMBER_MPI_CHECK(MPI_Ireduce_scatter_block(in.data, out.data, static_cast<int>(out.count),
                                            mpi_type(in.dtype), MPI_SUM, comm_, &req));
  std::optional<FlatBuffer> after;
  if (op == ReduceOp::Average) after = out;
  return std::make_shared<MpiWork>(this, req, seq, "reduce_scatter", label, after);
}

std::shared_ptr<Work> MpiCommunicator::all_to_all_async(FlatBuffer in, FlatBuffer out,
                                                        const std::string& label) {
  int64_t seq = begin("all_to_all", label, &in, false);
  check_all_to_all(in, out);
  const int block = static_cast<int>(in.count / size());
  MPI_Request req;
  EMBER_MPI_CHECK(MPI_Ialltoall(in.data, block, mpi_type(in.dtype), out.data, block,
                                mpi_type(in.dtype), comm_, &req));
  return std::make_shared<MpiWork>(this, req, seq, "all_to_all", label, std::nullopt);
}

std::shared_ptr<Work> MpiCommunicator::barrier_async(const std::string& label) {
  int64_t seq = begin("barrier", label, nullptr, false);
  MPI_Request req;
  EMBER_MPI_CHECK(MPI_Ibarrier(comm_, &req));
  return std::make_shared<MpiWork>(this, req, seq, "barrier", label, std::nullopt);
}

void MpiCommunicator::wait(MPI_Request& request, int64_t seq, const char* op,
                           const std::string& label) {
  waiting_seq_ = seq;
  waiting_what_ = describe(op, label, seq);
  const auto deadline = Clock::now() + options().timeout_;
  for (int spins = 0;; ++spins) {
    int flag = 0;
    EMBER_MPI_CHECK(MPI_Test(&request, &flag, MPI_STATUS_IGNORE));
    if (flag) break;
    serve_queries();
    if (Clock::now() >= deadline) fail_timeout(seq, op, label);
    // Spin briefly (MPI progresses inside MPI_Test), then stop hogging a shared core.
    if (spins > 200) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  waiting_seq_ = -1;
}

void MpiCommunicator::serve_queries(std::vector<Position>* seen) {
  for (;;) {
    int flag = 0;
    MPI_Status status;
    EMBER_MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, kQueryTag, control_, &flag, &status));
    if (!flag) return;
    Position query;
    EMBER_MPI_CHECK(MPI_Recv(&query, sizeof(Position), MPI_BYTE, status.MPI_SOURCE, kQueryTag,
                             control_, MPI_STATUS_IGNORE));
    if (seen) (*seen)[status.MPI_SOURCE] = query;
    auto answer = std::make_unique<Position>();
    answer->seq = waiting_seq_;
    std::strncpy(answer->what, waiting_what_.c_str(), sizeof(answer->what) - 1);
    MPI_Request req;
    EMBER_MPI_CHECK(MPI_Isend(answer.get(), sizeof(Position), MPI_BYTE, status.MPI_SOURCE,
                              kAnswerTag, control_, &req));
    pending_sends_.push_back(req);
    send_buffers_.push_back(std::move(answer));
  }
}

void MpiCommunicator::fail_timeout(int64_t seq, const char* op, const std::string& label) {
  const std::string what = describe(op, label, seq);
  // Ask every other rank where it is. Ranks waiting in a collective answer from
  // their wait loop; a rank that never arrived (hung, gone, or skipping this
  // collective) stays silent.
  auto query = std::make_unique<Position>();
  query->seq = seq;
  std::strncpy(query->what, what.c_str(), sizeof(query->what) - 1);
  for (int r = 0; r < size(); ++r) {
    if (r == rank()) continue;
    MPI_Request req;
    EMBER_MPI_CHECK(
        MPI_Isend(query.get(), sizeof(Position), MPI_BYTE, r, kQueryTag, control_, &req));
    pending_sends_.push_back(req);
  }
  send_buffers_.push_back(std::move(query));

  std::vector<Position> answers(size());  // seq -1: no word from that rank
  const auto grace = std::clamp<std::chrono::milliseconds>(
      options().timeout_ / 2, std::chrono::milliseconds(200), std::chrono::milliseconds(2000));
  const auto grace_end = Clock::now() + grace;
  while (Clock::now() < grace_end) {
    serve_queries(&answers);
    int flag = 0;
    MPI_Status status;
    EMBER_MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, kAnswerTag, control_, &flag, &status));
    if (flag) {
      Position answer;
      EMBER_MPI_CHECK(MPI_Recv(&answer, sizeof(Position), MPI_BYTE, status.MPI_SOURCE, kAnswerTag,
                               control_, MPI_STATUS_IGNORE));
      answers[status.MPI_SOURCE] = answer;
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  std::string missing, with_us;
  for (int r = 0; r < size(); ++r) {
    if (r == rank()) continue;
    const Position& a = answers[r];
    if (a.seq >= seq) {
      with_us += (with_us.empty() ? "" : ", ") + std::to_string(r);
    } else {
      missing += (missing.empty() ? "" : "; ") + std::string("rank ") + std::to_string(r);
      missing += a.seq >= 0 ? std::string(" (waiting in ") + a.what + ")"
                            : std::string(" (no answer: not inside a collective)");
    }
  }
  std::string msg = "MPI " + what + " timed out after " +
                    std::to_string(options().timeout_.count()) + " ms on rank " +
                    std::to_string(rank()) + " of " + std::to_string(size()) +
                    "; ranks that did not arrive: " + (missing.empty() ? "unknown" : missing) +
                    "; waiting with this rank: " + (with_us.empty() ? "none" : with_us);
  broken_reason_ = msg;
  waiting_seq_ = -1;
  throw CollectiveTimeoutError(msg);
}

}  // namespace ember::parallel
