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

#include "ember.h"

using namespace ember;

// The CSV: 64 pixels (0..16) then the class, per line. Images come back as
// (N, 1, 8, 8) floats scaled to [0, 1], classes as int64.
void load_digits(const std::string& path, Tensor& images, Tensor& labels) {
  std::ifstream in(path);
  if (!in) throw Error("digits: cannot open " + path);
  std::vector<float> pixels;
  std::vector<double> classes;
  std::string line;
  while (std::getline(in, line)) {
    std::stringstream row(line);
    std::string cell;
    for (int i = 0; i < 64 && std::getline(row, cell, ','); ++i)
      pixels.push_back(std::stof(cell) / 16.0f);
    std::getline(row, cell);
    classes.push_back(std::stod(cell));
  }
  const auto n = static_cast<int64_t>(classes.size());
  images = from_vector(pixels, {n, 1, 8, 8});
  labels = from_vector(classes, {n}, kInt64);
}

int main(int argc, char** argv) {
  std::string data = EMBER_EXAMPLES_DATA_DIR "/digits/digits.csv";
  int epochs = 30;
  double min_accuracy = 0.985;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--data")) data = argv[i + 1];
    if (!std::strcmp(argv[i], "--epochs")) epochs = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--min-accuracy")) min_accuracy = std::atof(argv[i + 1]);
  }
  const Device device = cuda::is_available() ? kCUDA : kCPU;
  manual_seed(0);

  // 1,797 images: a fixed random 80/20 split into training and test sets.
  Tensor images, labels;
  load_digits(data, images, labels);
  const int64_t n = labels.numel(), n_train = n * 8 / 10;
  Tensor order = randperm(n);
  Tensor train_idx = order.slice(0, 0, n_train), test_idx = order.slice(0, n_train, n);
  nn::DataLoader loader(
      nn::TensorDataset(index_select(images, 0, train_idx), index_select(labels, 0, train_idx)),
      nn::DataLoaderOptions(64).shuffle(true).device(device));
  Tensor test_x = index_select(images, 0, test_idx).to(device);
  Tensor test_y = index_select(labels, 0, test_idx);

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
  const int64_t steps = epochs * static_cast<int64_t>(loader.size());
  auto warmup = std::make_shared<optim::LinearLR>(optimizer, 0.1, 1.0, 50);
  auto cosine = std::make_shared<optim::CosineAnnealingLR>(optimizer, steps - 50);
  optim::SequentialLR schedule(optimizer, {warmup, cosine}, {50});

  const auto start = std::chrono::steady_clock::now();
  for (int epoch = 1; epoch <= epochs; ++epoch) {
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
    if (epoch % 5 == 0 || epoch == epochs) {
      const double secs =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::printf("epoch %3d  train loss %.4f  lr %.2e  %.1f s/epoch\n", epoch,
                  total / loader.size(), schedule.get_last_lr()[0], secs / epoch);
    }
  }

  model->eval();
  NoGradGuard no_grad;
  const std::vector<int64_t> predicted = model->forward(test_x).argmax(1).to_vector<int64_t>();
  const std::vector<int64_t> truth = test_y.to_vector<int64_t>();
  int64_t correct = 0;
  for (size_t i = 0; i < truth.size(); ++i) correct += predicted[i] == truth[i];
  const double accuracy = static_cast<double>(correct) / static_cast<double>(truth.size());
  std::printf("test accuracy %.4f (%lld of %zu) on %s\n", accuracy, static_cast<long long>(correct),
              truth.size(), device.is_cuda() ? "CUDA" : "CPU");
  if (accuracy < min_accuracy) {
    std::printf("FAILED: below the required %.3f\n", min_accuracy);
    return 1;
  }
  return 0;
}
