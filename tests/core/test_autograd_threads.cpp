// Autograd from several threads at once: graphs built and run backward
// concurrently on leaves they share. Each thread's gradient is an exact float64
// integer vector, so the accumulated .grad() must equal the sum exactly whatever
// the order; a lost or torn update shows as a wrong value (and as a data race under
// make test-tsan).
#include <doctest/doctest.h>

#include <latch>
#include <thread>
#include <vector>

#include "core/autograd.h"
#include "core/ops.h"

using namespace ember;

namespace {

constexpr int kThreads = 6;
constexpr int kSteps = 150;
constexpr int64_t kN = 4096;  // long enough accumulations that unguarded ones would overlap

// Thread t's constant: small integers, different per thread and element.
std::vector<double> coefficients(int t, int salt) {
  std::vector<double> c(kN);
  for (int64_t i = 0; i < kN; ++i) c[static_cast<size_t>(i)] = double((t + 1) * (salt + 1) + i % 7);
  return c;
}

Tensor vec(const std::vector<double>& v) {
  return from_vector(v, {static_cast<int64_t>(v.size())}, kFloat64);
}

}  // namespace

TEST_CASE("autograd/threads: concurrent backward over graphs sharing leaves sums every gradient") {
  // Fresh leaves: their AccumulateGrad nodes are created by the threads' first ops,
  // concurrently, and must still be one per leaf.
  Tensor w = zeros({kN}, TensorOptions(kFloat64).requires_grad());
  Tensor b = zeros({kN}, TensorOptions(kFloat64).requires_grad());
  int hook_calls = 0;  // plain int: hooks run under the leaf's lock
  w.register_post_accumulate_grad_hook([&](const Tensor&) { ++hook_calls; });

  std::vector<Tensor> cw, cb;  // made here: the default generator is not for threads
  for (int t = 0; t < kThreads; ++t) {
    cw.push_back(vec(coefficients(t, 0)));
    cb.push_back(vec(coefficients(t, 1)));
  }
  std::latch start(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      start.arrive_and_wait();
      for (int s = 0; s < kSteps; ++s) {
        // d/dw = cw[t] + 2 cb[t], d/db = cb[t] + 1: w is used twice, so its two
        // gradients meet in the engine's buffer before the shared accumulator.
        Tensor y = (w * cw[t]).sum() + ((w * 2.0 + b) * cb[t]).sum() + b.sum();
        y.backward();
      }
    });
  }
  for (std::thread& th : threads) th.join();

  std::vector<double> want_w(kN, 0.0), want_b(kN, 0.0);
  for (int t = 0; t < kThreads; ++t) {
    const std::vector<double> a = coefficients(t, 0), c = coefficients(t, 1);
    for (int64_t i = 0; i < kN; ++i) {
      want_w[static_cast<size_t>(i)] +=
          kSteps * (a[static_cast<size_t>(i)] + 2 * c[static_cast<size_t>(i)]);
      want_b[static_cast<size_t>(i)] += kSteps * (c[static_cast<size_t>(i)] + 1);
    }
  }
  REQUIRE(w.grad().defined());
  REQUIRE(b.grad().defined());
  CHECK(w.grad().to_vector<double>() == want_w);
  CHECK(b.grad().to_vector<double>() == want_b);
  CHECK(hook_calls == kThreads * kSteps);
}

TEST_CASE(
    "autograd/threads: threads with retained graphs over one shared leaf, grad() and backward "
    "mixed") {
  Tensor x = full({kN}, 1.0, TensorOptions(kFloat64).requires_grad());
  std::latch start(kThreads);
  std::vector<std::thread> threads;
  std::vector<int> grads_ok(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      start.arrive_and_wait();
      for (int s = 0; s < kSteps; ++s) {
        // y = sum((t+1) * x^2): dy/dx = 2 (t+1) x = 2 (t+1) at x = 1, exact.
        Tensor y = (x * x * double(t + 1)).sum();
        if (s % 2 == 0) {
          // autograd::grad leaves .grad() alone; the retained graph is reused once.
          std::vector<Tensor> g = grad({y}, {x}, {}, /*retain_graph=*/true);
          grads_ok[static_cast<size_t>(t)] +=
              g[0].to_vector<double>() == std::vector<double>(kN, 2.0 * (t + 1));
        }
        y.backward();
      }
    });
  }
  for (std::thread& th : threads) th.join();
  double want = 0;
  for (int t = 0; t < kThreads; ++t) want += kSteps * 2.0 * (t + 1);
  CHECK(x.grad().to_vector<double>() == std::vector<double>(kN, want));
  for (int t = 0; t < kThreads; ++t) CHECK(grads_ok[static_cast<size_t>(t)] == (kSteps + 1) / 2);
}

TEST_CASE(
    "autograd/threads: backward of retained graphs at once accumulates into one leaf exactly") {
  // Mostly accumulation: each thread's graph is built once and run backward many
  // times, so the threads meet in the shared AccumulateGrad as often as possible.
  Tensor w = zeros({kN}, TensorOptions(kFloat64).requires_grad());
  std::vector<Tensor> roots;
  for (int t = 0; t < kThreads; ++t) roots.push_back((w * double(t + 1)).sum());
  std::latch start(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      start.arrive_and_wait();
      for (int s = 0; s < 4 * kSteps; ++s)
        roots[static_cast<size_t>(t)].backward({}, /*retain_graph=*/true);
    });
  }
  for (std::thread& th : threads) th.join();
  // Every step adds t + 1 to each element: 4 kSteps (1 + 2 + ... + kThreads).
  const double want = 4.0 * kSteps * kThreads * (kThreads + 1) / 2;
  CHECK(w.grad().to_vector<double>() == std::vector<double>(kN, want));
}
