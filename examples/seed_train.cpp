// Seed scenario (a): the SimpleModel, one Linear(10, 10), trained with Adam and
// MSELoss on batches of 32, 3 epochs of 10 batches, printing the loss and the
// allocator's memory summary after each epoch. `make demo` runs this. Exits 1
// unless the loss fell every epoch and allocated memory stayed flat after the
// first (CTest runs it).
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <vector>

#include "core/memory.h"
#include "ember.h"
#include "nn/nn.h"
#include "optim/optim.h"

using namespace ember;

struct SimpleModel : nn::Module {
  SimpleModel() { fc = register_module("fc", std::make_shared<nn::Linear>(10, 10)); }
  Tensor forward(const Tensor& x) { return fc->forward(x); }
  std::shared_ptr<nn::Linear> fc;
};

int main() {
  const Device device = cuda::is_available() ? kCUDA : kCPU;
  std::printf("seed_train: training on %s\n", device.str().c_str());
  manual_seed(0);

  // 320 examples of a fixed random linear map plus noise: 10 batches of 32.
  Tensor inputs = randn({320, 10});
  Tensor targets = matmul(inputs, randn({10, 10})) + 0.1 * randn({320, 10});
  nn::DataLoader loader(nn::TensorDataset(inputs, targets),
                        nn::DataLoaderOptions(32).shuffle(true).device(device));

  auto model = std::make_shared<SimpleModel>();
  model->to(device);
  std::printf("%s\n", model->str().c_str());
  optim::Adam optimizer(model->parameters(), optim::AdamOptions(1e-2));
  nn::MSELoss criterion;

  const bool progress = isatty(fileno(stdout));  // a live batch counter on terminals
  std::vector<double> losses;
  std::vector<int64_t> allocated;
  for (int epoch = 1; epoch <= 3; ++epoch) {
    double total = 0;
    int batch_index = 0;
    for (const nn::Example& batch : loader) {
      optimizer.zero_grad();
      Tensor loss = criterion.forward(model->forward(batch.data), batch.target);
      loss.backward();
      optimizer.step();
      total += loss.item();
      ++batch_index;
      if (progress) {
        std::printf("\repoch %d  batch %2d/%zu", epoch, batch_index, loader.size());
        std::fflush(stdout);
      }
    }
    std::printf("%sepoch %d  mean loss %.6f\n", progress ? "\r" : "", epoch, total / batch_index);
    std::printf("%s\n", memory_summary(device).c_str());
    losses.push_back(total / batch_index);
    allocated.push_back(memory_allocated(device));
  }
  const bool learned = losses[1] < losses[0] && losses[2] < losses[1];
  const bool flat = allocated[2] == allocated[1];
  std::printf("verdict: loss %s every epoch (%.4f -> %.4f); allocated memory %s after epoch 1\n",
              learned ? "fell" : "did NOT fall", losses[0], losses[2], flat ? "flat" : "GREW");
  return learned && flat ? 0 : 1;
}
