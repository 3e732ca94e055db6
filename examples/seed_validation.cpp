// Seed scenario (c): validation that builds no autograd graph. After training,
// the model goes to eval() (dropout off) and runs under NoGradGuard over a
// validation DataLoader; outputs carry no grad_fn and memory does not grow. Exits
// 1 if validation built a graph, made an output that requires grad, or left memory
// allocated (CTest runs it).
#include <cstdio>
#include <memory>

#include "core/memory.h"
#include "ember.h"
#include "nn/nn.h"
#include "optim/optim.h"

using namespace ember;

int main() {
  const Device device = cuda::is_available() ? kCUDA : kCPU;
  std::printf("seed_validation: running on %s\n", device.str().c_str());
  manual_seed(0);
  Tensor w_true = randn({10, 10});
  Tensor x_train = randn({320, 10}), x_val = randn({128, 10});
  Tensor y_train = matmul(x_train, w_true), y_val = matmul(x_val, w_true);
  nn::DataLoader train_loader(nn::TensorDataset(x_train, y_train),
                              nn::DataLoaderOptions(32).shuffle(true).device(device));
  nn::DataLoader val_loader(nn::TensorDataset(x_val, y_val),
                            nn::DataLoaderOptions(32).device(device));

  auto model = std::make_shared<nn::Sequential>(nn::Linear(10, 64), nn::ReLU(), nn::Dropout(0.1),
                                                nn::Linear(64, 10));
  model->to(device);
  optim::Adam optimizer(model->parameters(), optim::AdamOptions(1e-2));
  nn::MSELoss criterion;

  bool wrong = false;
  for (int epoch = 1; epoch <= 3; ++epoch) {
    model->train();
    size_t train_nodes = 0;
    for (const nn::Example& batch : train_loader) {
      optimizer.zero_grad();
      Tensor loss = criterion.forward(model->forward(batch.data), batch.target);
      train_nodes = count_graph_nodes(loss);
      loss.backward();
      optimizer.step();
    }

    model->eval();
    NoGradGuard no_grad;
    const int64_t before = memory_allocated(device);
    double total = 0;
    size_t val_nodes = 0;
    bool any_grad = false;
    for (const nn::Example& batch : val_loader) {
      Tensor output = model->forward(batch.data);
      Tensor loss = criterion.forward(output, batch.target);
      val_nodes += count_graph_nodes(loss);
      any_grad = any_grad || loss.requires_grad() || output.requires_grad();
      total += loss.item();
    }
    std::printf(
        "epoch %d  val loss %.5f  graph nodes per step: train %zu, validation %zu%s  "
        "allocated after validation %+lld bytes\n",
        epoch, total / static_cast<double>(val_loader.size()), train_nodes, val_nodes,
        any_grad ? " (outputs require grad!)" : "",
        static_cast<long long>(memory_allocated(device) - before));
    wrong = wrong || val_nodes != 0 || any_grad || memory_allocated(device) != before;
  }
  std::printf("verdict: %s\n",
              wrong ? "WRONG: validation built a graph or kept memory" : "no graph, no growth");
  return wrong ? 1 : 0;
}
