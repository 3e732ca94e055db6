// Leak pattern: a tensor cached in a module member every step, here a running
// statistic of the activations computed with grad on. Each update chains onto the
// last one's graph and saves that step's activations for a backward that never
// comes. Fixed: update the statistic under NoGradGuard (or from .detach()).
#include "leak_demo.h"

using namespace ember;

struct StatNet : demo::Net {
  Tensor running_energy = zeros({demo::kHidden});
  bool fixed = false;
  Tensor forward(const Tensor& x) {
    Tensor h = hidden(x);
    if (fixed) {
      NoGradGuard no_grad;
      running_energy = running_energy * 0.9 + mul(h, h).mean(0);
    } else {
      running_energy = running_energy * 0.9 + mul(h, h).mean(0);
    }
    return fc2->forward(h);
  }
};

int main(int argc, char** argv) {
  return demo::run(
      argc, argv, "a tensor cached in a module member every step",
      [](bool fixed, int steps, LeakTracker& tracker) {
        const Device dev = demo::pick_device();
        manual_seed(0);
        auto model = std::make_shared<StatNet>();
        model->to(dev);
        model->running_energy = model->running_energy.to(dev);
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
