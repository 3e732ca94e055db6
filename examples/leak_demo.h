// What the leak_* examples share: a small two-layer model, a fixed batch, and a
// driver that runs a pattern leaking and then fixed under a LeakTracker, prints
// the tracker's verdict for each, and exits non-zero if a verdict is wrong (CI
// runs these). Flags: --leaky or --fixed (one variant), --steps N.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>

#include "core/leak_check.h"
#include "core/memory.h"
#include "ember.h"
#include "nn/nn.h"
#include "optim/optim.h"

namespace demo {

using namespace ember;

constexpr int64_t kBatch = 32, kIn = 64, kHidden = 256;

inline Device pick_device() {
  return cuda::is_available() ? kCUDA : kCPU;
}

// Allocations in fc1's forward read "model.fc1.forward / linear"; hidden() opens
// the model's own scope, so the relu between reads "model.forward / relu".
struct Net : nn::Module {
  Net() {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(kIn, kHidden));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(kHidden, 1));
  }
  Tensor hidden(const Tensor& x) {
    nn::ForwardScope scope(*this);
    return relu(fc1->forward(x));
  }
  Tensor forward(const Tensor& x) { return fc2->forward(hidden(x)); }
  std::shared_ptr<nn::Linear> fc1, fc2;
};

struct Options {
  bool leaky = true, fixed = true;
  int steps = 20;
};

inline Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--leaky"))
      o.fixed = false;
    else if (!std::strcmp(argv[i], "--fixed"))
      o.leaky = false;
    else if (!std::strcmp(argv[i], "--steps") && i + 1 < argc)
      o.steps = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: %s [--leaky | --fixed] [--steps N]\n", argv[0]);
      std::exit(2);
    }
  }
  if (o.steps < 3) o.steps = 3;  // the tracker needs two steps after warm-up
  return o;
}

// Runs `step(fixed, tracker)` for each chosen variant `steps` times, each step
// inside a StepLeakCheck, and prints the verdict. Returns the exit status.
inline int run(int argc, char** argv, const char* pattern,
               const std::function<void(bool fixed, int steps, LeakTracker&)>& body) {
  Options o = parse(argc, argv);
  std::printf("== %s, on %s, %d steps\n", pattern, pick_device().str().c_str(), o.steps);
  int status = 0;
  for (bool fixed : {false, true}) {
    if ((fixed && !o.fixed) || (!fixed && !o.leaky)) continue;
    LeakTracker tracker(LeakMode::record);
    body(fixed, o.steps, tracker);
    LeakTrend trend = tracker.trend();
    std::printf("-- %s:\n%s", fixed ? "fixed" : "leaking", trend.str().c_str());
    if (!fixed && !tracker.reports().empty())  // what one StepLeakCheck says on its own
      std::printf("   the last step's StepLeakCheck:\n%s", tracker.reports().back().str().c_str());
    if (trend.leaked() == fixed) {
      std::printf("!! unexpected verdict for the %s variant\n", fixed ? "fixed" : "leaking");
      status = 1;
    }
  }
  return status;
}

}  // namespace demo
