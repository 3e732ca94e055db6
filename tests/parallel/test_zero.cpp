// ZeRO-1 and the collectives under it, on the MPI backend with however many ranks
// mpirun gave (CI: 1, 2 and 3): all_to_all and in-place all_gather, DDP's
// bfloat16 reduce_dtype against a float64 reference, ZeroRedundancyOptimizer
// against plain DDP with SGD/Adam/AdamW, its state 1/N per rank, sharded
// checkpoints loaded by another world size, checkpoints of another model or
// optimizer refused, and a rank that skips the reduce-scatter or the all-gather.
#include <doctest/doctest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <memory>
#include <string>

#include "core/ops.h"
#include "error_text.h"
#include "nn/activation.h"
#include "nn/checkpoint.h"
#include "nn/linear.h"
#include "nn/sequential.h"
#include "optim/adam.h"
#include "optim/sgd.h"
#include "parallel/distributed.h"
#include "parallel/mpi_communicator.h"
#include "parallel/zero.h"
#include "shared_dir.h"

using namespace ember;
using namespace ember::parallel;
using ember::testing::contains;
using ember::testing::error_of;

namespace {

std::shared_ptr<MpiCommunicator> world(
    MPI_Comm parent = MPI_COMM_WORLD,
    std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
  return std::make_shared<MpiCommunicator>(parent, CommOptions().timeout(timeout));
}

std::shared_ptr<nn::Sequential> make_mlp(uint64_t seed, int64_t hidden = 16) {
  manual_seed(seed);
  return std::make_shared<nn::Sequential>(nn::Linear(4, hidden), nn::ReLU(), nn::Linear(hidden, 8),
                                          nn::ReLU(), nn::Linear(8, 2));
}

double rel_err(const Tensor& a, const Tensor& b) {
  Tensor d = (a.to(kFloat64) - b.to(kFloat64)).pow(2).sum();
  Tensor r = b.to(kFloat64).pow(2).sum();
  return std::sqrt(d.item() / std::max(r.item(), 1e-30));
}

// Rank r's rows of a batch every rank can rebuild.
struct Shard {
  Tensor x, y;
};
Shard shard(int rank, int64_t per_rank, uint64_t seed, int world_size) {
  manual_seed(seed);
  Tensor x = randn({per_rank * world_size, 4}), y = randn({per_rank * world_size, 2});
  return {x.slice(0, rank * per_rank, (rank + 1) * per_rank),
          y.slice(0, rank * per_rank, (rank + 1) * per_rank)};
}

using Factory = ZeroRedundancyOptimizer::OptimizerFactory;
struct Kind {
  const char* name;
  std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)> make;
};
std::vector<Kind> kinds() {
  return {
      {"SGD momentum",
       [](std::vector<Tensor> p) -> std::unique_ptr<optim::Optimizer> {
         return std::make_unique<optim::SGD>(
             p, optim::SGDOptions(0.05).momentum(0.9).weight_decay(1e-3));
       }},
      {"Adam",
       [](std::vector<Tensor> p) -> std::unique_ptr<optim::Optimizer> {
         return std::make_unique<optim::Adam>(p, optim::AdamOptions(1e-2));
       }},
      {"AdamW",
       [](std::vector<Tensor> p) -> std::unique_ptr<optim::Optimizer> {
         return std::make_unique<optim::AdamW>(p, optim::AdamWOptions(1e-2).weight_decay(0.1));
       }},
  };
}

std::string shared_dir(Communicator& comm, const std::string& name) {
  return ember::testing::shared_dir(comm, "ember_zero", name);
}

// Every rank's copy of `t` equal to rank 0's, bit for bit.
bool same_everywhere(Communicator& comm, const Tensor& t) {
  Tensor all = comm.all_gather(t.detach().contiguous().reshape({1, -1}));
  for (int k = 1; k < comm.size(); ++k)
    if (all[k].to_vector<float>() != all[0].to_vector<float>()) return false;
  return true;
}

}  // namespace

TEST_CASE("communicator/mpi: all_to_all moves block k to rank k; in-place all_gather; bfloat16") {
  auto comm = world();
  const int r = comm->rank(), n = comm->size();
  // Rank r sends 10 * r + k (twice) to rank k.
  std::vector<double> mine;
  for (int k = 0; k < n; ++k) mine.insert(mine.end(), {10.0 * r + k, 10.0 * r + k});
  for (DType t : {kFloat32, kBFloat16, kInt64}) {
    CAPTURE(t);
    Tensor in = from_vector(mine, {2 * n}, t), out = zeros({2 * n}, t);
    comm->all_to_all(FlatBuffer::of(in), FlatBuffer::of(out));
    std::vector<double> want;
    for (int k = 0; k < n; ++k) want.insert(want.end(), {10.0 * k + r, 10.0 * k + r});
    CHECK(out.to(kFloat64).to_vector<double>() == want);
  }
  // In place: this rank's block of the output already holds its input.
  Tensor g = zeros({3 * n}, kBFloat16);
  g.slice(0, 3 * r, 3 * r + 3).fill_(r + 0.5);
  comm->all_gather(FlatBuffer::of(g.slice(0, 3 * r, 3 * r + 3)), FlatBuffer::of(g));
  for (int k = 0; k < n; ++k) CHECK(g.to(kFloat64).to_vector<double>()[3 * k + 2] == k + 0.5);
  CHECK(contains(error_of([&] {
                   Tensor a = zeros({2 * n + 1}), b = zeros({2 * n + 1});
                   comm->all_to_all(FlatBuffer::of(a), FlatBuffer::of(b));
                 }),
                 n > 1 ? "do not split into" : "(no error)"));
  CHECK(contains(error_of([&] {
                   Tensor a = ones({4}, kBFloat16);
                   comm->all_reduce(a);
                 }),
                 "cannot sum bfloat16"));
}

TEST_CASE("ddp/reduce_dtype: bfloat16 buckets give the float32 average of bfloat16 gradients") {
  auto comm = world();
  const int r = comm->rank(), n = comm->size();
  auto model = make_mlp(40);
  DistributedDataParallel ddp(model, comm,
                              DdpOptions().first_bucket_bytes(64).reduce_dtype(kBFloat16));
  Shard mine = shard(r, 3, 41, n);
  mse_loss(model->forward(mine.x), mine.y).backward();
  // Reference: every rank's local gradient, rounded to bfloat16, averaged in
  // float64, rounded to bfloat16 once.
  auto got = model->named_parameters();
  std::vector<Tensor> sum(got.size());
  std::vector<Tensor> exact(got.size());
  for (int k = 0; k < n; ++k) {
    auto ref = make_mlp(40);
    Shard s = shard(k, 3, 41, n);
    mse_loss(ref->forward(s.x), s.y).backward();
    auto rp = ref->parameters();
    for (size_t i = 0; i < rp.size(); ++i) {
      Tensor g16 = rp[i].grad().to(kBFloat16).to(kFloat64);
      sum[i] = k == 0 ? g16 : sum[i] + g16;
      exact[i] = k == 0 ? rp[i].grad().to(kFloat64) : exact[i] + rp[i].grad().to(kFloat64);
    }
  }
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(got[i].first);
    Tensor want = (sum[i] / static_cast<double>(n)).to(kFloat32).to(kBFloat16).to(kFloat64);
    const Tensor& g = got[i].second.grad();
    CHECK(g.dtype() == kFloat32);
    CHECK(rel_err(g, want) < 4e-3);  // within a bfloat16 rounding of the reference
    // It really went through bfloat16: the exact float32 average differs.
    CHECK(rel_err(g, exact[i] / static_cast<double>(n)) > 1e-6);
    CHECK(same_everywhere(*comm, g));
  }
}

TEST_CASE("zero/step: parameters after 30 steps equal plain DDP's (SGD, Adam, AdamW)") {
  const int n = world()->size();
  for (const Kind& kind : kinds()) {
    CAPTURE(kind.name);
    auto comm_a = world(), comm_b = world();
    const int r = comm_a->rank();
    auto plain = make_mlp(7), sharded = make_mlp(7);
    DistributedDataParallel ddp_a(plain, comm_a,
                                  DdpOptions().first_bucket_bytes(72).bucket_bytes(300));
    DistributedDataParallel ddp_b(sharded, comm_b,
                                  DdpOptions().first_bucket_bytes(72).bucket_bytes(300));
    auto opt = kind.make(plain->parameters());
    ZeroRedundancyOptimizer zero(ddp_b, kind.make);
    for (int step = 0; step < 30; ++step) {
      Shard s = shard(r, 2, 100 + step, n);
      opt->zero_grad();
      zero.zero_grad();
      mse_loss(plain->forward(s.x), s.y).backward();
      mse_loss(sharded->forward(s.x), s.y).backward();
      opt->step();
      zero.step();
    }
    auto pa = plain->named_parameters(), pb = sharded->named_parameters();
    for (size_t i = 0; i < pa.size(); ++i) {
      CAPTURE(pa[i].first);
      // With one or two ranks each element's sum is one addition in either
      // collective, so the bits agree; with three, MPI's all-reduce and
      // reduce-scatter may add in different orders.
      if (n <= 2)
        CHECK(pb[i].second.to_vector<float>() == pa[i].second.to_vector<float>());
      else
        CHECK(rel_err(pb[i].second, pa[i].second) < 1e-5);
      CHECK(same_everywhere(*comm_b, pb[i].second));
    }
  }
}

TEST_CASE("zero/state: each rank keeps the optimizer state of its 1/N block only") {
  auto comm = world();
  const int n = comm->size();
  auto model = make_mlp(3, 64);  // 4*64+64 + 64*8+8 + 8*2+2 = 858 parameters
  DistributedDataParallel ddp(model, comm, DdpOptions().first_bucket_bytes(256).bucket_bytes(1024));
  ZeroRedundancyOptimizer zero(ddp, kinds()[1].make);  // Adam: two float32 buffers per element
  CHECK(zero.total_numel() == 858);
  CHECK(zero.state_bytes() == 0);
  Shard s = shard(comm->rank(), 2, 5, n);
  mse_loss(model->forward(s.x), s.y).backward();
  zero.step();
  // Blocks are 1/N of each bucket padded to a multiple of 64 x N elements.
  const int64_t buckets = static_cast<int64_t>(ddp.buckets().size());
  CHECK(zero.shard_numel() * n >= zero.total_numel());
  CHECK(zero.shard_numel() * n < zero.total_numel() + 64 * n * buckets);
  CHECK(zero.state_bytes() == 2 * 4 * zero.shard_numel());
  // Unsharded Adam over the same model holds 2 x 4 x 858 bytes on every rank.
  if (n > 1) CHECK(zero.state_bytes() < 2 * 4 * 858);
}

TEST_CASE("zero/checkpoint: N ranks save, another world size loads and continues bit for bit") {
  auto comm = world();
  const int r = comm->rank(), n = comm->size();
  // Every world size against one rank alone (MPI_COMM_SELF on rank 0): both ways.
  for (bool save_all : {true, false}) {
    CAPTURE(save_all);
    const std::string dir = shared_dir(*comm, save_all ? "all_to_one" : "one_to_all");
    auto kind = kinds()[2];  // AdamW: moments and step counts
    // The world that saves trains 4 steps on the whole batch (every rank sees
    // all rows in its mean: the result does not depend on the world size).
    auto train = [&](std::shared_ptr<Communicator> c, nn::Sequential& m, ZeroRedundancyOptimizer& z,
                     int from, int steps) {
      for (int step = from; step < from + steps; ++step) {
        Shard s = shard(0, 4, 300 + step, 1);
        z.zero_grad();
        mse_loss(m.forward(s.x), s.y).backward();
        z.step();
      }
      (void)c;
    };
    const bool saver = save_all || r == 0;
    const bool loader = !save_all || r == 0;
    std::shared_ptr<Communicator> save_comm =
        saver ? world(save_all ? MPI_COMM_WORLD : MPI_COMM_SELF) : nullptr;
    std::shared_ptr<Communicator> load_comm =
        loader ? world(save_all ? MPI_COMM_SELF : MPI_COMM_WORLD) : nullptr;
    std::vector<float> after_saver;  // rank 0: parameters of the saver after 4 + 3 steps
    if (saver) {
      auto m = make_mlp(11);
      DistributedDataParallel ddp(m, save_comm,
                                  DdpOptions().first_bucket_bytes(72).bucket_bytes(300));
      ZeroRedundancyOptimizer z(ddp, kind.make);
      train(save_comm, *m, z, 0, 4);
      z.save(dir);
      if (save_comm->rank() == 0) nn::save(*m, dir + "/model.ckpt");
      train(save_comm, *m, z, 4, 3);
      for (const Tensor& p : m->parameters()) {
        auto v = p.to_vector<float>();
        after_saver.insert(after_saver.end(), v.begin(), v.end());
      }
    }
    comm->barrier();
    if (loader) {
      auto m = make_mlp(99);  // other initial weights: the checkpoint replaces them
      nn::load(*m, dir + "/model.ckpt");
      DistributedDataParallel ddp(m, load_comm,
                                  DdpOptions().first_bucket_bytes(72).bucket_bytes(300));
      ZeroRedundancyOptimizer z(ddp, kind.make);
      z.load(dir);
      CHECK(z.shard_optimizer().state_dict().contains("state.0.exp_avg"));
      train(load_comm, *m, z, 4, 3);
      if (r == 0) {
        std::vector<float> mine;
        for (const Tensor& p : m->parameters()) {
          auto v = p.to_vector<float>();
          mine.insert(mine.end(), v.begin(), v.end());
        }
        // Same data, same state: the same steps. Every rank trains on the whole
        // batch, so each average is of equal gradients: exact (bitwise) with one
        // or two ranks, within float32 rounding with three.
        if (n <= 2)
          CHECK(mine == after_saver);
        else
          CHECK(rel_err(from_vector(std::vector<double>(mine.begin(), mine.end()),
                                    {int64_t(mine.size())}),
                        from_vector(std::vector<double>(after_saver.begin(), after_saver.end()),
                                    {int64_t(after_saver.size())})) < 1e-5);
      }
    }
    comm->barrier();
    if (r == 0) std::filesystem::remove_all(dir);
  }
}

TEST_CASE("zero/checkpoint: another model or optimizer is refused, naming the mismatch") {
  auto comm = world();
  const std::string dir = shared_dir(*comm, "mismatch");
  {
    auto m = make_mlp(1);
    DistributedDataParallel ddp(m, comm);
    ZeroRedundancyOptimizer z(ddp, kinds()[1].make);  // Adam
    Shard s = shard(comm->rank(), 2, 1, comm->size());
    mse_loss(m->forward(s.x), s.y).backward();
    z.step();
    z.save(dir);
  }
  SUBCASE("another optimizer") {
    auto m = make_mlp(1);
    DistributedDataParallel ddp(m, comm);
    ZeroRedundancyOptimizer z(ddp, kinds()[0].make);  // SGD
    const std::string e = error_of([&] { z.load(dir); });
    if (comm->rank() == 0) MESSAGE(e);
    CHECK(contains(e, "holds the state of Adam, but this ZeroRedundancyOptimizer wraps SGD"));
  }
  SUBCASE("another model: a layer of another width") {
    auto m = make_mlp(1, 32);
    DistributedDataParallel ddp(m, comm);
    ZeroRedundancyOptimizer z(ddp, kinds()[1].make);
    const std::string e = error_of([&] { z.load(dir); });
    if (comm->rank() == 0) MESSAGE(e);
    CHECK(contains(e, "does not match this model"));
    CHECK(contains(e, "parameter '0.weight': the checkpoint has shape [16, 4]"));
    CHECK(contains(e, "the model [32, 4]"));
  }
  SUBCASE("another model: a parameter it lacks") {
    manual_seed(1);
    auto m = std::make_shared<nn::Sequential>(nn::Linear(4, 16), nn::ReLU(), nn::Linear(16, 8));
    DistributedDataParallel ddp(m, comm);
    ZeroRedundancyOptimizer z(ddp, kinds()[1].make);
    const std::string e = error_of([&] { z.load(dir); });
    CHECK(contains(e, "the checkpoint has a parameter '4.weight' this model lacks"));
  }
  SUBCASE("a missing shard file is named") {
    comm->barrier();
    if (comm->rank() == 0)
      std::filesystem::remove(dir + "/zero_rank" + std::to_string(comm->size() - 1) + "_of" +
                              std::to_string(comm->size()) + ".ckpt");
    comm->barrier();
    auto m = make_mlp(1);
    DistributedDataParallel ddp(m, comm);
    ZeroRedundancyOptimizer z(ddp, kinds()[1].make);
    const std::string e = error_of([&] { z.load(dir); });
    CHECK(contains(e, comm->size() > 1 ? "is missing from the checkpoint" : "no zero_rank"));
  }
  comm->barrier();
  if (comm->rank() == 0) std::filesystem::remove_all(dir);
}

TEST_CASE("zero/errors: bad use is named") {
  auto comm = world();
  auto m = make_mlp(2);
  DistributedDataParallel ddp(m, comm);
  ZeroRedundancyOptimizer z(ddp, kinds()[0].make);
  CHECK(contains(error_of([&] { z.step(); }), "run a synchronised backward"));
  CHECK(contains(error_of([&] { ZeroRedundancyOptimizer again(ddp, kinds()[0].make); }),
                 "already has one"));
  auto m2 = make_mlp(2);
  DistributedDataParallel ddp2(m2, comm);
  CHECK(contains(error_of([&] {
                   ZeroRedundancyOptimizer bad(
                       ddp2, [](std::vector<Tensor> p) -> std::unique_ptr<optim::Optimizer> {
                         p.push_back(zeros({1}).requires_grad_());  // one parameter too many
                         return std::make_unique<optim::SGD>(p, optim::SGDOptions(0.1));
                       });
                 }),
                 "one parameter group over the"));
}

TEST_CASE("zero/timeout: a rank that skips the reduce-scatter or the all-gather is named" *
          doctest::test_suite("2+ ranks")) {
  auto control = world();
  REQUIRE(control->size() >= 2);  // main skips suite "2+ ranks" with one rank
  SUBCASE("reduce-scatter") {
    auto comm = world(MPI_COMM_WORLD, std::chrono::milliseconds(300));
    auto m = make_mlp(5);
    DistributedDataParallel ddp(m, comm, DdpOptions().first_bucket_bytes(72));
    ZeroRedundancyOptimizer z(ddp, kinds()[0].make);
    if (comm->rank() != 1) {
      Shard s = shard(0, 2, 1, 1);
      std::string what;
      try {
        mse_loss(m->forward(s.x), s.y).backward();
        z.step();
      } catch (const CollectiveTimeoutError& e) {
        what = e.what();
      }
      if (comm->rank() == 0) MESSAGE(what);
      CHECK(contains(what, "reduce_scatter 'DDP bucket 0'"));
      CHECK(contains(what, "rank 1 (no answer"));
    }
    control->barrier();
  }
  SUBCASE("all-gather") {
    auto comm = world(MPI_COMM_WORLD, std::chrono::milliseconds(300));
    auto m = make_mlp(5);
    DistributedDataParallel ddp(m, comm, DdpOptions().first_bucket_bytes(72));
    ZeroRedundancyOptimizer z(ddp, kinds()[0].make);
    Shard s = shard(0, 2, 1, 1);
    mse_loss(m->forward(s.x), s.y).backward();  // every rank: the reduce-scatters match
    if (comm->rank() != 1) {
      std::string what;
      try {
        z.step();
      } catch (const CollectiveTimeoutError& e) {
        what = e.what();
      }
      if (comm->rank() == 0) MESSAGE(what);
      CHECK(contains(what, "all_gather 'ZeRO bucket 0'"));
      CHECK(contains(what, "rank 1 (waiting in reduce_scatter") == false);
      CHECK(contains(what, "rank 1 ("));
    } else {
      // Rank 1 collects its reduce-scatters (so it stays a matching peer) and
      // skips the all-gathers.
      ddp.finish_gradient_sync();
    }
    control->barrier();
  }
}
