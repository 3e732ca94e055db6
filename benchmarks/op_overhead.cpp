// bench_op_overhead: host time per eager op (issue 8). On cuda:0, a bare
// cudaLaunchKernel of the kernel ember's add launches (same grid, block, stream)
// is the floor; ember's add(a, b) without and with grad is measured against it.
// The same ops on CPU show the framework's share alone (no launch). Each figure
// is the median over 50 batches of 200 ops, each batch timed with a steady clock
// and followed by an untimed synchronisation, so the GPU's queue never fills and
// throttles the host. Target: op <= 1.5x the bare launch. --json FILE writes rows.
// The profiler's cost (core/profiler.h): "add, no grad" runs with the profiler
// built in and off (its whole off cost: compare with a tree without it,
// tools/gpu_op_overhead_ab.sh); the "profiled" rows run the same add inside a
// Profile, with host spans only and, on CUDA, with CUDA events around each span.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "benchmarks/timing.h"
#include "core/autograd.h"
#include "core/ops.h"
#include "core/profiler.h"
#include "cuda/check.h"
#include "cuda/kernels/elementwise.h"
#include "cuda/runtime.h"

using namespace ember;

namespace {

constexpr int kBatch = 200;
constexpr int kBatches = 50;
constexpr double kTarget = 1.5;

// Median host ns per call of f over kBatches timed batches of kBatch calls; after
// each batch, `sync` runs untimed. One untimed batch first warms caches and pools.
template <typename F, typename S>
double host_ns(F&& f, S&& sync) {
  for (int i = 0; i < kBatch; ++i) f();
  sync();
  std::vector<double> ns;
  for (int r = 0; r < kBatches; ++r) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < kBatch; ++i) f();
    const std::chrono::duration<double, std::nano> d = std::chrono::steady_clock::now() - start;
    sync();
    ns.push_back(d.count() / kBatch);
  }
  std::sort(ns.begin(), ns.end());
  return ns[ns.size() / 2];
}

// Median host ns per op of x = add(x, b) over a chain of kBatch adds whose graph
// is kept, as in a forward pass (b's AccumulateGrad node lives on); the chain is
// dropped untimed after each batch.
template <typename S>
double chain_ns(const Tensor& a, const Tensor& b, S&& sync) {
  std::vector<double> ns;
  for (int r = 0; r <= kBatches; ++r) {
    Tensor x = a;
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < kBatch; ++i) x = add(x, b);
    const std::chrono::duration<double, std::nano> d = std::chrono::steady_clock::now() - start;
    sync();
    x = Tensor();
    if (r > 0) ns.push_back(d.count() / kBatch);  // the first is a warm-up
  }
  std::sort(ns.begin(), ns.end());
  return ns[ns.size() / 2];
}

// Median host ns per node of backward through a chain of kBatch adds
// (x = add(x, b)), the chain rebuilt untimed before each timed backward.
template <typename S>
double backward_ns(const Tensor& a, const Tensor& b, S&& sync) {
  std::vector<double> ns;
  for (int r = 0; r <= kBatches; ++r) {
    a.set_grad(Tensor());
    b.set_grad(Tensor());
    Tensor x = a;
    for (int i = 0; i < kBatch; ++i) x = add(x, b);
    Tensor g = ones_like(x.detach());
    sync();
    const auto start = std::chrono::steady_clock::now();
    x.backward(g);
    const std::chrono::duration<double, std::nano> d = std::chrono::steady_clock::now() - start;
    sync();
    if (r > 0) ns.push_back(d.count() / kBatch);  // the first is a warm-up
  }
  std::sort(ns.begin(), ns.end());
  return ns[ns.size() / 2];
}

struct Row {
  std::string what, device, shape;
  double ns = 0;
  double ratio = 0;  // to the bare launch of the same size; 0: not applicable
};

std::vector<Row> g_rows;

void add_row(const std::string& what, Device dev, int64_t n, double ns, double bare = 0) {
  char shape[32];
  std::snprintf(shape, sizeof shape, "[%lld]", static_cast<long long>(n));
  Row r{what, dev.str(), shape, ns, bare > 0 ? ns / bare : 0};
  if (r.ratio > 0)
    std::printf("%-34s %-7s %-7s %10.0f %8.2fx\n", r.what.c_str(), r.device.c_str(),
                r.shape.c_str(), r.ns, r.ratio);
  else
    std::printf("%-34s %-7s %-7s %10.0f %9s\n", r.what.c_str(), r.device.c_str(), r.shape.c_str(),
                r.ns, "-");
  std::fflush(stdout);
  g_rows.push_back(std::move(r));
}

double max_rel_err(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    num += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    den += double(want[i]) * want[i];
  }
  return std::sqrt(num / (den > 0 ? den : 1));
}

// A bare launch of binary_kernel<float> (BinaryOp::Add) on contiguous [n] buffers,
// with the arguments launch_binary passes; by the kernel's handle (as <<<>>> and
// launch_binary launch) or by its host stub.
struct BareAdd {
  cuda::KernelLaunch launch;
  BinaryOp op = BinaryOp::Add;
  const float* x;
  const float* y;
  float* out;
  StridedLayout layout{};
  int64_t n;
  double alpha = 1.0;
  cudaStream_t stream;
  bool by_stub = false;

  BareAdd(const Tensor& a, const Tensor& b, const Tensor& o)
      : launch(cuda::binary_kernel_launch(kFloat32, a.numel())),
        x(a.data_ptr<float>()),
        y(b.data_ptr<float>()),
        out(o.data_ptr<float>()),
        n(a.numel()),
        stream(cuda::current_stream(a.device().index)) {
    layout.ndim = 1;
    layout.sizes[0] = n;
    layout.strides[0] = 1;
  }
  void operator()() {
    void* args[] = {&op, &x, &layout, &y, &layout, &out, &layout, &n, &alpha};
    EMBER_CUDA_CHECK(cudaLaunchKernel(by_stub ? launch.kernel : launch.handle, dim3(launch.grid),
                                      dim3(launch.block), args, 0, stream));
  }
};

void write_json(const char* path, const std::string& gpu) {
  if (path == nullptr) return;
  FILE* f = std::fopen(path, "w");
  if (f == nullptr) {
    std::fprintf(stderr, "cannot write %s\n", path);
    return;
  }
  std::fprintf(f, "{\"benchmark\": \"op_overhead\", \"gpu\": \"%s\", \"rows\": [\n", gpu.c_str());
  for (size_t i = 0; i < g_rows.size(); ++i) {
    const Row& r = g_rows[i];
    const char* what = r.what.c_str() + r.what.find_first_not_of(' ');  // no table indent
    std::fprintf(f,
                 "  {\"workload\": \"%s\", \"device\": \"%s\", \"shape\": \"%s\", "
                 "\"host_ns_per_op\": %.1f, \"ratio_to_bare_launch\": %.3f}%s\n",
                 what, r.device.c_str(), r.shape.c_str(), r.ns, r.ratio,
                 i + 1 < g_rows.size() ? "," : "");
  }
  std::fprintf(f, "]}\n");
  std::fclose(f);
}

// Checks every path op_rows times, on `dev` with [n] inputs, against values
// computed on the host: add without and with grad (its output and its node), a
// chain of kBatch adds, add_ in place, and the gradients backward through the
// chain gives. Prints what failed.
bool validate_op_rows(Device dev, int64_t n) {
  manual_seed(0);
  Tensor a = randn({n}, dev), b = randn({n}, dev);
  const std::vector<float> av = a.to_vector<float>(), bv = b.to_vector<float>();
  std::vector<float> sum(av.size()), chain(av.size()), twice(av.size());
  for (size_t i = 0; i < av.size(); ++i) {
    sum[i] = av[i] + bv[i];
    chain[i] = static_cast<float>(double(av[i]) + kBatch * double(bv[i]));
    twice[i] = 2 * av[i];
  }
  bool ok = max_rel_err(add(a, b).to_vector<float>(), sum) <= 1e-6;
  Tensor ga = a.detach().set_requires_grad(true), gb = b.detach().set_requires_grad(true);
  Tensor c = add(ga, gb);
  ok = ok && max_rel_err(c.to_vector<float>(), sum) <= 1e-6 && c.requires_grad() &&
       c.grad_fn() != nullptr;
  Tensor x = ga;
  for (int i = 0; i < kBatch; ++i) x = add(x, gb);
  ok = ok && max_rel_err(x.to_vector<float>(), chain) <= 1e-5;  // kBatch roundings in float
  x.backward(ones_like(x.detach()));
  ok = ok && ga.grad().to_vector<float>() == std::vector<float>(av.size(), 1.0f) &&
       gb.grad().to_vector<float>() == std::vector<float>(av.size(), float(kBatch));
  Tensor in_place = zeros({n}, dev);
  in_place.add_(a);
  in_place.add_(a);
  ok = ok && max_rel_err(in_place.to_vector<float>(), twice) <= 1e-6;
  Tensor fresh = empty({n}, dev);
  ok = ok && fresh.numel() == n && fresh.device() == dev && fresh.dtype() == kFloat32;
  if (!ok)
    std::fprintf(stderr,
                 "bench_op_overhead: VALIDATION FAILED on %s [%lld]: add, add with grad, "
                 "the chain, its backward or add_ is wrong\n",
                 dev.str().c_str(), static_cast<long long>(n));
  return ok;
}

// The framework-only rows, on either device: the op without and with grad, its
// parts (a fresh output alone; the same op in place, with no allocation), and
// backward per node.
void op_rows(Device dev, int64_t n, double bare, const std::function<void()>& sync) {
  manual_seed(0);
  Tensor a = randn({n}, dev), b = randn({n}, dev);
  add_row("add, no grad", dev, n, host_ns([&] { Tensor c = add(a, b); }, sync), bare);
  if (n <= 16) {
    // An add is two spans (add and its output's "empty").
    profiler::Profile host_only(profiler::ProfileOptions().device_time(false));
    add_row("  same, profiled (host spans)", dev, n, host_ns([&] { Tensor c = add(a, b); }, sync),
            bare);
    host_only.stop();
    if (dev.is_cuda()) {
      profiler::Profile with_events;
      add_row("  same, profiled (+ CUDA events)", dev, n,
              host_ns([&] { Tensor c = add(a, b); }, sync), bare);
      with_events.stop();
    }
  }
  Tensor ga = randn({n}, TensorOptions().device(dev).requires_grad());
  Tensor gb = randn({n}, TensorOptions().device(dev).requires_grad());
  add_row("add, inputs require grad", dev, n, host_ns([&] { Tensor c = add(ga, gb); }, sync), bare);
  if (n > 16) return;
  add_row("  same, chained, graph kept", dev, n, chain_ns(ga, gb, sync), bare);
  add_row("  part: empty (output alone)", dev, n,
          host_ns([&] { Tensor c = empty({n}, dev); }, sync));
  Tensor c = empty({n}, dev);
  add_row("  part: add_ in place (no alloc)", dev, n, host_ns([&] { c.add_(a); }, sync));
  add_row("backward per add node", dev, n, backward_ns(ga, gb, sync));
}

}  // namespace

int main(int argc, char** argv) {
  const char* json = bench::json_path(argc, argv);
  std::printf("bench_op_overhead: host ns per eager op; median of %d batches of %d ops\n", kBatches,
              kBatch);

  // Check before timing: every timed path, on each device and size it runs at.
  for (int64_t n : {16, 4096})
    if (!validate_op_rows(kCPU, n)) return 1;
  if (cuda::is_available())
    for (int64_t n : {16, 4096})
      if (!validate_op_rows(kCUDA, n)) return 1;

  std::printf("\n%-34s %-7s %-7s %10s %9s\n", "workload", "device", "shape", "ns/op", "vs bare");
  for (int64_t n : {16, 4096}) op_rows(kCPU, n, 0, [] {});

  std::string gpu = "none";
  if (!cuda::is_available()) {
    std::printf("\nno GPU: CUDA rows skipped\n");
    std::printf("per-op host overhead <= %.1fx bare launch: n/a (no GPU; no grad and grad)\n",
                kTarget);
    write_json(json, gpu);
    return 0;
  }
  cudaDeviceProp prop{};
  EMBER_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  gpu = prop.name;
  std::printf("\ncuda:0 is %s\n", prop.name);
  const cudaStream_t stream = cuda::current_stream(0);
  auto sync = [stream] { EMBER_CUDA_CHECK(cudaStreamSynchronize(stream)); };

  double ratio_nograd = 0, ratio_grad = 0;
  for (int64_t n : {16, 4096}) {
    manual_seed(2);
    Tensor a = randn({n}, kCUDA), b = randn({n}, kCUDA), out = empty({n}, kCUDA);
    BareAdd bare_add(a, b, out);
    // Check before timing: the bare launch (by handle and by stub) and the launcher
    // write what the CPU computes.
    std::vector<float> want = add(a.cpu(), b.cpu()).to_vector<float>();
    bool launches_ok = true;
    for (int way = 0; way < 3; ++way) {
      fill_(out, 0.0);
      sync();
      bare_add.by_stub = way == 1;
      if (way < 2)
        bare_add();
      else
        cuda::launch_binary(BinaryOp::Add, kFloat32, a.raw_data(), bare_add.layout, b.raw_data(),
                            bare_add.layout, out.raw_data(), bare_add.layout, n, 1.0, stream);
      sync();
      launches_ok = launches_ok && max_rel_err(out.to_vector<float>(), want) <= 1e-6;
    }
    bare_add.by_stub = false;
    if (!launches_ok) {
      std::fprintf(
          stderr, "bench_op_overhead: VALIDATION FAILED: a bare CUDA add disagrees with the CPU\n");
      return 1;
    }
    const double bare = host_ns(bare_add, sync);
    add_row("bare cudaLaunchKernel (floor)", kCUDA, n, bare, bare);
    bare_add.by_stub = true;
    add_row("  same, by host stub, not handle", kCUDA, n, host_ns(bare_add, sync), bare);
    bare_add.by_stub = false;
    add_row("cuda::launch_binary (launcher)", kCUDA, n,
            host_ns(
                [&] {
                  cuda::launch_binary(BinaryOp::Add, kFloat32, a.raw_data(), bare_add.layout,
                                      b.raw_data(), bare_add.layout, out.raw_data(),
                                      bare_add.layout, n, 1.0, stream);
                },
                sync),
            bare);
    op_rows(kCUDA, n, bare, sync);
    if (n == 16) {
      for (const Row& r : g_rows) {
        if (r.device != "cuda:0" || r.shape != "[16]") continue;
        if (r.what == "add, no grad") ratio_nograd = r.ratio;
        if (r.what == "add, inputs require grad") ratio_grad = r.ratio;
      }
    }
  }

  std::printf("\n");
  std::printf("per-op host overhead <= %.1fx bare launch: %.2fx %s (add [16] on cuda:0, no grad)\n",
              kTarget, ratio_nograd, ratio_nograd <= kTarget ? "met" : "MISSED");
  std::printf("per-op host overhead <= %.1fx bare launch: %.2fx %s (add [16] on cuda:0, grad)\n",
              kTarget, ratio_grad, ratio_grad <= kTarget ? "met" : "MISSED");
  write_json(json, gpu);
  return 0;
}
