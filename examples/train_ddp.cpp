// train_ddp: one training loop for every scale. Run it as
//   ./train_ddp                       one process (a GPU if present, else the CPU)
//   ember-run --nproc 4 ./train_ddp   one process per GPU on this machine (NCCL)
//   mpirun -np 4 ./train_ddp          one process per rank, across machines (NCCL on
//                                     GPUs, MPI on CPUs)
// Each rank draws its own shard of a synthetic regression (y = sum of x); DDP
// averages the gradients so every rank takes the same step.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "ember.h"
#include "nn/nn.h"
#include "optim/optim.h"
#include "parallel/parallel.h"

using namespace ember;

int main(int argc, char** argv) {
  int steps = 200;
  for (int i = 1; i + 1 < argc; ++i)
    if (!std::strcmp(argv[i], "--steps")) steps = std::atoi(argv[i + 1]);

  parallel::ProcessGroup pg = parallel::init_process_group();
  if (pg.rank == 0)
    std::printf("train_ddp: %d rank(s), %s backend, rank 0 on %s\n", pg.world_size,
                pg.communicator->backend(), pg.device.str().c_str());

  manual_seed(0);  // rank 0's initial weights win anyway: DDP broadcasts them
  auto model = std::make_shared<nn::Sequential>(nn::Linear(16, 64), nn::ReLU(), nn::Linear(64, 1));
  model->to(pg.device);
  parallel::DistributedDataParallel ddp(model, pg.communicator);
  optim::SGD opt(model->parameters(), optim::SGDOptions(0.02).momentum(0.9));

  Generator data(1000 + pg.rank);  // this rank's shard
  double loss_value = 0;
  for (int step = 0; step < steps; ++step) {
    Tensor x = randn({64, 16}, pg.device, &data);
    Tensor y = x.sum(1, true);
    Tensor loss = mse_loss(model->forward(x), y);
    opt.zero_grad();
    loss.backward();  // gradients are averaged over the ranks when this returns
    opt.step();
    loss_value = loss.item();
    if (pg.rank == 0 && step % 50 == 0) std::printf("step %4d  loss %.5f\n", step, loss_value);
  }
  std::string memory = parallel::memory_summary_all_ranks(*pg.communicator, pg.device);
  if (pg.rank == 0) std::printf("final loss %.5f\n%s", loss_value, memory.c_str());
  return loss_value < 1.0 ? 0 : 1;
}
