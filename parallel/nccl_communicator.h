// NcclCommunicator: the CUDA backend, one rank = one GPU. Across processes the
// ranks join through a non-blocking NCCL communicator (ncclCommInitRankConfig,
// blocking = 0), so joining has a deadline; collectives then run on a blocking
// communicator split off it (ncclCommSplit, resources shared), because NCCL
// starts a host thread for every call on a non-blocking one. They run on the
// communicator's own stream, ordered after the caller's current stream by one
// reused event; each records a pooled completion event, which Work::wait polls
// (with ncclCommGetAsyncError) until the deadline, then aborts (ncclCommAbort).
// In one process, create_all() gives one per device (ncclCommInitAll) and
// all_reduce_group() drives them from one thread.
#pragma once

#include <nccl.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cuda/runtime.h"
#include "parallel/communicator.h"

namespace ember::parallel {

// ncclUniqueId as plain bytes, to send through files, sockets or MPI.
struct NcclUniqueId {
  std::array<char, NCCL_UNIQUE_ID_BYTES> bytes{};
  static NcclUniqueId create();  // ncclGetUniqueId: call on one rank, share with the others
};

// The NCCL library this process runs (ncclGetVersion), e.g. "2.28.9"; the
// headers ember was built with may be older or newer.
std::string nccl_runtime_version();

// Host timestamps (steady_clock, ns) of one collective's stages, written when a
// probe is set (set_stage_probe): bench_parallel's breakdown of where the time
// of a small all-reduce goes. Zero where a stage did not happen.
struct NcclStageTimes {
  int64_t begin = 0;          // entering the collective
  int64_t ordered = 0;        // after recording the caller's event and the stream wait
  int64_t nccl_returned = 0;  // ncclAllReduce (etc.) returned
  int64_t nccl_ready = 0;     // non-blocking only: NCCL reported the call taken in
  int64_t recorded = 0;       // completion event recorded: the collective call returns
  int64_t completed = 0;      // wait(): the completion event seen done
  int64_t waited = 0;         // wait(): the caller's stream ordered after it, returning
  int64_t polls = 0;          // wait(): completion queries made
};

class EventPool;

class NcclCommunicator final : public Communicator {
 public:
  // Rank `rank` of `size` on CUDA device `device`; every rank passes the same id.
  NcclCommunicator(const NcclUniqueId& id, int rank, int size, int device,
                   CommOptions options = {});
  // One process driving several GPUs: communicator i is rank i on devices[i].
  static std::vector<std::unique_ptr<NcclCommunicator>> create_all(const std::vector<int>& devices,
                                                                   CommOptions options = {});
  ~NcclCommunicator() override;

  const char* backend() const override { return "NCCL"; }
  ncclComm_t comm() const { return comm_; }  // the one collectives run on
  cudaStream_t stream() const { return stream_.get(); }
  bool broken() const override { return !broken_reason_.empty(); }
  // True when collectives go through a non-blocking NCCL communicator
  // (CommOptions::nccl_nonblocking, or the split failed and ember said so).
  bool nonblocking() const { return !comm_blocking_; }

  std::shared_ptr<Work> all_reduce_async(FlatBuffer buf, ReduceOp op,
                                         const std::string& label = "") override;
  std::shared_ptr<Work> broadcast_async(FlatBuffer buf, int root,
                                        const std::string& label = "") override;
  std::shared_ptr<Work> all_gather_async(FlatBuffer in, FlatBuffer out,
                                         const std::string& label = "") override;
  std::shared_ptr<Work> reduce_scatter_async(FlatBuffer in, FlatBuffer out, ReduceOp op,
                                             const std::string& label = "") override;
  std::shared_ptr<Work> all_to_all_async(FlatBuffer in, FlatBuffer out,
                                         const std::string& label = "") override;
  std::shared_ptr<Work> barrier_async(const std::string& label = "") override;

  // One host thread, several GPUs: all-reduces bufs[i] on comms[i] inside one
  // ncclGroupStart/End, each on the current stream of comms[i]'s device (so it
  // is ordered with the work already queued there). Blocking communicators only.
  static void all_reduce_group(const std::vector<NcclCommunicator*>& comms,
                               const std::vector<FlatBuffer>& bufs, ReduceOp op);

  // While set (not null), every collective writes its stages' timestamps there.
  void set_stage_probe(NcclStageTimes* probe) { probe_ = probe; }

 private:
  friend class NcclWork;
  NcclCommunicator(ncclComm_t comm, int rank, int size, int device, bool blocking,
                   CommOptions options);
  // Runs `call` on stream_ after the caller's current stream; returns its Work.
  template <typename Call>
  std::shared_ptr<Work> enqueue(const char* op, const std::string& label, Call call);
  // Waits until the non-blocking communicator `c` has taken the last call (or
  // init, or split) in, polling its async error; aborts past the deadline.
  void wait_ready(ncclComm_t c, const char* op, const std::string& label, int64_t seq);
  [[noreturn]] void abort(const std::string& reason, bool timeout);
  void check_buffer(const char* op, const FlatBuffer& buf) const;
  // Text naming a collective in errors: "all_reduce 'label' (collective #7)".
  static std::string describe(const char* op, const std::string& label, int64_t seq);

  ncclComm_t parent_ = nullptr;  // non-blocking; joined the ranks (null for create_all's)
  ncclComm_t comm_ = nullptr;    // collectives run here (== parent_ when non-blocking)
  int cuda_device_ = 0;
  bool comm_blocking_ = true;
  cuda::Stream stream_;
  cudaEvent_t ready_ = nullptr;  // recorded on the caller's stream, waited on at once
  std::shared_ptr<EventPool> events_;
  int64_t next_seq_ = 0;
  std::string broken_reason_;
  Tensor barrier_buffer_;  // one float all-reduced by barrier()
  NcclStageTimes* probe_ = nullptr;
};

}  // namespace ember::parallel
