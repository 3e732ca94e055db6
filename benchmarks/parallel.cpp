// bench_parallel: what data parallelism costs and buys on this machine's GPUs.
// One process (run it plainly), over every GPU:
//   1. all-reduce, float32 sum, 1 MiB .. 256 MiB, DataParallel's path (one
//      thread, one NCCL group call) against raw ncclAllReduce in a group on the
//      same communicators and buffers: median time, algbw (bytes / time) and bus
//      bandwidth busbw = algbw * 2(n-1)/n, as nccl-tests defines it;
//   2. a training step of an MLP under DataParallel on 1..N GPUs, 256 samples per
//      GPU: median step time, samples/s, scaling efficiency (throughput on k GPUs
//      / (k x throughput on 1)).
// Then it runs itself under ember-run --nproc N (one process per GPU; ember-run
// is looked for in the build folder above this binary) for:
//   3. Communicator::all_reduce (DDP's path: a non-blocking NCCL communicator,
//      polled against a deadline) against raw ncclAllReduce on the same
//      communicator, stream and buffers, and the target line at 256 MiB;
//   4. the same MLP step under DistributedDataParallel on k = 1..N ranks (a
//      communicator over ranks 0..k-1, the others wait), efficiency per k and
//      the ">= 0.95 at 8 GPUs" target line.
// Started by a launcher (ember-run, mpirun) it runs 3 and 4 only. Results are
// checked before timing. With one GPU busbw is 0 by definition, so the
// bandwidth target is not measurable, and it says so. Without a GPU it exits 0.
// Every time is wall clock around the call plus a device synchronize (the same
// in benchmarks/peer_parallel.py), the median of 20 after 3 warm-ups.
// Usage: bench_parallel [--json FILE] [--quick] [--no-ddp] [--ember-run PATH]
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/ops.h"
#include "cuda/runtime.h"
#include "nn/activation.h"
#include "nn/linear.h"
#include "nn/sequential.h"
#include "optim/sgd.h"
#include "parallel/data_parallel.h"
#include "parallel/distributed.h"
#include "parallel/memory_view.h"
#include "parallel/process_group.h"
#include "timing.h"
#ifdef EMBER_HAVE_NCCL
#include "parallel/check.h"
#include "parallel/nccl_communicator.h"
#endif

using namespace ember;
using namespace ember::parallel;
using Clock = std::chrono::steady_clock;

namespace {

#ifdef EMBER_HAVE_NCCL
constexpr int64_t kPerGpu = 256, kWidth = 2048;  // the MLP: 2048-8192-8192-2048, ReLU
constexpr double kLr = 1e-3;                     // plain SGD, MSE (mean) loss

std::shared_ptr<nn::Sequential> make_mlp() {
  return std::make_shared<nn::Sequential>(nn::Linear(kWidth, 4 * kWidth), nn::ReLU(),
                                          nn::Linear(4 * kWidth, 4 * kWidth), nn::ReLU(),
                                          nn::Linear(4 * kWidth, kWidth));
}

void check(bool ok, const std::string& what) {
  if (!ok) {
    std::fprintf(stderr, "bench_parallel: check failed: %s\n", what.c_str());
    std::exit(1);
  }
}

// Median seconds of f() over `iters` runs after 3 warm-ups; f ends synchronised.
template <typename F>
double median_s(F&& f, int iters) {
  std::vector<double> s;
  for (int it = 0; it < iters + 3; ++it) {
    auto t0 = Clock::now();
    f();
    if (it >= 3) s.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  std::sort(s.begin(), s.end());
  return s[s.size() / 2];
}

std::string mib(int64_t bytes) {
  return std::to_string(bytes >> 20) + " MiB";
}
std::string gpus(int k) {
  return std::to_string(k) + (k == 1 ? " GPU" : " GPUs");
}

struct Bw {
  double algbw, busbw;
};
Bw bandwidth(int64_t bytes, double s, int n) {
  const double algbw = static_cast<double>(bytes) / s / 1e9;
  return {algbw, algbw * 2.0 * (n - 1) / n};
}

void add_all_reduce(bench::Table& t, const char* impl, int64_t bytes, int n, double s) {
  Bw bw = bandwidth(bytes, s, n);
  char note[64];
  std::snprintf(note, sizeof(note), "algbw %.1f GB/s", bw.algbw);
  t.add({"all_reduce", "f32", mib(bytes) + " x " + gpus(n), impl, s * 1e3, bw.busbw, "GB/s", note});
}

// Ours against raw NCCL at 256 MiB. For Communicator::all_reduce this is the
// issue's target line; for DataParallel's group call, a plain comparison.
void all_reduce_verdict(const char* what, bool target, int n, double ours_s, double nccl_s) {
  const char* head = target ? "target: all-reduce within 5% of NCCL's own bandwidth at 256 MiB"
                            : "DataParallel's group all-reduce against raw NCCL at 256 MiB";
  if (n == 1) {
    std::printf(
        "%s (%s): not measurable with 1 GPU (busbw = algbw x 2(n-1)/n is 0 by "
        "definition); time NCCL / ours = %.3f\n",
        head, what, nccl_s / ours_s);
    return;
  }
  const double ratio = nccl_s / ours_s;  // busbw ours / busbw NCCL
  std::printf("%s (%s): ratio %.3f%s (%d GPUs)\n", head, what, ratio,
              target ? (ratio >= 0.95 ? " met" : " MISSED") : "", n);
}

struct StepPoint {
  int k;
  double s;
};
// Adds the rows of a scaling run and prints the efficiency target line.
void add_scaling(bench::Table& t, const char* workload, const std::vector<StepPoint>& pts) {
  const double one = kPerGpu / pts.front().s;
  for (const StepPoint& p : pts) {
    const double rate = kPerGpu * p.k / p.s;
    char note[64];
    std::snprintf(note, sizeof(note), "efficiency %.3f", rate / (p.k * one));
    t.add({workload, "f32", gpus(p.k) + " x 256", "ember", p.s * 1e3, rate, "samp/s", note});
  }
  const StepPoint& last = pts.back();
  const double eff = kPerGpu * last.k / last.s / (last.k * one);
  if (last.k >= 8)
    std::printf("target: %s scaling efficiency >= 0.95 at 8 GPUs: %.3f %s (measured at %d)\n",
                workload, eff, eff >= 0.95 ? "met" : "MISSED", last.k);
  else
    std::printf(
        "target: %s scaling efficiency >= 0.95 at 8 GPUs: not measurable on %s; "
        "measured at %d: %.3f\n",
        workload, gpus(last.k).c_str(), last.k, eff);
}

std::vector<int64_t> sizes() {
  std::vector<int64_t> out;
  for (int64_t b = int64_t{1} << 20; b <= (int64_t{256} << 20); b *= 2) out.push_back(b);
  return out;
}

// ---- one process, every GPU (DataParallel's path)

void bench_group_all_reduce(bench::Table& table, int n, int iters) {
  std::vector<int> ids;
  for (int i = 0; i < n; ++i) ids.push_back(i);
  auto comms = NcclCommunicator::create_all(ids);
  std::vector<NcclCommunicator*> cs;
  for (auto& c : comms) cs.push_back(c.get());
  auto sync_all = [&] {
    for (int i = 0; i < n; ++i) cuda::synchronize(i);
  };
  double ours_256 = 0, nccl_256 = 0;
  for (int64_t bytes : sizes()) {
    const int64_t count = bytes / 4;
    std::vector<Tensor> bufs;
    std::vector<FlatBuffer> flats;
    for (int i = 0; i < n; ++i) {
      bufs.push_back(full({count}, i + 1.0, Device::cuda(i)));
      flats.push_back(FlatBuffer::of(bufs.back()));
    }
    auto raw = [&] {
      EMBER_NCCL_CHECK(ncclGroupStart());
      for (int i = 0; i < n; ++i)
        EMBER_NCCL_CHECK(ncclAllReduce(flats[i].data, flats[i].data, static_cast<size_t>(count),
                                       ncclFloat32, ncclSum, cs[i]->comm(),
                                       cuda::current_stream(i)));
      EMBER_NCCL_CHECK(ncclGroupEnd());
    };
    // Check both: every buffer holds 1 + 2 + ... + n, then n times that.
    NcclCommunicator::all_reduce_group(cs, flats, ReduceOp::Sum);
    sync_all();
    for (int i = 0; i < n; ++i)
      check(bufs[i].slice(0, count - 1, count).item() == n * (n + 1) / 2.0,
            "all_reduce_group on cuda:" + std::to_string(i));
    raw();
    sync_all();
    check(bufs[n - 1].slice(0, 0, 1).item() == n * n * (n + 1) / 2.0, "raw ncclAllReduce");
    for (auto& b : bufs) b.zero_();  // sums of zeros: no overflow however long it runs
    const double ours = median_s(
        [&] {
          NcclCommunicator::all_reduce_group(cs, flats, ReduceOp::Sum);
          sync_all();
        },
        iters);
    const double nccl = median_s(
        [&] {
          raw();
          sync_all();
        },
        iters);
    add_all_reduce(table, "ember grp", bytes, n, ours);
    add_all_reduce(table, "nccl grp", bytes, n, nccl);
    ours_256 = ours;
    nccl_256 = nccl;
  }
  all_reduce_verdict("one process, one group call", false, n, ours_256, nccl_256);
}

void bench_data_parallel(bench::Table& table, int n, int iters) {
  std::vector<StepPoint> pts;
  std::vector<Device> devices;
  for (int k = 1; k <= n; ++k) {
    devices.push_back(Device::cuda(k - 1));
    manual_seed(0);
    DataParallel<nn::Sequential> dp(make_mlp, devices);
    dp.set_optimizer([](std::vector<Tensor> p) {
      return std::make_unique<optim::SGD>(p, optim::SGDOptions(kLr));
    });
    // The batch starts on cuda:0, as in PyTorch's DataParallel (peer_parallel.py).
    Tensor x = randn({kPerGpu * k, kWidth}, Device::cuda(0));
    Tensor y = randn({kPerGpu * k, kWidth}, Device::cuda(0));
    auto loss_fn = [](nn::Sequential& m, const Tensor& a, const Tensor& b) {
      return mse_loss(m.forward(a), b);
    };
    const double s = median_s(
        [&] {
          dp.zero_grad();
          double loss = dp.forward_backward(x, y, loss_fn);
          dp.step();
          for (int i = 0; i < k; ++i) cuda::synchronize(i);
          check(std::isfinite(loss), "finite loss");
        },
        iters);
    pts.push_back({k, s});
    if (k == n)
      std::printf("memory after %s DataParallel steps:\n%s", gpus(k).c_str(),
                  memory_summary_all(devices).c_str());
  }
  add_scaling(table, "mlp step DP", pts);
}

// ---- one process per GPU (DistributedDataParallel's path)

// A fresh communicator over ranks 0..k-1 of `world` (nullptr on the other ranks,
// which still take part in sharing the id).
std::shared_ptr<NcclCommunicator> sub_communicator(Communicator& world, int k) {
  const int r = world.rank();
  NcclUniqueId id;
  if (r == 0) id = NcclUniqueId::create();
  std::vector<double> bytes(id.bytes.size());
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<unsigned char>(id.bytes[i]);
  Tensor t = from_vector(bytes, {static_cast<int64_t>(bytes.size())},
                         TensorOptions().device(world.device()));
  world.broadcast(t, 0);
  std::vector<float> got = t.cpu().to_vector<float>();
  for (size_t i = 0; i < got.size(); ++i)
    id.bytes[i] = static_cast<char>(static_cast<unsigned char>(got[i]));
  if (r >= k) return nullptr;
  return std::make_shared<NcclCommunicator>(id, r, k, world.device().index,
                                            CommOptions().timeout(std::chrono::seconds(60)));
}

void bench_rank_all_reduce(bench::Table* table, NcclCommunicator& comm, int iters) {
  const int n = comm.size(), dev = comm.device().index;
  cudaStream_t stream = cuda::current_stream(dev);
  double ours_256 = 0, nccl_256 = 0;
  for (int64_t bytes : sizes()) {
    const int64_t count = bytes / 4;
    Tensor buf = full({count}, comm.rank() + 1.0, comm.device());
    FlatBuffer flat = FlatBuffer::of(buf);
    // Raw NCCL on the same (non-blocking) communicator: enqueue, poll until NCCL
    // has taken it, wait for the stream.
    auto raw = [&] {
      ncclResult_t st = ncclAllReduce(flat.data, flat.data, static_cast<size_t>(count), ncclFloat32,
                                      ncclSum, comm.comm(), stream);
      while (st == ncclInProgress) EMBER_NCCL_CHECK(ncclCommGetAsyncError(comm.comm(), &st));
      EMBER_NCCL_CHECK(st);
      EMBER_CUDA_CHECK(cudaStreamSynchronize(stream));
    };
    comm.all_reduce(flat, ReduceOp::Sum);
    cuda::synchronize(dev);
    check(buf.slice(0, count - 1, count).item() == n * (n + 1) / 2.0, "Communicator::all_reduce");
    raw();
    check(buf.slice(0, 0, 1).item() == n * n * (n + 1) / 2.0, "raw ncclAllReduce");
    buf.zero_();
    cuda::synchronize(dev);
    const double ours = median_s(
        [&] {
          comm.all_reduce(flat, ReduceOp::Sum);
          cuda::synchronize(dev);
        },
        iters);
    const double nccl = median_s(raw, iters);
    if (table) {
      add_all_reduce(*table, "ember", bytes, n, ours);
      add_all_reduce(*table, "nccl", bytes, n, nccl);
    }
    ours_256 = ours;
    nccl_256 = nccl;
  }
  if (table)
    all_reduce_verdict("Communicator::all_reduce, one process per GPU", true, n, ours_256,
                       nccl_256);
}

void bench_ddp(bench::Table* table, Communicator& world, int iters) {
  const int r = world.rank(), n = world.size();
  const Device device = world.device();
  std::vector<StepPoint> pts;
  for (int k = 1; k <= n; ++k) {
    auto comm = sub_communicator(world, k);
    if (comm) {
      manual_seed(0);
      auto model = make_mlp();
      model->to(device);
      DistributedDataParallel ddp(model, comm);
      optim::SGD opt(model->parameters(), optim::SGDOptions(kLr));
      Generator data(1000 + r);  // this rank's shard
      Tensor x = randn({kPerGpu, kWidth}, device, &data);
      Tensor y = randn({kPerGpu, kWidth}, device, &data);
      const double s = median_s(
          [&] {
            opt.zero_grad();
            Tensor loss = mse_loss(model->forward(x), y);
            loss.backward();  // buckets all-reduce while backward runs
            opt.step();
            cuda::synchronize(device.index);
          },
          iters);
      pts.push_back({k, s});
      if (k == n) {
        std::string mem = memory_summary_all_ranks(*comm, device);
        if (table) std::printf("memory after %s DDP steps:\n%s", gpus(k).c_str(), mem.c_str());
      }
    }
    world.barrier();  // ranks >= k waited here
  }
  if (table) add_scaling(*table, "mlp step DDP", pts);
}

// Appends the rows of the JSON file `extra` (written by the ember-run child) to `path`.
void merge_json(const std::string& path, const std::string& extra) {
  std::ifstream a(path), b(extra);
  if (!a || !b) return;
  std::stringstream sa, sb;
  sa << a.rdbuf();
  sb << b.rdbuf();
  std::string mine = sa.str(), theirs = sb.str();
  const size_t end = mine.rfind("]}"), from = theirs.find("[\n"), to = theirs.rfind("\n]}");
  if (end == std::string::npos || from == std::string::npos || to == std::string::npos ||
      to <= from + 2)
    return;
  std::string rows = theirs.substr(from + 2, to - from - 2);
  const bool empty = mine.find("{\"workload\"") == std::string::npos;
  mine = mine.substr(0, end);
  while (!mine.empty() && mine.back() == '\n') mine.pop_back();
  mine += (empty ? "\n" : ",\n") + rows + "\n]}\n";
  std::ofstream(path) << mine;
  std::filesystem::remove(extra);
}

// Runs this binary under ember-run, one process per GPU; false if it could not.
bool run_ddp_child(std::string ember_run, int n, bool quick, const std::string& json) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return false;
  if (ember_run.empty()) ember_run = (self.parent_path().parent_path() / "ember-run").string();
  if (!fs::exists(ember_run)) {
    std::printf(
        "\nDDP sections skipped: %s not found (build target ember-run, or pass "
        "--ember-run PATH; or run `ember-run --nproc %d %s` yourself)\n",
        ember_run.c_str(), n, self.c_str());
    return false;
  }
  std::string cmd = "'" + ember_run + "' --nproc " + std::to_string(n) + " '" + self.string() + "'";
  if (quick) cmd += " --quick";
  if (!json.empty()) cmd += " --json '" + json + ".ddp'";
  std::printf("\n$ %s\n", cmd.c_str());
  std::fflush(stdout);
  const int rc = std::system(cmd.c_str());
  if (rc != 0) std::printf("bench_parallel: the DDP run under ember-run failed (status %d)\n", rc);
  if (!json.empty()) merge_json(json, json + ".ddp");
  return rc == 0;
}
#endif

int run(int argc, char** argv) {
  std::string ember_run;
  bool quick = false, ddp = true;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--quick"))
      quick = true;
    else if (!std::strcmp(argv[i], "--no-ddp"))
      ddp = false;
    else if (!std::strcmp(argv[i], "--ember-run") && i + 1 < argc)
      ember_run = argv[++i];
  }
  const char* json_arg = bench::json_path(argc, argv);
  const std::string json = json_arg ? json_arg : "";
  const int n = cuda::device_count();
  if (n == 0) {
    std::printf("bench_parallel: no CUDA device; nothing to measure (exit 0)\n");
    return 0;
  }
#ifndef EMBER_HAVE_NCCL
  (void)quick, (void)ddp;
  std::printf("bench_parallel: built without NCCL; nothing to measure (exit 0)\n");
  return 0;
#else
  const int iters = quick ? 5 : 20;
  const LaunchEnv env = launch_env();
  if (env.from_launcher || env.from_mpi) {
    // One process per GPU: sections 3 and 4; rank 0 prints and writes the JSON.
    ProcessGroup pg = init_process_group(
        ProcessGroupOptions().comm(CommOptions().timeout(std::chrono::seconds(120))));
    auto* world = dynamic_cast<NcclCommunicator*>(pg.communicator.get());
    if (!world) {
      if (pg.rank == 0)
        std::printf(
            "bench_parallel: %d ranks but the %s backend (NCCL needs one GPU per "
            "rank); nothing to measure\n",
            pg.world_size, pg.communicator->backend());
      return 0;
    }
    std::unique_ptr<bench::Table> table;
    if (pg.rank == 0)
      table = std::make_unique<bench::Table>("bench_parallel: one process per GPU (ember-run)");
    bench_rank_all_reduce(table.get(), *world, iters);
    bench_ddp(table.get(), *world, iters);
    if (table && !json.empty()) table->write_json(json.c_str());
    return 0;
  }

  cudaDeviceProp prop{};
  EMBER_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("bench_parallel: %s x %s, NCCL %d.%d.%d, NCCL_NVLS_ENABLE=%s\n", gpus(n).c_str(),
              prop.name, NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH,
              std::getenv("NCCL_NVLS_ENABLE") ? std::getenv("NCCL_NVLS_ENABLE") : "(unset)");
  {
    bench::Table table("bench_parallel: one process, every GPU (DataParallel)");
    bench_group_all_reduce(table, n, iters);
    bench_data_parallel(table, n, iters);
    if (!json.empty()) table.write_json(json.c_str());
  }
  if (ddp) run_ddp_child(ember_run, n, quick, json);
  return 0;
#endif
}
}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_parallel: %s\n", e.what());
    return 1;
  }
}
