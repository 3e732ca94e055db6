// The NCCL backend (suite "cuda"): all-reduce against a CPU sum over every GPU
// of this process (one thread driving all, in a group), and, one rank per MPI
// process, DistributedDataParallel on the GPUs (needs one GPU per rank).
#include <doctest/doctest.h>

#ifdef EMBER_HAVE_NCCL
#include <cmath>
#include <memory>

#include "core/ops.h"
#include "cuda/runtime.h"
#include "nn/linear.h"
#include "nn/activation.h"
#include "nn/sequential.h"
#include "parallel/distributed.h"
#include "parallel/mpi_communicator.h"
#include "parallel/nccl_communicator.h"

using namespace ember;
using namespace ember::parallel;

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
    Tensor got = dev[i].cpu().to(kFloat64);
    double err = std::sqrt((got - want).pow(2).sum().item() / want.pow(2).sum().item());
    CHECK(err < 1e-6);
  }
  // Average, through the Communicator interface (one GPU: itself).
  if (n == 1) {
    Tensor t = full({17}, 3.0, Device::cuda(0));
    comms[0]->all_reduce(t, ReduceOp::Average);
    CHECK(t.cpu().to_vector<float>()[16] == 3.0f);
    comms[0]->barrier();
  }
}

TEST_CASE("nccl/ddp: one rank per GPU matches the MPI ranks' CPU reference" *
          doctest::test_suite("cuda")) {
  auto cpu = std::make_shared<MpiCommunicator>();
  if (cpu->size() > cuda::device_count()) {
    MESSAGE("skipped: ", cpu->size(), " ranks but ", cuda::device_count(), " GPU(s)");
    return;
  }
  const int r = cpu->rank(), n = cpu->size();
  NcclUniqueId id;
  if (r == 0) id = NcclUniqueId::create();
  // The 128-byte id travels over MPI as 16 int64 words.
  cpu->broadcast(FlatBuffer{id.bytes.data(), static_cast<int64_t>(id.bytes.size() / 8), kInt64, kCPU});
  auto comm = std::make_shared<NcclCommunicator>(id, r, n, r, CommOptions());
  cuda::set_device(r);
  manual_seed(4);
  auto model = std::make_shared<nn::Sequential>(nn::Linear(8, 32), nn::ReLU(), nn::Linear(32, 4));
  manual_seed(4);
  auto reference = std::make_shared<nn::Sequential>(nn::Linear(8, 32), nn::ReLU(), nn::Linear(32, 4));
  model->to(Device::cuda(r));
  DistributedDataParallel ddp(model, comm, DdpOptions().first_bucket_bytes(256));
  manual_seed(9);
  Tensor x = randn({4 * n, 8}), y = randn({4 * n, 4});
  mse_loss(model->forward(x.slice(0, 4 * r, 4 * r + 4).cuda(r)), y.slice(0, 4 * r, 4 * r + 4).cuda(r))
      .backward();
  mse_loss(reference->forward(x), y).backward();
  auto got = model->parameters();
  auto want = reference->parameters();
  for (size_t i = 0; i < got.size(); ++i) {
    Tensor g = got[i].grad().cpu().to(kFloat64), w = want[i].grad().to(kFloat64);
    CHECK(std::sqrt((g - w).pow(2).sum().item() / w.pow(2).sum().item()) < 1e-5);
  }
}
#endif
