// DistributedDataParallel on the MPI backend, with however many ranks mpirun gave:
// gradients against one process on the whole batch, bucket order and overlap,
// no_sync accumulation, unused parameters, a rank that does not show up.
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <memory>
#include <string>

#include "core/autograd.h"
#include "core/ops.h"
#include "nn/activation.h"
#include "nn/linear.h"
#include "nn/sequential.h"
#include "optim/sgd.h"
#include "parallel/distributed.h"
#include "parallel/mpi_communicator.h"

using namespace ember;
using namespace ember::parallel;

namespace {

std::shared_ptr<MpiCommunicator> world(
    std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
  return std::make_shared<MpiCommunicator>(MPI_COMM_WORLD, CommOptions().timeout(timeout));
}

std::shared_ptr<nn::Sequential> make_mlp(uint64_t seed) {
  manual_seed(seed);
  return std::make_shared<nn::Sequential>(nn::Linear(4, 16), nn::ReLU(), nn::Linear(16, 8),
                                          nn::ReLU(), nn::Linear(8, 2));
}

double rel_err(const Tensor& a, const Tensor& b) {
  Tensor d = (a.to(kFloat64) - b.to(kFloat64)).pow(2).sum();
  Tensor r = b.to(kFloat64).pow(2).sum();
  return std::sqrt(d.item() / std::max(r.item(), 1e-30));
}

// The batch every rank knows; rank r trains on rows [r * per_rank, (r + 1) * per_rank).
struct Batch {
  Tensor x, y;
};
Batch full_batch(int64_t rows, uint64_t seed) {
  manual_seed(seed);
  return {randn({rows, 4}), randn({rows, 2})};
}

struct TwoHeads : nn::Module {
  TwoHeads() {
    used = register_module("used", std::make_shared<nn::Linear>(4, 2));
    unused = register_module("unused", std::make_shared<nn::Linear>(4, 2));
  }
  Tensor forward(const Tensor& x) const { return used->forward(x); }
  std::shared_ptr<nn::Linear> used, unused;
};

}  // namespace

TEST_CASE("communicator/mpi: all_reduce, broadcast, all_gather, reduce_scatter, barrier") {
  auto comm = world();
  const int r = comm->rank(), n = comm->size();
  SUBCASE("float32 and float64 sum and average") {
    for (DType t : {kFloat32, kFloat64}) {
      Tensor a = full({3, 2}, r + 1.0, t);
      comm->all_reduce(a, ReduceOp::Sum);
      CHECK(a.to_vector<double>() == std::vector<double>(6, n * (n + 1) / 2.0));
      Tensor b = full({5}, 2.0 * r, t);
      comm->all_reduce(b, ReduceOp::Average);
      CHECK(b.to_vector<double>()[4] == doctest::Approx(n - 1.0));
    }
  }
  SUBCASE("broadcast from the last rank") {
    Tensor a = full({4}, r, kFloat32);
    comm->broadcast(a, n - 1);
    CHECK(a.to_vector<float>() == std::vector<float>(4, float(n - 1)));
  }
  SUBCASE("all_gather and reduce_scatter") {
    Tensor a = full({2, 3}, r, kFloat64);
    Tensor g = comm->all_gather(a);
    REQUIRE(g.sizes() == Shape{2 * n, 3});
    for (int k = 0; k < n; ++k) CHECK(g[2 * k + 1][2].item() == k);
    Tensor in = arange(2.0 * n, kFloat32);  // rank-independent: block r is {2r, 2r + 1}
    Tensor out = comm->reduce_scatter(in, ReduceOp::Sum);
    CHECK(out.to_vector<float>() == std::vector<float>{float(2 * r * n), float((2 * r + 1) * n)});
    comm->barrier();
  }
  SUBCASE("wrong device or layout is refused, naming the problem") {
    Tensor t = zeros({2, 3}).t();
    CHECK_THROWS_WITH_AS(comm->all_reduce(t), doctest::Contains("not contiguous"), Error);
  }
}

TEST_CASE("ddp/gradients: equal one process's gradients on the concatenated batch") {
  auto comm = world();
  const int r = comm->size() > 1 ? comm->rank() : 0, n = comm->size();
  const int64_t per_rank = 5;
  // Different initial weights per rank: construction must broadcast rank 0's.
  auto model = make_mlp(100 + r);
  DistributedDataParallel ddp(model, comm, DdpOptions().first_bucket_bytes(64).bucket_bytes(300));
  auto reference = make_mlp(100);
  Batch batch = full_batch(per_rank * n, 7);
  Tensor x = batch.x.slice(0, r * per_rank, (r + 1) * per_rank);
  Tensor y = batch.y.slice(0, r * per_rank, (r + 1) * per_rank);

  optim::SGD opt(model->parameters(), optim::SGDOptions(0.05));
  optim::SGD ref_opt(reference->parameters(), optim::SGDOptions(0.05));
  for (int step = 0; step < 5; ++step) {
    opt.zero_grad();
    ref_opt.zero_grad();
    mse_loss(model->forward(x), y).backward();
    mse_loss(reference->forward(batch.x), batch.y).backward();
    auto got = model->named_parameters();
    auto want = reference->named_parameters();
    for (size_t i = 0; i < got.size(); ++i) {
      CAPTURE(got[i].first);
      CHECK(rel_err(got[i].second.grad(), want[i].second.grad()) < 1e-5);
    }
    opt.step();
    ref_opt.step();
  }
  // Replicas never drift: every rank holds the same bits.
  for (const Tensor& p : model->parameters()) {
    Tensor all = comm->all_gather(p.detach().reshape({1, -1}));
    for (int k = 1; k < n; ++k) CHECK(all[k].to_vector<float>() == all[0].to_vector<float>());
  }
}

TEST_CASE("ddp/buckets: reverse registration order, same launch order on every rank, overlap") {
  auto comm = world();
  auto model = make_mlp(3);
  // Parameters in floats: 64 + 16, 128 + 8, 16 + 2. Caps of 72 then 600 bytes.
  DistributedDataParallel ddp(model, comm, DdpOptions().first_bucket_bytes(72).bucket_bytes(600));
  auto buckets = ddp.buckets();
  REQUIRE(buckets.size() >= 3);
  CHECK(buckets[0].parameters == std::vector<std::string>{"4.bias", "4.weight"});
  CHECK(buckets[1].parameters.front() == "2.bias");
  CHECK(buckets.back().parameters.back() == "0.weight");

  Batch batch = full_batch(6, 11);
  mse_loss(model->forward(batch.x), batch.y).backward();
  const auto& trace = ddp.last_sync_trace();
  std::vector<double> launches;
  size_t first_launch = trace.size(), last_grad = 0;
  for (size_t i = 0; i < trace.size(); ++i) {
    if (trace[i].kind == SyncEvent::BucketLaunched) {
      launches.push_back(static_cast<double>(trace[i].index));
      first_launch = std::min(first_launch, i);
    } else {
      last_grad = i;
    }
  }
  REQUIRE(launches.size() == buckets.size());
  for (size_t i = 0; i < launches.size(); ++i) CHECK(launches[i] == double(i));
  // The first bucket went out while later gradients were still being computed.
  CHECK(first_launch < last_grad);
  Tensor mine = from_vector(launches, {1, static_cast<int64_t>(launches.size())}, kFloat64);
  Tensor all = comm->all_gather(mine);
  for (int k = 1; k < comm->size(); ++k) CHECK(all[k].to_vector<double>() == launches);
}

TEST_CASE("ddp/no_sync: accumulates locally, then the synced backward averages the sum") {
  auto comm = world();
  const int r = comm->rank(), n = comm->size();
  auto model = make_mlp(21);
  auto reference = make_mlp(21);
  DistributedDataParallel ddp(model, comm, DdpOptions().first_bucket_bytes(128));
  Batch a = full_batch(2 * n, 31), b = full_batch(2 * n, 32);
  auto mine = [&](const Tensor& t) { return t.slice(0, 2 * r, 2 * r + 2); };
  {
    auto guard = ddp.no_sync();
    mse_loss(model->forward(mine(a.x)), mine(a.y)).backward();
    CHECK(ddp.last_sync_trace().empty());
  }
  // Local only so far: equal to this rank's shard alone.
  auto local = make_mlp(21);
  mse_loss(local->forward(mine(a.x)), mine(a.y)).backward();
  CHECK(rel_err(model->parameters()[0].grad(), local->parameters()[0].grad()) < 1e-6);

  mse_loss(model->forward(mine(b.x)), mine(b.y)).backward();
  Tensor ref_loss = mse_loss(reference->forward(a.x), a.y) + mse_loss(reference->forward(b.x), b.y);
  ref_loss.backward();
  auto got = model->named_parameters();
  auto want = reference->named_parameters();
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(got[i].first);
    CHECK(rel_err(got[i].second.grad(), want[i].second.grad()) < 1e-5);
  }
}

TEST_CASE("ddp/unused: a parameter without gradient is named, or counted as zero on request") {
  auto comm = world();
  Tensor x = full({3, 4}, 0.5), y = zeros({3, 2});
  SUBCASE("error names it") {
    auto model = std::make_shared<TwoHeads>();
    DistributedDataParallel ddp(model, comm);
    try {
      mse_loss(model->forward(x), y).backward();
    } catch (const Error& e) {
      if (comm->rank() == 0) MESSAGE(std::string(e.what()));
    }
    CHECK_THROWS_WITH_AS(mse_loss(model->forward(x), y).backward(),
                         doctest::Contains("'unused.weight', 'unused.bias'"), Error);
    // The next backward works again (the failed one left nothing in flight).
    CHECK_THROWS_WITH_AS(mse_loss(model->forward(x), y).backward(),
                         doctest::Contains("find_unused_parameters"), Error);
  }
  SUBCASE("find_unused_parameters") {
    auto model = std::make_shared<TwoHeads>();
    DistributedDataParallel ddp(model, comm, DdpOptions().find_unused_parameters(true));
    mse_loss(model->forward(x), y).backward();
    CHECK(model->unused->parameters()[0].grad().abs().sum().item() == 0.0);
    CHECK(model->used->parameters()[0].grad().abs().sum().item() > 0.0);
  }
}

TEST_CASE("communicator/timeout: a rank that skips a collective makes the others fail in time" *
          doctest::test_suite("2+ ranks")) {
  auto control = world();
  REQUIRE(control->size() >= 2);  // main skips this suite with one rank
  // 300 ms here and in the other timeout cases: each waits its timeout out, then up to
  // half of it (at least 200 ms) for the answers, on every CTest run of np2 and np3;
  // their healthy collectives take milliseconds, under TSan too.
  auto comm = world(std::chrono::milliseconds(300));
  const auto start = std::chrono::steady_clock::now();
  if (comm->rank() != 1) {
    Tensor t = ones({8});
    std::string what;
    try {
      comm->all_reduce(t);
    } catch (const CollectiveTimeoutError& e) {
      what = e.what();
    }
    if (comm->rank() == 0) MESSAGE(what);
    CHECK(what.find("all_reduce") != std::string::npos);
    CHECK(what.find("ranks that did not arrive: rank 1 (no answer") != std::string::npos);
    if (comm->size() > 2) CHECK(what.find("waiting with this rank: ") != std::string::npos);
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    CHECK(s < 4.0);
    CHECK_THROWS_WITH_AS(comm->barrier(), doctest::Contains("unusable"), Error);
  }
  control->barrier();
}

TEST_CASE("ddp/timeout: a rank that skips backward makes the others name the bucket" *
          doctest::test_suite("2+ ranks")) {
  auto control = world();
  REQUIRE(control->size() >= 2);  // main skips this suite with one rank
  auto comm = world(std::chrono::milliseconds(300));
  auto model = make_mlp(5);
  DistributedDataParallel ddp(model, comm, DdpOptions().first_bucket_bytes(72));
  if (comm->rank() != 1) {
    Batch batch = full_batch(4, 1);
    std::string what;
    try {
      mse_loss(model->forward(batch.x), batch.y).backward();
    } catch (const CollectiveTimeoutError& e) {
      what = e.what();
    }
    if (comm->rank() == 0) MESSAGE(what);
    CHECK(what.find("all_reduce 'DDP bucket 0'") != std::string::npos);
    CHECK(what.find("rank 1 (no answer") != std::string::npos);
  }
  control->barrier();
}
