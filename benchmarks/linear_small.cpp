// bench_linear_small: Linear at the host-bound shapes (32x10->10, 64x128->128,
// 256x256->256, fp32), through ember::linear as nn::Linear calls it (the dispatch
// picks the GEMM): forward, and forward + backward (linear, then grad with respect
// to x, w and b). CUDA-event median per call after warm-up, with the range. These
// shapes cost launches, not FLOPs, so they are the rows compared with libtorch
// (benchmarks/peer_libtorch.cpp) and Python PyTorch (peer_host_bound.py), timed
// the same way there. Each shape is checked first on every output element (they
// are small) against float64 on the CPU at DESIGN.md's fp32 GEMM threshold (1e-5);
// a failed check prints no row and the program exits 1.
// Usage: bench_linear_small [--json FILE]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "benchmarks/check.h"
#include "benchmarks/timing.h"
#include "core/autograd.h"
#include "core/ops.h"
#include "cuda/blas.h"

using namespace ember;

namespace {

using bench::f64;
using bench::rel_err;

}  // namespace

int main(int argc, char** argv) {
  if (!bench::have_gpu("bench_linear_small")) return 0;
  cuda::set_allow_tf32(false);  // fp32 GEMMs (the default), as the peers run them
  bench::Table table("linear, host-bound shapes: ember::linear (dispatch), fp32");
  int failures = 0;
  struct S {
    int64_t m, k, n;
  };
  for (const S& s : {S{32, 10, 10}, S{64, 128, 128}, S{256, 256, 256}}) {
    manual_seed(1);
    const TensorOptions o = TensorOptions(kFloat32).device(kCUDA);
    Tensor x = randn({s.m, s.k}, o), w = mul(randn({s.n, s.k}, o), 1.0 / std::sqrt(double(s.k)));
    Tensor b = randn({s.n}, o), dy = randn({s.m, s.n}, o);
    const std::string shape =
        std::to_string(s.m) + "x" + std::to_string(s.k) + "->" + std::to_string(s.n);
    Tensor xr = x.detach().set_requires_grad(true), wr = w.detach().set_requires_grad(true);
    Tensor br = b.detach().set_requires_grad(true);
    // The check: the timed calls once, every output against float64 on the CPU.
    Tensor y;
    {
      NoGradGuard no_grad;
      y = linear(x, w, b);
    }
    Tensor yg = linear(xr, wr, br);
    std::vector<Tensor> g = grad({yg}, {xr, wr, br}, {dy});
    {
      NoGradGuard no_grad;
      const Tensor want_y = matmul(f64(x), f64(w).t()) + f64(b);
      const double err =
          std::max({rel_err(y, want_y), rel_err(yg, want_y), rel_err(g[0], matmul(f64(dy), f64(w))),
                    rel_err(g[1], matmul(f64(dy).t(), f64(x))), rel_err(g[2], f64(dy).sum(0))});
      const bool ok = err <= 1e-5;
      std::printf("validate linear %s: forward and d_x, d_w, d_b against float64, rel err %.2e%s\n",
                  shape.c_str(), err, ok ? "" : "  FAILED");
      if (!ok) {
        ++failures;
        continue;
      }
    }
    const double flops = 2.0 * s.m * s.n * s.k;
    {
      NoGradGuard no_grad;
      const bench::Spread ms = bench::spread_ms([&] { Tensor r = linear(x, w, b); }, 3, 30);
      table.add({"fwd", "f32", shape, "ember", ms.median, flops / ms.median / 1e9, "TF/s",
                 "ember::linear", ms.min, ms.max});
    }
    const bench::Spread ms = bench::spread_ms(
        [&] {
          Tensor r = linear(xr, wr, br);
          std::vector<Tensor> gg = grad({r}, {xr, wr, br}, {dy});
        },
        3, 30);
    table.add({"fwd+bwd op", "f32", shape, "ember", ms.median, 3 * flops / ms.median / 1e9, "TF/s",
               "linear + grad", ms.min, ms.max});
  }
  table.write_json(bench::json_path(argc, argv));
  if (failures) std::printf("%d validation failure(s): their rows are not printed\n", failures);
  return failures == 0 ? 0 : 1;
}
