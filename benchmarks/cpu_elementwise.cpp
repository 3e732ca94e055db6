// bench_cpu_elementwise: host time per eager element-wise op on the CPU (issue
// 20), whole op (allocation, autograd checks, kernel) and kernel alone (the
// kernel table's entry on preallocated buffers), at [16], [4096] and [1M]
// elements. Each figure is the median over 31 batches; a batch runs the op
// enough times to last ~1 ms. No GPU needed.
//   --only NAME   only the rows named NAME
//   --n N         only the rows of N elements
//   --calls N     run each selected row's op N times and time nothing: under
//                 valgrind --tool=callgrind each row's N calls are a profile part
//                 of their own (callgrind.out.<pid>.<k>, the k-th row printed;
//                 instructions per op = the part's total / N)
//   --json FILE   write the rows
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#else
#define CALLGRIND_ZERO_STATS
#define CALLGRIND_DUMP_STATS
#endif

#include "core/kernel_table.h"
#include "core/ops.h"

using namespace ember;

namespace {

struct Row {
  std::string name;
  int64_t n;
  std::function<void()> op;
};

// Kept out of line so that callgrind can collect exactly the op's calls.
__attribute__((noinline)) void measured_calls(const Row& r, int64_t calls) {
  for (int64_t i = 0; i < calls; ++i) r.op();
}

double median_ns(const Row& r) {
  // Calls per batch: enough for ~1 ms, measured once.
  int64_t calls = 1;
  for (;;) {
    const auto t0 = std::chrono::steady_clock::now();
    measured_calls(r, calls);
    const double ns =
        std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
    if (ns > 1e6 || calls > (int64_t{1} << 24)) break;
    calls *= 2;
  }
  std::vector<double> per;
  for (int b = 0; b < 31; ++b) {
    const auto t0 = std::chrono::steady_clock::now();
    measured_calls(r, calls);
    per.push_back(
        std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() /
        static_cast<double>(calls));
  }
  std::sort(per.begin(), per.end());
  return per[per.size() / 2];
}

// out = op(x, y) by the kernel table's CPU entry, contiguous [n].
kernels::BinaryArgs binary_args(BinaryOp op, const Tensor& x, const Tensor& y, const Tensor& out,
                                double alpha = 1.0) {
  const int64_t n = out.numel();
  return {kCPU,           op,
          x.dtype(),      x.raw_data(),
          flat_layout(n), y.raw_data(),
          flat_layout(n), out.raw_data(),
          flat_layout(n), n,
          alpha,          out.dtype()};
}

// Every value of a row's output against the host's own arithmetic before timing.
bool validate() {
  manual_seed(0);
  const Tensor a = randn({4096}), b = randn({4096});
  const std::vector<float> av = a.to_vector<float>(), bv = b.to_vector<float>();
  const std::vector<float> sum = add(a, b).to_vector<float>(), prod = mul(a, b).to_vector<float>(),
                           e = exp(a).to_vector<float>();
  const std::vector<double> sum64 = add(a.to(kFloat64), b.to(kFloat64)).to_vector<double>();
  for (size_t i = 0; i < av.size(); ++i) {
    if (sum[i] != av[i] + bv[i] || prod[i] != av[i] * bv[i] ||
        e[i] != static_cast<float>(std::exp(static_cast<double>(av[i]))) ||
        sum64[i] != static_cast<double>(av[i]) + static_cast<double>(bv[i])) {
      std::fprintf(stderr, "bench_cpu_elementwise: VALIDATION FAILED at %zu\n", i);
      return false;
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::string only, json;
  int64_t calls = 0, only_n = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--only") == 0)
      only = argv[i + 1];
    else if (std::strcmp(argv[i], "--calls") == 0)
      calls = std::atoll(argv[i + 1]);
    else if (std::strcmp(argv[i], "--n") == 0)
      only_n = std::atoll(argv[i + 1]);
    else if (std::strcmp(argv[i], "--json") == 0)
      json = argv[i + 1];
    else {
      std::fprintf(stderr, "usage: %s [--only NAME] [--n N] [--calls N] [--json FILE]\n", argv[0]);
      return 2;
    }
  }
  if (!validate()) return 1;

  std::vector<Row> rows;
  for (int64_t n : {16, 4096, 1 << 20}) {
    if (only_n != 0 && n != only_n) continue;
    manual_seed(1);
    const Tensor a = randn({n}), b = randn({n}), out = empty({n});
    const Tensor ga = randn({n}, TensorOptions().requires_grad()),
                 gb = randn({n}, TensorOptions().requires_grad());
    const Tensor a64 = a.to(kFloat64), b64 = b.to(kFloat64), a16 = a.to(kBFloat16),
                 b16 = b.to(kBFloat16);
    const Tensor i64 = randint(-100, 100, {n}), j64 = randint(-100, 100, {n});
    const Tensor pos = abs(a) + 0.5;
    Tensor acc = zeros({n});
    rows.push_back({"add f32", n, [=] { Tensor c = add(a, b); }});
    rows.push_back({"add f32, inputs require grad", n, [=] { Tensor c = add(ga, gb); }});
    rows.push_back({"add f32 kernel alone", n, [=, args = binary_args(BinaryOp::Add, a, b, out)] {
                      kernels::kernels_for(kCPU).binary(args);
                    }});
    rows.push_back({"add f32 alpha 0.5", n, [=] { Tensor c = add(a, b, 0.5); }});
    rows.push_back({"add_ f32 in place", n, [=]() mutable { acc.add_(a); }});
    rows.push_back({"mul f32", n, [=] { Tensor c = mul(a, b); }});
    rows.push_back({"div f32", n, [=] { Tensor c = div(a, pos); }});
    rows.push_back({"add f64", n, [=] { Tensor c = add(a64, b64); }});
    rows.push_back({"add bf16", n, [=] { Tensor c = add(a16, b16); }});
    rows.push_back({"add int64", n, [=] { Tensor c = add(i64, j64); }});
    rows.push_back({"mul f32 scalar", n, [=] { Tensor c = mul(a, 1.5); }});
    rows.push_back({"relu f32", n, [=] { Tensor c = relu(a); }});
    rows.push_back({"exp f32", n, [=] { Tensor c = exp(a); }});
    rows.push_back({"tanh f32", n, [=] { Tensor c = tanh(a); }});
    rows.push_back({"lt f32 (bool out)", n, [=] { Tensor c = lt(a, b); }});
    rows.push_back({"cast f32 -> bf16", n, [=] { Tensor c = a.to(kBFloat16); }});
    rows.push_back({"zeros f32", n, [=] { Tensor c = zeros({n}); }});
  }

  std::FILE* jf = json.empty() ? nullptr : std::fopen(json.c_str(), "w");
  if (jf) std::fprintf(jf, "{\"benchmark\": \"cpu_elementwise\", \"rows\": [\n");
  if (calls == 0) std::printf("%-32s %8s %12s %10s\n", "workload", "n", "ns/op", "ns/elem");
  bool first = true;
  for (const Row& r : rows) {
    if ((!only.empty() && r.name != only) || (only_n != 0 && r.n != only_n)) continue;
    if (calls > 0) {
      CALLGRIND_ZERO_STATS;
      measured_calls(r, calls);
      CALLGRIND_DUMP_STATS;
      std::printf("ran %-32s [%lld] %lld times\n", r.name.c_str(), static_cast<long long>(r.n),
                  static_cast<long long>(calls));
      continue;
    }
    const double ns = median_ns(r);
    std::printf("%-32s %8lld %12.0f %10.3f\n", r.name.c_str(), static_cast<long long>(r.n), ns,
                ns / static_cast<double>(r.n));
    std::fflush(stdout);
    if (jf)
      std::fprintf(jf,
                   "%s  {\"workload\": \"%s\", \"shape\": \"[%lld]\", \"host_ns_per_op\": %.1f}",
                   first ? "" : ",\n", r.name.c_str(), static_cast<long long>(r.n), ns);
    first = false;
  }
  if (jf) {
    std::fprintf(jf, "\n]}\n");
    std::fclose(jf);
  }
  return 0;
}
