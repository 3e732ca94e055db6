// bench_alloc_site: what leak diagnostics cost on the hot path. Host time per
// small op (add of two 16-element tensors, where bookkeeping weighs most) with
// the live-tensor registry on and off, the OpSite guard alone, a TensorImpl's
// life, and one StepLeakCheck around a step. Median of 21 rounds; on a GPU
// machine the op is also timed on CUDA:0 (host time per launch, synchronised at
// the end of each round). --json FILE writes the rows.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "core/alloc_site.h"
#include "core/leak_check.h"
#include "core/live_tensors.h"
#include "core/ops.h"
#include "cuda/runtime.h"

using namespace ember;

namespace {

struct Row {
  std::string what;
  double ns = 0;
};

// Median ns per call of f over 21 rounds of `iters` calls, after one warm-up round.
template <typename F>
double median_ns(F&& f, int iters, Device sync = kCPU) {
  std::vector<double> ns;
  for (int round = 0; round < 22; ++round) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) f();
    if (sync.is_cuda()) cuda::synchronize(sync.index);
    const std::chrono::duration<double, std::nano> d = std::chrono::steady_clock::now() - start;
    if (round > 0) ns.push_back(d.count() / iters);
  }
  std::sort(ns.begin(), ns.end());
  return ns[ns.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const char* json = nullptr;
  for (int i = 1; i + 1 < argc; ++i)
    if (!std::strcmp(argv[i], "--json")) json = argv[i + 1];
  std::vector<Row> rows;
  auto add_row = [&](const std::string& what, double ns) {
    std::printf("%-58s %10.1f ns\n", what.c_str(), ns);
    std::fflush(stdout);
    rows.push_back({what, ns});
  };
  std::printf("bench_alloc_site: host cost of allocation tagging and the live-tensor registry\n");

  // Check before timing: the op is tagged and its tensor listed.
  {
    Tensor a = randn({16}), b = randn({16});
    Tensor c = add(a, b);
    if (std::string(c.impl().site_op) != "add" || live_tensor_count() < 3) {
      std::fprintf(stderr, "bench_alloc_site: tagging or registry not working\n");
      return 1;
    }
  }

  {
    const char* sink = nullptr;
    add_row("OpSite guard alone", median_ns(
                                      [&] {
                                        OpSite site("add");
                                        sink = cuda::AllocationTag::current();
                                        asm volatile("" : : "r"(sink) : "memory");
                                      },
                                      1000000));
  }
  for (bool on : {true, false}) {
    set_live_tensor_registry(on);
    add_row(std::string("TensorImpl made and dropped, registry ") + (on ? "on" : "off"),
            median_ns([] { auto t = std::make_shared<TensorImpl>(); }, 200000));
  }
  std::vector<Device> devices{kCPU};
  if (cuda::is_available()) devices.push_back(kCUDA);
  for (Device dev : devices) {
    Tensor a = randn({16}).to(dev), b = randn({16}).to(dev);
    const int iters = dev.is_cuda() ? 20000 : 100000;
    double on = 0, off = 0;
    for (bool reg : {true, false}) {
      set_live_tensor_registry(reg);
      const double ns = median_ns([&] { Tensor c = add(a, b); }, iters, dev);
      (reg ? on : off) = ns;
      add_row("add([16], [16]) on " + dev.str() + ", registry " + (reg ? "on" : "off"), ns);
    }
    std::printf("  -> registry: %+.1f ns per op (%+.1f%%)\n", on - off, 100 * (on - off) / off);
  }
  set_live_tensor_registry(true);

  // A StepLeakCheck costs two allocator snapshots and two registry walks.
  for (int live : {100, 1000}) {
    std::vector<Tensor> keep;
    for (int i = 0; i < live; ++i) keep.push_back(empty({16}));
    add_row("StepLeakCheck around an empty step, " + std::to_string(live) + " live tensors",
            median_ns([] { StepLeakCheck check("bench", LeakMode::record, {kCPU}); }, 200));
  }

  if (json) {
    std::ofstream out(json);
    out << "[";
    for (size_t i = 0; i < rows.size(); ++i)
      out << (i ? ",\n" : "\n") << "{\"what\":\"" << rows[i].what << "\",\"ns\":" << rows[i].ns
          << "}";
    out << "\n]\n";
  }
  return 0;
}
