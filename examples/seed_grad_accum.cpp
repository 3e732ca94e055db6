// Seed scenario (d): gradient accumulation. Micro-batches of 8 are accumulated
// 4 at a time (an effective batch of 32): each micro-batch's loss is divided by
// the number of micro-batches in its group, so the summed gradient is the mean
// over the group, and the optimizer steps once per group. A last, short group
// is stepped too, scaled by its own size. Exits 1 unless every epoch took 11
// steps (10 groups of 4, one of 2) and the loss fell every epoch (CTest runs it).
#include <algorithm>
#include <cstdio>
#include <memory>

#include "ember.h"
#include "nn/nn.h"
#include "optim/optim.h"

using namespace ember;

int main() {
  const Device device = cuda::is_available() ? kCUDA : kCPU;
  std::printf("seed_grad_accum: training on %s\n", device.str().c_str());
  manual_seed(0);
  const int accumulation_steps = 4;
  Tensor inputs = randn({336, 10});  // 42 micro-batches: 10 groups of 4, then one of 2
  Tensor targets = matmul(inputs, randn({10, 10}));
  nn::DataLoader loader(nn::TensorDataset(inputs, targets),
                        nn::DataLoaderOptions(8).shuffle(true).device(device));

  auto model = std::make_shared<nn::Linear>(10, 10);
  model->to(device);
  optim::Adam optimizer(model->parameters(), optim::AdamOptions(1e-2));
  nn::MSELoss criterion;

  const int micro_batches = static_cast<int>(loader.size());
  bool wrong = false;
  double previous = 1e300;
  for (int epoch = 1; epoch <= 3; ++epoch) {
    int i = 0, steps = 0;
    double total = 0;
    optimizer.zero_grad();
    for (const nn::Example& batch : loader) {
      const int group_start = i / accumulation_steps * accumulation_steps;
      const int group_size = std::min(accumulation_steps, micro_batches - group_start);
      Tensor loss = criterion.forward(model->forward(batch.data), batch.target);
      (loss / static_cast<double>(group_size)).backward();  // gradients add up in .grad()
      total += loss.item();
      if (++i - group_start == group_size) {  // the group is complete: step
        optimizer.step();
        optimizer.zero_grad();
        ++steps;
      }
    }
    std::printf("epoch %d  mean loss %.5f  %d micro-batches, %d optimizer steps\n", epoch,
                total / micro_batches, micro_batches, steps);
    wrong = wrong || steps != 11 || !(total / micro_batches < previous);
    previous = total / micro_batches;
  }
  std::printf("verdict: %s\n", wrong ? "WRONG: a step count or the loss is off"
                                     : "11 steps per epoch, loss falling");
  return wrong ? 1 : 0;
}
