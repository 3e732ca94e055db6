// bench_parallel: what data parallelism costs and buys on this machine's GPUs.
//   1. NCCL all-reduce over every GPU (one process, one group call), float32,
//      1 MiB .. 256 MiB: median time, algorithm bandwidth (bytes / time) and bus
//      bandwidth busbw = algbw * 2(n-1)/n, as nccl-tests defines it;
//   2. a training step of an MLP under DataParallel on 1..N GPUs with a fixed
//      batch per GPU: median step time, samples/s and scaling efficiency
//      (throughput on k GPUs / (k x throughput on 1)).
// Results are checked before timing. With one GPU, busbw is 0 by definition and
// scaling has one point: it says so. Without a GPU it says so and exits 0.
// Usage: bench_parallel [--json FILE] [--quick]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "core/ops.h"
#include "cuda/runtime.h"
#include "nn/activation.h"
#include "nn/linear.h"
#include "nn/sequential.h"
#include "optim/sgd.h"
#include "parallel/data_parallel.h"
#include "parallel/memory_view.h"
#ifdef EMBER_HAVE_NCCL
#include "parallel/nccl_communicator.h"
#endif

using namespace ember;
using namespace ember::parallel;
using Clock = std::chrono::steady_clock;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void check(bool ok, const std::string& what) {
  if (!ok) {
    std::fprintf(stderr, "bench_parallel: check failed: %s\n", what.c_str());
    std::exit(1);
  }
}

struct AllReduceRow {
  int64_t bytes;
  double ms, algbw, busbw;
};
struct ScalingRow {
  int gpus;
  double ms, samples_per_s, efficiency;
};

#ifdef EMBER_HAVE_NCCL
std::vector<AllReduceRow> bench_all_reduce(int n, bool quick) {
  std::vector<int> ids;
  for (int i = 0; i < n; ++i) ids.push_back(i);
  auto comms = NcclCommunicator::create_all(ids);
  std::vector<NcclCommunicator*> cs;
  for (auto& c : comms) cs.push_back(c.get());
  std::vector<AllReduceRow> rows;
  for (int64_t bytes = int64_t{1} << 20; bytes <= (int64_t{256} << 20); bytes *= 4) {
    const int64_t count = bytes / 4;
    std::vector<Tensor> bufs;
    std::vector<FlatBuffer> flats;
    for (int i = 0; i < n; ++i) {
      bufs.push_back(full({count}, i + 1.0, Device::cuda(i)));
      flats.push_back(FlatBuffer::of(bufs.back()));
    }
    // Check: every buffer holds 1 + 2 + ... + n.
    NcclCommunicator::all_reduce_group(cs, flats, ReduceOp::Sum);
    for (int i = 0; i < n; ++i) {
      cuda::synchronize(i);
      Tensor last = bufs[i].slice(0, count - 1, count).cpu();
      check(last.item() == n * (n + 1) / 2.0, "all-reduce sum on cuda:" + std::to_string(i));
    }
    const int iters = quick ? 5 : 20;
    std::vector<double> samples;
    for (int it = 0; it < iters + 3; ++it) {
      auto t0 = Clock::now();
      NcclCommunicator::all_reduce_group(cs, flats, ReduceOp::Sum);
      for (int i = 0; i < n; ++i) cuda::synchronize(i);
      if (it >= 3) samples.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    }
    const double s = median(samples);
    const double algbw = static_cast<double>(bytes) / s / 1e9;
    rows.push_back({bytes, s * 1e3, algbw, algbw * 2.0 * (n - 1) / n});
  }
  return rows;
}

std::vector<ScalingRow> bench_scaling(int n, bool quick) {
  const int64_t per_gpu = 256, width = 2048;
  auto make = [] {
    return std::make_shared<nn::Sequential>(nn::Linear(width, 4 * width), nn::ReLU(),
                                            nn::Linear(4 * width, 4 * width), nn::ReLU(),
                                            nn::Linear(4 * width, width));
  };
  std::vector<ScalingRow> rows;
  for (int k = 1; k <= n; ++k) {
    std::vector<Device> devices;
    for (int i = 0; i < k; ++i) devices.push_back(Device::cuda(i));
    manual_seed(0);
    DataParallel<nn::Sequential> dp(make, devices);
    dp.set_optimizer([](std::vector<Tensor> p) {
      return std::make_unique<optim::SGD>(p, optim::SGDOptions(1e-3));
    });
    Tensor x = randn({per_gpu * k, width}), y = randn({per_gpu * k, width});
    auto loss_fn = [](nn::Sequential& m, const Tensor& a, const Tensor& b) {
      return mse_loss(m.forward(a), b);
    };
    std::vector<double> samples;
    const int iters = quick ? 5 : 20;
    for (int it = 0; it < iters + 3; ++it) {
      auto t0 = Clock::now();
      dp.zero_grad();
      double loss = dp.forward_backward(x, y, loss_fn);
      dp.step();
      for (int i = 0; i < k; ++i) cuda::synchronize(i);
      check(std::isfinite(loss), "finite loss");
      if (it >= 3) samples.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    }
    const double s = median(samples);
    const double throughput = static_cast<double>(per_gpu * k) / s;
    const double eff = rows.empty() ? 1.0 : throughput / (k * rows.front().samples_per_s);
    rows.push_back({k, s * 1e3, throughput, eff});
    if (k == n) std::printf("\nmemory after %d-GPU steps:\n%s", k,
                            memory_summary_all(devices).c_str());
  }
  return rows;
}
#endif

}  // namespace

int main(int argc, char** argv) {
  std::string json;
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
    else if (!std::strcmp(argv[i], "--quick")) quick = true;
  }
  const int n = cuda::device_count();
  if (n == 0) {
    std::printf("bench_parallel: no CUDA device; nothing to measure (exit 0)\n");
    return 0;
  }
#ifndef EMBER_HAVE_NCCL
  (void)quick;
  std::printf("bench_parallel: built without NCCL; nothing to measure (exit 0)\n");
  return 0;
#else
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::printf("bench_parallel: %d x %s, NCCL %d.%d.%d\n", n, prop.name, NCCL_MAJOR, NCCL_MINOR,
              NCCL_PATCH);

  auto ar = bench_all_reduce(n, quick);
  std::printf("\nall-reduce (float32, sum, %d GPU(s), one group call)\n", n);
  std::printf("%12s %10s %12s %12s\n", "size", "time ms", "algbw GB/s", "busbw GB/s");
  for (const auto& r : ar)
    std::printf("%9lld MiB %10.3f %12.2f %12.2f\n", static_cast<long long>(r.bytes >> 20), r.ms,
                r.algbw, r.busbw);
  if (n == 1)
    std::printf("note: with 1 GPU busbw = algbw x 2(n-1)/n = 0 by definition; bus bandwidth "
                "needs 2+ GPUs\n");

  auto sc = bench_scaling(n, quick);
  std::printf("\nMLP training step under DataParallel (256 samples per GPU, 2048-8192-8192-2048)\n");
  std::printf("%6s %10s %12s %11s\n", "GPUs", "step ms", "samples/s", "efficiency");
  for (const auto& r : sc)
    std::printf("%6d %10.3f %12.0f %11.3f\n", r.gpus, r.ms, r.samples_per_s, r.efficiency);
  if (n == 1) std::printf("note: scaling efficiency needs 2+ GPUs; only the 1-GPU point ran\n");

  if (!json.empty()) {
    std::ofstream out(json);
    out << "{\"gpus\": " << n << ", \"gpu\": \"" << prop.name << "\", \"all_reduce\": [";
    for (size_t i = 0; i < ar.size(); ++i)
      out << (i ? ", " : "") << "{\"bytes\": " << ar[i].bytes << ", \"ms\": " << ar[i].ms
          << ", \"algbw_gbps\": " << ar[i].algbw << ", \"busbw_gbps\": " << ar[i].busbw << "}";
    out << "], \"scaling\": [";
    for (size_t i = 0; i < sc.size(); ++i)
      out << (i ? ", " : "") << "{\"gpus\": " << sc[i].gpus << ", \"step_ms\": " << sc[i].ms
          << ", \"samples_per_s\": " << sc[i].samples_per_s
          << ", \"efficiency\": " << sc[i].efficiency << "}";
    out << "]}\n";
  }
  return 0;
#endif
}
