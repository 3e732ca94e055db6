// The training loop shown in the README, kept compiling as an example.
#include <cstdio>
#include <filesystem>
#include <memory>

#include "ember.h"
#include "nn/nn.h"
#include "optim/optim.h"

using namespace ember;

int main() {
  const Device device = cuda::is_available() ? kCUDA : kCPU;
  manual_seed(0);
  Tensor x = rand({1024, 1}) * 6.0 - 3.0;
  Tensor y = tanh(x * 2.0) + 0.1 * x * x;  // the function to learn

  auto model = std::make_shared<nn::Sequential>(nn::Linear(1, 32), nn::ReLU(), nn::Linear(32, 1));
  model->to(device);
  optim::Adam optimizer(model->parameters(), optim::AdamOptions(1e-2));
  nn::DataLoader loader(nn::TensorDataset(x, y),
                        nn::DataLoaderOptions(64).shuffle(true).device(device));

  double loss_per_batch = 0;
  for (int epoch = 1; epoch <= 20; ++epoch) {
    double total = 0;
    for (const nn::Example& batch : loader) {
      optimizer.zero_grad();
      Tensor loss = nn::functional::mse_loss(model->forward(batch.data), batch.target);
      loss.backward();
      optimizer.step();
      total += loss.item();
    }
    loss_per_batch = total / loader.size();
    if (epoch % 5 == 0) std::printf("epoch %2d  loss %.5f\n", epoch, loss_per_batch);
  }
  nn::save(*model, optimizer, (std::filesystem::temp_directory_path() / "readme.ckp").string());
  return loss_per_batch < 0.01 ? 0 : 1;  // it learned the function
}
