// Fits y = 3x - 2 (plus noise) with ember's tensor ops and plain gradient descent:
// the smallest end-to-end use of autograd. Runs on CUDA when a GPU is present.
// Exits 1 unless it learned w and b to within 0.05 (CTest runs it).
#include <cmath>
#include <cstdio>

#include "ember.h"

using namespace ember;

int main() {
  const Device device = cuda::is_available() ? kCUDA : kCPU;
  std::printf("linear regression on %s\n", device.str().c_str());

  manual_seed(0);
  Tensor x = randn({256, 1}, device);
  Tensor y = x * 3.0 - 2.0 + 0.1 * randn({256, 1}, device);

  Tensor w = zeros({1, 1}, TensorOptions().device(device).requires_grad());
  Tensor b = zeros({1}, TensorOptions().device(device).requires_grad());
  const double lr = 0.1;

  for (int step = 0; step <= 100; ++step) {
    Tensor pred = matmul(x, w) + b;
    Tensor loss = (pred - y).pow(2).mean();
    w.set_grad(Tensor());
    b.set_grad(Tensor());
    loss.backward();
    {
      NoGradGuard no_grad;  // the update itself is not part of the graph
      w.sub_(w.grad() * lr);
      b.sub_(b.grad() * lr);
    }
    if (step % 20 == 0) std::printf("step %3d  loss %.6f\n", step, loss.item());
  }
  std::printf("learned w = %.4f (true 3), b = %.4f (true -2)\n", w.item(), b.item());
  return std::abs(w.item() - 3.0) < 0.05 && std::abs(b.item() + 2.0) < 0.05 ? 0 : 1;
}
