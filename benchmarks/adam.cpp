// bench_adam: optimizer steps as users call them (optim::Adam, AdamW and SGD with
// momentum: step() on parameters with gradients), on an MLP's parameters (4 x
// Linear(4096, 4096): 8 tensors, 67 M floats) and on many small tensors (512 x
// 32768). Before timing, each optimizer's first two steps are checked on every
// element of every parameter and state buffer against the same optimizer run on
// float64 CPU copies (relative error <= 1e-6); a failed check prints no row and
// the program exits 1. GB/s counts 28 bytes per element for Adam (read p, g, m, v;
// write p, m, v) and 20 for SGD with momentum (read p, g, b; write p, b).
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "benchmarks/timing.h"
#include "core/ops.h"
#include "optim/optim.h"

using namespace ember;

namespace {

struct Workload {
  const char* name;
  std::vector<int64_t> sizes;
};

using MakeOptimizer = std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)>;

// ||a - b|| / ||b|| over every element of every tensor.
double rel_error(const std::vector<Tensor>& got, const std::vector<Tensor>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const std::vector<double> a = got[i].to_vector<double>(), b = ref[i].to_vector<double>();
    for (size_t j = 0; j < a.size(); ++j) {
      num += (a[j] - b[j]) * (a[j] - b[j]);
      den += b[j] * b[j];
    }
  }
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-300);
}

// Everything the optimizer holds for its parameters, in a fixed order.
std::vector<Tensor> state_of(const optim::Optimizer& opt) {
  std::vector<Tensor> out;
  // Named: a range-for over state_dict().items() would read a destroyed temporary.
  const StateDict state = opt.state_dict();
  for (const auto& [key, t] : state.items())
    if (t.numel() > 1) out.push_back(t);
  return out;
}

bool validate(const Workload& w, const char* opt_name, const MakeOptimizer& make) {
  manual_seed(7);
  std::vector<Tensor> gpu, cpu;
  for (int64_t n : w.sizes) {
    Tensor p = randn({n}, TensorOptions(kFloat32).device(kCUDA));
    Tensor g = randn({n}, TensorOptions(kFloat32).device(kCUDA));
    Tensor pc = p.to(kCPU).to(kFloat64);
    pc.set_requires_grad(true);
    p.set_requires_grad(true);
    p.set_grad(g);
    pc.set_grad(g.to(kCPU).to(kFloat64));
    gpu.push_back(p);
    cpu.push_back(pc);
  }
  auto og = make(gpu), oc = make(cpu);
  for (int s = 0; s < 2; ++s) {
    og->step();
    oc->step();
  }
  std::vector<Tensor> got = gpu, ref = cpu;
  for (const Tensor& t : state_of(*og)) got.push_back(t);
  for (const Tensor& t : state_of(*oc)) ref.push_back(t);
  const double err = got.size() == ref.size() ? rel_error(got, ref) : 1.0;
  std::printf("validate %s %s: 2 steps, %zu tensors (parameters and state), rel err %.2e\n",
              opt_name, w.name, got.size(), err);
  if (!(err <= 1e-6)) {
    std::printf("VALIDATION FAILED: %s on %s\n", opt_name, w.name);
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (!bench::have_gpu("bench_adam")) return 0;
  bench::Table table("optimizer step (optim::*::step()), float32 on CUDA");
  std::vector<Workload> workloads(2);
  workloads[0].name = "mlp 4x4096";
  for (int i = 0; i < 4; ++i) {
    workloads[0].sizes.push_back(4096 * 4096);
    workloads[0].sizes.push_back(4096);
  }
  workloads[1].name = "512 x 32768";
  workloads[1].sizes.assign(512, 32768);
  struct Opt {
    const char* name;
    double bytes_per_element;
    MakeOptimizer make;
  };
  const std::vector<Opt> optimizers = {
      {"adam", 28,
       [](std::vector<Tensor> p) {
         return std::make_unique<optim::Adam>(std::move(p), optim::AdamOptions(1e-3));
       }},
      {"adamw", 28,
       [](std::vector<Tensor> p) {
         return std::make_unique<optim::AdamW>(std::move(p),
                                               optim::AdamWOptions(1e-3).weight_decay(1e-2));
       }},
      {"sgd", 20,
       [](std::vector<Tensor> p) {
         return std::make_unique<optim::SGD>(std::move(p), optim::SGDOptions(1e-2).momentum(0.9));
       }},
  };
  int failures = 0;
  for (const Workload& w : workloads) {
    for (const Opt& o : optimizers) {
      if (!validate(w, o.name, o.make)) {
        ++failures;
        continue;
      }
      std::vector<Tensor> params;
      int64_t total = 0;
      for (int64_t n : w.sizes) {
        Tensor p = randn({n}, TensorOptions(kFloat32).device(kCUDA)).set_requires_grad(true);
        p.set_grad(randn({n}, TensorOptions(kFloat32).device(kCUDA)));
        params.push_back(p);
        total += n;
      }
      auto opt = o.make(params);
      const double ms = bench::median_ms([&] { opt->step(); }, 5, 50);
      const std::string shape = std::to_string(w.sizes.size()) + " tensors";
      table.add({w.name, "f32", shape, o.name, ms,
                 o.bytes_per_element * static_cast<double>(total) / ms / 1e6, "GB/s", "step()"});
    }
  }
  table.write_json(bench::json_path(argc, argv));
  return failures == 0 ? 0 : 1;
}
