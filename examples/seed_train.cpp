// Seed scenario (a), as the seed writes it: the SimpleModel, one Linear(10, 10),
// wrapped in DataParallel when more than one GPU is visible (plain on one GPU or
// on the CPU), trained with Adam and MSELoss on batches of 32, 3 epochs of 10
// batches, printing the loss and the allocator's memory summary after every
// batch (the full table after the first, abbreviated after), then every GPU's
// memory side by side. `make demo` runs this. Exits 1 unless the mean loss fell
// every epoch and allocated memory stayed flat after the first (CTest runs it).
#include <cstdio>
#include <functional>
#include <memory>
#include <vector>

#include "core/memory.h"
#include "ember.h"
#include "nn/nn.h"
#include "optim/optim.h"
#ifdef EMBER_HAVE_PARALLEL
#include "parallel/data_parallel.h"
#include "parallel/memory_view.h"
#endif

using namespace ember;

struct SimpleModel : nn::Module {
  SimpleModel() { fc = register_module("fc", std::make_shared<nn::Linear>(10, 10)); }
  Tensor forward(const Tensor& x) { return fc->forward(x); }
  std::shared_ptr<nn::Linear> fc;
};

int main() {
  const int gpus = cuda::device_count();
  const Device device = gpus > 0 ? kCUDA : kCPU;
  manual_seed(0);

  // 320 examples of a fixed random linear map plus noise: 10 batches of 32.
  Tensor inputs = randn({320, 10});
  Tensor targets = matmul(inputs, randn({10, 10})) + 0.1 * randn({320, 10});
  nn::DataLoader loader(nn::TensorDataset(inputs, targets),
                        nn::DataLoaderOptions(32).shuffle(true).device(device));
  auto model = std::make_shared<SimpleModel>();
  std::printf("%s\n", model->str().c_str());
  nn::MSELoss criterion;

  // One step on a batch: the loss. The seed's `if device_count() > 1: model =
  // DataParallel(model)`: one replica per GPU, each with its rows, its loss and
  // its own Adam (the same update everywhere); otherwise the model itself.
  std::function<double(const nn::Example&)> step;
  std::vector<Device> devices{device};
#ifdef EMBER_HAVE_PARALLEL
  std::unique_ptr<parallel::DataParallel<SimpleModel>> dp;
  if (gpus > 1) {
    dp = std::make_unique<parallel::DataParallel<SimpleModel>>(
        model, [] { return std::make_shared<SimpleModel>(); });
    dp->set_optimizer([](std::vector<Tensor> p) {
      return std::make_unique<optim::Adam>(p, optim::AdamOptions(1e-2));
    });
    devices = dp->devices();
    step = [&](const nn::Example& batch) {
      dp->zero_grad();
      double loss = dp->forward_backward(batch.data, batch.target,
                                         [&](SimpleModel& m, const Tensor& x, const Tensor& y) {
                                           return criterion.forward(m.forward(x), y);
                                         });
      dp->step();
      return loss;
    };
  }
#endif
  std::unique_ptr<optim::Adam> optimizer;
  if (!step) {
    model->to(device);
    optimizer = std::make_unique<optim::Adam>(model->parameters(), optim::AdamOptions(1e-2));
    step = [&](const nn::Example& batch) {
      optimizer->zero_grad();
      Tensor loss = criterion.forward(model->forward(batch.data), batch.target);
      loss.backward();
      optimizer->step();
      return loss.item();
    };
  }
  std::printf("seed_train: training on %s%s\n", device.str().c_str(),
              devices.size() > 1
                  ? (" with DataParallel over " + std::to_string(devices.size()) + " GPUs").c_str()
                  : "");

  int batches = 0;
  std::vector<double> losses;
  std::vector<int64_t> allocated;
  for (int epoch = 1; epoch <= 3; ++epoch) {
    int batch_index = 0;
    double total = 0;
    for (const nn::Example& batch : loader) {
      const double loss = step(batch);
      total += loss;
      ++batch_index;
      std::printf("epoch %d  batch %2d/%zu  loss %.6f\n", epoch, batch_index, loader.size(), loss);
      std::printf("%s\n", memory_summary(devices.front(), /*abbreviated=*/batches++ > 0).c_str());
    }
    std::printf("epoch %d  mean loss %.6f\n", epoch, total / batch_index);
    losses.push_back(total / batch_index);
    int64_t bytes = 0;  // over every GPU the step uses
    for (const Device& d : devices) bytes += memory_allocated(d);
    allocated.push_back(bytes);
  }
#ifdef EMBER_HAVE_PARALLEL
  // Every GPU's key rows side by side: balanced, no pile-up on the first.
  if (devices.front().is_cuda())
    std::printf("memory per GPU:\n%s", parallel::memory_summary_all(devices).c_str());
#endif
  const bool learned = losses[1] < losses[0] && losses[2] < losses[1];
  const bool flat = allocated[2] == allocated[1];
  std::printf("verdict: loss %s every epoch (%.4f -> %.4f); allocated memory %s after epoch 1\n",
              learned ? "fell" : "did NOT fall", losses[0], losses[2], flat ? "flat" : "GREW");
  return learned && flat ? 0 : 1;
}
