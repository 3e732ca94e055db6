// Leak pattern: re-replicating the weights on every forward (as PyTorch's
// DataParallel does) behind a cache keyed by the weights' version. The optimizer
// bumps the version every step, so every step makes a fresh replica and the old
// ones stay cached. Fixed: one persistent replica per device, trained in place
// (ember's DataParallel keeps one and never re-replicates).
#include <map>
#include <vector>

#include "leak_demo.h"

using namespace ember;

struct Replicating : nn::Module {
  std::shared_ptr<demo::Net> inner = register_module("inner", std::make_shared<demo::Net>());
  std::map<uint64_t, std::vector<Tensor>> replicas;  // version -> weights
  bool fixed = false;

  Tensor forward(const Tensor& x) {
    std::vector<Tensor> w;
    if (fixed) {
      w = inner->parameters();  // the model on this device is the replica
    } else {
      std::vector<Tensor>& cached = replicas[inner->fc1->weight.version()];
      if (cached.empty()) {
        nn::ForwardScope scope(*this);
        for (const Tensor& p : inner->parameters()) cached.push_back(p.clone());
      }
      w = cached;
    }
    return linear(relu(linear(x, w[0], w[1])), w[2], w[3]);
  }
};

int main(int argc, char** argv) {
  return demo::run(argc, argv, "replica per step", [](bool fixed, int steps, LeakTracker& tracker) {
    const Device dev = demo::pick_device();
    manual_seed(0);
    auto model = std::make_shared<Replicating>();
    model->to(dev);
    model->fixed = fixed;
    optim::SGD opt(model->parameters(), optim::SGDOptions(1e-3));
    Tensor x = randn({demo::kBatch, demo::kIn}).to(dev), y = randn({demo::kBatch, 1}).to(dev);
    for (int step = 0; step < steps; ++step) {
      StepLeakCheck check(tracker, "step");
      opt.zero_grad();
      mse_loss(model->forward(x), y).backward();
      opt.step();
    }
  });
}
