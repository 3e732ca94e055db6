// The NCCL backend (suite "cuda"), with every GPU present: all-reduce against a
// CPU sum over every GPU of this process (one thread driving all, in a group);
// one rank per MPI process (mpirun -np <= GPUs; with more ranks than GPUs main
// skips those cases and says why): every collective against a CPU reference on ember's (blocking)
// communicator and on the non-blocking one, DistributedDataParallel against one
// process on the whole batch with replicas bit-identical after many steps, its
// bfloat16 reduce_dtype against a float64 reference, ZeRO-1 against plain DDP
// with its state 1/N per rank, and a rank that skips a collective (2+ GPUs).
// gpu_parallel.sh runs these again with NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1
// (the socket transport two machines would use).
#include <doctest/doctest.h>

#ifdef EMBER_HAVE_NCCL
#include <chrono>
#include <cmath>
#include <memory>
#include <string>

#include "core/memory.h"
#include "core/ops.h"
#include "cuda/runtime.h"
#include "nn/activation.h"
#include "nn/linear.h"
#include "nn/sequential.h"
#include "optim/adam.h"
#include "optim/sgd.h"
#include "parallel/distributed.h"
#include "parallel/memory_view.h"
#include "parallel/mpi_communicator.h"
#include "parallel/nccl_communicator.h"
#include "parallel/zero.h"

using namespace ember;
using namespace ember::parallel;

namespace {

double rel_err(const Tensor& a, const Tensor& b) {
  Tensor d = (a.cpu().to(kFloat64) - b.cpu().to(kFloat64)).pow(2).sum();
  Tensor r = b.cpu().to(kFloat64).pow(2).sum();
  return std::sqrt(d.item() / std::max(r.item(), 1e-30));
}

// One NCCL rank per MPI rank on cuda:<rank>. NCCL refuses two ranks on one GPU,
// so main (tests/parallel/main.cpp) skips the cases that call this when there are
// more ranks than GPUs; reaching it then is a failure of that filter.
std::shared_ptr<NcclCommunicator> nccl_world(MpiCommunicator& cpu, CommOptions options = {}) {
  REQUIRE_MESSAGE(cpu.size() <= cuda::device_count(), cpu.size(), " ranks but ",
                  cuda::device_count(), " GPU(s): main should have skipped this case");
  NcclUniqueId id;
  if (cpu.rank() == 0) id = NcclUniqueId::create();
  // The 128-byte id travels over MPI as 16 int64 words.
  cpu.broadcast(
      FlatBuffer{id.bytes.data(), static_cast<int64_t>(id.bytes.size() / 8), kInt64, kCPU});
  cuda::set_device(cpu.rank());
  return std::make_shared<NcclCommunicator>(id, cpu.rank(), cpu.size(), cpu.rank(), options);
}

// Rank k's input, known to every rank (so each can compute the CPU reference).
Tensor rank_input(int k, int64_t n) {
  manual_seed(100 + k);
  return randn({n});
}

}  // namespace

TEST_CASE("nccl/all_reduce: every GPU, a group from one thread, against a CPU sum" *
          doctest::test_suite("cuda")) {
  const int n = cuda::device_count();
  MESSAGE("NCCL all-reduce over ", n, " GPU(s)");
  std::vector<int> ids;
  for (int i = 0; i < n; ++i) ids.push_back(i);
  auto comms = NcclCommunicator::create_all(ids);
  std::vector<Tensor> host, dev;
  std::vector<NcclCommunicator*> cs;
  std::vector<FlatBuffer> bufs;
  for (int i = 0; i < n; ++i) {
    manual_seed(10 + i);
    host.push_back(randn({1000003}));
    dev.push_back(host.back().to(Device::cuda(i)));
    cs.push_back(comms[i].get());
    bufs.push_back(FlatBuffer::of(dev.back()));
  }
  Tensor want = host[0].to(kFloat64);
  for (int i = 1; i < n; ++i) want = want + host[i].to(kFloat64);
  NcclCommunicator::all_reduce_group(cs, bufs, ReduceOp::Sum);
  for (int i = 0; i < n; ++i) {
    cuda::synchronize(i);
    CHECK(rel_err(dev[i], want) < 1e-6);
  }
  // Average, through the Communicator interface (one GPU: itself).
  if (n == 1) {
    Tensor t = full({17}, 3.0, Device::cuda(0));
    comms[0]->all_reduce(t, ReduceOp::Average);
    CHECK(t.cpu().to_vector<float>()[16] == 3.0f);
    comms[0]->barrier();
  }
}

TEST_CASE("nccl/communicator: one rank per process, every collective against a CPU reference" *
          doctest::test_suite("cuda")) {
  MpiCommunicator cpu;
  auto comm = nccl_world(cpu);
  const int r = cpu.rank(), n = cpu.size();
  const Device dev = Device::cuda(r);
  if (r == 0) MESSAGE("NCCL collectives over ", n, " process(es), one GPU each");
  const int64_t len = 840 * 12;  // divisible by 1..8: reduce_scatter blocks
  Tensor sum = rank_input(0, len).to(kFloat64);
  for (int k = 1; k < n; ++k) sum = sum + rank_input(k, len).to(kFloat64);
  Tensor mine = rank_input(r, len);

  SUBCASE("all_reduce sum and average") {
    Tensor t = mine.to(dev);
    comm->all_reduce(t, ReduceOp::Sum);
    CHECK(rel_err(t, sum) < 1e-6);
    Tensor a = mine.to(dev);
    comm->all_reduce(a, ReduceOp::Average);
    CHECK(rel_err(a, sum / static_cast<double>(n)) < 1e-6);
  }
  SUBCASE("broadcast from the last rank") {
    Tensor t = mine.to(dev);
    comm->broadcast(t, n - 1);
    CHECK(t.cpu().to_vector<float>() == rank_input(n - 1, len).to_vector<float>());
  }
  SUBCASE("all_gather: rank order along dim 0") {
    Tensor g = comm->all_gather(mine.reshape({1, len}).to(dev)).cpu();
    REQUIRE(g.sizes() == Shape{n, len});
    for (int k = 0; k < n; ++k)
      CHECK(g[k].to_vector<float>() == rank_input(k, len).to_vector<float>());
  }
  SUBCASE("reduce_scatter: block r of the sum") {
    Tensor out = comm->reduce_scatter(mine.to(dev), ReduceOp::Sum);
    const int64_t block = len / n;
    CHECK(rel_err(out, sum.slice(0, r * block, (r + 1) * block)) < 1e-6);
  }
  comm->barrier();
}

TEST_CASE("nccl/ddp: one rank per GPU matches one process, replicas bit-identical after 30 steps" *
          doctest::test_suite("cuda")) {
  MpiCommunicator cpu;
  auto comm = nccl_world(cpu);
  const int r = cpu.rank(), n = cpu.size();
  const Device dev = Device::cuda(r);
  // Different initial weights per rank: construction must broadcast rank 0's.
  manual_seed(4 + r);
  auto model = std::make_shared<nn::Sequential>(nn::Linear(8, 32), nn::ReLU(), nn::Linear(32, 4));
  manual_seed(4);
  auto reference =
      std::make_shared<nn::Sequential>(nn::Linear(8, 32), nn::ReLU(), nn::Linear(32, 4));
  model->to(dev);
  DistributedDataParallel ddp(model, comm, DdpOptions().first_bucket_bytes(256));
  optim::SGD opt(model->parameters(), optim::SGDOptions(0.05).momentum(0.9));
  optim::SGD ref_opt(reference->parameters(), optim::SGDOptions(0.05).momentum(0.9));
  manual_seed(9);
  for (int step = 0; step < 30; ++step) {
    Tensor x = randn({4 * n, 8}), y = randn({4 * n, 4});
    opt.zero_grad();
    ref_opt.zero_grad();
    mse_loss(model->forward(x.slice(0, 4 * r, 4 * r + 4).to(dev)),
             y.slice(0, 4 * r, 4 * r + 4).to(dev))
        .backward();
    mse_loss(reference->forward(x), y).backward();
    if (step < 3) {
      auto got = model->named_parameters();
      auto want = reference->named_parameters();
      for (size_t i = 0; i < got.size(); ++i) {
        CAPTURE(got[i].first);
        CHECK(rel_err(got[i].second.grad(), want[i].second.grad()) < 1e-5);
      }
    }
    opt.step();
    ref_opt.step();
  }
  // Every rank holds the same bits (gathered through NCCL), close to one process's.
  auto got = model->parameters();
  auto want = reference->parameters();
  for (size_t i = 0; i < got.size(); ++i) {
    Tensor all = comm->all_gather(got[i].detach().reshape({1, -1})).cpu();
    for (int k = 1; k < n; ++k) CHECK(all[k].to_vector<float>() == all[0].to_vector<float>());
    CHECK(rel_err(got[i], want[i]) < 1e-4);
  }
}

TEST_CASE("nccl/communicator: all_to_all, in-place all_gather, bfloat16; both communicators agree" *
          doctest::test_suite("cuda")) {
  MpiCommunicator cpu;
  for (bool nonblocking : {false, true}) {
    CAPTURE(nonblocking);
    auto comm = nccl_world(cpu, CommOptions().nccl_nonblocking(nonblocking));

    CHECK(comm->nonblocking() == nonblocking);
    const int r = cpu.rank(), n = cpu.size();
    const Device dev = Device::cuda(r);
    // all_to_all: rank r sends 100 r + k (3 times) to rank k, in float32 and bfloat16.
    std::vector<double> mine, want;
    for (int k = 0; k < n; ++k)
      for (int j = 0; j < 3; ++j) {
        mine.push_back(100.0 * r + k);
        want.push_back(100.0 * k + r);
      }
    for (DType t : {kFloat32, kBFloat16}) {
      CAPTURE(t);
      Tensor in = from_vector(mine, {3 * n}, TensorOptions(t).device(dev));
      Tensor out = zeros({3 * n}, TensorOptions(t).device(dev));
      comm->all_to_all(FlatBuffer::of(in), FlatBuffer::of(out));
      CHECK(out.cpu().to(kFloat64).to_vector<double>() == want);
    }
    // In-place all_gather: this rank's block of the output is its input.
    Tensor g = zeros({4 * n}, dev);
    g.slice(0, 4 * r, 4 * r + 4).fill_(r + 0.25);
    comm->all_gather(FlatBuffer::of(g.slice(0, 4 * r, 4 * r + 4)), FlatBuffer::of(g));
    std::vector<float> got = g.cpu().to_vector<float>();
    for (int k = 0; k < n; ++k) CHECK(got[4 * k + 3] == k + 0.25f);
    // all_reduce average against the CPU reference (the other communicator's too).
    const int64_t len = 840 * 12;
    Tensor sum = rank_input(0, len).to(kFloat64);
    for (int k = 1; k < n; ++k) sum = sum + rank_input(k, len).to(kFloat64);
    Tensor a = rank_input(r, len).to(dev);
    comm->all_reduce(a, ReduceOp::Average);
    CHECK(rel_err(a, sum / static_cast<double>(n)) < 1e-6);
    comm->barrier();
  }
}

TEST_CASE("nccl/ddp: bfloat16 reduce_dtype is the float32 average of bfloat16 gradients" *
          doctest::test_suite("cuda")) {
  MpiCommunicator cpu;
  auto comm = nccl_world(cpu);

  const int r = cpu.rank(), n = cpu.size();
  const Device dev = Device::cuda(r);
  auto make = [] {
    manual_seed(12);
    return std::make_shared<nn::Sequential>(nn::Linear(8, 64), nn::ReLU(), nn::Linear(64, 4));
  };
  auto model = make();
  model->to(dev);
  DistributedDataParallel ddp(model, comm,
                              DdpOptions().first_bucket_bytes(256).reduce_dtype(kBFloat16));
  manual_seed(13);
  Tensor x = randn({4 * n, 8}), y = randn({4 * n, 4});
  mse_loss(model->forward(x.slice(0, 4 * r, 4 * r + 4).to(dev)),
           y.slice(0, 4 * r, 4 * r + 4).to(dev))
      .backward();
  std::vector<Tensor> sum;
  for (int k = 0; k < n; ++k) {
    auto ref = make();
    mse_loss(ref->forward(x.slice(0, 4 * k, 4 * k + 4)), y.slice(0, 4 * k, 4 * k + 4)).backward();
    auto rp = ref->parameters();
    for (size_t i = 0; i < rp.size(); ++i) {
      Tensor g16 = rp[i].grad().to(kBFloat16).to(kFloat64);
      if (k == 0)
        sum.push_back(g16);
      else
        sum[i] = sum[i] + g16;
    }
  }
  auto got = model->named_parameters();
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(got[i].first);
    Tensor want = (sum[i] / static_cast<double>(n)).to(kFloat32).to(kBFloat16).to(kFloat64);
    CHECK(rel_err(got[i].second.grad(), want) < 4e-3);
    Tensor all = comm->all_gather(got[i].second.grad().reshape({1, -1})).cpu();
    for (int k = 1; k < n; ++k) CHECK(all[k].to_vector<float>() == all[0].to_vector<float>());
  }
}

TEST_CASE("nccl/zero: ZeRO-1 with Adam equals DDP after 30 steps, state 1/N per rank" *
          doctest::test_suite("cuda")) {
  MpiCommunicator cpu;
  auto comm_a = nccl_world(cpu);

  auto comm_b = nccl_world(cpu);
  const int r = cpu.rank(), n = cpu.size();
  const Device dev = Device::cuda(r);
  auto make = [&] {
    manual_seed(21);
    auto m = std::make_shared<nn::Sequential>(nn::Linear(32, 256), nn::ReLU(), nn::Linear(256, 32));
    m->to(dev);
    return m;
  };
  auto plain = make(), sharded = make();
  DistributedDataParallel ddp_a(plain, comm_a, DdpOptions().first_bucket_bytes(4096));
  DistributedDataParallel ddp_b(sharded, comm_b, DdpOptions().first_bucket_bytes(4096));
  auto adam = [](std::vector<Tensor> p) -> std::unique_ptr<optim::Optimizer> {
    return std::make_unique<optim::Adam>(p, optim::AdamOptions(1e-3));
  };
  auto opt = adam(plain->parameters());
  ZeroRedundancyOptimizer zero(ddp_b, adam);
  manual_seed(22);
  for (int step = 0; step < 30; ++step) {
    Tensor x = randn({4 * n, 32}), y = randn({4 * n, 32});
    Tensor xs = x.slice(0, 4 * r, 4 * r + 4).to(dev), ys = y.slice(0, 4 * r, 4 * r + 4).to(dev);
    opt->zero_grad();
    zero.zero_grad();
    mse_loss(plain->forward(xs), ys).backward();
    mse_loss(sharded->forward(xs), ys).backward();
    opt->step();
    zero.step();
  }
  auto pa = plain->named_parameters(), pb = sharded->named_parameters();
  bool bitwise = true;
  for (size_t i = 0; i < pa.size(); ++i) {
    CAPTURE(pa[i].first);
    const auto a = pa[i].second.cpu().to_vector<float>(), b = pb[i].second.cpu().to_vector<float>();
    bitwise = bitwise && a == b;
    CHECK(rel_err(pb[i].second, pa[i].second) < 1e-5);
    Tensor all = comm_b->all_gather(pb[i].second.detach().reshape({1, -1})).cpu();
    for (int k = 1; k < n; ++k) CHECK(all[k].to_vector<float>() == all[0].to_vector<float>());
  }
  if (r == 0)
    MESSAGE("ZeRO-1 vs DDP after 30 Adam steps on ", n,
            " GPU(s): ", bitwise ? "bitwise equal" : "equal to float32 rounding, not bitwise");
  // Adam's two moments for this rank's block only: 1/N of the whole (plus padding).
  CHECK(zero.state_bytes() == 2 * 4 * zero.shard_numel());
  CHECK(zero.shard_numel() * n <
        zero.total_numel() + 64 * n * static_cast<int64_t>(ddp_b.buckets().size()));
  const std::string table = memory_summary_all_ranks(*comm_b, dev);
  if (r == 0) MESSAGE(table);
  CHECK(table.find("rank " + std::to_string(n - 1)) != std::string::npos);
}

// Last in the file: the aborted communicators are gone before any later test.
TEST_CASE("nccl/timeout: a rank that skips a collective makes the others fail in time" *
          doctest::test_suite("cuda")) {
  MpiCommunicator cpu;
  REQUIRE(cpu.size() >= 2);  // main skips this case with one rank
  for (bool nonblocking : {false, true}) {
    CAPTURE(nonblocking);
    auto comm = nccl_world(
        cpu, CommOptions().timeout(std::chrono::milliseconds(1500)).nccl_nonblocking(nonblocking));

    const auto start = std::chrono::steady_clock::now();
    if (comm->rank() != 1) {
      Tensor t = ones({1 << 20}, TensorOptions().device(comm->device()));
      std::string what;
      try {
        comm->all_reduce(t);
      } catch (const Error& e) {
        what = e.what();
      }
      if (comm->rank() == 0) MESSAGE(what);
      CHECK(what.find("all_reduce") != std::string::npos);
      CHECK(what.find("timed out") != std::string::npos);
      const double s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      CHECK(s < 6.0);
      CHECK(comm->broken());
      CHECK_THROWS_WITH_AS(comm->barrier(), doctest::Contains("aborted"), Error);
    }
    cpu.barrier();
  }
}
#endif
