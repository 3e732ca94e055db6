// `ember_tests_parallel --rank-killed-probe [ddp|zero-rs|zero-ag]`, run under
// ember-run with one process per GPU (2+ GPUs): training over NCCL in which the
// last rank SIGKILLs itself at step 5: between two steps (ddp: the others hang in
// DDP's all-reduce), before its backward under ZeRO-1 (zero-rs: the others hang in
// the reduce-scatter) or after it (zero-ag: in the parameters' all-gather). Every
// other rank must fail with an error naming that collective within the timeout
// (3 s) plus slack, not hang. Each survivor prints "rank-killed probe: rank R:
// failed in time" and exits 0; ember-run's own status is the killed rank's (137),
// so CTest and tools/gpu_parallel.sh judge by those lines. With fewer than 2 GPUs
// it prints "skipped" and exits 0. (Under mpirun the same death makes mpirun end
// the job, so this cannot be a doctest case.)
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "cuda/runtime.h"
#include "parallel/process_group.h"
#ifdef EMBER_HAVE_NCCL
#include <algorithm>
#include <chrono>
#include <memory>

#include "core/ops.h"
#include "nn/activation.h"
#include "nn/linear.h"
#include "nn/sequential.h"
#include "optim/adam.h"
#include "optim/sgd.h"
#include "parallel/distributed.h"
#include "parallel/nccl_communicator.h"
#include "parallel/zero.h"
#endif

namespace ember::parallel::testing {

int rank_killed_probe(const std::string& mode) {
  const LaunchEnv env = launch_env();
  const int gpus = cuda::device_count();
#ifdef EMBER_HAVE_NCCL
  const bool can_run = env.from_launcher && env.world_size >= 2 && gpus >= env.world_size;
#else
  const bool can_run = false;
#endif
  const char* expect = mode == "ddp"       ? "all_reduce 'DDP bucket"
                       : mode == "zero-rs" ? "reduce_scatter 'DDP bucket"
                       : mode == "zero-ag" ? "all_gather 'ZeRO bucket"
                                           : nullptr;
  if (!expect) {
    std::printf("rank-killed probe: setup failed: unknown mode '%s' (ddp, zero-rs, zero-ag)\n",
                mode.c_str());
    return 1;
  }
  if (!can_run) {
    if (env.rank == 0)
      std::printf(
          "rank-killed probe: skipped: needs ember-run --nproc 2+ and one GPU per rank "
          "with NCCL (%d rank(s), %d GPU(s))\n",
          env.world_size, gpus);
    return 0;
  }
#ifdef EMBER_HAVE_NCCL
  using Clock = std::chrono::steady_clock;
  const auto timeout = std::chrono::milliseconds(3000);
  try {
    // A world with a patient deadline (cold CUDA and NCCL start-up), then, with
    // every rank warm and past a barrier, the communicator under test with a
    // short one (its deadline bounds its own set-up too).
    ProcessGroup pg =
        init_process_group(ProcessGroupOptions()
                               .backend(Backend::Nccl)
                               .comm(CommOptions().timeout(std::chrono::seconds(60))));
    pg.communicator->barrier();
    NcclUniqueId id;
    std::string mine;
    if (pg.rank == 0) {
      id = NcclUniqueId::create();
      mine.assign(id.bytes.begin(), id.bytes.end());
    }
    const std::string shared = detail::share_via_rendezvous("rank_killed_id", mine, env);
    std::copy(shared.begin(), shared.end(), id.bytes.begin());
    auto comm = std::make_shared<NcclCommunicator>(id, pg.rank, pg.world_size, pg.device.index,
                                                   CommOptions().timeout(timeout));
    manual_seed(0);
    auto model =
        std::make_shared<nn::Sequential>(nn::Linear(64, 256), nn::ReLU(), nn::Linear(256, 8));
    model->to(pg.device);
    DistributedDataParallel ddp(model, comm, DdpOptions().first_bucket_bytes(4096));
    optim::SGD opt(model->parameters(), optim::SGDOptions(0.01));
    std::unique_ptr<ZeroRedundancyOptimizer> zero;
    if (mode != "ddp")
      zero = std::make_unique<ZeroRedundancyOptimizer>(ddp, [](std::vector<Tensor> p) {
        return std::make_unique<optim::Adam>(p, optim::AdamOptions(1e-3));
      });
    const int victim = pg.world_size - 1;
    auto die = [&](int step) {
      std::printf("rank-killed probe: rank %d: SIGKILL at step %d (%s)\n", pg.rank, step,
                  mode.c_str());
      std::fflush(stdout);
      std::raise(SIGKILL);
    };
    for (int step = 0; step < 100; ++step) {
      const bool dies = pg.rank == victim && step == 5;
      if (dies && mode != "zero-ag") die(step);
      const auto start = Clock::now();
      try {
        Tensor x = randn({32, 64}, pg.device), y = randn({32, 8}, pg.device);
        if (zero)
          zero->zero_grad();
        else
          opt.zero_grad();
        mse_loss(model->forward(x), y).backward();
        if (dies) {
          cuda::synchronize(pg.device.index);  // its reduce-scatters done, then gone
          die(step);
        }
        if (zero)
          zero->step();
        else
          opt.step();
        cuda::synchronize(pg.device.index);
      } catch (const Error& e) {
        const double s = std::chrono::duration<double>(Clock::now() - start).count();
        const bool in_time = s < 3.0 + 4.0;  // the timeout, plus slack for the abort
        const bool named = std::string(e.what()).find(expect) != std::string::npos;
        std::printf("rank-killed probe: rank %d: %s: error at step %d after %.2f s: %s\n", pg.rank,
                    !named    ? "wrong collective named"
                    : in_time ? "failed in time"
                              : "too late",
                    step, s, e.what());
        std::fflush(stdout);
        // Done: skip the teardown, where the world communicator (its peer gone)
        // would wait out its own 60 s deadline before ember-run stops us anyway.
        std::_Exit(in_time && named ? 0 : 1);
      }
    }
    std::printf("rank-killed probe: rank %d: no error after rank %d was killed\n", pg.rank, victim);
    return 1;
  } catch (const std::exception& e) {
    std::printf("rank-killed probe: rank %d: setup failed: %s\n", env.rank, e.what());
    return 1;
  }
#else
  return 0;
#endif
}

}  // namespace ember::parallel::testing
