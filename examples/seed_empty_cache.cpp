// Seed scenario (b): the folk remedy for creeping GPU memory, "drop every output
// and call empty_cache() every step", measured. The same training runs twice,
// plainly and with the remedy, for the seed's SimpleModel and for a wider layer
// whose activations come from the large pool. The remedy never lowers the memory
// tensors use (peak allocated: nothing was leaking); where it does release
// cached segments, the next step pays to allocate them again. Exits 1 if the
// remedy changed the peak of allocated memory (CTest runs it); times are shown,
// never judged.
#include <chrono>
#include <cstdio>
#include <memory>

#include "core/memory.h"
#include "ember.h"
#include "nn/nn.h"
#include "optim/optim.h"

using namespace ember;

constexpr int kEpochs = 3;  // timed, after one warm-up epoch; 10 batches each

struct Result {
  double seconds;
  int64_t peak_allocated;
  int64_t peak_reserved;
};

Result train(Device device, int64_t features, int64_t batch, bool remedy) {
  manual_seed(0);
  Tensor inputs = randn({10 * batch, features});
  Tensor targets = 0.5 * inputs + 0.1 * randn({10 * batch, features});
  nn::DataLoader loader(nn::TensorDataset(inputs, targets),
                        nn::DataLoaderOptions(batch).shuffle(true).device(device));
  auto model = std::make_shared<nn::Linear>(features, features);
  model->to(device);
  optim::Adam optimizer(model->parameters(), optim::AdamOptions(1e-3));
  nn::MSELoss criterion;

  auto run_epoch = [&] {
    for (const nn::Example& batch_data : loader) {
      optimizer.zero_grad();
      Tensor output = model->forward(batch_data.data);
      Tensor loss = criterion.forward(output, batch_data.target);
      loss.backward();
      optimizer.step();
      loss.item();   // as a training loop that logs its loss would
      if (remedy) {  // the folk advice: `del output, loss` and empty the cache
        output = Tensor();
        loss = Tensor();
        empty_cache(device);
      }
    }
  };
  run_epoch();  // warm-up: first allocations, CUDA context, cuBLAS handles
  reset_peak_memory_stats(device);
  const auto start = std::chrono::steady_clock::now();
  for (int epoch = 0; epoch < kEpochs; ++epoch) run_epoch();
  if (device.is_cuda()) cuda::synchronize(device.index);
  const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
  return {elapsed.count(), max_memory_allocated(device), max_memory_reserved(device)};
}

int main() {
  const Device device = cuda::is_available() ? kCUDA : kCPU;
  std::printf("seed_empty_cache: training on %s, %d epochs x 10 batches each way\n",
              device.str().c_str(), kEpochs);
  struct Config {
    const char* name;
    int64_t features, batch;
  };
  const Config configs[] = {{"SimpleModel Linear(10, 10), batch 32", 10, 32},
                            {"Linear(256, 256), batch 2048", 256, 2048}};
  std::printf("%-38s %-10s %10s %16s %16s\n", "model", "variant", "time (ms)", "peak allocated",
              "peak reserved");
  bool wrong = false;
  for (const Config& c : configs) {
    const Result plain = train(device, c.features, c.batch, false);
    const Result remedy = train(device, c.features, c.batch, true);
    for (const auto& [variant, r] : {std::pair{"plain", plain}, {"remedy", remedy}})
      std::printf("%-38s %-10s %10.2f %16lld %16lld\n", c.name, variant, r.seconds * 1e3,
                  static_cast<long long>(r.peak_allocated),
                  static_cast<long long>(r.peak_reserved));
    std::printf("  -> the remedy took %+.0f%% time; peak allocated memory %s (%+lld bytes)\n",
                (remedy.seconds / plain.seconds - 1) * 100,
                remedy.peak_allocated == plain.peak_allocated ? "is the same" : "differs",
                static_cast<long long>(remedy.peak_allocated - plain.peak_allocated));
    wrong = wrong || remedy.peak_allocated != plain.peak_allocated;
  }
  std::printf("verdict: %s\n", wrong ? "WRONG: the remedy changed peak allocated memory"
                                     : "the remedy leaves allocated memory as it was");
  return wrong ? 1 : 0;
}
