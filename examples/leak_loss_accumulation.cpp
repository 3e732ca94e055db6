// Leak pattern: a running total of the loss kept as a tensor. `total = total +
// loss` keeps each step's loss, and with it that step's autograd graph, chained
// onto the last: the graph grows every step. Fixed: total += loss.item().
#include "leak_demo.h"

using namespace ember;

int main(int argc, char** argv) {
  return demo::run(
      argc, argv, "loss accumulated with its graph",
      [](bool fixed, int steps, LeakTracker& tracker) {
        const Device dev = demo::pick_device();
        manual_seed(0);
        auto model = std::make_shared<demo::Net>();
        model->to(dev);
        optim::SGD opt(model->parameters(), optim::SGDOptions(1e-3));
        Tensor x = randn({demo::kBatch, demo::kIn}).to(dev), y = randn({demo::kBatch, 1}).to(dev);

        Tensor total = zeros({}, dev);  // the leak: a tensor total
        double total_value = 0;         // the fix: a number
        for (int step = 0; step < steps; ++step) {
          StepLeakCheck check(tracker, "step");
          opt.zero_grad();
          Tensor loss = mse_loss(model->forward(x), y);
          loss.backward();
          opt.step();
          if (fixed)
            total_value += loss.item();
          else
            total = total + loss;
        }
      });
}
