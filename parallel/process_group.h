// Starting a job: init_process_group() works out this process's rank, the world
// size and its device from whoever launched it (ember-run, torchrun-style RANK/
// WORLD_SIZE, mpirun, srun) and builds the communicator: NCCL (the unique id
// shared through ember-run's rendezvous folder, or MPI_Bcast under MPI) on GPUs,
// MPI on CPUs.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "parallel/communicator.h"

namespace ember::parallel {

// What the environment says about this process.
struct LaunchEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;    // ranks on this machine
  bool from_launcher = false;  // RANK and WORLD_SIZE set (ember-run, torchrun)
  bool from_mpi = false;       // OMPI_COMM_WORLD_*, PMI_*, or SLURM_* set
  std::string rendezvous_dir;  // EMBER_RENDEZVOUS_DIR (ember-run)
};
// Reads RANK/WORLD_SIZE/LOCAL_RANK, else OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK,
// else PMI_RANK/PMI_SIZE, else SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID; else a
// single process (local sizes from LOCAL_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_SIZE,
// MPI_LOCALNRANKS or SLURM_NTASKS_PER_NODE). Throws naming a malformed variable.
LaunchEnv launch_env();

enum class Backend { Auto, Nccl, Mpi };

struct ProcessGroupOptions {
  // Auto: NCCL when built in and this machine has a GPU for each of its ranks
  // (NCCL refuses two ranks on one GPU), else MPI on the CPU.
  Backend backend_ = Backend::Auto;
  CommOptions comm_;
  ProcessGroupOptions& backend(Backend b) {
    backend_ = b;
    return *this;
  }
  ProcessGroupOptions& comm(CommOptions c) {
    comm_ = c;
    return *this;
  }
};

struct ProcessGroup {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  Device device = kCPU;  // cuda:(local_rank % GPUs) on the NCCL backend
  std::shared_ptr<Communicator> communicator;
};

// Sets this thread's CUDA device on the NCCL backend. Throws ember::Error saying
// what is missing (no MPI launch for the MPI backend, no NCCL built in, ...).
ProcessGroup init_process_group(ProcessGroupOptions options = {});

namespace detail {
// Rank 0's `value` on every rank, through a file in env.rendezvous_dir (written
// atomically by rank 0, polled by the others until `timeout`).
std::string share_via_rendezvous(const std::string& key, const std::string& value,
                                 const LaunchEnv& env,
                                 std::chrono::milliseconds timeout = std::chrono::seconds(120));
}  // namespace detail

}  // namespace ember::parallel
