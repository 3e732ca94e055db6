// Standalone probe (issue 30's "the seed step on the CPU no slower than today"): the
// seed's training step on the CPU, as examples/seed_train.cpp writes it (Linear(10, 10),
// MSELoss, Adam lr 1e-2, batches of 32, loss.item() each step), timed through ember's
// public API only, so the same file builds against today's tree and against an older one.
//
// Build it inside a build tree (examples/ globs its .cpp files):
//   cp tools/seed_cpu_probe.cpp examples/ && cmake --build BUILD --target seed_cpu_probe
//   (then remove the copy; an older tree, e.g. a `git worktree` at c093766, the commit
//   before the CPU path, the same way)
// Run: BUILD/examples/seed_cpu_probe [rounds (default 7)] [steps per round (default 500)]
// Prints the per-step wall time (median, min, max over rounds, microseconds) and the
// loss after the timed steps, which two builds must agree on to float32 rounding (the
// same seed, data and arithmetic order up to each build's matrix-product kernel).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "ember.h"
#include "nn/nn.h"
#include "optim/optim.h"

using namespace ember;

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 7;
  const int steps = argc > 2 ? std::atoi(argv[2]) : 500;
  if (rounds < 1 || steps < 1) {
    std::fprintf(stderr, "usage: seed_cpu_probe [rounds >= 1] [steps >= 1]\n");
    return 2;
  }
  manual_seed(0);
  std::vector<Tensor> xs, ys;
  const Tensor map = randn({10, 10});
  for (int b = 0; b < 10; ++b) {
    xs.push_back(randn({32, 10}));
    ys.push_back(matmul(xs.back(), map) + 0.1 * randn({32, 10}));
  }
  auto fc = std::make_shared<nn::Linear>(10, 10);
  nn::MSELoss criterion;
  optim::Adam opt(fc->parameters(), optim::AdamOptions(1e-2));
  double loss = 0;
  int i = 0;
  auto step = [&] {
    opt.zero_grad();
    Tensor l = criterion.forward(fc->forward(xs[i % 10]), ys[i % 10]);
    l.backward();
    opt.step();
    loss = l.item();
    ++i;
  };
  const double first = (step(), loss);
  for (int w = 0; w < 50; ++w) step();
  std::vector<double> us;
  for (int r = 0; r < rounds; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int s = 0; s < steps; ++s) step();
    us.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
        steps);
  }
  std::sort(us.begin(), us.end());
  if (!(loss < first)) {
    std::fprintf(stderr, "seed_cpu_probe: the loss did not fall (%.6f -> %.6f)\n", first, loss);
    return 1;
  }
  std::printf(
      "seed_cpu_probe us_per_step=%.3f min=%.3f max=%.3f steps=%d loss_first=%.6f "
      "loss_last=%.8f\n",
      us[us.size() / 2], us.front(), us.back(), 51 + rounds * steps, first, loss);
  return 0;
}
