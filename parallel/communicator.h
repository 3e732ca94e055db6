// Communicator: one rank's handle on a group of ranks, and the collectives they run
// together (all_reduce, broadcast, all_gather, reduce_scatter, all_to_all, barrier)
// on tensors or flat buffers. Backends: NcclCommunicator (CUDA), MpiCommunicator
// (CPU). Every collective has a deadline; past it every waiting rank throws
// CollectiveTimeoutError naming the collective.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/base/error.h"
#include "core/tensor.h"

namespace ember::parallel {

enum class ReduceOp { Sum, Average };
const char* reduce_op_name(ReduceOp op);

// Thrown on every rank that waited past the deadline: names the collective, its
// label (e.g. "DDP bucket 2") and, where the backend can tell, the missing ranks.
// The communicator is unusable afterwards (its collectives no longer match).
class CollectiveTimeoutError : public Error {
 public:
  using Error::Error;
};

struct CommOptions {
  std::chrono::milliseconds timeout_{std::chrono::minutes(5)};
  // NCCL only. false (default): collectives go through a blocking NCCL
  // communicator split off the non-blocking one that joined the ranks, so a call
  // costs what torch.distributed's does; the deadline is kept by polling the
  // collective's completion event and aborting. true: every collective goes
  // through the non-blocking communicator, where NCCL starts a host thread per
  // call (measured ~2x slower at 1 MiB; kept for bench_parallel's breakdown).
  // EMBER_NCCL_NONBLOCKING=1 in the environment does the same for every one.
  bool nccl_nonblocking_ = false;
  CommOptions& timeout(std::chrono::milliseconds t) {
    timeout_ = t;
    return *this;
  }
  CommOptions& nccl_nonblocking(bool on) {
    nccl_nonblocking_ = on;
    return *this;
  }
};

// `count` elements of `dtype` at `data` on `device`; the caller keeps it alive
// until the collective's Work has finished.
struct FlatBuffer {
  void* data = nullptr;
  int64_t count = 0;
  DType dtype = kFloat32;
  Device device = kCPU;
  static FlatBuffer of(const Tensor& t);  // checks that t is contiguous
};

// An in-flight collective. wait() returns when it finished (on CUDA: the current
// stream of the calling thread, at the time of wait(), is ordered after it) or
// throws past the deadline, naming the collective.
class Work {
 public:
  virtual ~Work() = default;
  virtual bool poll() = 0;  // true once finished
  virtual void wait() = 0;
  // Tensors that must outlive the collective (held until the Work is destroyed).
  void keep_alive(Tensor t) { keep_alive_.push_back(std::move(t)); }
  // After a timeout the collective may still touch its buffers: keep them for
  // the rest of the process rather than let their memory be reused.
  void abandon_buffers();

 private:
  std::vector<Tensor> keep_alive_;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  Device device() const { return device_; }  // where its buffers must live
  const CommOptions& options() const { return options_; }
  virtual const char* backend() const = 0;
  // True after a collective failed or timed out: later collectives throw at once.
  virtual bool broken() const = 0;

  // --- flat buffers, asynchronous. `label` names the collective in errors.
  virtual std::shared_ptr<Work> all_reduce_async(FlatBuffer buf, ReduceOp op,
                                                 const std::string& label = "") = 0;
  virtual std::shared_ptr<Work> broadcast_async(FlatBuffer buf, int root,
                                                const std::string& label = "") = 0;
  // out.count == in.count * size(); rank r's input lands at out[r * in.count].
  // In place when `in` is that block of `out` (in.data == out.data + rank() * in.count).
  virtual std::shared_ptr<Work> all_gather_async(FlatBuffer in, FlatBuffer out,
                                                 const std::string& label = "") = 0;
  // in.count == out.count * size(); rank r receives the reduction of block r.
  virtual std::shared_ptr<Work> reduce_scatter_async(FlatBuffer in, FlatBuffer out, ReduceOp op,
                                                     const std::string& label = "") = 0;
  // in.count == out.count, a multiple of size(): block k of `in` goes to rank k,
  // block k of `out` comes from rank k. Moves bytes only (any dtype).
  virtual std::shared_ptr<Work> all_to_all_async(FlatBuffer in, FlatBuffer out,
                                                 const std::string& label = "") = 0;
  virtual std::shared_ptr<Work> barrier_async(const std::string& label = "") = 0;

  // --- flat buffers, blocking
  void all_reduce(FlatBuffer buf, ReduceOp op = ReduceOp::Sum);
  void broadcast(FlatBuffer buf, int root = 0);
  void all_gather(FlatBuffer in, FlatBuffer out);
  void reduce_scatter(FlatBuffer in, FlatBuffer out, ReduceOp op = ReduceOp::Sum);
  void all_to_all(FlatBuffer in, FlatBuffer out);
  void barrier();

  // --- tensors (contiguous, on device()), blocking; in place where it makes sense
  void all_reduce(const Tensor& t, ReduceOp op = ReduceOp::Sum);
  std::shared_ptr<Work> all_reduce_async(const Tensor& t, ReduceOp op,
                                         const std::string& label = "");
  void broadcast(const Tensor& t, int root = 0);
  // t: (n, ...) on every rank -> (size() * n, ...), rank order along dim 0.
  Tensor all_gather(const Tensor& t);
  // t: (size() * n, ...) -> (n, ...): this rank's block of the reduction.
  Tensor reduce_scatter(const Tensor& t, ReduceOp op = ReduceOp::Sum);

 protected:
  Communicator(int rank, int size, Device device, CommOptions options)
      : rank_(rank), size_(size), device_(device), options_(options) {}
  // Throws unless `t` can take part in a collective on this communicator.
  void check_tensor(const char* op, const Tensor& t) const;
  // Checks shared by the backends: counts, dtypes, divisibility, naming `op`.
  void check_all_gather(const FlatBuffer& in, const FlatBuffer& out) const;
  void check_reduce_scatter(const FlatBuffer& in, const FlatBuffer& out) const;
  void check_all_to_all(const FlatBuffer& in, const FlatBuffer& out) const;

 private:
  int rank_;
  int size_;
  Device device_;
  CommOptions options_;
};

}  // namespace ember::parallel
