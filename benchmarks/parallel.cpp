// bench_parallel: what data parallelism costs and buys on this machine's GPUs.
// Sections (--sections, comma-separated; default all):
//   group      one process, every GPU: DataParallel's all-reduce (one thread, one
//              NCCL group call) against raw ncclAllReduce in a group, 256 KiB ..
//              256 MiB: median time, algbw and busbw = algbw * 2(n-1)/n;
//   dp         the MLP step (4 x Linear(4096, 4096), ReLU between, MSE, SGD, 256
//              samples per GPU) under DataParallel on 1..N GPUs, and its memory
//              per GPU: peak allocated largest / smallest;
// then, one process per GPU (it starts itself under ember-run, or runs these
// alone when a launcher started it):
//   ar         Communicator::all_reduce against raw ncclAllReduce on the same
//              communicator, stream and buffers, each on the blocking
//              communicator ember uses and on the non-blocking one it joins with;
//   breakdown  where the time of one small all-reduce goes: host timestamps of
//              each stage (NcclStageTimes) and CUDA-event device time, per call
//              and back to back, both communicators, with raw NCCL beside it;
//   ddp        the MLP step under DistributedDataParallel on k = 1..N ranks (a
//              communicator over ranks 0..k-1), float32 and bfloat16 reduce_dtype;
//   zero       the MLP step with Adam under DDP, and under ZeRO-1
//              (ZeroRedundancyOptimizer), N ranks: step time and state per rank.
// Every time is wall clock around the call plus a device synchronize (as
// benchmarks/peer_parallel.py times torch), the median of --iters (20) after 3
// warm-ups; results are checked before timing. --tag T appends T to every impl
// (gpu_parallel.sh: "socket" under NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1).
// Without a GPU it exits 0.
// Usage: bench_parallel [--json FILE] [--quick] [--iters N] [--sections LIST]
//                       [--tag T] [--ember-run PATH]
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/memory.h"
#include "core/ops.h"
#include "cuda/runtime.h"
#include "nn/activation.h"
#include "nn/linear.h"
#include "nn/sequential.h"
#include "optim/adam.h"
#include "optim/sgd.h"
#include "parallel/data_parallel.h"
#include "parallel/distributed.h"
#include "parallel/memory_view.h"
#include "parallel/process_group.h"
#include "parallel/zero.h"
#include "timing.h"
#ifdef EMBER_HAVE_NCCL
#include "parallel/check.h"
#include "parallel/nccl_communicator.h"
#endif

extern char** environ;

using namespace ember;
using namespace ember::parallel;
using Clock = std::chrono::steady_clock;

namespace {

#ifdef EMBER_HAVE_NCCL
constexpr int64_t kPerGpu = 256, kWidth = 4096, kLayers = 4;  // the 4 x 4096 MLP
constexpr double kLr = 1e-3;                                  // SGD; Adam in "zero"

struct Config {
  int iters = 20;
  std::set<std::string> sections;
  std::string tag;  // appended to impl names
  bool has(const char* s) const { return sections.count(s) != 0; }
  std::string impl(const std::string& base) const { return tag.empty() ? base : base + " " + tag; }
};

std::shared_ptr<nn::Sequential> make_mlp() {
  auto m = std::make_shared<nn::Sequential>();
  for (int64_t i = 0; i < kLayers; ++i) {
    if (i > 0) m->push_back(nn::ReLU());
    m->push_back(nn::Linear(kWidth, kWidth));
  }
  return m;
}

void check(bool ok, const std::string& what) {
  if (!ok) {
    std::fprintf(stderr, "bench_parallel: check failed: %s\n", what.c_str());
    std::exit(1);
  }
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
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

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::string size_str(int64_t bytes) {
  return bytes >= (int64_t{1} << 20) ? std::to_string(bytes >> 20) + " MiB"
                                     : std::to_string(bytes >> 10) + " KiB";
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

void add_all_reduce(bench::Table& t, const std::string& impl, int64_t bytes, int n, double s) {
  Bw bw = bandwidth(bytes, s, n);
  char note[64];
  std::snprintf(note, sizeof(note), "algbw %.1f GB/s", bw.algbw);
  t.add({"all_reduce", "f32", size_str(bytes) + " x " + gpus(n), impl, s * 1e3, bw.busbw, "GB/s",
         note});
}

std::vector<int64_t> sizes() {
  std::vector<int64_t> out;
  for (int64_t b = int64_t{256} << 10; b <= (int64_t{256} << 20); b *= 2) out.push_back(b);
  return out;
}

struct StepPoint {
  int k;
  double s;
};
// The rows of a scaling run, with efficiency = throughput on k / (k x on 1).
void add_scaling(bench::Table& t, const std::string& workload, const std::string& impl,
                 const std::vector<StepPoint>& pts) {
  const double one = kPerGpu / pts.front().s;
  for (const StepPoint& p : pts) {
    const double rate = kPerGpu * p.k / p.s;
    char note[64];
    std::snprintf(note, sizeof(note), "efficiency %.3f", rate / (p.k * one));
    t.add({workload, "f32", gpus(p.k) + " x 256", impl, p.s * 1e3, rate, "samp/s", note});
  }
}

void print_nccl_env() {
  std::string env;
  for (char** e = environ; *e; ++e)
    if (std::strncmp(*e, "NCCL_", 5) == 0) env += std::string(" ") + *e;
  std::printf("NCCL runtime %s (headers %d.%d.%d); NCCL_* in the environment:%s\n",
              nccl_runtime_version().c_str(), NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH,
              env.empty() ? " (none)" : env.c_str());
}

// ---- one process, every GPU (DataParallel's path)

void bench_group_all_reduce(bench::Table& table, const Config& cfg, int n) {
  std::vector<int> ids;
  for (int i = 0; i < n; ++i) ids.push_back(i);
  auto comms = NcclCommunicator::create_all(ids);
  std::vector<NcclCommunicator*> cs;
  for (auto& c : comms) cs.push_back(c.get());
  auto sync_all = [&] {
    for (int i = 0; i < n; ++i) cuda::synchronize(i);
  };
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
        cfg.iters);
    const double nccl = median_s(
        [&] {
          raw();
          sync_all();
        },
        cfg.iters);
    add_all_reduce(table, cfg.impl("ember grp"), bytes, n, ours);
    add_all_reduce(table, cfg.impl("nccl grp"), bytes, n, nccl);
  }
}

void bench_data_parallel(bench::Table& table, const Config& cfg, int n) {
  std::vector<StepPoint> pts;
  std::vector<Device> devices;
  for (int k = 1; k <= n; ++k) {
    devices.push_back(Device::cuda(k - 1));
    for (const Device& d : devices) reset_peak_memory_stats(d);
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
        cfg.iters);
    pts.push_back({k, s});
    if (k == n) {
      int64_t lo = INT64_MAX, hi = 0;
      for (const Device& d : devices) {
        lo = std::min(lo, max_memory_allocated(d));
        hi = std::max(hi, max_memory_allocated(d));
      }
      std::printf("memory_summary_all after %s DataParallel steps:\n%s", gpus(k).c_str(),
                  memory_summary_all(devices).c_str());
      const double ratio = static_cast<double>(hi) / static_cast<double>(lo);
      char note[96];
      std::snprintf(note, sizeof(note), "peak allocated %.2f / %.2f GiB", hi / 1073741824.0,
                    lo / 1073741824.0);
      table.add(
          {"dp peak max/min", "f32", gpus(k) + " x 256", cfg.impl("ember"), 0.0, ratio, "x", note});
    }
  }
  add_scaling(table, "mlp step DP", cfg.impl("ember"), pts);
}

// ---- one process per GPU (DistributedDataParallel's path)

// A fresh communicator over ranks 0..k-1 of `world` (nullptr on the other ranks,
// which still take part in sharing the id).
std::shared_ptr<NcclCommunicator> sub_communicator(Communicator& world, int k,
                                                   CommOptions options = {}) {
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
                                            options.timeout(std::chrono::seconds(60)));
}

// Raw ncclAllReduce on `comm`'s own communicator and stream, as a user of NCCL
// would call it; a non-blocking communicator is polled until it has taken the call.
void raw_all_reduce(NcclCommunicator& comm, const FlatBuffer& flat) {
  ncclResult_t st = ncclAllReduce(flat.data, flat.data, static_cast<size_t>(flat.count),
                                  ncclFloat32, ncclSum, comm.comm(), comm.stream());
  while (st == ncclInProgress) EMBER_NCCL_CHECK(ncclCommGetAsyncError(comm.comm(), &st));
  EMBER_NCCL_CHECK(st);
}

void bench_rank_all_reduce(bench::Table* table, const Config& cfg, NcclCommunicator& comm,
                           NcclCommunicator& nb) {
  const int n = comm.size(), dev = comm.device().index;
  for (int64_t bytes : sizes()) {
    const int64_t count = bytes / 4;
    Tensor buf = full({count}, comm.rank() + 1.0, comm.device());
    FlatBuffer flat = FlatBuffer::of(buf);
    comm.all_reduce(flat, ReduceOp::Sum);
    cuda::synchronize(dev);
    check(buf.slice(0, count - 1, count).item() == n * (n + 1) / 2.0, "Communicator::all_reduce");
    raw_all_reduce(comm, flat);
    cuda::synchronize(dev);
    check(buf.slice(0, 0, 1).item() == n * n * (n + 1) / 2.0, "raw ncclAllReduce");
    buf.zero_();
    cuda::synchronize(dev);
    struct Variant {
      const char* impl;
      std::function<void()> call;
    };
    const Variant variants[] = {
        {"ember", [&] { comm.all_reduce(flat, ReduceOp::Sum); }},
        {"nccl", [&] { raw_all_reduce(comm, flat); }},
        {"ember nb", [&] { nb.all_reduce(flat, ReduceOp::Sum); }},
        {"nccl nb", [&] { raw_all_reduce(nb, flat); }},
    };
    for (const Variant& v : variants) {
      const double s = median_s(
          [&] {
            v.call();
            cuda::synchronize(dev);
          },
          cfg.iters);
      if (table) add_all_reduce(*table, cfg.impl(v.impl), bytes, n, s);
    }
  }
}

// One all-reduce, stage by stage: host nanoseconds between NcclStageTimes'
// stamps and the device time between events on the caller's stream.
struct Breakdown {
  std::vector<double> ordered, nccl, ready, recorded, completed, waited, synced, total, device,
      polls;
};

void bench_breakdown(bench::Table* table, const Config& cfg, NcclCommunicator& comm,
                     NcclCommunicator& nb) {
  const int dev = comm.device().index;
  const int iters = std::max(cfg.iters, 50);
  cuda::Event start, end;
  if (table) {
    print_nccl_env();
    std::printf(
        "\nbreakdown of one all-reduce (float32 sum), median over %d calls, microseconds.\n"
        "  order:    caller's event recorded, NCCL stream told to wait for it\n"
        "  nccl:     the NCCL call (blocking communicator: kernel launched; non-blocking:\n"
        "            NCCL starts a host thread for the launch and returns ncclInProgress)\n"
        "  ready:    non-blocking only: polling until NCCL reports the call taken in\n"
        "  record:   completion event recorded; the collective call returns here\n"
        "  gpu wait: wait() polling the completion event (the GPU still working)\n"
        "  order2:   caller's stream told to wait for the completion event\n"
        "  sync:     cudaDeviceSynchronize after wait() returned\n"
        "  device:   CUDA-event time on the caller's stream around call + wait\n"
        "  raw rows: ncclAllReduce on the same communicator and stream, then the sync\n",
        iters);
    std::printf("%-10s %-9s %-10s %7s %7s %7s %7s %8s %7s %7s %8s %8s %6s\n", "size", "comm",
                "impl", "order", "nccl", "ready", "record", "gpu wait", "order2", "sync", "total",
                "device", "polls");
  }
  for (int64_t bytes : {int64_t{256} << 10, int64_t{1} << 20, int64_t{8} << 20}) {
    const int64_t count = bytes / 4;
    Tensor buf = zeros({count}, comm.device());
    FlatBuffer flat = FlatBuffer::of(buf);
    cuda::synchronize(dev);
    for (NcclCommunicator* c : {&comm, &nb}) {
      const char* which = c == &comm ? "blocking" : "non-block";
      // Through the Communicator, with the stage probe on.
      NcclStageTimes probe;
      Breakdown b;
      c->set_stage_probe(&probe);
      for (int it = 0; it < iters + 5; ++it) {
        start.record(cuda::current_stream(dev));
        auto work = c->all_reduce_async(flat, ReduceOp::Sum);
        work->wait();
        end.record(cuda::current_stream(dev));
        const int64_t waited = probe.waited;
        cuda::synchronize(dev);
        const int64_t synced = now_ns();
        if (it < 5) continue;
        const int64_t after_call = probe.nccl_ready ? probe.nccl_ready : probe.nccl_returned;
        b.ordered.push_back((probe.ordered - probe.begin) / 1e3);
        b.nccl.push_back((probe.nccl_returned - probe.ordered) / 1e3);
        b.ready.push_back(probe.nccl_ready ? (probe.nccl_ready - probe.nccl_returned) / 1e3 : 0);
        b.recorded.push_back((probe.recorded - after_call) / 1e3);
        b.completed.push_back((probe.completed - probe.recorded) / 1e3);
        b.waited.push_back((waited - probe.completed) / 1e3);
        b.synced.push_back((synced - waited) / 1e3);
        b.total.push_back((synced - probe.begin) / 1e3);
        b.device.push_back(start.elapsed_ms(end) * 1e3);
        b.polls.push_back(static_cast<double>(probe.polls));
      }
      c->set_stage_probe(nullptr);
      // Raw NCCL on the same communicator and stream.
      Breakdown raw;
      for (int it = 0; it < iters + 5; ++it) {
        const int64_t t0 = now_ns();
        start.record(c->stream());
        raw_all_reduce(*c, flat);
        const int64_t t1 = now_ns();
        end.record(c->stream());
        cuda::synchronize(dev);
        const int64_t t2 = now_ns();
        if (it < 5) continue;
        raw.nccl.push_back((t1 - t0) / 1e3);
        raw.synced.push_back((t2 - t1) / 1e3);
        raw.total.push_back((t2 - t0) / 1e3);
        raw.device.push_back(start.elapsed_ms(end) * 1e3);
      }
      // Back to back: 20 calls queued, one wait at the end (launch-bound rate).
      auto queued = [&](bool ours) {
        std::vector<double> per;
        for (int rep = 0; rep < 7; ++rep) {
          const int64_t t0 = now_ns();
          std::vector<std::shared_ptr<Work>> works;
          for (int i = 0; i < 20; ++i) {
            if (ours)
              works.push_back(c->all_reduce_async(flat, ReduceOp::Sum));
            else
              raw_all_reduce(*c, flat);
          }
          for (auto& w : works) w->wait();
          cuda::synchronize(dev);
          if (rep >= 2) per.push_back((now_ns() - t0) / 20e3);
        }
        return median(per);
      };
      const double q_ours = queued(true), q_raw = queued(false);
      if (table) {
        std::printf(
            "%-10s %-9s %-10s %7.1f %7.1f %7.1f %7.1f %8.1f %7.1f %7.1f %8.1f %8.1f %6.0f\n",
            size_str(bytes).c_str(), which, "ember", median(b.ordered), median(b.nccl),
            median(b.ready), median(b.recorded), median(b.completed), median(b.waited),
            median(b.synced), median(b.total), median(b.device), median(b.polls));
        std::printf("%-10s %-9s %-10s %7s %7.1f %7s %7s %8s %7s %7.1f %8.1f %8.1f\n",
                    size_str(bytes).c_str(), which, "raw nccl", "-", median(raw.nccl), "-", "-",
                    "-", "-", median(raw.synced), median(raw.total), median(raw.device));
        std::printf(
            "%-10s %-9s back to back, 20 queued then one wait: ember %.1f us/call, raw "
            "%.1f us/call\n",
            size_str(bytes).c_str(), which, q_ours, q_raw);
        const std::string shape = size_str(bytes) + " " + which;
        table->add({"ar breakdown", "f32", shape, cfg.impl("ember"), median(b.total) / 1e3,
                    median(b.device), "us dev", "host total ms; rate: device us"});
        table->add({"ar breakdown", "f32", shape, cfg.impl("nccl"), median(raw.total) / 1e3,
                    median(raw.device), "us dev", "host total ms; rate: device us"});
        table->add({"ar back-to-back", "f32", shape, cfg.impl("ember"), q_ours / 1e3, 0, "",
                    "ms per call, 20 queued"});
        table->add({"ar back-to-back", "f32", shape, cfg.impl("nccl"), q_raw / 1e3, 0, "",
                    "ms per call, 20 queued"});
      }
    }
  }
}

void bench_ddp(bench::Table* table, const Config& cfg, Communicator& world) {
  const int r = world.rank(), n = world.size();
  const Device device = world.device();
  std::vector<StepPoint> pts, pts_bf16;
  for (int k = 1; k <= n; ++k) {
    for (DType reduce : {kFloat32, kBFloat16}) {
      if (reduce == kBFloat16 && k != n) continue;  // bfloat16: the full world only
      auto comm = sub_communicator(world, k);
      if (comm) {
        manual_seed(0);
        auto model = make_mlp();
        model->to(device);
        DistributedDataParallel ddp(model, comm, DdpOptions().reduce_dtype(reduce));
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
            cfg.iters);
        (reduce == kFloat32 ? pts : pts_bf16).push_back({k, s});
      }
      world.barrier();  // ranks >= k waited here
    }
  }
  if (table) {
    add_scaling(*table, "mlp step DDP", cfg.impl("ember"), pts);
    // bfloat16 gradients, efficiency against the float32 one-GPU step.
    if (n > 1 && !pts_bf16.empty()) {
      const double one = kPerGpu / pts.front().s;
      const StepPoint& p = pts_bf16.back();
      char note[64];
      std::snprintf(note, sizeof(note), "efficiency %.3f", kPerGpu * p.k / p.s / (p.k * one));
      table->add({"mlp step DDP", "f32", gpus(p.k) + " x 256", cfg.impl("ember bf16"), p.s * 1e3,
                  kPerGpu * p.k / p.s, "samp/s", note});
    }
  }
}

void bench_zero(bench::Table* table, const Config& cfg, Communicator& world) {
  const int r = world.rank(), n = world.size();
  const Device device = world.device();
  for (bool zero : {false, true}) {
    auto comm = sub_communicator(world, n);
    reset_peak_memory_stats(device);
    manual_seed(0);
    auto model = make_mlp();
    model->to(device);
    DistributedDataParallel ddp(model, comm);
    auto make = [](std::vector<Tensor> p) -> std::unique_ptr<optim::Optimizer> {
      return std::make_unique<optim::Adam>(p, optim::AdamOptions(kLr));
    };
    std::unique_ptr<optim::Optimizer> plain;
    std::unique_ptr<ZeroRedundancyOptimizer> sharded;
    if (zero)
      sharded = std::make_unique<ZeroRedundancyOptimizer>(ddp, make);
    else
      plain = make(model->parameters());
    Generator data(2000 + r);
    Tensor x = randn({kPerGpu, kWidth}, device, &data);
    Tensor y = randn({kPerGpu, kWidth}, device, &data);
    const double s = median_s(
        [&] {
          if (zero)
            sharded->zero_grad();
          else
            plain->zero_grad();
          mse_loss(model->forward(x), y).backward();
          if (zero)
            sharded->step();
          else
            plain->step();
          cuda::synchronize(device.index);
        },
        cfg.iters);
    int64_t state = 0;
    if (zero) {
      state = sharded->state_bytes();
    } else {
      for (const Tensor& p : model->parameters())
        if (const optim::ParamState* st = plain->state(p))
          for (const auto& [name, t] : st->buffers) state += static_cast<int64_t>(t.nbytes());
    }
    const std::string mem = memory_summary_all_ranks(*comm, device);
    if (table) {
      const char* what = zero ? "ZeRO-1 (ZeroRedundancyOptimizer, Adam)" : "DDP + Adam";
      std::printf("\nmemory_summary_all_ranks after %s on %s:\n%s", what, gpus(n).c_str(),
                  mem.c_str());
      std::printf("optimizer state on rank 0: %.1f MiB\n", state / 1048576.0);
      char note[96];
      std::snprintf(note, sizeof(note), "state %.1f MiB/rank, peak alloc %.2f GiB",
                    state / 1048576.0, max_memory_allocated(device) / 1073741824.0);
      table->add({zero ? "mlp step ZeRO Adam" : "mlp step DDP Adam", "f32", gpus(n) + " x 256",
                  cfg.impl("ember"), s * 1e3, kPerGpu * n / s, "samp/s", note});
    }
  }
}

// Appends the rows of the JSON file `extra` (written by the ember-run child) to `path`.
void merge_json(const std::string& path, const std::string& extra) {
  std::ifstream a(path), b(extra);
  if (!b) return;
  std::stringstream sa, sb;
  if (a) sa << a.rdbuf();
  sb << b.rdbuf();
  std::string mine = sa.str(), theirs = sb.str();
  if (mine.empty()) {
    std::ofstream(path) << theirs;
    std::filesystem::remove(extra);
    return;
  }
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
bool run_rank_child(std::string ember_run, int n, const std::string& args,
                    const std::string& json) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return false;
  if (ember_run.empty()) ember_run = (self.parent_path().parent_path() / "ember-run").string();
  if (!fs::exists(ember_run)) {
    std::printf(
        "\none-process-per-GPU sections skipped: %s not found (build target ember-run, or pass "
        "--ember-run PATH; or run `ember-run --nproc %d %s` yourself)\n",
        ember_run.c_str(), n, self.c_str());
    return false;
  }
  std::string cmd =
      "'" + ember_run + "' --nproc " + std::to_string(n) + " '" + self.string() + "'" + args;
  if (!json.empty()) cmd += " --json '" + json + ".ranks'";
  std::printf("\n$ %s\n", cmd.c_str());
  std::fflush(stdout);
  const int rc = std::system(cmd.c_str());
  if (rc != 0) std::printf("bench_parallel: the run under ember-run failed (status %d)\n", rc);
  if (!json.empty()) merge_json(json, json + ".ranks");
  return rc == 0;
}
#endif

int run(int argc, char** argv) {
  std::string ember_run, sections = "group,dp,ar,breakdown,ddp,zero", tag;
  bool quick = false;
  int iters = 0;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--quick"))
      quick = true;
    else if (!std::strcmp(argv[i], "--no-ddp"))
      sections = "group,dp";
    else if (!std::strcmp(argv[i], "--ember-run") && i + 1 < argc)
      ember_run = argv[++i];
    else if (!std::strcmp(argv[i], "--sections") && i + 1 < argc)
      sections = argv[++i];
    else if (!std::strcmp(argv[i], "--tag") && i + 1 < argc)
      tag = argv[++i];
    else if (!std::strcmp(argv[i], "--iters") && i + 1 < argc)
      iters = std::atoi(argv[++i]);
  }
  const char* json_arg = bench::json_path(argc, argv);
  const std::string json = json_arg ? json_arg : "";
  const int n = cuda::device_count();
  if (n == 0) {
    std::printf("bench_parallel: no CUDA device; nothing to measure (exit 0)\n");
    return 0;
  }
#ifndef EMBER_HAVE_NCCL
  (void)quick, (void)iters;
  std::printf("bench_parallel: built without NCCL; nothing to measure (exit 0)\n");
  return 0;
#else
  Config cfg;
  cfg.iters = iters > 0 ? iters : quick ? 5 : 20;
  cfg.tag = tag;
  {
    std::stringstream ss(sections);
    for (std::string s; std::getline(ss, s, ',');)
      if (!s.empty()) cfg.sections.insert(s);
  }
  const LaunchEnv env = launch_env();
  if (env.from_launcher || env.from_mpi) {
    // One process per GPU; rank 0 prints and writes the JSON.
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
    if (cfg.has("ar") || cfg.has("breakdown")) {
      // The same ranks on a non-blocking communicator, for the comparison.
      auto nb = sub_communicator(*world, pg.world_size, CommOptions().nccl_nonblocking(true));
      if (pg.rank == 0)
        std::printf("communicators: ember's %s, the other %s\n",
                    world->nonblocking() ? "non-blocking (split failed?)" : "blocking (split)",
                    nb->nonblocking() ? "non-blocking" : "blocking");
      if (cfg.has("ar")) bench_rank_all_reduce(table.get(), cfg, *world, *nb);
      if (cfg.has("breakdown")) bench_breakdown(table.get(), cfg, *world, *nb);
    }
    if (cfg.has("ddp")) bench_ddp(table.get(), cfg, *world);
    if (cfg.has("zero")) bench_zero(table.get(), cfg, *world);
    if (table && !json.empty()) table->write_json(json.c_str());
    return 0;
  }

  cudaDeviceProp prop{};
  EMBER_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("bench_parallel: %s x %s, NCCL %s, NCCL_NVLS_ENABLE=%s\n", gpus(n).c_str(), prop.name,
              nccl_runtime_version().c_str(),
              std::getenv("NCCL_NVLS_ENABLE") ? std::getenv("NCCL_NVLS_ENABLE") : "(unset)");
  if (cfg.has("group") || cfg.has("dp")) {
    bench::Table table("bench_parallel: one process, every GPU (DataParallel)");
    if (cfg.has("group")) bench_group_all_reduce(table, cfg, n);
    if (cfg.has("dp")) bench_data_parallel(table, cfg, n);
    if (!json.empty()) table.write_json(json.c_str());
  }
  std::string child;
  for (const char* s : {"ar", "breakdown", "ddp", "zero"})
    if (cfg.has(s)) child += (child.empty() ? "" : ",") + std::string(s);
  if (!child.empty()) {
    std::string args = " --sections " + child + " --iters " + std::to_string(cfg.iters);
    if (!tag.empty()) args += " --tag '" + tag + "'";
    if (!run_rank_child(ember_run, n, args, json)) return 1;
  }
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
