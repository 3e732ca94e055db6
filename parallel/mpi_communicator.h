// MpiCommunicator: the CPU backend. Collectives on host tensors (float32, float64,
// int64; bfloat16 where no sum is needed) over MPI's non-blocking calls, polled with MPI_Test
// against a deadline; on timeout the waiting ranks ask each other where they are, so the error
// names the ranks that did not arrive. Used by the CI tests and by anyone without GPUs.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "parallel/communicator.h"

namespace ember::parallel {

// Calls MPI_Init_thread (MPI_THREAD_SERIALIZED) unless MPI is already initialised;
// MPI_Finalize runs at exit when ember initialised it. Safe to call repeatedly.
void ensure_mpi_initialized();

class MpiCommunicator final : public Communicator {
 public:
  // Duplicates `parent` (a collective call over it): the new communicator's
  // traffic never mixes with the parent's or with other communicators'.
  explicit MpiCommunicator(MPI_Comm parent = MPI_COMM_WORLD, CommOptions options = {});
  ~MpiCommunicator() override;

  const char* backend() const override { return "MPI"; }
  MPI_Comm comm() const { return comm_; }
  // True after a collective timed out: later collectives throw at once.
  bool broken() const override { return !broken_reason_.empty(); }

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

 private:
  friend class MpiWork;
  // Sent as bytes: the collective a rank is waiting in (-1: none) and its name.
  struct Position {
    int64_t seq = -1;
    char what[120] = {};
  };

  // Checks the communicator and the buffer, and numbers the next collective.
  int64_t begin(const char* op, const std::string& label, const FlatBuffer* buf, bool reduce);
  // Waits for `request` until the deadline (serving peers' queries meanwhile).
  void wait(MPI_Request& request, int64_t seq, const char* op, const std::string& label);
  // Answers the "where are you?" queries of ranks that timed out; a query also
  // tells where its sender is, recorded into `seen` (by rank) when given.
  void serve_queries(std::vector<Position>* seen = nullptr);
  [[noreturn]] void fail_timeout(int64_t seq, const char* op, const std::string& label);

  MPI_Comm comm_ = MPI_COMM_NULL;     // the collectives
  MPI_Comm control_ = MPI_COMM_NULL;  // queries and answers after a timeout
  int64_t next_seq_ = 0;
  int64_t waiting_seq_ = -1;  // the collective this rank is waiting in, or -1
  std::string waiting_what_;
  std::string broken_reason_;
  std::vector<MPI_Request> pending_sends_;
  std::vector<std::unique_ptr<Position>> send_buffers_;
};

}  // namespace ember::parallel
