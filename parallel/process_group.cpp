#include "parallel/process_group.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "cuda/runtime.h"
#include "parallel/check.h"
#include "parallel/mpi_communicator.h"
#ifdef EMBER_HAVE_NCCL
#include "parallel/nccl_communicator.h"
#endif

namespace ember::parallel {

namespace {

// The integer in environment variable `name`, or `fallback` when unset.
int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  EMBER_CHECK(*end == '\0' && x >= 0 && x < (1 << 30), "init_process_group: environment variable ",
              name, "='", v, "' is not a non-negative integer");
  return static_cast<int>(x);
}

bool env_set(const char* name) {
  return std::getenv(name) != nullptr;
}

}  // namespace

LaunchEnv launch_env() {
  LaunchEnv env;
  struct Source {
    const char *rank, *size, *local_rank, *local_size;
    bool mpi;
  };
  const Source sources[] = {
      {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", false},
      {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
       "OMPI_COMM_WORLD_LOCAL_SIZE", true},
      {"PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", true},
      {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE", true},
  };
  for (const Source& s : sources) {
    if (!env_set(s.rank) || !env_set(s.size)) continue;
    env.rank = env_int(s.rank, 0);
    env.world_size = env_int(s.size, 1);
    env.local_rank = env_int(s.local_rank, env.rank);
    env.local_world_size = env_int(s.local_size, env.world_size);
    env.from_launcher = !s.mpi;
    env.from_mpi = s.mpi;
    EMBER_CHECK(env.world_size >= 1 && env.rank < env.world_size, "init_process_group: ", s.rank,
                "=", env.rank, " is not below ", s.size, "=", env.world_size);
    break;
  }
  if (const char* dir = std::getenv("EMBER_RENDEZVOUS_DIR")) env.rendezvous_dir = dir;
  return env;
}

namespace detail {

std::string share_via_rendezvous(const std::string& key, const std::string& value,
                                 const LaunchEnv& env, std::chrono::milliseconds timeout) {
  namespace fs = std::filesystem;
  EMBER_CHECK(!env.rendezvous_dir.empty(),
              "rendezvous: EMBER_RENDEZVOUS_DIR is not set; start "
              "the job with ember-run (or under mpirun/srun)");
  const fs::path path = fs::path(env.rendezvous_dir) / key;
  if (env.rank == 0) {
    // Write then rename, so a reader never sees half a file.
    const fs::path tmp = path.string() + ".tmp";
    {
      std::ofstream out(tmp, std::ios::binary);
      out.write(value.data(), static_cast<std::streamsize>(value.size()));
      EMBER_CHECK(out.good(), "rendezvous: cannot write ", tmp.string());
    }
    fs::rename(tmp, path);
    return value;
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!fs::exists(path)) {
    EMBER_CHECK(std::chrono::steady_clock::now() < deadline, "rendezvous: rank ", env.rank,
                " waited ", timeout.count(), " ms for rank 0 to write ", path.string(),
                "; did rank 0 start?");
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace detail

ProcessGroup init_process_group(ProcessGroupOptions options) {
  const LaunchEnv env = launch_env();
  ProcessGroup pg;
  pg.rank = env.rank;
  pg.world_size = env.world_size;
  pg.local_rank = env.local_rank;
  Backend backend = options.backend_;
  const int gpus = cuda::device_count();
  (void)gpus;  // unused when built without NCCL
  if (backend == Backend::Auto) {
#ifdef EMBER_HAVE_NCCL
    // Every rank reads the same variables, so all choose the same backend.
    backend = gpus > 0 && env.local_world_size <= gpus ? Backend::Nccl : Backend::Mpi;
    if (gpus > 0 && backend == Backend::Mpi && env.rank == 0)
      std::fprintf(stderr,
                   "ember: %d ranks per machine but %d GPU(s): using the MPI backend "
                   "on the CPU (NCCL needs one GPU per rank)\n",
                   env.local_world_size, gpus);
#else
    backend = Backend::Mpi;
#endif
  }

  if (backend == Backend::Mpi) {
    EMBER_CHECK(env.from_mpi || env.world_size == 1,
                "init_process_group: the MPI backend needs "
                "the processes started by mpirun or srun (ember-run starts GPU jobs only); "
                "WORLD_SIZE=",
                env.world_size, " came from another launcher");
    ensure_mpi_initialized();
    pg.communicator = std::make_shared<MpiCommunicator>(MPI_COMM_WORLD, options.comm_);
    pg.rank = pg.communicator->rank();
    pg.world_size = pg.communicator->size();
    return pg;
  }

#ifdef EMBER_HAVE_NCCL
  EMBER_CHECK(gpus > 0, "init_process_group: the NCCL backend needs a CUDA device, found none");
  EMBER_CHECK(env.local_world_size <= gpus,
              "init_process_group: the NCCL backend needs one GPU "
              "per rank, but this machine runs ",
              env.local_world_size, " ranks on ", gpus, " GPU(s)");
  const int device = env.local_rank % gpus;
  cuda::set_device(device);
  pg.device = Device::cuda(device);
  NcclUniqueId id;
  if (env.from_mpi) {
    // Across machines: the id travels over MPI, which mpirun/srun already wired up.
    ensure_mpi_initialized();
    if (env.rank == 0) id = NcclUniqueId::create();
    EMBER_MPI_CHECK(
        MPI_Bcast(id.bytes.data(), static_cast<int>(id.bytes.size()), MPI_BYTE, 0, MPI_COMM_WORLD));
  } else if (env.world_size > 1) {
    std::string mine;
    if (env.rank == 0) {
      id = NcclUniqueId::create();
      mine.assign(id.bytes.begin(), id.bytes.end());
    }
    std::string shared = detail::share_via_rendezvous("nccl_unique_id", mine, env);
    EMBER_CHECK(shared.size() == id.bytes.size(), "init_process_group: the NCCL id read from ",
                env.rendezvous_dir, " has ", shared.size(), " bytes, expected ", id.bytes.size());
    std::copy(shared.begin(), shared.end(), id.bytes.begin());
  } else {
    id = NcclUniqueId::create();
  }
  pg.communicator =
      std::make_shared<NcclCommunicator>(id, env.rank, env.world_size, device, options.comm_);
  return pg;
#else
  EMBER_FAIL(
      "init_process_group: the NCCL backend was asked for, but ember was built without "
      "NCCL (CMake did not find nccl.h and libnccl)");
#endif
}

}  // namespace ember::parallel
