// The consumer project's program: a small regression trained with ember as an
// installed package would be used. Exits 0 when the loss fell tenfold.
#include <cstdio>

#include "ember.h"

using namespace ember;

int main() {
  const Device device = cuda::is_available() ? kCUDA : kCPU;
  manual_seed(0);
  Tensor x = rand({256, 2}) * 2.0 - 1.0;
  Tensor y = (x * 3.0).sum(1, true) - 1.0;  // y = 3 x0 + 3 x1 - 1
  auto model = std::make_shared<nn::Sequential>(nn::Linear(2, 16), nn::Tanh(), nn::Linear(16, 1));
  model->to(device);
  optim::Adam optimizer(model->parameters(), optim::AdamOptions(1e-2));
  nn::DataLoader loader(nn::TensorDataset(x, y), nn::DataLoaderOptions(32).device(device));
  double first = 0, last = 0;
  for (int epoch = 0; epoch < 30; ++epoch) {
    double total = 0;
    for (const nn::Example& batch : loader) {
      optimizer.zero_grad();
      Tensor loss = nn::functional::mse_loss(model->forward(batch.data), batch.target);
      loss.backward();
      optimizer.step();
      total += loss.item();
    }
    (epoch == 0 ? first : last) = total / static_cast<double>(loader.size());
  }
  std::printf("ember consumer: loss %.4f -> %.4f on %s\n", first, last,
              device.is_cuda() ? "CUDA" : "CPU");
  return last < first / 10 ? 0 : 1;
}
