// Faults real training meets. Out of memory at each allocation of a training step
// in turn: the step throws OutOfMemoryError, nothing leaks (allocated bytes are
// back at their pre-step value), nothing is half-updated, and the next step
// succeeds; a run with faults ends bit-identical to one without. And a checkpoint
// write killed (SIGKILL) at random points always leaves a loadable checkpoint.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/autograd.h"
#include "core/memory/allocator.h"
#include "core/memory/caching_allocator.h"
#include "core/ops.h"
#include "nn/nn.h"
#include "optim/optim.h"

using namespace ember;

namespace {

constexpr size_t kMiB = size_t{1} << 20;

// Forwards to a caching allocator and throws OutOfMemoryError at the
// `fail_at`-th non-empty allocation (1-based; 0: never), as a device that runs
// out exactly there would. Counts calls so a test can walk every allocation.
class FaultyAllocator final : public memory::Allocator {
 public:
  explicit FaultyAllocator(memory::CachingAllocator& inner) : inner_(inner) {}
  void* allocate(size_t bytes, cudaStream_t stream) override {
    if (bytes != 0 && ++calls_ == fail_at_)
      throw OutOfMemoryError("CPU out of memory (injected at allocation " + std::to_string(calls_) +
                             ")");
    return inner_.allocate(bytes, stream);
  }
  void deallocate(void* ptr) noexcept override { inner_.deallocate(ptr); }
  void arm(size_t fail_at) {
    calls_ = 0;
    fail_at_ = fail_at;
  }
  size_t calls() const { return calls_; }

 private:
  memory::CachingAllocator& inner_;
  size_t calls_ = 0;
  size_t fail_at_ = 0;
};

// The seed model on a private allocator: Linear(10, 10), Adam, MSE, batch 32.
struct Trainer {
  std::shared_ptr<nn::Linear> model;
  std::unique_ptr<optim::Adam> opt;
  Tensor x, y;

  explicit Trainer(uint64_t seed) {
    Generator gen(seed);
    manual_seed(seed);
    model = std::make_shared<nn::Linear>(10, 10);
    opt = std::make_unique<optim::Adam>(model->parameters(), optim::AdamOptions(1e-2));
    x = randn({32, 10}, kFloat32, &gen);
    y = randn({32, 10}, kFloat32, &gen);
  }
  // Forward, backward and update; grads are dropped beforehand by the caller.
  double step() {
    Tensor loss = nn::functional::mse_loss(model->forward(x), y);
    loss.backward();
    opt->step();
    return loss.item();
  }
  std::vector<std::vector<double>> params() const {
    std::vector<std::vector<double>> out;
    for (const Tensor& p : model->parameters()) out.push_back(p.to_vector<double>());
    return out;
  }
  std::vector<int64_t> steps() const {
    std::vector<int64_t> out;
    for (const Tensor& p : model->parameters()) {
      const optim::ParamState* s = opt->state(p);
      out.push_back(s == nullptr ? -1 : s->step);
    }
    return out;
  }
};

}  // namespace

TEST_CASE("faults/oom: out of memory at each allocation of a training step in turn") {
  memory::CachingAllocator memory(std::make_unique<memory::SimulatedBackend>(256 * kMiB));
  FaultyAllocator faulty(memory);
  memory::HostAllocatorOverride use(faulty);

  Trainer clean(3), faulted(3);
  // Step 0 makes the optimizer's state (allocations that only the first step
  // does); step 1 is the steady state. Both are walked allocation by allocation.
  for (int step = 0; step < 2; ++step) {
    CAPTURE(step);
    clean.opt->zero_grad();
    faulty.arm(0);
    const double clean_loss = clean.step();
    const size_t allocations = faulty.calls();
    // The steady-state step allocates 9 times (forward 4: the CPU's fused Linear
    // writes its bias into its output; backward 5; the CPU products read transposed
    // operands in place, so no copies), the first more.
    REQUIRE(allocations >= 9);

    for (size_t k = 1; k <= allocations; ++k) {
      CAPTURE(k);
      faulted.opt->zero_grad();
      const int64_t allocated = memory.memory_allocated();
      const auto params = faulted.params();
      const auto steps = faulted.steps();
      faulty.arm(k);
      CHECK_THROWS_AS(faulted.step(), OutOfMemoryError);
      faulty.arm(0);
      // Gradients already accumulated are the user's to drop (as in PyTorch);
      // after that, every byte the step took is back.
      faulted.opt->zero_grad();
      CHECK(memory.memory_allocated() == allocated);
      CHECK(faulted.params() == params);
      CHECK(faulted.steps() == steps);
    }
    // The same step now succeeds and matches the run that never failed.
    faulted.opt->zero_grad();
    CHECK(faulted.step() == clean_loss);
    CHECK(faulted.params() == clean.params());
    CHECK(faulted.steps() == clean.steps());
  }
}

TEST_CASE("faults/oom: the simulated backend failing each segment allocation of a step") {
  // From a cold cache, the step's own segments come from the backend; a failure
  // schedule fails the k-th of them and its retry, so the caching allocator's
  // real out-of-memory path (free the cache, retry, throw) runs at each.
  auto backend = std::make_unique<memory::SimulatedBackend>(256 * kMiB);
  memory::SimulatedBackend* sim = backend.get();
  memory::CachingAllocator memory(std::move(backend));
  memory::HostAllocatorOverride use(memory);
  // Tensors of more than 1 MiB, so each activation and state buffer needs a
  // large-pool block: Linear(512, 512) with a batch of 1024.
  Generator gen(5);
  manual_seed(5);
  auto model = std::make_shared<nn::Linear>(512, 512);
  optim::Adam opt(model->parameters(), optim::AdamOptions(1e-3));
  Tensor x = randn({1024, 512}, kFloat32, &gen), y = randn({1024, 512}, kFloat32, &gen);
  auto step = [&] {
    Tensor loss = nn::functional::mse_loss(model->forward(x), y);
    loss.backward();
    opt.step();
  };
  auto params = [&] {
    std::vector<std::vector<double>> out;
    for (const Tensor& p : model->parameters()) out.push_back(p.to_vector<double>());
    return out;
  };

  // Walk k = 0, 1, ...: fail the k-th segment allocation of the step (and its
  // retry) until the step needs fewer segments than k and so succeeds.
  size_t k = 0;
  for (;; ++k) {
    CAPTURE(k);
    REQUIRE(k < 64);
    opt.zero_grad();
    memory.empty_cache();
    const int64_t allocated = memory.memory_allocated();
    const int64_t ooms = memory.stats().num_ooms;
    const auto before = params();
    std::vector<bool> schedule(k, false);
    schedule.push_back(true);  // the k-th segment allocation of the step...
    schedule.push_back(true);  // ...and its retry after the cache was freed
    sim->set_failure_schedule(schedule);
    bool failed = false;
    try {
      step();
    } catch (const OutOfMemoryError& e) {
      failed = true;
      CHECK(std::string(e.what()).find("CPU out of memory") == std::string::npos);
      CHECK(std::string(e.what()).find("out of memory. Tried to allocate") != std::string::npos);
    }
    sim->set_failure_schedule({});
    if (!failed) break;  // the step needed only k segments: all were walked
    opt.zero_grad();
    CHECK(memory.memory_allocated() == allocated);
    CHECK(memory.stats().num_ooms == ooms + 1);
    CHECK(params() == before);
    CHECK(opt.state(model->parameters()[0]) == nullptr);  // all or nothing
  }
  CHECK(k >= 2);  // at least two different allocations were made to fail
  CHECK(opt.state(model->parameters()[0])->step == 1);
}

TEST_CASE("faults/checkpoint: a save killed at random points leaves a loadable checkpoint") {
  const std::string path = "/tmp/ember_test_killed_" + std::to_string(getpid()) + ".ckp";
  // About 8 MB, so a save spends measurable time writing and syncing.
  auto model = std::make_shared<nn::Sequential>(nn::Linear(1024, 1024), nn::Linear(1024, 1024));
  auto fill = [&](double v) {
    NoGradGuard no_grad;
    for (Tensor p : model->parameters()) p.fill_(v);
  };
  fill(0.0);
  nn::save(*model, path);

  std::mt19937 rng(1234);
  std::uniform_int_distribution<int> delay_us(0, 60000);
  double last_seen = 0.0;
  int loads = 0;
  for (int round = 0; round < 20; ++round) {
    CAPTURE(round);
    const double base = 1000.0 * (round + 1);
    const pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      // The child saves new versions until it is killed (or gives up after 10 s).
      try {
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        for (int v = 1; std::chrono::steady_clock::now() < until; ++v) {
          fill(base + v);
          nn::save(*model, path);
        }
      } catch (...) {
        _exit(2);
      }
      _exit(0);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(delay_us(rng)));
    ::kill(child, SIGKILL);
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    CHECK((WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL));

    // Whatever the child was doing, the file is a whole checkpoint of one version.
    auto loaded = std::make_shared<nn::Sequential>(nn::Linear(1024, 1024), nn::Linear(1024, 1024));
    REQUIRE_NOTHROW(nn::load(*loaded, path));
    ++loads;
    const double v = loaded->parameters()[0].to_vector<double>()[0];
    bool uniform = true;
    for (const Tensor& p : loaded->parameters())
      for (double e : p.to_vector<double>()) uniform = uniform && e == v;
    CHECK(uniform);
    CHECK(v >= last_seen);  // never older than a checkpoint already seen complete
    last_seen = v;
  }
  CHECK(loads == 20);
  std::remove(path.c_str());
  std::remove((path + ".tmp").c_str());
}
