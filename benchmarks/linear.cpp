// bench_linear: Linear forward (y = x w^T + b, bias fused) and forward+backward,
// ours vs cuBLAS(Lt) in the same run, fp32 / TF32 / bf16, at 8192x4096 -> 4096
// and a sweep of smaller shapes. TFLOP/s counts 2MNK for forward and 6MNK for
// forward+backward (d_x and d_w; d_b is fused into d_w). Forward compares the two
// kernels directly; forward+backward runs the op (ember::linear + grad) with
// EMBER_GEMM forcing the forward's backend (the backward is cuBLAS(Lt) in both).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "benchmarks/timing.h"
#include "core/autograd.h"
#include "core/ops.h"
#include "cuda/blas.h"
#include "cuda/kernels/gemm.h"

using namespace ember;

namespace {

struct Shape3 {
  int64_t m, k, n;  // x (m, k) -> y (m, n)
  bool backward;
};

double rel_err_gpu(const Tensor& out, const Tensor& ref) {
  NoGradGuard no_grad;
  Tensor o = out.to(kFloat64), r = ref.to(kFloat64);
  Tensor e = sub(o, r);
  return std::sqrt(sum(mul(e, e)).item() / sum(mul(r, r)).item());
}

}  // namespace

int main(int argc, char** argv) {
  if (!bench::have_gpu("bench_linear")) return 0;
  const std::vector<Shape3> shapes = {{8192, 4096, 4096, true},  {8192, 8192, 8192, false},
                                      {4096, 4096, 4096, true},  {2048, 2048, 2048, true},
                                      {1024, 1024, 1024, true},  {256, 1024, 1024, true},
                                      {4097, 4097, 4097, false}, {256, 256, 256, true},
                                      {64, 128, 128, true},      {32, 10, 10, true}};
  bench::Table table("linear: ours vs cuBLAS(Lt)");
  int failures = 0;
  for (const char* mode : {"f32", "tf32", "bf16"}) {
    const bool tf32 = std::string(mode) == "tf32";
    const DType dtype = std::string(mode) == "bf16" ? kBFloat16 : kFloat32;
    cuda::set_allow_tf32(tf32);
    for (const Shape3& s : shapes) {
      const TensorOptions o = TensorOptions(dtype).device(kCUDA);
      Tensor x = randn({s.m, s.k}, o), w = mul(randn({s.n, s.k}, o), 1.0 / std::sqrt(s.k));
      Tensor b = randn({s.n}, o), dy = randn({s.m, s.n}, o);
      Tensor y_ours = empty({s.m, s.n}, o), y_lt = empty({s.m, s.n}, o);
      const std::string shape =
          std::to_string(s.m) + "x" + std::to_string(s.k) + "->" + std::to_string(s.n);
      auto ours = [&] {
        cuda::launch_linear_gemm(dtype, x.raw_data(), s.k, w.raw_data(), s.k, b.raw_data(),
                                 y_ours.raw_data(), nullptr, s.m, s.n, s.k,
                                 Activation::None, nullptr);
      };
      bool lt_ok = true;
      auto lt = [&] {
        lt_ok = cuda::lt_linear_forward(dtype, s.m, s.n, s.k, x.raw_data(), s.k, w.raw_data(), s.k,
                                        b.raw_data(), y_lt.raw_data(), nullptr,
                                        Activation::None, 0, nullptr);
      };
      // Validate before timing: ours against cuBLASLt, and both against float64
      // for the first rows on the GPU (matmul in double).
      const bool run_ours = !tf32;  // ours has no TF32 mode
      lt();
      if (run_ours) ours();
      {
        Tensor xs = x.slice(0, 0, std::min<int64_t>(s.m, 16)).to(kFloat64);
        Tensor ref = linear(xs, w.to(kFloat64), b.to(kFloat64));
        const double tol = dtype == kBFloat16 ? 1e-2 : tf32 ? 1e-3 : 1e-5;
        const double e_lt = lt_ok ? rel_err_gpu(y_lt.slice(0, 0, xs.size(0)), ref) : 0;
        const double e_ours = run_ours ? rel_err_gpu(y_ours.slice(0, 0, xs.size(0)), ref) : 0;
        if (!(e_lt <= tol) || !(e_ours <= tol)) {
          std::printf("VALIDATION FAILED %s %s: cuBLASLt %.2e, ours %.2e (tol %.0e)\n", mode,
                      shape.c_str(), e_lt, e_ours, tol);
          ++failures;
          continue;
        }
      }
      const double flops = 2.0 * s.m * s.n * s.k;
      const int iters = flops > 5e11 ? 10 : 30;
      const double ms_lt = lt_ok ? bench::median_ms(lt, 3, iters) : 0;
      if (lt_ok)
        table.add({"fwd", mode, shape, "cublasLt", ms_lt, flops / ms_lt / 1e9, "TF/s", ""});
      if (run_ours) {
        const double ms = bench::median_ms(ours, 3, iters);
        char note[64];
        std::snprintf(note, sizeof(note), "%.2fx cuBLAS speed", ms_lt / ms);
        table.add({"fwd", mode, shape, "ours", ms, flops / ms / 1e9, "TF/s", note});
      }
      // Our bf16 tile variants, each timed on the same inputs (the launcher's Auto
      // picks one; NOTES.md records why).
      if (run_ours && flops > 1e11) {
        std::vector<std::pair<cuda::GemmTile, const char*>> tiles = {
            {cuda::GemmTile::k128x128s3, "128x128s3"},
            {cuda::GemmTile::k128x128s4, "128x128s4"},
            {cuda::GemmTile::k128x256s3, "128x256s3"},
            {cuda::GemmTile::k128x256s4, "128x256s4"}};
        if (dtype == kFloat32)
          tiles = {{cuda::GemmTile::kF32Bk8, "f32 bk8"}, {cuda::GemmTile::kF32Bk16, "f32 bk16"}};
        for (const auto& [tile, tname] : tiles) {
          auto variant = [&] {
            cuda::launch_linear_gemm(dtype, x.raw_data(), s.k, w.raw_data(), s.k, b.raw_data(),
                                     y_ours.raw_data(), nullptr, s.m, s.n, s.k,
                                     Activation::None, nullptr, tile);
          };
          variant();
          Tensor xs = x.slice(0, 0, 16).to(kFloat64);
          const double e =
              rel_err_gpu(y_ours.slice(0, 0, 16), linear(xs, w.to(kFloat64), b.to(kFloat64)));
          const double ms = bench::median_ms(variant, 3, iters);
          char note[64];
          std::snprintf(note, sizeof(note), "%.2fx cuBLAS, err %.1e", ms_lt / ms, e);
          table.add({"fwd tile", mode, shape, tname, ms, flops / ms / 1e9, "TF/s", note});
        }
      }
      // The weight gradient with d_b fused (BGRADB) against d_w alone.
      if (s.backward && flops > 1e11) {
        Tensor dw = empty({s.n, s.k}, o), db = empty({s.n}, o);
        for (bool with_db : {false, true}) {
          auto wgrad = [&] {
            cuda::lt_linear_backward_weight(dtype, s.m, s.n, s.k, x.raw_data(), s.k, dy.raw_data(),
                                            dw.raw_data(), with_db ? db.raw_data() : nullptr, 0,
                                            nullptr);
          };
          const double ms = bench::median_ms(wgrad, 3, iters);
          table.add({with_db ? "d_w + d_b (BGRADB)" : "d_w alone", mode, shape, "cublasLt", ms,
                     flops / ms / 1e9, "TF/s", ""});
        }
        NoGradGuard no_grad;
        const double ms_sum = bench::median_ms([&] { Tensor t = sum(dy, 0); }, 3, iters);
        table.add({"d_b alone (sum)", mode, shape, "ours", ms_sum, 0, "", "reduce.cu"});
      }
      if (!s.backward) continue;
      Tensor xr = x.detach().set_requires_grad(true), wr = w.detach().set_requires_grad(true);
      Tensor br = b.detach().set_requires_grad(true);
      auto step = [&] {
        Tensor y = linear(xr, wr, br);
        std::vector<Tensor> g = grad({y}, {xr, wr, br}, {dy});
      };
      double ms_pair[2] = {0, 0};
      for (int i = 0; i < (run_ours ? 2 : 1); ++i) {
        setenv("EMBER_GEMM", i == 0 ? "cublas" : "ours", 1);
        ms_pair[i] = bench::median_ms(step, 3, iters);
        char note[64] = "";
        if (i == 1)
          std::snprintf(note, sizeof(note), "%.2fx cuBLAS speed", ms_pair[0] / ms_pair[1]);
        table.add({"fwd+bwd op", mode, shape, i == 0 ? "cublasLt" : "ours+cublas", ms_pair[i],
                   3 * flops / ms_pair[i] / 1e9, "TF/s", note});
      }
      unsetenv("EMBER_GEMM");
      // And what the dispatch rule picks by itself.
      const double ms_auto = bench::median_ms(step, 3, iters);
      table.add(
          {"fwd+bwd op", mode, shape, "auto", ms_auto, 3 * flops / ms_auto / 1e9, "TF/s", ""});
    }
  }
  cuda::set_allow_tf32(false);
  table.write_json(bench::json_path(argc, argv));
  return failures == 0 ? 0 : 1;
}
