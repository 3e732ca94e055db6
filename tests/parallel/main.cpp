// The doctest main of tests/parallel, run by CTest under mpirun with 1-3 ranks:
// MPI_Init/Finalize around the run, the "cuda" suite skipped without a GPU (as
// tests/main.cpp), the suite "2+ ranks" skipped with one rank, each skip said
// with its reason. Every rank runs every case; rank 0 prints doctest's report and,
// last, one summary for all ranks ("[ember] test cases over N MPI rank(s): ...", a case
// failed on any rank counted failed), which tools/test_summary.sh counts; the other
// ranks print their failures, prefixed "[rank k]".
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
#include <vector>

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

// Records, in run order, whether each test case that ran failed, and doctest's
// counts, so that main can combine the ranks' results (every rank runs the same
// cases in the same order: the same binary with the same filters).
class RankResults : public doctest::IReporter {
 public:
  explicit RankResults(const doctest::ContextOptions&) {}
  static std::vector<int>& failed() {
    static std::vector<int> f;
    return f;
  }
  static unsigned& total() {
    static unsigned t = 0;
    return t;
  }
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats& st) override { total() = st.numTestCases; }
  void test_case_start(const doctest::TestCaseData&) override {}
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats& st) override {
    failed().push_back(st.testCaseSuccess ? 0 : 1);
  }
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};
REGISTER_LISTENER("ember_rank_results", 1, RankResults);

// Rank 0 prints one line for the whole world: a case counts as failed when it
// failed on any rank (rank 0's own doctest summary sees only rank 0).
void print_world_summary(int rank, int size) {
  std::vector<int>& mine = RankResults::failed();
  int n = static_cast<int>(mine.size()), most = 0;
  MPI_Allreduce(&n, &most, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  mine.resize(static_cast<size_t>(most), 1);  // a rank that ran fewer cases: the rest failed
  std::vector<int> any(static_cast<size_t>(most), 0);
  MPI_Allreduce(mine.data(), any.data(), most, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank != 0) return;
  int failed = 0;
  for (int f : any) failed += f;
  const int skipped = static_cast<int>(RankResults::total()) - most;
  std::printf("[ember] test cases over %d MPI rank(s): %d | %d passed | %d failed | %d skipped\n",
              size, most, most - failed, failed, skipped);
  std::fflush(stdout);
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
  // What cannot run here is filtered out, so doctest counts it as skipped (never
  // as passed), and the reason is printed: the timeout cases need 2+ ranks, the
  // NCCL cases with one rank per process a GPU per rank.
  std::string not_here;
  if (size < 2) {
    context.addFilter("test-suite-exclude", "2+ ranks");
    not_here += "; one rank: test cases in suite '2+ ranks' are skipped";
  }
#ifndef EMBER_HAVE_NCCL
  // DataParallel on GPUs all-reduces through NCCL (the nccl/* cases are not even
  // compiled without it).
  if (have_gpu) {
    context.addFilter("test-case-exclude", "data_parallel/cuda*");
    not_here += "; built without NCCL: data_parallel/cuda is skipped";
  }
#endif
  if (have_gpu && size > gpus) {
    context.addFilter("test-case-exclude", "nccl/communicator*,nccl/ddp*,nccl/zero*,nccl/timeout*");
    not_here += "; " + std::to_string(size) + " ranks but " + std::to_string(gpus) +
                " GPU(s): the one-GPU-per-rank NCCL cases are skipped";
  } else if (have_gpu && size < 2) {
    context.addFilter("test-case-exclude", "nccl/timeout*");
    not_here += "; one rank: nccl/timeout (2+ ranks) is skipped";
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
  print_world_summary(rank, size);
  int worst = 0;
  MPI_Allreduce(&status, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return worst;
}
