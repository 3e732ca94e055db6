// The GPT step of examples/gpt_model.h (the model bench_gpt and gpt_char train) on
// the MPI backend with however many ranks mpirun gave (CI: 1, 2 and 3), on CPU
// ranks: under DistributedDataParallel and under ZeroRedundancyOptimizer (ZeRO-1)
// each rank trains on its rows of a batch, and the parameters after a few AdamW
// steps are those of one process training on the whole batch (to float32
// rounding); a sharded ZeRO checkpoint of the GPT saved by N ranks resumes on one
// rank, and one saved by one rank on N, continuing as the saver does; ZeRO's
// clip_grad_norm_ clips as one process clips the whole batch's gradient, and clipping
// the module's own gradients under ZeRO is refused.
#include <doctest/doctest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "gpt_model.h"
#include "nn/checkpoint.h"
#include "parallel/distributed.h"
#include "parallel/mpi_communicator.h"
#include "parallel/zero.h"
#include "shared_dir.h"

using namespace ember;
using namespace ember::parallel;

namespace {

std::shared_ptr<MpiCommunicator> world(MPI_Comm parent = MPI_COMM_WORLD) {
  return std::make_shared<MpiCommunicator>(parent, CommOptions().timeout(std::chrono::seconds(60)));
}

// Two blocks, two heads, 16 dims, 8 tokens, with biases, no dropout: small enough
// for CI's CPU ranks, every kind of parameter of the full model (tied head too).
gpt::GPTConfig tiny() {
  gpt::GPTConfig c;
  c.vocab_size = 13;
  c.block_size = 8;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 16;
  c.dropout = 0.0;
  c.bias = true;
  return c;
}

std::shared_ptr<gpt::GPT> make_gpt(uint64_t seed) {
  manual_seed(seed);
  return std::make_shared<gpt::GPT>(tiny());
}

std::unique_ptr<optim::Optimizer> adamw(std::vector<Tensor> params) {
  return std::make_unique<optim::AdamW>(std::move(params),
                                        optim::AdamWOptions(3e-3).weight_decay(0.1));
}

// Tokens and next-token targets of `rows` sequences every rank can rebuild, and
// rows [first, first + count) of them.
struct Tokens {
  Tensor idx, targets;
};
Tokens batch(uint64_t seed, int64_t rows, int64_t first, int64_t count) {
  manual_seed(seed);
  const gpt::GPTConfig c = tiny();
  Tensor all = randint(0, c.vocab_size, {rows, c.block_size + 1});
  Tensor mine = all.slice(0, first, first + count);
  return {mine.slice(1, 0, c.block_size).contiguous(),
          mine.slice(1, 1, c.block_size + 1).contiguous()};
}

std::vector<double> flat(const nn::Module& m) {
  std::vector<double> out;
  for (const Tensor& p : m.parameters()) {
    const std::vector<double> v = p.to(kFloat64).to_vector<double>();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

// ||a - b|| / ||b|| over every parameter.
double rel_err(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double d = 0, r = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    d += (a[i] - b[i]) * (a[i] - b[i]);
    r += b[i] * b[i];
  }
  return std::sqrt(d / std::max(r, 1e-30));
}

constexpr int kSteps = 5;
constexpr int64_t kPerRank = 2;

// The reference: one process, the whole batch of every step, plain AdamW.
std::vector<double> single_process(int world_size) {
  auto m = make_gpt(21);
  auto opt = adamw(m->parameters());
  for (int step = 0; step < kSteps; ++step) {
    const int64_t rows = kPerRank * world_size;
    Tokens t = batch(500 + step, rows, 0, rows);
    opt->zero_grad();
    m->loss(t.idx, t.targets).backward();
    opt->step();
  }
  return flat(*m);
}

// The reference with clipping: one process, the whole batch, clip_grad_norm_ at
// max_norm before each AdamW step; the first step's norm in *first_norm.
std::vector<double> single_process_clipped(int world_size, double max_norm, double norm_type,
                                           double* first_norm) {
  auto m = make_gpt(21);
  auto opt = adamw(m->parameters());
  for (int step = 0; step < kSteps; ++step) {
    const int64_t rows = kPerRank * world_size;
    Tokens t = batch(500 + step, rows, 0, rows);
    opt->zero_grad();
    m->loss(t.idx, t.targets).backward();
    const double norm = nn::utils::clip_grad_norm_(m->parameters(), max_norm, norm_type);
    if (step == 0) *first_norm = norm;
    opt->step();
  }
  return flat(*m);
}

std::string shared_dir(Communicator& comm, const std::string& name) {
  return ember::testing::shared_dir(comm, "ember_gpt", name);
}

}  // namespace

// The tolerance: each rank's mean loss over its tokens, averaged over ranks, is the
// mean over the whole batch (equal token counts); the gradients differ from the
// single process's only in the order of float32 additions, and AdamW's updates
// carry that rounding: 2.4e-7 measured with two CPU ranks, bounded at 1e-5.
TEST_CASE("gpt/ddp: each rank on its rows gives the parameters of one process on the batch") {
  auto comm = world();
  const int r = comm->rank(), n = comm->size();
  auto m = make_gpt(21);
  DistributedDataParallel ddp(m, comm, DdpOptions().bucket_bytes(16 * 1024));
  auto opt = adamw(m->parameters());
  for (int step = 0; step < kSteps; ++step) {
    Tokens t = batch(500 + step, kPerRank * n, r * kPerRank, kPerRank);
    opt->zero_grad();
    m->loss(t.idx, t.targets).backward();
    opt->step();
  }
  const double err = rel_err(flat(*m), single_process(n));
  INFO("ranks=", n, " rel_err=", err);
  CHECK(err < 1e-5);
}

TEST_CASE("gpt/zero: ZeRO-1 on each rank's rows gives the parameters of one process on the batch") {
  auto comm = world();
  const int r = comm->rank(), n = comm->size();
  auto m = make_gpt(21);
  DistributedDataParallel ddp(m, comm, DdpOptions().bucket_bytes(16 * 1024));
  ZeroRedundancyOptimizer zero(ddp, adamw);
  for (int step = 0; step < kSteps; ++step) {
    Tokens t = batch(500 + step, kPerRank * n, r * kPerRank, kPerRank);
    zero.zero_grad();
    m->loss(t.idx, t.targets).backward();
    zero.step();
  }
  const double err = rel_err(flat(*m), single_process(n));
  INFO("ranks=", n, " rel_err=", err);
  CHECK(err < 1e-5);
  // Each rank holds the AdamW state of its block only (two float32 moments).
  CHECK(zero.state_bytes() == 2 * 4 * zero.shard_numel());
  if (n > 1) CHECK(zero.shard_numel() < zero.total_numel());
}

TEST_CASE("gpt/zero clip: ZeRO's clip_grad_norm_ clips the averaged gradient as one process does") {
  // max_norm 0.05 is below the tiny GPT's gradient norm at every step (about 0.3-1):
  // every step is clipped, so a clip of the wrong gradient (this rank's own) shows.
  auto comm = world();
  const int r = comm->rank(), n = comm->size();
  for (double norm_type : {2.0, std::numeric_limits<double>::infinity()}) {
    CAPTURE(norm_type);
    auto m = make_gpt(21);
    DistributedDataParallel ddp(m, comm, DdpOptions().bucket_bytes(16 * 1024));
    ZeroRedundancyOptimizer zero(ddp, adamw);
    double first = 0;
    for (int step = 0; step < kSteps; ++step) {
      Tokens t = batch(500 + step, kPerRank * n, r * kPerRank, kPerRank);
      zero.zero_grad();
      m->loss(t.idx, t.targets).backward();
      const double norm = zero.clip_grad_norm_(0.05, norm_type).item();
      if (step == 0) first = norm;
      zero.step();
    }
    double want_first = 0;
    const double err = rel_err(flat(*m), single_process_clipped(n, 0.05, norm_type, &want_first));
    INFO("ranks=", n, " rel_err=", err, " first norm ", first, " (one process: ", want_first, ")");
    CHECK(want_first > 0.05);  // the reference did clip
    CHECK(std::fabs(first - want_first) <= 1e-5 * want_first);
    CHECK(err < 1e-5);
  }
}

TEST_CASE("gpt/zero clip: clipping the module's own gradients after backward is refused") {
  auto comm = world();
  const int r = comm->rank(), n = comm->size();
  auto m = make_gpt(21);
  DistributedDataParallel ddp(m, comm, DdpOptions().bucket_bytes(16 * 1024));
  ZeroRedundancyOptimizer zero(ddp, adamw);
  Tokens t = batch(500, kPerRank * n, r * kPerRank, kPerRank);
  zero.zero_grad();
  m->loss(t.idx, t.targets).backward();
  nn::utils::clip_grad_norm_(m->parameters(), 0.05);  // this rank's local gradients
  std::string error;
  try {
    zero.step();
  } catch (const Error& e) {
    error = e.what();
  }
  INFO(error);
  CHECK(error.find("changed in place after backward") != std::string::npos);
  CHECK(error.find("ZeroRedundancyOptimizer::clip_grad_norm_") != std::string::npos);
  // Nothing was updated, and the next backward and step go through.
  zero.zero_grad();
  m->loss(t.idx, t.targets).backward();
  zero.clip_grad_norm_(0.05);
  zero.step();
}

TEST_CASE(
    "gpt/zero checkpoint: N ranks save, one rank resumes, and back, continuing as the saver") {
  auto comm = world();
  const int r = comm->rank();
  for (bool save_all : {true, false}) {
    CAPTURE(save_all);
    const std::string dir = shared_dir(*comm, save_all ? "all_to_one" : "one_to_all");
    // Every rank of a world trains on the whole batch, so the steps do not depend
    // on the world size and the loader can be compared with the saver.
    auto train = [](gpt::GPT& m, ZeroRedundancyOptimizer& z, int from, int steps) {
      for (int step = from; step < from + steps; ++step) {
        Tokens t = batch(700 + step, 4, 0, 4);
        z.zero_grad();
        m.loss(t.idx, t.targets).backward();
        z.step();
      }
    };
    const bool saver = save_all || r == 0;
    const bool loader = !save_all || r == 0;
    std::vector<double> saver_after;  // rank 0 of the saver: after 3 + 2 steps
    if (saver) {
      auto c = world(save_all ? MPI_COMM_WORLD : MPI_COMM_SELF);
      auto m = make_gpt(31);
      DistributedDataParallel ddp(m, c, DdpOptions().bucket_bytes(16 * 1024));
      ZeroRedundancyOptimizer z(ddp, adamw);
      train(*m, z, 0, 3);
      z.save(dir);
      if (c->rank() == 0) nn::save(*m, dir + "/model.ckpt");
      train(*m, z, 3, 2);
      saver_after = flat(*m);
    }
    comm->barrier();
    if (loader) {
      auto c = world(save_all ? MPI_COMM_SELF : MPI_COMM_WORLD);
      auto m = make_gpt(99);  // other weights: the checkpoint replaces them
      nn::load(*m, dir + "/model.ckpt");
      DistributedDataParallel ddp(m, c, DdpOptions().bucket_bytes(16 * 1024));
      ZeroRedundancyOptimizer z(ddp, adamw);
      z.load(dir);
      train(*m, z, 3, 2);
      if (r == 0) {
        const double err = rel_err(flat(*m), saver_after);
        INFO("world=", comm->size(), " rel_err=", err);
        CHECK(err < 1e-5);
      }
    }
    comm->barrier();
    if (r == 0) std::filesystem::remove_all(dir);
  }
}
