// bench_attention: ember's fused attention through the op layer
// (detail::fused_attention, core/ops/attention_fused.cpp: the kernel table's CUDA
// attention families, autograd through the fused backward), bfloat16, at issue 27's
// shapes (B, H, T, D) 8x16x1024x64, 8x16x2048x128, 16x12x1024x64 and at T 4096 and
// 8192, causal and not, forward and forward+backward. benchmarks/peer_attention.py
// times PyTorch's scaled_dot_product_attention on the same shapes (the faster of its
// flash and cuDNN backends). Each shape is checked before it is timed: O and dQ, dK,
// dV of the (b, h) = (0, 0) slice against the composed path (matmul, softmax,
// matmul) in float64 on the GPU, relative error <= 1e-2 (DESIGN.md's bf16
// tolerance); a failed check prints no row and exits 1.
//   bench_attention [--json FILE] [--quick] [--only I] [--composed]
// --composed (with EMBER_ATTENTION=composed in the environment, which the op reads once):
// the same rows through scaled_dot_product_attention's composed path (matmul, mask,
// softmax, matmul, each an op with its own backward) instead of the fused kernels, with
// the same checks, as impl "composed": compare.sh's attention set runs both, so issue 27's
// "never slower than the composed path" is read from one run.
// --only I: shape I of the five alone (0-4, in the order above), causal then full; its
// first four fused-attention kernels are the causal check's forward and backward (delta,
// dK/dV, dQ), which tools/gpu_switches_check.sh's round10 stage profiles under ncu.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "benchmarks/check.h"
#include "benchmarks/timing.h"
#include "core/autograd.h"
#include "core/ops.h"

using namespace ember;

namespace {

bool checked(const std::string& what, double err, double tol) {
  std::printf("validate %-44s rel err %.2e (tolerance %.0e)\n", what.c_str(), err, tol);
  if (err <= tol) return true;
  std::printf("VALIDATION FAILED\n");
  return false;
}

// The composed reference of one (T, D) slice in float64 on the GPU.
Tensor composed(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale) {
  Tensor s = matmul(q, transpose(k, 0, 1)) * scale;
  if (causal) {
    const int64_t t = q.size(0);
    const TensorOptions o = TensorOptions(kInt64).device(q.device());
    const Tensor idx = arange(0, static_cast<double>(t), 1, o);
    const Tensor rows = reshape(idx, {t, 1}), cols = reshape(idx, {1, t});
    s = masked_fill(s, gt(cols, rows), -std::numeric_limits<double>::infinity());
  }
  return matmul(softmax(s, 1), v);
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false, composed_path = false;
  int only = -1;
  for (int i = 1; i < argc; ++i) {
    quick |= std::strcmp(argv[i], "--quick") == 0;
    composed_path |= std::strcmp(argv[i], "--composed") == 0;
    if (std::strcmp(argv[i], "--only") == 0) {
      char* end = nullptr;
      only = i + 1 < argc ? static_cast<int>(std::strtol(argv[i + 1], &end, 10)) : -1;
      if (i + 1 >= argc || end == argv[i + 1] || *end != '\0' || only < 0 || only > 4) {
        std::fprintf(stderr, "bench_attention: --only takes a shape index from 0 to 4, got %s\n",
                     i + 1 < argc ? argv[i + 1] : "nothing");
        return 2;
      }
      ++i;
    }
  }
  if (!bench::have_gpu("bench_attention")) return 0;
  const int iters = quick ? 5 : 20;
  bench::Table table("attention: fused scaled-dot-product attention (bf16)");
  struct Shape4 {
    int64_t b, h, t, d;
  };
  const Shape4 shapes[] = {{8, 16, 1024, 64},
                           {8, 16, 2048, 128},
                           {16, 12, 1024, 64},
                           {4, 16, 4096, 64},
                           {2, 16, 8192, 128}};
  Generator gen(27);
  const TensorOptions gpu = TensorOptions(kBFloat16).device(kCUDA);
  for (int si = 0; si < 5; ++si)
    for (bool causal : {true, false}) {
      if (only >= 0 && si != only) continue;
      const Shape4& s = shapes[si];
      char shape[64];
      std::snprintf(shape, sizeof shape, "B%lld H%lld T%lld D%lld %s", static_cast<long long>(s.b),
                    static_cast<long long>(s.h), static_cast<long long>(s.t),
                    static_cast<long long>(s.d), causal ? "causal" : "full");
      const double scale = 1.0 / std::sqrt(static_cast<double>(s.d));
      Tensor q = randn({s.b, s.h, s.t, s.d}, gpu, &gen).detach().set_requires_grad(true);
      Tensor k = randn({s.b, s.h, s.t, s.d}, gpu, &gen).detach().set_requires_grad(true);
      Tensor v = randn({s.b, s.h, s.t, s.d}, gpu, &gen).detach().set_requires_grad(true);
      const Tensor dy = randn({s.b, s.h, s.t, s.d}, gpu, &gen);
      if (detail::fused_attention_supported(q, k, v) == composed_path) {
        std::printf(
            composed_path
                ? "VALIDATION FAILED: --composed needs EMBER_ATTENTION=composed in the "
                  "environment (the fused kernels would run at %s)\n"
                : "VALIDATION FAILED: no fused attention for %s (EMBER_ATTENTION=composed?)\n",
            shape);
        return 1;
      }
      // The path timed: the fused kernels, or (--composed) the op's composed path.
      auto attend = [&] {
        return composed_path ? scaled_dot_product_attention(q, k, v, Tensor(), 0.0, causal, scale)
                             : detail::fused_attention(q, k, v, causal, scale);
      };
      {
        // The (0, 0) slice of the full run against float64 on the same bf16 values.
        const Tensor o = attend();
        const std::vector<Tensor> g = grad({o}, {q, k, v}, {dy});
        auto slice0 = [](const Tensor& t) { return t.select(0, 0).select(0, 0); };
        Tensor q64 = slice0(q).to(kFloat64).detach().set_requires_grad(true);
        Tensor k64 = slice0(k).to(kFloat64).detach().set_requires_grad(true);
        Tensor v64 = slice0(v).to(kFloat64).detach().set_requires_grad(true);
        const Tensor o64 = composed(q64, k64, v64, causal, scale);
        const std::vector<Tensor> g64 = grad({o64}, {q64, k64, v64}, {slice0(dy).to(kFloat64)});
        const std::string at = std::string(" ") + shape;
        if (!checked("O" + at, bench::rel_err_on_device(slice0(o), o64), 1e-2) ||
            !checked("dQ" + at, bench::rel_err_on_device(slice0(g[0]), g64[0]), 1e-2) ||
            !checked("dK" + at, bench::rel_err_on_device(slice0(g[1]), g64[1]), 1e-2) ||
            !checked("dV" + at, bench::rel_err_on_device(slice0(g[2]), g64[2]), 1e-2))
          return 1;
      }
      const double flop =
          4.0 * s.b * s.h * static_cast<double>(s.t) * s.t * s.d * (causal ? 0.5 : 1.0);
      auto fwd = [&] {
        NoGradGuard ng;
        Tensor o = attend();
      };
      auto fwd_bwd = [&] { std::vector<Tensor> g = grad({attend()}, {q, k, v}, {dy}); };
      const bench::Spread f = bench::spread_ms(fwd, 3, iters);
      const char* impl = composed_path ? "composed" : "ember";
      table.add({"attention fwd", "bf16", shape, impl, f.median, flop / f.median / 1e9, "TFLOP/s",
                 "", f.min, f.max});
      const bench::Spread fb = bench::spread_ms(fwd_bwd, 3, iters);
      table.add({"attention fwd+bwd", "bf16", shape, impl, fb.median, 3.5 * flop / fb.median / 1e9,
                 "TFLOP/s", "", fb.min, fb.max});
    }
  table.write_json(bench::json_path(argc, argv));
  return 0;
}
