// Leak pattern: every step's output kept in a list ("for the metrics later").
// Each kept output holds its storage and its (spent) graph: the allocator grows
// by one output per step at fc2's site. Fixed: keep the numbers you need.
#include <vector>

#include "leak_demo.h"

using namespace ember;

int main(int argc, char** argv) {
  return demo::run(
      argc, argv, "outputs kept in a list across steps",
      [](bool fixed, int steps, LeakTracker& tracker) {
        const Device dev = demo::pick_device();
        manual_seed(0);
        auto model = std::make_shared<demo::Net>();
        model->to(dev);
        optim::SGD opt(model->parameters(), optim::SGDOptions(1e-3));
        Tensor x = randn({demo::kBatch, demo::kIn}).to(dev), y = randn({demo::kBatch, 1}).to(dev);

        std::vector<Tensor> outputs;             // the leak
        std::vector<std::vector<float>> values;  // the fix: plain host numbers
        for (int step = 0; step < steps; ++step) {
          StepLeakCheck check(tracker, "step");
          opt.zero_grad();
          Tensor out = model->forward(x);
          mse_loss(out, y).backward();
          opt.step();
          if (fixed)
            values.push_back(out.to_vector<float>());
          else
            outputs.push_back(out);
        }
      });
}
