// The README's custom module: children registered with register_module, a tensor
// with register_parameter, a ForwardScope at the top of forward. Compiled and run
// with the other examples, so the README stays true.
#include <cstdio>
#include <iostream>
#include <memory>

#include "ember.h"

using namespace ember;

struct Net : nn::Module {
  Net(int64_t in, int64_t hidden, int64_t out) {
    // Register every child and tensor: what is not registered does not exist for
    // parameters(), to(), state_dict() or checkpoints.
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(in, hidden));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(hidden, out));
    scale = register_parameter("scale", ones({out}));
  }
  Tensor forward(const Tensor& x) {
    nn::ForwardScope scope(*this);  // names allocations "model.forward"; checks registration
    return fc2->forward(relu(fc1->forward(x))) * scale;
  }
  std::shared_ptr<nn::Linear> fc1, fc2;
  Tensor scale;
};

int main() {
  auto net = std::make_shared<Net>(4, 16, 2);
  std::cout << net << "\n";  // PyTorch's repr, through the handle
  for (const auto& [name, p] : net->named_parameters())
    std::printf("%-10s %s\n", name.c_str(), shape_str(p.sizes()).c_str());
  optim::SGD optimizer(net->parameters(), optim::SGDOptions(0.1));
  Tensor x = randn({8, 4}), y = randn({8, 2});
  double first = 0, last = 0;
  for (int step = 0; step < 50; ++step) {
    optimizer.zero_grad();
    Tensor loss = nn::functional::mse_loss(net->forward(x), y);
    loss.backward();
    optimizer.step();
    (step == 0 ? first : last) = loss.item();
  }
  std::printf("loss %.4f -> %.4f\n", first, last);
  return last < first ? 0 : 1;
}
