// Soak: the seed scenario (Linear(10, 10), Adam, MSELoss, batches of 32 from a
// shuffling DataLoader) for 100,000 steps, sampling the allocator's allocated
// and reserved bytes every 1,000 steps. After warm-up (the first sample) both
// must stay exactly flat: any creep is a leak, however slow. CPU here; the same
// on CUDA in suite "cuda".
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <vector>

#include "core/memory.h"
#include "core/ops.h"
#include "cuda/runtime.h"
#include "nn/nn.h"
#include "optim/optim.h"

using namespace ember;

namespace {

constexpr int kSteps = 100000;
constexpr int kSampleEvery = 1000;

struct Sample {
  int64_t allocated = 0;
  int64_t reserved = 0;
  bool operator==(const Sample&) const = default;
};

// Runs the soak on `device`; returns one sample per kSampleEvery steps.
std::vector<Sample> soak(Device device, double* final_loss) {
  manual_seed(0);
  Tensor inputs = randn({320, 10});
  Tensor targets = matmul(inputs, randn({10, 10})) + 0.1 * randn({320, 10});
  nn::DataLoader loader(nn::TensorDataset(inputs, targets),
                        nn::DataLoaderOptions(32).shuffle(true).device(device));
  auto model = std::make_shared<nn::Linear>(10, 10);
  model->to(device);
  optim::Adam optimizer(model->parameters(), optim::AdamOptions(1e-2));
  nn::MSELoss criterion;

  std::vector<Sample> samples;
  int step = 0;
  double loss_value = 0;
  while (step < kSteps) {
    for (const nn::Example& batch : loader) {
      optimizer.zero_grad();
      Tensor loss = criterion.forward(model->forward(batch.data), batch.target);
      loss.backward();
      optimizer.step();
      if (++step % kSampleEvery == 0) {
        loss_value = loss.item();
        samples.push_back({memory_allocated(device), memory_reserved(device)});
      }
      if (step == kSteps) break;
    }
  }
  *final_loss = loss_value;
  return samples;
}

void check_flat(const std::vector<Sample>& samples) {
  REQUIRE(samples.size() == kSteps / kSampleEvery);
  const Sample& warm = samples.front();
  MESSAGE("after warm-up: " << warm.allocated << " bytes allocated, " << warm.reserved
                            << " reserved");
  size_t off = 0;
  for (size_t i = 1; i < samples.size(); ++i) {
    if (samples[i] == warm) continue;
    if (off++ == 0)
      MESSAGE("step " << (i + 1) * kSampleEvery << ": " << samples[i].allocated << " allocated, "
                      << samples[i].reserved << " reserved");
  }
  CHECK(off == 0);
}

}  // namespace

TEST_CASE("soak/cpu: 100,000 seed steps keep allocated and reserved memory flat") {
  double loss = 0;
  const std::vector<Sample> samples = soak(kCPU, &loss);
  check_flat(samples);
  CHECK(std::isfinite(loss));
  CHECK(loss < 0.05);  // it trained: the noise floor is 0.01
}

TEST_CASE("soak/cuda: 100,000 seed steps keep device memory flat" * doctest::test_suite("cuda")) {
  double loss = 0;
  const std::vector<Sample> samples = soak(kCUDA, &loss);
  check_flat(samples);
  CHECK(std::isfinite(loss));
  CHECK(loss < 0.05);
}
