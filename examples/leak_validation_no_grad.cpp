// Leak pattern: validation without NoGradGuard, summing the loss as a tensor.
// With grad mode on, every batch builds a graph that saves its activations, and
// the running sum holds them all until the loop ends. Fixed: NoGradGuard + item().
#include <cstdio>

#include "core/live_tensors.h"
#include "leak_demo.h"

using namespace ember;

int main(int argc, char** argv) {
  return demo::run(
      argc, argv, "validation without NoGradGuard",
      [](bool fixed, int steps, LeakTracker& tracker) {
        const Device dev = demo::pick_device();
        manual_seed(0);
        auto model = std::make_shared<demo::Net>();
        model->to(dev);
        model->eval();
        Tensor xv = randn({demo::kBatch, demo::kIn}).to(dev), yv = randn({demo::kBatch, 1}).to(dev);

        Tensor val_total = zeros({}, dev);
        double val_value = 0;
        for (int batch = 0; batch < steps; ++batch) {
          StepLeakCheck check(tracker, "val batch");
          if (fixed) {
            NoGradGuard no_grad;
            val_value += mse_loss(model->forward(xv), yv).item();
          } else {
            val_total = val_total + mse_loss(model->forward(xv), yv);
          }
        }
        if (!fixed)
          std::printf("   live tensors now, largest first:\n%s",
                      live_tensors_table(dev, 6).c_str());
      });
}
