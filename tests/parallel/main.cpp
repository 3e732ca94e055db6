// The doctest main of tests/parallel, run by CTest under mpirun with 1-3 ranks:
// MPI_Init/Finalize around the run, the "cuda" suite skipped without a GPU (as
// tests/main.cpp), and only rank 0 printing doctest's summary (other ranks print
// their failures, prefixed, so tools/test_summary.sh counts each test case once).
// `--launcher-probe` instead checks the environment ember-run gives its children;
// `--rank-killed-probe [ddp|zero-rs|zero-ag]` kills a rank mid-run under ember-run
// (rank_killed.cpp).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <mpi.h>

#include <cstdio>
#include <cstring>
#include <iostream>
#include <sstream>
#include <string>

#include "cuda/runtime.h"
#include "parallel/process_group.h"

namespace ember::parallel::testing {
int rank_killed_probe(const std::string& mode);  // rank_killed.cpp
}

namespace {

int launcher_probe() {
  try {
    ember::parallel::LaunchEnv env = ember::parallel::launch_env();
    if (!env.from_launcher || env.world_size < 1 || env.rank < 0 || env.rank >= env.world_size) {
      std::fprintf(stderr, "launcher probe: bad RANK/WORLD_SIZE\n");
      return 1;
    }
    const char* nvls = std::getenv("NCCL_NVLS_ENABLE");
    if (!nvls || std::string(nvls) != "0" || !std::getenv("MASTER_ADDR") ||
        !std::getenv("MASTER_PORT")) {
      std::fprintf(stderr, "launcher probe: NCCL_NVLS_ENABLE/MASTER_ADDR/MASTER_PORT unset\n");
      return 1;
    }
    // The same bytes reach every rank through the rendezvous folder.
    std::string mine = env.rank == 0 ? "ember-" + std::to_string(getppid()) : "";
    std::string shared = ember::parallel::detail::share_via_rendezvous("probe", mine, env);
    if (shared != "ember-" + std::to_string(getppid())) {
      std::fprintf(stderr, "launcher probe: rank %d read '%s'\n", env.rank, shared.c_str());
      return 1;
    }
    std::printf("launcher probe: rank %d of %d ok\n", env.rank, env.world_size);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "launcher probe: %s\n", e.what());
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--launcher-probe") == 0) return launcher_probe();
  if (argc > 1 && std::strcmp(argv[1], "--rank-killed-probe") == 0)
    return ember::parallel::testing::rank_killed_probe(argc > 2 ? argv[2] : "ddp");
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);

  doctest::Context context;
  const int gpus = ember::cuda::device_count();
  const bool have_gpu = gpus > 0;
  if (!have_gpu) context.addFilter("test-suite-exclude", "cuda");
  // The NCCL cases with one rank per process need a GPU per rank, and the
  // timeout case 2+ ranks: where they cannot run they are filtered out here, so
  // doctest counts them as skipped (never as passed).
  std::string not_here;
  if (have_gpu && size > gpus) {
    context.addFilter("test-case-exclude", "nccl/communicator*,nccl/ddp*,nccl/zero*,nccl/timeout*");
    not_here = "; " + std::to_string(size) + " ranks but " + std::to_string(gpus) +
               " GPU(s): the one-GPU-per-rank NCCL cases are skipped";
  } else if (have_gpu && size < 2) {
    context.addFilter("test-case-exclude", "nccl/timeout*");
    not_here = "; one rank: nccl/timeout (2+ ranks) is skipped";
  }
  std::ostringstream captured;
  if (rank == 0) {
    std::printf("ember parallel tests: %d MPI rank(s)%s%s\n", size,
                have_gpu ? "" : "; no CUDA device, test cases in suite 'cuda' are skipped",
                not_here.c_str());
  } else {
    context.setOption("minimal", true);
    context.setCout(&captured);
  }
  context.applyCommandLine(argc, argv);
  int status = context.run();
  if (rank != 0 && status != 0) {
    std::istringstream lines(captured.str());
    for (std::string line; std::getline(lines, line);)
      std::cout << "[rank " << rank << "] " << line << "\n";
    std::cout.flush();
  }
  int worst = 0;
  MPI_Allreduce(&status, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return worst;
}
