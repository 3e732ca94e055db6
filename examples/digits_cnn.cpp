// Handwritten digits (UCI, 1,797 8x8 images as scikit-learn ships them;
// examples/data/digits/README.md) classified by a small CNN, written as a libtorch
// user would: Conv2d + BatchNorm2d + ReLU + MaxPool2d twice, then a Linear head;
// cross-entropy, AdamW with a warm-up then cosine schedule, and the test accuracy
// at the end (eval mode: batch norm reads its running statistics). Runs on CUDA
// when there is a GPU, else on the CPU. Exits 1 when the test accuracy is below
// --min-accuracy (0.985).
//
//   build/examples/digits_cnn [--data examples/data/digits/digits.csv] [--epochs 30]
#include <chrono>
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
  const digits::Flags flags = digits::parse_flags(argc, argv, 30, 0.985);
  const Device device = cuda::is_available() ? kCUDA : kCPU;
  manual_seed(0);

  // 1,797 images: a fixed random 80/20 split into training and test sets.
  Tensor images, labels;
  digits::load(flags.data, images, labels);
  digits::Split data = digits::split(images, labels, 64, device);
  nn::DataLoader& loader = data.loader;

  // (N, 1, 8, 8) -> 32 x 4 x 4 -> 64 x 2 x 2 -> 256 -> 10.
  auto model = std::make_shared<nn::Sequential>(
      nn::Conv2d(nn::Conv2dOptions(1, 32, 3).padding(1).bias(false)), nn::BatchNorm2d(32),
      nn::ReLU(), nn::MaxPool2d(nn::MaxPool2dOptions(2)),
      nn::Conv2d(nn::Conv2dOptions(32, 64, 3).padding(1).bias(false)), nn::BatchNorm2d(64),
      nn::ReLU(), nn::MaxPool2d(nn::MaxPool2dOptions(2)), nn::Flatten(), nn::Dropout(0.25),
      nn::Linear(256, 10));
  model->to(device);
  std::printf("digits_cnn: %s, %zu parameters tensors\n", device.is_cuda() ? "CUDA" : "CPU",
              model->parameters().size());
  optim::AdamW optimizer(model->parameters(), optim::AdamWOptions(3e-3).weight_decay(1e-4));
  const int64_t steps = flags.epochs * static_cast<int64_t>(loader.size());
  // 50 warm-up steps (fewer in a run too short for them), then the cosine decay.
  const int64_t warm = std::min<int64_t>(50, steps / 4);
  auto warmup = std::make_shared<optim::LinearLR>(optimizer, 0.1, 1.0, warm);
  auto cosine = std::make_shared<optim::CosineAnnealingLR>(optimizer, steps - warm);
  optim::SequentialLR schedule(optimizer, {warmup, cosine}, {warm});

  const auto start = std::chrono::steady_clock::now();
  for (int epoch = 1; epoch <= flags.epochs; ++epoch) {
    model->train();
    double total = 0;
    for (const nn::Example& batch : loader) {
      optimizer.zero_grad();
      Tensor loss = nn::functional::cross_entropy(model->forward(batch.data), batch.target);
      loss.backward();
      optimizer.step();
      schedule.step();
      total += loss.item();
    }
    if (epoch % 5 == 0 || epoch == flags.epochs) {
      const double secs =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::printf("epoch %3d  train loss %.4f  lr %.2e  %.1f s/epoch\n", epoch,
                  total / loader.size(), schedule.get_last_lr()[0], secs / epoch);
    }
  }

  model->eval();
  const double accuracy = digits::accuracy(*model, data);
  std::printf("test accuracy %.4f (%lld test images) on %s\n", accuracy,
              static_cast<long long>(data.test_y.numel()), device.is_cuda() ? "CUDA" : "CPU");
  if (accuracy < flags.min_accuracy) {
    std::printf("FAILED: below the required %.3f\n", flags.min_accuracy);
    return 1;
  }
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  return digits::main_of(run, argc, argv);
}
