// NcclCommunicator: the CUDA backend, one rank = one GPU. Across processes it is
// a non-blocking NCCL communicator (ncclCommInitRankConfig, blocking = 0) whose
// collectives run on its own stream, ordered after the caller's current stream by
// events, and are polled (ncclCommGetAsyncError) until the deadline, then aborted
// (ncclCommAbort). In one process, create_all() gives one per device
// (ncclCommInitAll) and all_reduce_group() drives them from one thread.
#pragma once

#include <nccl.h>

#include <array>
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
  ncclComm_t comm() const { return comm_; }
  cudaStream_t stream() const { return stream_.get(); }
  bool broken() const { return !broken_reason_.empty(); }

  std::shared_ptr<Work> all_reduce_async(FlatBuffer buf, ReduceOp op,
                                         const std::string& label = "") override;
  std::shared_ptr<Work> broadcast_async(FlatBuffer buf, int root,
                                        const std::string& label = "") override;
  std::shared_ptr<Work> all_gather_async(FlatBuffer in, FlatBuffer out,
                                         const std::string& label = "") override;
  std::shared_ptr<Work> reduce_scatter_async(FlatBuffer in, FlatBuffer out, ReduceOp op,
                                             const std::string& label = "") override;
  std::shared_ptr<Work> barrier_async(const std::string& label = "") override;

  // One host thread, several GPUs: all-reduces bufs[i] on comms[i] inside one
  // ncclGroupStart/End, each on the current stream of comms[i]'s device (so it
  // is ordered with the work already queued there). Blocking communicators only.
  static void all_reduce_group(const std::vector<NcclCommunicator*>& comms,
                               const std::vector<FlatBuffer>& bufs, ReduceOp op);

 private:
  friend class NcclWork;
  NcclCommunicator(ncclComm_t comm, int rank, int size, int device, bool blocking,
                   CommOptions options);
  // Runs `call` on stream_ after the caller's current stream; returns its Work.
  template <typename Call>
  std::shared_ptr<Work> enqueue(const char* op, const std::string& label, Call call);
  // Non-blocking communicators: waits until NCCL has taken the last call (or
  // init) in, polling its async error; aborts past the deadline.
  void wait_ready(const std::string& what);
  [[noreturn]] void abort(const std::string& reason, bool timeout);
  void check_buffer(const char* op, const FlatBuffer& buf) const;

  ncclComm_t comm_ = nullptr;
  int cuda_device_ = 0;
  bool blocking_ = true;
  cuda::Stream stream_;
  int64_t next_seq_ = 0;
  std::string broken_reason_;
  Tensor barrier_buffer_;  // one float all-reduced by barrier()
};

}  // namespace ember::parallel
