// bench_adam: the fused multi-tensor Adam step (one launch per 32 parameters)
// against one launch per parameter, on an MLP's parameters (4 x Linear(4096,
// 4096): 8 tensors, 67 M floats) and on many small tensors (512 x 32768).
// GB/s counts 28 bytes per element (read p, g, m, v; write p, m, v).
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "benchmarks/timing.h"
#include "core/ops.h"
#include "cuda/kernels/fused_optim.h"

using namespace ember;

int main(int argc, char** argv) {
  if (!bench::have_gpu("bench_adam")) return 0;
  bench::Table table("adam: fused multi-tensor step vs one launch per parameter");
  struct Config {
    const char* name;
    std::vector<int64_t> sizes;
  };
  std::vector<Config> configs(2);
  configs[0].name = "mlp 4x4096";
  for (int i = 0; i < 4; ++i) {
    configs[0].sizes.push_back(4096 * 4096);
    configs[0].sizes.push_back(4096);
  }
  configs[1].name = "512 x 32768";
  configs[1].sizes.assign(512, 32768);
  AdamConfig cfg;
  cfg.lr = 1e-3;
  int failures = 0;
  for (const Config& c : configs) {
    const TensorOptions o = TensorOptions(kFloat32).device(kCUDA);
    std::vector<Tensor> keep;
    std::vector<cuda::OptimTensor> table_rows;
    int64_t total = 0;
    for (int64_t n : c.sizes) {
      Tensor p = randn({n}, o), g = randn({n}, o), m = zeros({n}, o), v = zeros({n}, o);
      cuda::OptimTensor t;
      t.param = p.raw_data();
      t.grad = g.raw_data();
      t.state[0] = m.raw_data();
      t.state[1] = v.raw_data();
      t.numel = n;
      t.step_size = cfg.lr / (1 - cfg.beta1);
      t.bias_correction2_sqrt = std::sqrt(1 - cfg.beta2);
      table_rows.push_back(t);
      keep.insert(keep.end(), {p, g, m, v});
      total += n;
    }
    const int64_t count = static_cast<int64_t>(table_rows.size());
    // Validate one step of the first tensor's first elements against the host formula.
    {
      std::vector<double> p0 = keep[0].slice(0, 0, 1000).to_vector<double>();
      std::vector<double> g0 = keep[1].slice(0, 0, 1000).to_vector<double>();
      cuda::launch_fused_adam(table_rows.data(), count, cfg, nullptr);
      std::vector<double> p1 = keep[0].slice(0, 0, 1000).to_vector<double>();
      double worst = 0;
      for (size_t i = 0; i < p0.size(); ++i) {
        double p = p0[i], m = 0, v = 0, vm = 0;
        adam_update(cfg, p, g0[i], m, v, vm, table_rows[0].step_size,
                          table_rows[0].bias_correction2_sqrt);
        worst = std::max(worst, std::fabs(p - p1[i]) / std::max(1e-12, std::fabs(p)));
      }
      std::printf("validate %s: first step max rel err %.2e\n", c.name, worst);
      if (!(worst < 1e-6)) {
        std::printf("VALIDATION FAILED\n");
        ++failures;
        continue;
      }
    }
    const double bytes = 28.0 * static_cast<double>(total);
    const double ms_fused = bench::median_ms(
        [&] { cuda::launch_fused_adam(table_rows.data(), count, cfg, nullptr); },
        5, 50);
    const double ms_each = bench::median_ms(
        [&] {
          for (int64_t i = 0; i < count; ++i)
            cuda::launch_fused_adam(&table_rows[i], 1, cfg, nullptr);
        },
        5, 50);
    const std::string shape = std::to_string(count) + " tensors";
    table.add({c.name, "f32", shape, "per-param", ms_each, bytes / ms_each / 1e6, "GB/s", ""});
    char note[64];
    std::snprintf(note, sizeof(note), "%.2fx per-param speed", ms_each / ms_fused);
    table.add({c.name, "f32", shape, "fused", ms_fused, bytes / ms_fused / 1e6, "GB/s", note});
  }
  table.write_json(bench::json_path(argc, argv));
  return failures == 0 ? 0 : 1;
}
