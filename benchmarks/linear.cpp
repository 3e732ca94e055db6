// bench_linear: Linear on CUDA, ember's GEMMs against cuBLAS(Lt) in one run, in
// fp32, TF32 and bf16, at 8192x4096->4096, 8192x8192->8192, 4096^3 and a sweep
// of smaller and ragged shapes (benchmarks/peer_pytorch.py runs PyTorch on the
// same list; benchmarks/compare.sh joins the two). Rows:
//   fwd, d_x, d_w+d_b  one of Linear's three products (cuda/gemm_dispatch.h)
//                      with EMBER_GEMM forcing cuBLAS(Lt) or ours; the impl
//                      column names the kernel that ran (sm90: the Hopper wgmma
//                      kernel; mma.sync, simt: the older ones; cublas);
//   fwd sched          ours with each schedule of the Hopper kernel (NOTES.md);
//   fwd+bwd op         ember::linear and its backward (ember::grad) with
//                      EMBER_GEMM=cublas, =ours and unset (the dispatch rule).
// TFLOP/s counts 2MNK per product, 6MNK for forward+backward. Every row is
// checked before it is timed: outputs against float64 on the GPU (DESIGN.md's
// budgets: fp32 1e-5, TF32 1e-3, bf16 1e-2); a failed row is not timed and the
// exit status is 1.
// Usage: bench_linear [--json FILE] [--quick] [--dtype LIST]   (LIST: f32,tf32,bf16; default all)
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "benchmarks/timing.h"
#include "core/autograd.h"
#include "core/ops.h"
#include "cuda/blas.h"
#include "cuda/gemm_dispatch.h"
#include "cuda/kernels/gemm_sm90.h"
#include "cuda/runtime.h"

using namespace ember;

namespace {

struct Shape3 {
  int64_t m, k, n;  // x (m, k) -> y (m, n)
  bool backward;    // also the backward products and forward+backward
};
// Keep in step with benchmarks/peer_pytorch.py's list.
const std::vector<Shape3> kShapes = {
    {8192, 4096, 4096, true}, {8192, 8192, 8192, true},  {4096, 4096, 4096, true},
    {2048, 2048, 2048, true}, {1024, 1024, 1024, true},  {256, 1024, 1024, true},
    {4097, 4096, 4095, true}, {4097, 4097, 4097, false}, {256, 256, 256, true},
    {64, 128, 128, true},     {32, 10, 10, true}};

struct GemmMode {  // EMBER_GEMM for one scope ("" = unset: the rule)
  explicit GemmMode(const char* v) {
    if (v[0] == '\0')
      unsetenv("EMBER_GEMM");
    else
      setenv("EMBER_GEMM", v, 1);
  }
  ~GemmMode() { unsetenv("EMBER_GEMM"); }
};

double rel_err_gpu(const Tensor& out, const Tensor& ref) {
  NoGradGuard no_grad;
  Tensor o = out.to(kFloat64), r = ref.to(kFloat64);
  Tensor e = sub(o, r);
  const double num = sum(mul(e, e)).item(), den = sum(mul(r, r)).item();
  if (std::isnan(num)) return std::numeric_limits<double>::infinity();
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

const char* arg_value(int argc, char** argv, const char* name) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return argv[i + 1];
  return nullptr;
}
bool has_flag(int argc, char** argv, const char* name) {
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return true;
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  if (!bench::have_gpu("bench_linear")) return 0;
  const bool quick = has_flag(argc, argv, "--quick");
  const char* only = arg_value(argc, argv, "--dtype");
  bench::Table table("linear: ours vs cuBLAS(Lt)");
  int failures = 0;
  const double kNaN = std::numeric_limits<double>::quiet_NaN();
  cudaStream_t stream = cuda::current_stream(0);
  for (const char* mode : {"f32", "tf32", "bf16"}) {
    if (only != nullptr &&
        (std::string(",") + only + ",").find(std::string(",") + mode + ",") == std::string::npos)
      continue;
    const bool tf32 = std::strcmp(mode, "tf32") == 0;
    const DType dtype = std::strcmp(mode, "bf16") == 0 ? kBFloat16 : kFloat32;
    const double tol = dtype == kBFloat16 ? 1e-2 : tf32 ? 1e-3 : 1e-5;
    cuda::set_allow_tf32(tf32);
    for (const Shape3& s : kShapes) {
      const TensorOptions o = TensorOptions(dtype).device(kCUDA);
      Tensor x = randn({s.m, s.k}, o), w = mul(randn({s.n, s.k}, o), 1.0 / std::sqrt(s.k));
      Tensor b = randn({s.n}, o), dy = randn({s.m, s.n}, o);
      Tensor y = empty({s.m, s.n}, o), dx = empty({s.m, s.k}, o), dw = empty({s.n, s.k}, o);
      Tensor db = empty({s.n}, o);
      const std::string shape =
          std::to_string(s.m) + "x" + std::to_string(s.k) + "->" + std::to_string(s.n);
      const double flops = 2.0 * s.m * s.n * s.k;
      const int iters = quick ? 5 : flops > 5e11 ? 10 : 30;
      const int warmup = quick ? 2 : 3;
      // float64 references on the GPU, from the same (rounded) operands.
      Tensor y_ref, dx_ref, dw_ref, db_ref;
      {
        NoGradGuard no_grad;
        const Tensor x64 = x.to(kFloat64), w64 = w.to(kFloat64), dy64 = dy.to(kFloat64);
        y_ref = linear(x64, w64, b.to(kFloat64));
        if (s.backward) {
          dx_ref = matmul(dy64, w64);
          dw_ref = matmul(dy64.t(), x64);
          db_ref = sum(dy64, 0);
        }
      }

      // ---- the three products, each side forced.
      struct Product {
        const char* name;
        cuda::LinearGemm g;
        std::vector<std::pair<Tensor, Tensor>> outs;  // (output, reference)
      };
      std::vector<Product> products;
      {
        cuda::LinearGemm g;
        g.dtype = dtype, g.rows = s.m, g.in = s.k, g.out = s.n;
        g.x = x.raw_data(), g.ldx = s.k, g.w = w.raw_data(), g.ldw = s.k;
        g.d_y = dy.raw_data(), g.ldd = s.n;
        Product f{"fwd", g, {{y, y_ref}}};
        f.g.product = cuda::LinearProduct::Forward, f.g.b = b.raw_data(), f.g.result = y.raw_data();
        products.push_back(f);
        if (s.backward) {
          Product i{"d_x", g, {{dx, dx_ref}}};
          i.g.product = cuda::LinearProduct::InputGrad, i.g.result = dx.raw_data();
          products.push_back(i);
          Product wg{"d_w+d_b", g, {{dw, dw_ref}, {db, db_ref}}};
          wg.g.product = cuda::LinearProduct::WeightGrad, wg.g.result = dw.raw_data();
          wg.g.d_b = db.raw_data();
          products.push_back(wg);
        }
      }
      const bool wg_composes = s.backward && cuda::weight_grad_composes(dtype, s.m, s.n, s.k, s.k);
      for (const Product& p : products) {
        double ms_cublas = 0;
        const bool is_wg = p.g.product == cuda::LinearProduct::WeightGrad;
        // "lt bgradb": cuBLASLt's one call with the d_b epilogue, whatever the rule says,
        // so that a composed d_w (the op's matmul then sum) is timed beside it.
        for (const char* side : {"lt bgradb", "cublas", "ours"}) {
          const bool direct_lt = side[0] == 'l';
          if (direct_lt && !(is_wg && wg_composes)) continue;
          GemmMode forced(direct_lt ? "cublas" : side);
          cuda::GemmKernel ran = cuda::GemmKernel::None;
          const bool composed = !direct_lt && cuda::plan_linear(p.g, 0) == cuda::GemmKernel::None;
          Tensor cw, cb;  // the composition's outputs
          auto run = [&] {
            if (direct_lt) {
              ran = cuda::lt_linear_backward_weight(dtype, s.m, s.n, s.k, x.raw_data(), s.k,
                                                    dy.raw_data(), s.n, dw.raw_data(),
                                                    db.raw_data(), 0, stream)
                        ? cuda::GemmKernel::Cublas
                        : cuda::GemmKernel::None;
            } else if (composed) {  // what the op runs instead (core/ops/linear.cpp)
              NoGradGuard no_grad;
              cw = matmul(dy.t(), x);
              cb = sum(dy, 0);
              ran = cuda::GemmKernel::Cublas;
            } else {
              ran = cuda::run_linear(p.g, 0, stream);
            }
          };
          for (const auto& [out, ref] : p.outs) Tensor(out).fill_(kNaN);
          run();
          double err = 0;
          if (composed) {
            err = std::max(rel_err_gpu(cw, dw_ref), rel_err_gpu(cb, db_ref));
          } else {
            for (const auto& [out, ref] : p.outs) err = std::max(err, rel_err_gpu(out, ref));
          }
          // "ours cublas": ours could not take these operands and fell back.
          const std::string impl =
              direct_lt        ? std::string("cublasLt bgradb")
              : composed       ? std::string(side[0] == 'c' ? "cublas" : "ours") + " composed"
              : side[0] == 'c' ? std::string("cublas")
                               : std::string("ours ") + cuda::to_string(ran);
          if (ran == cuda::GemmKernel::None || !(err <= tol)) {
            std::printf("VALIDATION FAILED %s %s %s %s: error %.2e (tol %.0e)\n", p.name, mode,
                        shape.c_str(), impl.c_str(), err, tol);
            ++failures;
            continue;
          }
          const double ms = bench::median_ms(run, warmup, iters, stream);
          char note[96];
          std::snprintf(note, sizeof note, "err %.1e", err);
          if (side[0] == 'c') ms_cublas = ms;
          if (side[0] == 'o' && ms_cublas > 0)
            std::snprintf(note, sizeof note, "%.3fx cuBLAS speed, err %.1e", ms_cublas / ms, err);
          table.add({p.name, mode, shape, impl, ms, flops / ms / 1e9, "TF/s", note});
          cw = Tensor(), cb = Tensor();
        }
      }

      // ---- ours with each schedule of the Hopper kernel (forward, bias).
      const cuda::Sm90Operand ox{x.raw_data(), s.k, true}, ow{w.raw_data(), s.k, true};
      cuda::GemmEpilogue epi;
      epi.bias = b.raw_data(), epi.out = dtype;
      const bool sm90 =
          (dtype == kBFloat16 || tf32) &&
          cuda::sm90_gemm_unsupported(dtype, s.m, s.n, s.k, ox, ow, epi, 0)[0] == '\0';
      if (sm90 && flops > 1e11) {
        for (auto sched : {cuda::Sm90Schedule::Cooperative, cuda::Sm90Schedule::Pingpong}) {
          cuda::Sm90Tuning t;
          t.schedule = sched;
          auto run = [&] {
            cuda::launch_sm90_gemm(dtype, s.m, s.n, s.k, ox, ow, y.raw_data(), s.n, epi, stream, t);
          };
          fill_(y, kNaN);
          run();
          const double err = rel_err_gpu(y, y_ref);
          const char* name = sched == cuda::Sm90Schedule::Pingpong ? "sm90 pingpong" : "sm90 coop";
          if (!(err <= tol)) {
            std::printf("VALIDATION FAILED fwd sched %s %s %s: error %.2e\n", mode, shape.c_str(),
                        name, err);
            ++failures;
            continue;
          }
          const double ms = bench::median_ms(run, warmup, iters, stream);
          char note[64];
          std::snprintf(note, sizeof note, "err %.1e", err);
          table.add({"fwd sched", mode, shape, name, ms, flops / ms / 1e9, "TF/s", note});
        }
      }

      // ---- the op, forward and backward, per EMBER_GEMM.
      if (!s.backward) continue;
      Tensor xr = x.detach().set_requires_grad(true), wr = w.detach().set_requires_grad(true);
      Tensor br = b.detach().set_requires_grad(true);
      std::vector<Tensor> last;
      auto step = [&] {
        Tensor out = linear(xr, wr, br);
        std::vector<Tensor> g = grad({out}, {xr, wr, br}, {dy});
        last = {out, g[0], g[1], g[2]};
      };
      double ms_cublas = 0;
      for (const char* side : {"cublas", "ours", ""}) {
        GemmMode forced(side);
        step();
        const std::vector<Tensor> refs = {y_ref, dx_ref, dw_ref, db_ref};
        double err = 0;
        for (size_t i = 0; i < 4; ++i) err = std::max(err, rel_err_gpu(last[i], refs[i]));
        const char* impl = side[0] == '\0' ? "auto" : side;
        last.clear();
        if (!(err <= tol)) {
          std::printf("VALIDATION FAILED fwd+bwd op %s %s %s: error %.2e (tol %.0e)\n", mode,
                      shape.c_str(), impl, err, tol);
          ++failures;
          continue;
        }
        const double ms = bench::median_ms(step, warmup, iters, stream);
        last.clear();
        char note[96];
        std::snprintf(note, sizeof note, "err %.1e", err);
        if (side[0] == 'c') ms_cublas = ms;
        if (side[0] != 'c' && ms_cublas > 0)
          std::snprintf(note, sizeof note, "%.3fx cuBLAS speed, err %.1e", ms_cublas / ms, err);
        table.add({"fwd+bwd op", mode, shape, impl, ms, 3 * flops / ms / 1e9, "TF/s", note});
      }
    }
  }
  cuda::set_allow_tf32(false);
  table.write_json(bench::json_path(argc, argv));
  return failures == 0 ? 0 : 1;
}
