// Handwritten digits (UCI, 1,797 8x8 images as scikit-learn ships them;
// examples/data/digits/README.md) classified by a small MLP: cross-entropy,
// Adam with a warm-up then cosine schedule, gradient clipping, and the test
// accuracy at the end. Runs on CUDA when there is a GPU, else on the CPU, in
// seconds. Exits 1 when the test accuracy is below --min-accuracy (0.95).
//
//   build/examples/digits_mlp [--data examples/data/digits/digits.csv] [--epochs 40]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "digits.h"
#include "ember.h"

using namespace ember;

namespace {
int run(int argc, char** argv) {
  const digits::Flags flags = digits::parse_flags(argc, argv, 40, 0.95);
  const Device device = cuda::is_available() ? kCUDA : kCPU;
  manual_seed(0);

  // 1,797 images: a fixed random 80/20 split into training and test sets.
  Tensor images, labels;
  digits::load(flags.data, images, labels);
  digits::Split data = digits::split(images, labels, 64, device);
  nn::DataLoader& loader = data.loader;

  auto model =
      std::make_shared<nn::Sequential>(nn::Flatten(), nn::Linear(64, 128), nn::ReLU(),
                                       nn::Linear(128, 64), nn::ReLU(), nn::Linear(64, 10));
  model->to(device);
  optim::AdamW optimizer(model->parameters(), optim::AdamWOptions(3e-3).weight_decay(1e-4));
  const int64_t steps = flags.epochs * static_cast<int64_t>(loader.size());
  auto warmup = std::make_shared<optim::LinearLR>(optimizer, 0.1, 1.0, 50);
  auto cosine = std::make_shared<optim::CosineAnnealingLR>(optimizer, steps - 50);
  optim::SequentialLR schedule(optimizer, {warmup, cosine}, {50});

  for (int epoch = 1; epoch <= flags.epochs; ++epoch) {
    model->train();
    double total = 0;
    for (const nn::Example& batch : loader) {
      optimizer.zero_grad();
      Tensor loss = nn::functional::cross_entropy(model->forward(batch.data), batch.target);
      loss.backward();
      nn::utils::clip_grad_norm_(model->parameters(), 1.0);
      optimizer.step();
      schedule.step();
      total += loss.item();
    }
    if (epoch % 10 == 0 || epoch == flags.epochs)
      std::printf("epoch %3d  train loss %.4f  lr %.2e\n", epoch, total / loader.size(),
                  schedule.get_last_lr()[0]);
  }

  model->eval();
  const double accuracy = digits::accuracy(*model, data);
  std::printf("test accuracy %.4f (%lld test images) on %s\n", accuracy,
              static_cast<long long>(data.test_y.numel()), device.is_cuda() ? "CUDA" : "CPU");
  if (accuracy < flags.min_accuracy) {
    std::printf("FAILED: below the required %.2f\n", flags.min_accuracy);
    return 1;
  }
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  return digits::main_of(run, argc, argv);
}
