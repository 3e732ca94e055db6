// predict_memory (core/predict.h) against the allocator's own figures: the same
// step run on the CPU through a private caching allocator over a simulated device
// of the same capacity (measure_memory), with the meta device mirroring the CPU's
// kernel choices. Every figure, every step, byte for byte: the seed scenario, an
// MLP with Adam, a small ResNet (convolution, batch norm, pooling), gradient
// accumulation, a varying batch, the leak examples, out of memory, allocator
// policies and the batch-size search.
#include <doctest/doctest.h>

#include <numeric>

#include "core/meta.h"
#include "core/predict.h"
#include "error_text.h"
#include "examples/workloads.h"

using namespace ember;
using ember::testing::contains;
using ember::testing::error_of;

namespace {

constexpr size_t kCapacity = size_t{256} << 20;

PredictOptions cpu_options(int steps, size_t capacity = kCapacity) {
  return PredictOptions()
      .steps(steps)
      .capacity(capacity)
      .mirror(DeviceType::CPU)
      .allocator(memory::AllocatorOptions{});
}

void check_step(const StepMemory& p, const StepMemory& m) {
  CHECK(p.allocated == m.allocated);
  CHECK(p.reserved == m.reserved);
  CHECK(p.peak_allocated == m.peak_allocated);
  CHECK(p.peak_reserved == m.peak_reserved);
  CHECK(p.growth == m.growth);
}

int64_t site_bytes(const MemoryPrediction& r) {
  int64_t sum = 0;
  for (const SiteMemory& s : r.peak_sites) sum += s.bytes;
  return sum;
}

// Predicted (meta, mirroring the CPU) against measured (the CPU through a
// simulated device): everything the allocator counts. `same_sites`: the sites
// too, by name (not where data come from the host: a host tensor moved to the
// device is tagged "to" there, and by its factory on the CPU).
MemoryPrediction check_exact(const StepFactory& factory, PredictOptions options,
                             bool same_sites = true) {
  options.top_sites(1000);  // every site, so their bytes add up to the peak
  const MemoryPrediction m = measure_memory(factory, kCPU, options);
  const MemoryPrediction p = predict_memory(factory, options);
  CHECK(p.fits == m.fits);
  CHECK(p.failed_step == m.failed_step);
  CHECK(p.failure == m.failure);
  {
    INFO("set-up");
    check_step(p.setup, m.setup);
  }
  REQUIRE(p.steps.size() == m.steps.size());
  for (size_t i = 0; i < p.steps.size(); ++i) {
    INFO("step ", i);
    check_step(p.steps[i], m.steps[i]);
  }
  CHECK(p.peak_allocated == m.peak_allocated);
  CHECK(p.peak_reserved == m.peak_reserved);
  CHECK(p.peak_step == m.peak_step);
  const auto pm = p.stats.to_map(), mm = m.stats.to_map();
  for (const auto& [key, value] : mm) {  // every counter, PyTorch's keys
    CAPTURE(key);
    CHECK(pm.at(key) == value);
  }
  CHECK(p.library_bytes == 0);  // the CPU has no library workspaces
  CHECK(site_bytes(p) == site_bytes(m));
  CHECK(site_bytes(p) == p.peak_allocated);
  if (same_sites) {
    REQUIRE(p.peak_sites.size() == m.peak_sites.size());
    for (size_t i = 0; i < p.peak_sites.size(); ++i) {
      CHECK(p.peak_sites[i].site == m.peak_sites[i].site);
      CHECK(p.peak_sites[i].bytes == m.peak_sites[i].bytes);
      CHECK(p.peak_sites[i].blocks == m.peak_sites[i].blocks);
    }
  }
  return p;
}

}  // namespace

TEST_CASE("predict/seed: the seed scenario's memory, predicted = measured, every step") {
  workloads::SeedTrain seed;
  const StepFactory f = [&](Device d) { return seed.make(d); };
  // 12 steps: one epoch of 10 batches and the start of the next.
  const MemoryPrediction p = check_exact(f, cpu_options(12), /*same_sites=*/false);
  // By hand: the set-up holds Linear(10, 10)'s weight (400 bytes) and bias (40),
  // 512 bytes each; everything else fits one 2 MiB small segment.
  CHECK(p.setup.allocated == 1024);
  CHECK(p.peak_reserved == int64_t{2} << 20);
  CHECK(p.fits);
  CHECK_FALSE(p.grows());
  CHECK(p.steps.size() == 12);
}

TEST_CASE("predict/mlp: an MLP with Adam, predicted = measured, sites included") {
  // benchmarks/train_step.cpp's MLP, smaller for the CPU: 4 x Linear(64, 64), batch 48.
  const StepFactory f = [](Device d) {
    return workloads::mlp(d, 48, workloads::Precision::fp32, 64, 4);
  };
  const MemoryPrediction p = check_exact(f, cpu_options(6));
  // Adam's state appears in step 0 (two moments and a step count per parameter),
  // gradients stay between steps (zero_grad sets them to none before the next
  // backward): from step 1 on, nothing grows.
  CHECK(p.steps[0].growth > 0);
  for (size_t i = 1; i < p.steps.size(); ++i) CHECK(p.steps[i].growth == 0);
  CHECK_FALSE(p.peak_sites.empty());
}

TEST_CASE("predict/resnet8: convolution, batch norm and pooling with SGD, predicted = measured") {
  // bench_conv's ResNet-8, small for the CPU: batch 2 of 16 x 16 images. The columns
  // (im2col), their gradient (col2im), the fused batch norm's statistics and the
  // momentum buffers, byte for byte, every step.
  // Sites by bytes only: the parameters, made on the host and moved, are "to" on the
  // meta device and their factories' (empty, ones, zeros) on the CPU.
  const StepFactory f = [](Device d) { return workloads::resnet8(d, 2, 16); };
  const MemoryPrediction p = check_exact(f, cpu_options(4), /*same_sites=*/false);
  // Momentum buffers appear in step 0; from step 1 on nothing grows.
  CHECK(p.steps[0].growth > 0);
  for (size_t i = 1; i < p.steps.size(); ++i) CHECK(p.steps[i].growth == 0);
  // The largest columns, layer 1's 3x3 over 64 channels at 16 x 16 (2 x 576 x 256
  // float32: 1.125 MiB), are live at the peak or below it.
  CHECK(p.peak_allocated >= int64_t{2} * 576 * 256 * 4);
}

TEST_CASE("predict/grad_accum: gradient accumulation, predicted = measured") {
  workloads::SeedGradAccum seed;
  const StepFactory f = [&](Device d) { return seed.make(d); };
  check_exact(f, cpu_options(14), /*same_sites=*/false);
}

TEST_CASE("predict/varying_batch: a batch size that changes every step, predicted = measured") {
  const StepFactory f = [](Device d) { return workloads::varying_batch(d, 48, 8); };
  check_exact(f, cpu_options(10));
}

TEST_CASE("predict/leaks: the leak examples, predicted = measured; leaks grow, fixes do not") {
  // A loss total kept as a tensor leaks host memory only: each step's graph stays
  // chained to it, but backward freed the tensors its nodes saved (the README's
  // "allocated memory flat"). The others keep device tensors from every step.
  using workloads::Leak;
  for (Leak pattern : {Leak::loss_accumulation, Leak::outputs_list, Leak::module_cache,
                       Leak::validation_no_grad, Leak::replica_per_step}) {
    for (bool fixed : {false, true}) {
      CAPTURE(static_cast<int>(pattern));
      CAPTURE(fixed);
      const StepFactory f = [=](Device d) { return workloads::leak(d, pattern, fixed); };
      const MemoryPrediction p = check_exact(f, cpu_options(6), /*same_sites=*/false);
      CHECK(p.grows() == (!fixed && pattern != Leak::loss_accumulation));
      if (fixed || pattern == Leak::loss_accumulation)
        for (size_t i = 2; i < p.steps.size(); ++i) CHECK(p.steps[i].growth == 0);
    }
  }
}

TEST_CASE("predict/oom: a step that does not fit fails where the real run fails") {
  // Width 160: batches up to 1024 (steps 0 to 3) keep every block in the small
  // pool; step 4's batch of 2048 needs blocks over 1 MiB, so a 20 MiB segment.
  const StepFactory f = [](Device d) { return workloads::varying_batch(d, 160, 1); };
  const MemoryPrediction unlimited = predict_memory(f, cpu_options(10, kNoCapacityLimit));
  REQUIRE(unlimited.fits);
  // Room for the first three steps' peak only: a later, larger batch cannot fit.
  size_t capacity = 0;
  for (size_t i = 0; i < 3; ++i)
    capacity = std::max(capacity, static_cast<size_t>(unlimited.steps[i].peak_reserved));
  REQUIRE(static_cast<size_t>(unlimited.peak_reserved) > capacity);
  const MemoryPrediction p = check_exact(f, cpu_options(10, capacity));
  CHECK_FALSE(p.fits);
  CHECK(p.failed_step >= 3);
  CHECK(contains(p.failure, "out of memory"));
  // What it would need: the unlimited run's reserved peak.
  CHECK(p.needed_bytes == unlimited.peak_reserved);
  // Nothing fits in 1 MiB: the first small segment is 2 MiB.
  const MemoryPrediction tiny = check_exact(f, cpu_options(3, size_t{1} << 20));
  CHECK(tiny.failed_step == -1);
}

TEST_CASE("predict/policies: another allocator policy, predicted = measured with it") {
  const StepFactory f = [](Device d) { return workloads::varying_batch(d, 48, 4); };
  const std::string policy = "roundup_power2_divisions:4";
  PredictOptions options = cpu_options(10);
  options.policy(policy);
  const MemoryPrediction p = predict_memory(f, options);
  REQUIRE(p.policies.size() == 1);
  CHECK(p.policies[0].policy == policy);
  const MemoryPrediction m =
      measure_memory(f, kCPU, cpu_options(10).allocator(memory::AllocatorOptions::parse(policy)));
  CHECK(p.policies[0].peak_allocated == m.peak_allocated);
  CHECK(p.policies[0].peak_reserved == m.peak_reserved);
  CHECK(p.policies[0].segments == m.stats.num_device_alloc);
  CHECK(p.policies[0].fits == m.fits);
  // The policy took effect: power-of-two steps round differently from 512 bytes.
  CHECK(p.policies[0].peak_allocated != p.peak_allocated);
}

TEST_CASE("predict/batch_search: the largest batch that fits, and the next does not, for real") {
  const BatchStepFactory f = workloads::mlp_batched(workloads::Precision::fp32, 32, 2);
  const PredictOptions options = cpu_options(2, size_t{4} << 20);
  const BatchSearch s = largest_fitting_batch(f, 1, 1 << 16, options);
  REQUIRE(s.batch > 1);
  REQUIRE(s.batch < (1 << 16));
  CHECK(s.at_batch.fits);
  // Bisection: about log2(2^16) probes, each a meta run.
  CHECK(s.probes.size() <= 20);
  const MemoryPrediction at =
      measure_memory([&](Device d) { return f(d, s.batch); }, kCPU, options);
  const MemoryPrediction above =
      measure_memory([&](Device d) { return f(d, s.batch + 1); }, kCPU, options);
  CHECK(at.fits);
  CHECK_FALSE(above.fits);
  CHECK(at.peak_reserved == s.at_batch.peak_reserved);
}

TEST_CASE("predict/errors: a step that reads values on meta is told to be shape-only") {
  const StepFactory reads = [](Device d) {
    Tensor w = ones({4, 4}, TensorOptions().device(d).requires_grad());
    return StepFunction([w](int) {
      Tensor loss = (w * 2.0).sum();
      loss.backward();
      std::printf("loss %f\n", loss.item());
    });
  };
  const std::string e = error_of([&] { (void)predict_memory(reads, cpu_options(2)); });
  CHECK(contains(e, "item(): a tensor on meta has a shape but no values"));
  CHECK(contains(e, "shape-only code"));
  CHECK(contains(error_of([] { (void)predict_memory(StepFactory()); }), "step factory is empty"));
  CHECK(contains(error_of([] {
                   (void)largest_fitting_batch([](Device, int64_t) { return StepFunction(); }, 4,
                                               2);
                 }),
                 "need 1 <= lo <= hi, got [4, 2]"));
}

TEST_CASE("predict/table: the report names the peak, the fit and the leak") {
  const StepFactory f = [](Device d) {
    return workloads::leak(d, workloads::Leak::outputs_list, false);
  };
  const MemoryPrediction p = predict_memory(f, cpu_options(6));
  const std::string t = p.table();
  CHECK(contains(t, "meta (mirroring cpu)"));
  CHECK(contains(t, "peak allocated  " + std::to_string(p.peak_allocated)));
  CHECK(contains(t, "fits: yes"));
  CHECK(contains(
      t, "LEAK: allocated memory grows every step, by " + std::to_string(p.growth_per_step())));
  CHECK(contains(t, "largest allocation sites live at the peak"));
}
