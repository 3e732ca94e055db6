// CUDA graphs: cuda::Graph captures a training step (forward, backward, Adam or
// SGD) and its replays give the eager run's parameters bit for bit; what a capture
// refuses (host syncs, random numbers, new optimizer state) throws naming the op
// and leaves eager work running; replays allocate nothing and a destroyed graph
// gives its memory back. The private pools of the caching allocator that graphs
// allocate from are tested here too, on the simulated backend (every machine).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/memory.h"
#include "core/ops.h"
#include "cuda/device_allocator.h"
#include "cuda/graph.h"
#include "error_text.h"
#include "nn/nn.h"
#include "optim/optim.h"

using namespace ember;
using ember::testing::contains;
using ember::testing::error_of;

namespace {

constexpr size_t kMiB = size_t{1} << 20;

cudaStream_t fake_stream(int i) {
  return reinterpret_cast<cudaStream_t>(static_cast<uintptr_t>(i) * 0x1000);
}

// The seed scenario's step: Linear(10, 10), MSELoss, batch 32, on cuda:0.
struct SeedRun {
  std::shared_ptr<nn::Linear> fc;
  std::unique_ptr<optim::Optimizer> opt;
  nn::MSELoss criterion;

  explicit SeedRun(bool adam) {
    manual_seed(0);
    fc = std::make_shared<nn::Linear>(10, 10);
    fc->to(kCUDA);
    if (adam)
      opt = std::make_unique<optim::Adam>(fc->parameters(), optim::AdamOptions(1e-2));
    else
      opt = std::make_unique<optim::SGD>(fc->parameters(),
                                         optim::SGDOptions(0.05).momentum(0.9).weight_decay(1e-3));
  }
  Tensor step(const Tensor& x, const Tensor& y) {
    opt->zero_grad();
    Tensor loss = criterion.forward(fc->forward(x), y);
    loss.backward();
    opt->step();
    return loss;
  }
  std::vector<float> params() const {
    std::vector<float> v = fc->weight.to_vector<float>();
    for (float b : fc->bias.to_vector<float>()) v.push_back(b);
    return v;
  }
};

// Batch s of the data: different every step, the same for every run.
std::pair<Tensor, Tensor> batch(int s) {
  Generator g(1000 + static_cast<uint64_t>(s));
  Tensor x = randn({32, 10}, {}, &g);
  Tensor y = randn({32, 10}, {}, &g);
  return {x.to(kCUDA), y.to(kCUDA)};
}

}  // namespace

// ------------------------------------------------------------------ every machine

TEST_CASE("cuda/graph: a Graph refuses a device that does not exist") {
  const int n = cuda::device_count();
  if (n == 0) {  // this machine: the whole of CUDA is missing, said in ember's words
    for (int device : {-1, 0})
      CHECK(contains(error_of([device] { cuda::Graph g(device); }),
                     "cuda::Graph: this machine has no CUDA device; CUDA graphs capture GPU work "
                     "and need one"));
  } else {
    CHECK(contains(error_of([] { cuda::Graph g(-2); }),
                   "cuda::Graph: device -2 is not a CUDA device"));
  }
  CHECK(contains(error_of([n] { cuda::Graph g(n); }),
                 n == 0 ? "no CUDA device" : "device " + std::to_string(n)));
}

TEST_CASE("cuda/graph: is_capturing is per device and per thread; syncs refuse during capture") {
  CHECK_FALSE(cuda::is_capturing(3));
  CHECK_NOTHROW(cuda::check_not_capturing(3, "item()"));
  cuda::detail::set_capturing(3, true);
  CHECK(cuda::is_capturing(3));
  CHECK_FALSE(cuda::is_capturing(2));
  bool other_thread = true;
  std::thread([&] { other_thread = cuda::is_capturing(3); }).join();
  CHECK_FALSE(other_thread);
  CHECK(contains(error_of([] { cuda::check_not_capturing(3, "item()"); }),
                 "item(): cannot synchronise with the host while a CUDA graph is being captured "
                 "(cuda::Graph::capture); move it outside the captured step"));
  CHECK(contains(error_of([] { cuda::synchronize(3); }), "cuda::synchronize(): cannot"));
  // CPU tensors are not the graph's business.
  cuda::detail::set_capturing(0, true);
  CHECK(tensor({2.5}).item() == 2.5);
  cuda::detail::set_capturing(0, false);
  cuda::detail::set_capturing(3, false);
  CHECK_FALSE(cuda::is_capturing(3));
}

TEST_CASE("allocator/pool: allocations on the capturing stream come from the pool's own segments") {
  memory::CachingAllocator a(std::make_unique<memory::SimulatedBackend>(64 * kMiB));
  const cudaStream_t s = fake_stream(1), s2 = fake_stream(2);
  void* g = a.allocate(kMiB, s);
  a.deallocate(g);  // cached in the general pool, on s
  const auto pool = a.create_pool();
  a.begin_allocate_to_pool(pool, s);
  CHECK(a.capture_underway());
  void* p = a.allocate(kMiB, s);
  CHECK(p != g);  // not the general cache's block
  CHECK(a.memory_reserved() == static_cast<int64_t>(4 * kMiB));
  CHECK(a.memory_allocated() == static_cast<int64_t>(kMiB));
  a.deallocate(p);
  void* q = a.allocate(kMiB, s);
  CHECK(q == p);  // freed during the capture: reused within it
  a.deallocate(q);
  a.end_allocate_to_pool(pool);
  CHECK_FALSE(a.capture_underway());

  // After the capture the pool's free blocks stay the graph's.
  void* r = a.allocate(kMiB, s);
  CHECK(r == g);
  a.deallocate(r);
  a.empty_cache();
  CHECK(a.memory_reserved() == static_cast<int64_t>(2 * kMiB));  // the pool's segment stays

  // Released, the pool's memory becomes general cache on the stream named.
  a.release_pool(pool, s2);
  void* t = a.allocate(kMiB, s2);
  CHECK(t == p);
  a.deallocate(t);
  a.empty_cache();
  CHECK(a.memory_reserved() == 0);
  CHECK(a.memory_allocated() == 0);
}

TEST_CASE("allocator/pool: a block in use when its pool is released joins the general cache") {
  memory::CachingAllocator a(std::make_unique<memory::SimulatedBackend>(64 * kMiB));
  const cudaStream_t s = fake_stream(1), s2 = fake_stream(2);
  const auto pool = a.create_pool();
  a.begin_allocate_to_pool(pool, s);
  void* loss = a.allocate(4096, s);  // a tensor made in the capture, kept after it
  void* scratch = a.allocate(8192, s);
  a.deallocate(scratch);
  a.end_allocate_to_pool(pool);
  a.release_pool(pool, s2);
  CHECK(a.memory_allocated() == 4096);
  a.deallocate(loss);
  void* again = a.allocate(4096, s2);
  CHECK(again == loss);
  a.deallocate(again);
  a.empty_cache();
  CHECK(a.memory_reserved() == 0);
  const memory::MemoryStats st = a.stats();
  CHECK(st.active_bytes[memory::kAggregate].current == 0);
  CHECK(st.segment[memory::kAggregate].current == 0);
}

TEST_CASE("allocator/pool: while a capture is underway nothing is freed; out of memory throws") {
  auto backend = std::make_unique<memory::SimulatedBackend>(4 * kMiB);
  memory::SimulatedBackend* sim = backend.get();
  memory::CachingAllocator a(std::move(backend));
  const cudaStream_t s = fake_stream(1);
  a.deallocate(a.allocate(kMiB, s));  // 2 MiB cached: an eager run would free it to retry
  const auto pool = a.create_pool();
  a.begin_allocate_to_pool(pool, s);
  void* p1 = a.allocate(kMiB, s);
  void* p2 = a.allocate(kMiB, s);  // the pool's segment is full
  std::string oom;
  try {
    a.allocate(kMiB, s);
  } catch (const OutOfMemoryError& e) {
    oom = e.what();
  }
  CHECK(contains(oom, "CUDA graph was being captured"));
  CHECK(sim->raw_free_calls() == 0);
  CHECK(a.stats().num_alloc_retries == 0);
  CHECK(contains(error_of([&] { a.empty_cache(); }),
                 "empty_cache: cannot return cached memory while a CUDA graph is being captured"));
  a.deallocate(p1);
  a.deallocate(p2);
  a.end_allocate_to_pool(pool);
  a.release_pool(pool, s);
  a.empty_cache();
  CHECK(a.memory_reserved() == 0);
  CHECK(sim->used() == 0);
}

TEST_CASE("allocator/pool: a general block freed during a capture waits for the pool's release") {
  memory::CachingAllocator a(std::make_unique<memory::SimulatedBackend>(64 * kMiB));
  const cudaStream_t s0 = fake_stream(0), s1 = fake_stream(1);
  void* g = a.allocate(kMiB, s0);  // made before the capture (a warm-up gradient, say)
  const auto pool = a.create_pool();
  a.begin_allocate_to_pool(pool, s1);
  a.deallocate(g);  // the graph may still use it
  CHECK(a.memory_allocated() == 0);
  a.end_allocate_to_pool(pool);
  void* x = a.allocate(kMiB, s0);
  CHECK(x != g);
  auto pending = [&] {
    int n = 0;
    for (const auto& seg : a.memory_snapshot().segments)
      for (const auto& b : seg.blocks) n += b.state == memory::BlockState::active_pending_free;
    return n;
  };
  CHECK(pending() == 1);
  a.deallocate(x);
  a.release_pool(pool, s0);
  CHECK(pending() == 0);
  a.empty_cache();
  CHECK(a.memory_reserved() == 0);
}

TEST_CASE("allocator/pool: misuse is refused") {
  memory::CachingAllocator a(std::make_unique<memory::SimulatedBackend>(64 * kMiB));
  const cudaStream_t s = fake_stream(1);
  CHECK(contains(error_of([&] { a.begin_allocate_to_pool(42, s); }), "no private pool 42"));
  const auto p = a.create_pool(), q = a.create_pool();
  a.begin_allocate_to_pool(p, s);
  CHECK(contains(error_of([&] { a.begin_allocate_to_pool(p, fake_stream(2)); }),
                 "already capturing"));
  CHECK(contains(error_of([&] { a.begin_allocate_to_pool(q, s); }),
                 "already allocates to another pool"));
  CHECK(contains(error_of([&] { a.release_pool(p, s); }), "still capturing"));
  a.end_allocate_to_pool(p);
  a.release_pool(p, s);
  a.release_pool(q, s);
  CHECK(contains(error_of([&] { a.release_pool(p, s); }), "no private pool"));

  memory::AllocatorOptions sanitize;
  sanitize.sanitize = true;
  memory::CachingAllocator b(std::make_unique<memory::SimulatedBackend>(64 * kMiB), sanitize);
  const auto r = b.create_pool();
  CHECK(contains(error_of([&] { b.begin_allocate_to_pool(r, s); }), "sanitizer mode"));
}

// ------------------------------------------------------------------ on the GPU

namespace {

// Capture refuses the allocator's sanitizer mode, so under
// EMBER_CUDA_ALLOC_CONF=sanitize:True these cases fail here, saying why, rather
// than pass without checking anything.
void require_capturable_allocator() {
  const bool sanitize = cuda::device_caching_allocator(0).options().sanitize;
  INFO("EMBER_CUDA_ALLOC_CONF has sanitize:True; CUDA graph capture needs it off");
  REQUIRE_FALSE(sanitize);
}

// Eager steps on one model, warm-up + capture + replays on an identical one: the
// parameters, the losses and Adam's step count agree bit for bit.
void check_graph_matches_eager(bool adam) {
  const int warm = 3, total = 20;
  SeedRun eager(adam), graphed(adam);
  std::vector<double> eager_losses;
  for (int s = 0; s < total; ++s) {
    auto [x, y] = batch(s);
    eager_losses.push_back(eager.step(x, y).item());
  }

  for (int s = 0; s < warm; ++s) {
    auto [x, y] = batch(s);
    CHECK(graphed.step(x, y).item() == eager_losses[static_cast<size_t>(s)]);
  }
  Tensor sx = empty({32, 10}, TensorOptions().device(kCUDA));
  Tensor sy = empty({32, 10}, TensorOptions().device(kCUDA));
  Tensor static_loss;
  cuda::Graph graph;
  const std::vector<float> before = graphed.params();
  graph.capture([&] { static_loss = graphed.step(sx, sy); });
  REQUIRE(graph.captured());
  CHECK(graphed.params() == before);    // capturing runs nothing
  cuda::Graph moved(std::move(graph));  // a graph is move-only; the moved-to one replays
  CHECK_FALSE(graph.captured());
  for (int s = warm; s < total; ++s) {
    auto [x, y] = batch(s);
    sx.copy_(x);
    sy.copy_(y);
    moved.replay();
    CAPTURE(s);
    CHECK(static_loss.item() == eager_losses[static_cast<size_t>(s)]);  // this replay's loss
  }
  CHECK(graphed.params() == eager.params());
  if (adam) {
    const StateDict sd = graphed.opt->state_dict();
    CHECK(sd.at("state.0.step").item() == total);  // the device count advanced on every replay
    CHECK(sd.at("state.1.step").item() == total);
  }
}

}  // namespace

TEST_CASE("cuda/graph: a captured Adam step replays the eager run bit for bit" *
          doctest::test_suite("cuda")) {
  require_capturable_allocator();
  check_graph_matches_eager(true);
}

TEST_CASE("cuda/graph: a captured SGD (momentum) step replays the eager run bit for bit" *
          doctest::test_suite("cuda")) {
  require_capturable_allocator();
  check_graph_matches_eager(false);
}

TEST_CASE("cuda/graph: item() inside a capture throws, and eager steps go on" *
          doctest::test_suite("cuda")) {
  require_capturable_allocator();
  SeedRun run(true);
  auto [x, y] = batch(0);
  run.step(x, y);
  const cudaStream_t stream_before = cuda::current_stream(0);
  cuda::Graph graph;
  const std::string err = error_of([&] {
    graph.capture([&] {
      Tensor loss = run.step(x, y);
      (void)loss.item();
    });
  });
  CHECK(contains(err,
                 "item(): cannot synchronise with the host while a CUDA graph is being "
                 "captured (cuda::Graph::capture)"));
  CHECK_FALSE(graph.captured());
  CHECK_FALSE(cuda::is_capturing(0));
  CHECK(cuda::current_stream(0) == stream_before);
  CHECK_FALSE(cuda::device_caching_allocator(0).capture_underway());

  // Eager work goes on: a step runs and changes the parameters; a later capture works.
  const std::vector<float> before = run.params();
  const double loss = run.step(x, y).item();
  CHECK(std::isfinite(loss));
  CHECK(run.params() != before);
  Tensor static_loss;
  graph.capture([&] { static_loss = run.step(x, y); });
  graph.replay();
  CHECK(std::isfinite(static_loss.item()));

  // Other refusals name their op.
  cuda::Graph g2;
  const std::string random =
      error_of([&] { g2.capture([] { (void)randperm(4, TensorOptions(kInt64).device(kCUDA)); }); });
  CHECK(contains(random, "randperm: cannot draw random numbers"));
  CHECK(contains(random, "while a CUDA graph is being captured"));
  CHECK(contains(error_of([&] { g2.capture([] { (void)tensor({1.0}, kCUDA); }); }),
                 "to(): cannot copy from host memory"));
  CHECK(contains(error_of([&] { g2.capture([] { empty_cache(kCUDA); }); }),
                 "empty_cache: cannot return cached memory"));
  CHECK_FALSE(cuda::is_capturing(0));
  CHECK(std::isfinite(run.step(x, y).item()));
}

TEST_CASE("cuda/graph: random draws in a captured step are fresh at each replay, as eager ones" *
          doctest::test_suite("cuda")) {
  // randn, randint, dropout, dropout_add_layer_norm's mask (drawn inside the norm's
  // kernel) and the fused attention's dropout inside a capture:
  // replay k equals the same ops run eagerly from the generator's state before it,
  // bit for bit; the capture leaves the generator where it was, each replay advances
  // it by the step's draws.
  require_capturable_allocator();
  const Tensor x = ones({1000}, TensorOptions(kFloat32).device(kCUDA));
  const Tensor q = randn({1, 2, 64, 64}, TensorOptions(kFloat32).device(kCUDA)).to(kBFloat16),
               k = randn({1, 2, 80, 64}, TensorOptions(kFloat32).device(kCUDA)).to(kBFloat16),
               v = randn({1, 2, 80, 64}, TensorOptions(kFloat32).device(kCUDA)).to(kBFloat16);
  const Tensor stream = reshape(x, {10, 100}),
               branch = randn({10, 100}, TensorOptions(kFloat32).device(kCUDA)).to(kBFloat16);
  const bool attention = detail::fused_attention_supported(q, k, v);
  const uint64_t per_step = 300 + 50 + 1000 + 1000 + (attention ? 2 * 64 * 80 : 0);
  auto step = [&](Generator& g) {
    std::vector<Tensor> out = {randn({300}, TensorOptions(kFloat32).device(kCUDA), &g),
                               randint(0, 1000, {50}, TensorOptions(kInt64).device(kCUDA), &g),
                               dropout(x, 0.5, true, &g)};
    auto [sum, normed] =
        dropout_add_layer_norm(stream, branch, 0.4, true, {100}, Tensor(), Tensor(), 1e-5, &g);
    out.push_back(sum);
    out.push_back(normed);
    if (attention) out.push_back(detail::fused_attention(q, k, v, true, 0.125, 0.3, &g));
    return out;
  };
  Generator gen(42);
  gen.set_offset(10);
  (void)step(gen);  // eager warm-up: kernels loaded, handles made
  const uint64_t start = gen.offset();
  cuda::Graph graph;
  std::vector<Tensor> captured;
  graph.capture([&] { captured = step(gen); });
  CHECK(gen.offset() == start);  // the capture drew nothing
  std::vector<std::vector<double>> first;
  for (uint64_t r = 0; r < 3; ++r) {
    graph.replay();
    CHECK(gen.offset() == start + (r + 1) * per_step);
    Generator twin(42);
    twin.set_offset(start + r * per_step);
    const std::vector<Tensor> eager = step(twin);
    for (size_t i = 0; i < eager.size(); ++i) {
      CAPTURE(i);
      const std::vector<double> got = captured[i].to(kFloat64).to(kCPU).to_vector<double>();
      CHECK(got == eager[i].to(kFloat64).to(kCPU).to_vector<double>());
      if (r == 0)
        first.push_back(got);
      else
        CHECK(got != first[i]);  // fresh numbers each replay
    }
  }
}

TEST_CASE("cuda/graph: arange runs on the device, equal to the CPU's, and a graph holds it" *
          doctest::test_suite("cuda")) {
  // arange fills on its tensor's device (no host buffer copied in), so a captured step
  // that makes positions (the GPT's forward, a causal mask) can be recorded.
  for (DType dt : {kFloat64, kFloat32, kBFloat16, kInt64}) {
    CAPTURE(dtype_name(dt));
    const double start = dt == kInt64 ? -7 : 0.1, step = dt == kInt64 ? 3 : 0.3;
    const Tensor on_gpu = arange(start, start + 1000 * step, step, TensorOptions(dt).device(kCUDA));
    CHECK(on_gpu.device() == Device::cuda(0));
    CHECK(on_gpu.to(kCPU).to_vector<double>() ==
          arange(start, start + 1000 * step, step, dt).to_vector<double>());
  }
  require_capturable_allocator();
  const Tensor x = ones({64}, TensorOptions(kFloat32).device(kCUDA));
  Tensor y;
  cuda::Graph graph;
  graph.capture([&] { y = x + arange(64, TensorOptions(kFloat32).device(kCUDA)); });
  REQUIRE(graph.captured());
  graph.replay();
  std::vector<double> want(64);
  for (size_t i = 0; i < want.size(); ++i) want[i] = 1.0 + static_cast<double>(i);
  CHECK(y.to(kCPU).to_vector<double>() == want);
}

TEST_CASE("cuda/graph: optimizer state cannot be created during a capture" *
          doctest::test_suite("cuda")) {
  require_capturable_allocator();
  SeedRun run(true);
  auto [x, y] = batch(0);
  cuda::Graph graph;
  const std::string err = error_of([&] { graph.capture([&] { run.step(x, y); }); });
  CHECK(contains(err, "Adam.step(): the parameter of shape [10, 10] has no 'exp_avg' state yet"));
  CHECK(contains(err, "run a few eager steps before capturing"));
  CHECK(run.opt->state(run.fc->weight) == nullptr);  // nothing was made
  run.step(x, y);                                    // the eager warm-up makes it
  CHECK(run.opt->state(run.fc->weight) != nullptr);
  graph.capture([&] { run.step(x, y); });
  CHECK(graph.captured());
}

TEST_CASE("cuda/graph: replays allocate nothing; a destroyed graph gives its memory back" *
          doctest::test_suite("cuda")) {
  require_capturable_allocator();
  SeedRun run(true);
  std::vector<std::pair<Tensor, Tensor>> data;
  for (int s = 0; s < 8; ++s) data.push_back(batch(s));
  for (int s = 0; s < 3; ++s) run.step(data[s].first, data[s].second);
  Tensor sx = empty({32, 10}, TensorOptions().device(kCUDA));
  Tensor sy = empty_like(sx);
  cuda::synchronize(0);
  empty_cache(kCUDA);
  const int64_t reserved_before = memory_reserved(kCUDA);
  {
    cuda::Graph graph;
    Tensor static_loss;
    graph.capture([&] { static_loss = run.step(sx, sy); });
    sx.copy_(data[3].first);
    sy.copy_(data[3].second);
    graph.replay();
    const int64_t allocated = memory_allocated(kCUDA);
    const int64_t reserved = memory_reserved(kCUDA);
    CHECK(reserved >= reserved_before + static_cast<int64_t>(2 * kMiB));  // the pool's segment
    // The allocator's own counters of calls, not just its byte totals (which an
    // allocate + free pair would leave unchanged): allocations and frees made,
    // segments and device allocations (cudaMalloc) made.
    auto calls = [] {
      const std::map<std::string, int64_t> st = memory_stats(kCUDA);
      return std::vector<int64_t>{st.at("allocation.all.allocated"), st.at("allocation.all.freed"),
                                  st.at("segment.all.allocated"), st.at("num_device_alloc"),
                                  st.at("num_alloc_retries")};
    };
    const std::vector<int64_t> calls_before = calls();
    for (int i = 0; i < 20; ++i) {
      const auto& [x, y] = data[static_cast<size_t>(i % 8)];
      sx.copy_(x);
      sy.copy_(y);
      graph.replay();
    }
    cuda::synchronize(0);
    CHECK(calls() == calls_before);
    CHECK(memory_allocated(kCUDA) == allocated);
    CHECK(memory_reserved(kCUDA) == reserved);
    {  // The counters do see an allocation: one eager op moves them by one each.
      Tensor probe = sx + sy;
      CHECK(calls()[0] == calls_before[0] + 1);
    }
    CHECK(calls()[1] == calls_before[1] + 1);
    CHECK(std::isfinite(static_loss.item()));
    // The graph's tensors die; its pool stays reserved while it lives.
    static_loss = Tensor();
    run.opt->zero_grad();
    empty_cache(kCUDA);
    CHECK(memory_reserved(kCUDA) >= reserved_before + static_cast<int64_t>(2 * kMiB));
  }
  empty_cache(kCUDA);
  CHECK(memory_reserved(kCUDA) <= reserved_before);
  // The summary still adds up, and the model trains on eagerly.
  const std::string summary = memory_summary(kCUDA);
  CHECK(contains(summary, "GPU reserved memory"));
  CHECK(std::isfinite(run.step(data[0].first, data[0].second).item()));
}
