// DataParallel: replicas on CPU "devices" (the same threads, scatter and reduction
// as on GPUs, with an in-process sum instead of NCCL) and, in suite "cuda", on
// every GPU present. Each MPI rank runs these on its own; they use no MPI.
#include <doctest/doctest.h>

#include <cmath>
#include <memory>

#include "core/memory.h"
#include "core/ops.h"
#include "cuda/runtime.h"
#include "nn/activation.h"
#include "nn/linear.h"
#include "nn/sequential.h"
#include "optim/adam.h"
#include "optim/sgd.h"
#include "parallel/data_parallel.h"
#include "parallel/memory_view.h"

using namespace ember;
using namespace ember::parallel;

namespace {

std::shared_ptr<nn::Sequential> mlp() {
  return std::make_shared<nn::Sequential>(nn::Linear(6, 16), nn::Tanh(), nn::Linear(16, 3));
}

double rel_err(const Tensor& a, const Tensor& b) {
  Tensor d = (a.cpu().to(kFloat64) - b.cpu().to(kFloat64)).pow(2).sum();
  Tensor r = b.cpu().to(kFloat64).pow(2).sum();
  return std::sqrt(d.item() / std::max(r.item(), 1e-30));
}

// Trains a DataParallel and a single module side by side on uneven batches and
// checks gradients, losses and that replicas stay bit-identical.
void check_against_single(std::vector<Device> devices) {
  manual_seed(1);
  auto single = mlp();
  manual_seed(1);
  auto first = mlp();
  manual_seed(99);  // the factory's own initialisation is overwritten by replica 0's
  DataParallel<nn::Sequential> dp(first, mlp, devices);
  const double lr = 0.1;
  dp.set_optimizer([&](std::vector<Tensor> p) {
    return std::make_unique<optim::SGD>(p, optim::SGDOptions(lr).momentum(0.9));
  });
  optim::SGD opt(single->parameters(), optim::SGDOptions(lr).momentum(0.9));
  auto loss_fn = [](nn::Sequential& m, const Tensor& x, const Tensor& y) {
    return mse_loss(m.forward(x), y);
  };
  manual_seed(5);
  for (int step = 0; step < 20; ++step) {
    // Batches of 7, 8, 2, 1 rows: uneven chunks, and chunks left empty.
    const int64_t rows = std::vector<int64_t>{7, 8, 2, 1}[step % 4];
    Tensor x = randn({rows, 6}), y = randn({rows, 3});
    dp.zero_grad();
    opt.zero_grad();
    double loss = dp.forward_backward(x, y, loss_fn);
    Tensor ref = mse_loss(single->forward(x), y);
    ref.backward();
    CHECK(loss == doctest::Approx(ref.item()).epsilon(1e-5));
    auto got = dp.replica(devices.size() - 1).parameters();
    auto want = single->parameters();
    for (size_t i = 0; i < got.size(); ++i) CHECK(rel_err(got[i].grad(), want[i].grad()) < 1e-5);
    dp.step();
    opt.step();
  }
  // Replicas never drift: the same bits on every device.
  auto p0 = dp.replica(0).parameters();
  for (size_t r = 1; r < devices.size(); ++r) {
    auto pr = dp.replica(r).parameters();
    for (size_t i = 0; i < p0.size(); ++i)
      CHECK(pr[i].cpu().to_vector<float>() == p0[i].cpu().to_vector<float>());
  }
  auto pw = single->parameters();
  for (size_t i = 0; i < p0.size(); ++i) CHECK(rel_err(p0[i], pw[i]) < 1e-4);
}

}  // namespace

TEST_CASE("data_parallel/cpu: three replicas match one module, stay bit-identical") {
  check_against_single({kCPU, kCPU, kCPU});
}

TEST_CASE("data_parallel/cpu: gradients accumulate across steps without zero_grad") {
  manual_seed(3);
  auto single = mlp();
  manual_seed(3);
  DataParallel<nn::Sequential> dp(mlp, {kCPU, kCPU});
  auto loss_fn = [](nn::Sequential& m, const Tensor& x, const Tensor& y) {
    return mse_loss(m.forward(x), y);
  };
  for (int k = 0; k < 2; ++k) {
    Tensor x = randn({5, 6}), y = randn({5, 3});
    dp.forward_backward(x, y, loss_fn);
    mse_loss(single->forward(x), y).backward();
  }
  CHECK(rel_err(dp.replica(1).parameters()[0].grad(), single->parameters()[0].grad()) < 1e-5);
}

TEST_CASE("data_parallel/errors: bad devices and batches are named") {
  CHECK_THROWS_WITH_AS(DataParallel<nn::Sequential>(mlp, std::vector<Device>{}),
                       doctest::Contains("no devices"), Error);
  DataParallel<nn::Sequential> dp(mlp, {kCPU, kCPU});
  auto loss_fn = [](nn::Sequential& m, const Tensor& x, const Tensor& y) {
    return mse_loss(m.forward(x), y);
  };
  CHECK_THROWS_WITH_AS(dp.forward_backward(randn({4, 6}), randn({3, 3}), loss_fn),
                       doctest::Contains("target 3"), Error);
  CHECK_THROWS_WITH_AS(dp.step(), doctest::Contains("set_optimizer"), Error);
}

TEST_CASE("memory_view: one column per device" * doctest::test_suite("cuda")) {
  std::vector<Device> devices = all_gpus();
  Tensor keep = zeros({1024}, TensorOptions().device(devices[0]));
  std::string table = memory_summary_all(devices);
  CHECK(table.find("cuda:0") != std::string::npos);
  CHECK(table.find("Allocated memory (peak)") != std::string::npos);
}

TEST_CASE("data_parallel/cuda: every GPU present matches one module, bit-identical replicas" *
          doctest::test_suite("cuda")) {
  // Built without NCCL, main skips this case (and says so).
  MESSAGE("DataParallel over ", cuda::device_count(), " GPU(s)");
  check_against_single(all_gpus());
}

TEST_CASE("data_parallel/cpu: gradients are views of one buffer per replica, reduced in place") {
  manual_seed(8);
  DataParallel<nn::Sequential> dp(mlp, {kCPU, kCPU});
  auto loss_fn = [](nn::Sequential& m, const Tensor& x, const Tensor& y) {
    return mse_loss(m.forward(x), y);
  };
  for (int step = 0; step < 2; ++step) {
    dp.zero_grad();  // set to none: autograd's fresh gradients are copied into the slots
    dp.forward_backward(randn({6, 6}), randn({6, 3}), loss_fn);
    for (size_t r = 0; r < 2; ++r) {
      auto params = dp.replica(r).parameters();
      const auto& storage = params[0].grad().storage();
      int64_t expect_offset = params[0].grad().storage_offset();
      for (const Tensor& p : params) {
        CHECK(p.grad().storage() == storage);  // one buffer per replica
        CHECK(p.grad().storage_offset() == expect_offset);
        expect_offset += p.numel();
      }
    }
    // Different buffers, same values.
    CHECK(dp.replica(0).parameters()[0].grad().storage() !=
          dp.replica(1).parameters()[0].grad().storage());
    CHECK(dp.replica(0).parameters()[2].grad().to_vector<float>() ==
          dp.replica(1).parameters()[2].grad().to_vector<float>());
  }
}

TEST_CASE("data_parallel/cuda: no pile-up on the first GPU (peak allocated max/min <= 1.10)" *
          doctest::test_suite("cuda")) {
#ifdef EMBER_HAVE_NCCL
  // A model large enough that parameters, gradients, activations and Adam's
  // state dominate; the batch starts on cuda:0 as a loader would put it.
  std::vector<Device> devices = all_gpus();
  auto make = [] {
    return std::make_shared<nn::Sequential>(nn::Linear(1024, 2048), nn::ReLU(),
                                            nn::Linear(2048, 1024));
  };
  manual_seed(2);
  DataParallel<nn::Sequential> dp(make, devices);
  dp.set_optimizer([](std::vector<Tensor> p) {
    return std::make_unique<optim::Adam>(p, optim::AdamOptions(1e-3));
  });
  const int64_t rows = 64 * static_cast<int64_t>(devices.size());
  Tensor x = randn({rows, 1024}, devices[0]), y = randn({rows, 1024}, devices[0]);
  for (const Device& d : devices) reset_peak_memory_stats(d);
  for (int step = 0; step < 3; ++step) {
    dp.zero_grad();
    dp.forward_backward(x, y, [](nn::Sequential& m, const Tensor& a, const Tensor& b) {
      return mse_loss(m.forward(a), b);
    });
    dp.step();
  }
  int64_t lo = INT64_MAX, hi = 0;
  for (const Device& d : devices) {
    lo = std::min(lo, max_memory_allocated(d));
    hi = std::max(hi, max_memory_allocated(d));
  }
  MESSAGE(memory_summary_all(devices));
  CHECK(static_cast<double>(hi) / static_cast<double>(lo) <= 1.10);
#else
  MESSAGE("built without NCCL");
#endif
}
