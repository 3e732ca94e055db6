// bench_alloc_site: what leak diagnostics cost on the hot path. Host time per
// small op (add of two 16-element tensors, where bookkeeping weighs most) with
// the live-tensor registry on and off, the OpSite guard alone (and inside a
// profile, core/profiler.h: the span it records then), a TensorImpl's
// life, and one StepLeakCheck around a step. Medians of 21 rounds (registry on
// and off interleaved); on a GPU
// machine the op is also timed on CUDA:0 (host time per launch, synchronised at
// the end of each round). --json FILE writes the rows.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "core/alloc_site.h"
#include "core/leak_check.h"
#include "core/live_tensors.h"
#include "core/ops.h"
#include "core/profiler.h"
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

// Registry on vs off, rounds interleaved so that drift in a shared machine's
// speed hits both alike. Returns median ns per call {on, off}.
template <typename F>
std::pair<double, double> registry_on_off(F&& f, int iters, Device sync = kCPU) {
  std::vector<double> on, off;
  for (int round = 0; round < 42; ++round) {
    const bool reg = round % 2 == 0;
    set_live_tensor_registry(reg);
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) f();
    if (sync.is_cuda()) cuda::synchronize(sync.index);
    const std::chrono::duration<double, std::nano> d = std::chrono::steady_clock::now() - start;
    if (round >= 2) (reg ? on : off).push_back(d.count() / iters);
  }
  set_live_tensor_registry(true);
  std::sort(on.begin(), on.end());
  std::sort(off.begin(), off.end());
  return {on[on.size() / 2], off[off.size() / 2]};
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
                                        sink = AllocationTag::current();
                                        asm volatile("" : : "r"(sink) : "memory");
                                      },
                                      1000000));
  }
  {
    // The same guard inside a profile (core/profiler.h): it records a span (fewer
    // iterations: every span is kept until the profile ends).
    const char* sink = nullptr;
    profiler::Profile prof(profiler::ProfileOptions().device_time(false));
    add_row("OpSite guard alone, profiler on (host span)",
            median_ns(
                [&] {
                  OpSite site("add");
                  sink = AllocationTag::current();
                  asm volatile("" : : "r"(sink) : "memory");
                },
                20000));
    prof.stop();
  }
  {
    auto [on, off] = registry_on_off([] { auto t = std::make_shared<TensorImpl>(); }, 200000);
    add_row("TensorImpl made and dropped, registry on", on);
    add_row("TensorImpl made and dropped, registry off", off);
  }
  std::vector<Device> devices{kCPU};
  if (cuda::is_available()) devices.push_back(kCUDA);
  for (Device dev : devices) {
    Tensor a = randn({16}).to(dev), b = randn({16}).to(dev);
    const int iters = dev.is_cuda() ? 20000 : 100000;
    auto [on, off] = registry_on_off([&] { Tensor c = add(a, b); }, iters, dev);
    add_row("add([16], [16]) on " + dev.str() + ", registry on", on);
    add_row("add([16], [16]) on " + dev.str() + ", registry off", off);
    std::printf("  -> registry: %+.1f ns per op (%+.1f%%)\n", on - off, 100 * (on - off) / off);
  }

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
