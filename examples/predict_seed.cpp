// Know before you run (README): the seed model's training step, written once for
// any device, predicted on the meta device for an 80 GiB GPU before anything runs;
// then the largest batch of a 4 x 4096 MLP that fits a 24 GiB GPU, by bisection
// over meta runs. Runs on a machine without a GPU.
#include <cstdio>
#include <memory>

#include "core/predict.h"
#include "ember.h"
#include "nn/nn.h"
#include "optim/optim.h"

using namespace ember;

int main() {
  manual_seed(0);
  Tensor inputs = randn({320, 10});  // the data stay on the host
  Tensor targets = matmul(inputs, randn({10, 10})) + 0.1 * randn({320, 10});

  // The training step, for any device: what it needs is made there, and kept
  // alive by the step it returns.
  StepFactory seed_step = [&](Device device) {
    auto model = std::make_shared<nn::Linear>(10, 10);
    model->to(device);
    auto optimizer = std::make_shared<optim::Adam>(model->parameters(), optim::AdamOptions(1e-2));
    auto loader = std::make_shared<nn::DataLoader>(
        nn::TensorDataset(inputs, targets), nn::DataLoaderOptions(32).shuffle(true).device(device));
    auto batch = std::make_shared<nn::DataLoader::Iterator>(loader->begin());
    return StepFunction([=](int) {
      if (*batch == loader->end()) *batch = loader->begin();  // the next epoch
      optimizer->zero_grad();
      Tensor loss = nn::functional::mse_loss(model->forward((*batch)->data), (*batch)->target);
      loss.backward();
      optimizer->step();
      ++*batch;
      // loss.item() here would throw on the meta device: read values only when
      // !device.is_meta().
    });
  };
  MemoryPrediction p =
      predict_memory(seed_step, PredictOptions().steps(10).capacity(size_t{80} << 30));
  std::printf("%s\n", p.table().c_str());

  // The largest batch of a 4 x Linear(4096, 4096) MLP with Adam that fits 24 GiB.
  BatchStepFactory mlp_step = [](Device device, int64_t batch) {
    auto net = std::make_shared<nn::Sequential>();
    for (int i = 0; i < 4; ++i)
      net->push_back(std::make_shared<nn::Linear>(nn::LinearOptions(4096, 4096).device(device)));
    auto optimizer = std::make_shared<optim::Adam>(net->parameters(), optim::AdamOptions(1e-3));
    Tensor x = randn({batch, 4096}, device), y = randn({batch, 4096}, device);
    return StepFunction([=](int) {
      optimizer->zero_grad();
      nn::functional::mse_loss(net->forward(x), y).backward();
      optimizer->step();
    });
  };
  BatchSearch s = largest_fitting_batch(mlp_step, 1, 1 << 20,
                                        PredictOptions().steps(3).capacity(size_t{24} << 30));
  std::printf("largest batch that fits 24 GiB: %lld (%zu meta runs); at it, peak reserved %s\n",
              static_cast<long long>(s.batch), s.probes.size(),
              memory::format_bytes(static_cast<uint64_t>(s.at_batch.peak_reserved)).c_str());
  return p.fits && s.batch > 0 ? 0 : 1;
}
