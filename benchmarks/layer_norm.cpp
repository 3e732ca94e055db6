// bench_layer_norm: layer_norm forward + backward on 8192 x 4096 (float32 and
// bfloat16) with weight and bias: the fused kernels alone (forward: one read of x,
// one write of y; backward: reads of d_y and x, one write of d_x, the weight and
// bias gradients in the same pass) and the op as users call it (layer_norm +
// autograd::grad of x, weight and bias, allocations included), as GB/s counting
// those accesses, beside a device-to-device copy in the same run. Each row is
// validated first against the composed ops in float64 on the GPU; a failed check
// prints no row and exits non-zero.
//
// Then GPT-2's rows, 16,384 x 768 (the warp-per-row kernels), the kernels alone with
// EMBER_LAYER_NORM_LEAN off (32 items a lane, the per-column chain of the weight
// gradients' sums) and on (24 items, one launch of the column sums), alternating, 5
// rounds each, each setting checked against float64 first: their medians and ranges
// and lean / full.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "benchmarks/check.h"
#include "benchmarks/timing.h"
#include "core/autograd.h"
#include "core/ops.h"
#include "cuda/kernels/layer_norm.h"

using namespace ember;

namespace {

constexpr int64_t kRows = 8192, kCols = 4096;

// ||a - b|| / ||b|| on the GPU, in float64.
const auto rel_err = bench::rel_err_on_device;

// One shape of one dtype: the inputs (x = 3 N(0,1) + 1, w = 0.5 N(0,1) + 1, b and d_y
// N(0,1), drawn from gen in that order), the composed ops' results in float64 on the GPU,
// and the fused kernels' outputs with their two launches.
struct KernelCase {
  int64_t rows, cols;
  DType dtype;
  Tensor x, w, b, dy, ref_y;
  std::vector<Tensor> ref;  // d_x, d_w, d_b
  Tensor y, mean, rstd, dx, dw, db, ws;

  KernelCase(int64_t r, int64_t c, DType dt, Generator& gen) : rows(r), cols(c), dtype(dt) {
    const TensorOptions f32 = TensorOptions(kFloat32).device(kCUDA);
    const TensorOptions opt = TensorOptions(dt).device(kCUDA);
    x = (randn({rows, cols}, f32, &gen) * 3.0 + 1.0).to(dt);
    w = (randn({cols}, f32, &gen) * 0.5 + 1.0).to(dt);
    b = randn({cols}, f32, &gen).to(dt);
    dy = randn({rows, cols}, f32, &gen).to(dt);
    Tensor x64 = x.to(kFloat64).detach().set_requires_grad(true);
    Tensor w64 = w.to(kFloat64).detach().set_requires_grad(true);
    Tensor b64 = b.to(kFloat64).detach().set_requires_grad(true);
    ref_y = layer_norm(x64, {cols}, w64, b64);
    ref = grad({ref_y}, {x64, w64, b64}, {dy.to(kFloat64)});
    y = empty({rows, cols}, opt);
    dx = empty({rows, cols}, opt);
    mean = empty({rows}, f32);
    rstd = empty({rows}, f32);
    dw = empty({cols}, opt);
    db = empty({cols}, opt);
    ws = empty({static_cast<int64_t>(cuda::layer_norm_workspace_bytes(dt, rows, cols) / 8 + 1)},
               TensorOptions(kFloat64).device(kCUDA));
  }
  void fwd() {
    cuda::launch_layer_norm(dtype, x.raw_data(), w.raw_data(), b.raw_data(), y.raw_data(),
                            mean.raw_data(), rstd.raw_data(), rows, cols, 1e-5, nullptr);
  }
  void bwd() {
    cuda::launch_layer_norm_backward(dtype, dy.raw_data(), x.raw_data(), w.raw_data(),
                                     mean.raw_data(), rstd.raw_data(), dx.raw_data(), dw.raw_data(),
                                     db.raw_data(), rows, cols, ws.raw_data(), nullptr);
  }
  // Runs both kernels once and prints their errors (y, d_x, d_w, d_b) against the
  // references after `what`; false (after VALIDATION FAILED) when one is over tol.
  bool check(const char* what, double tol) {
    fwd();
    bwd();
    const double errs[] = {rel_err(y, ref_y), rel_err(dx, ref[0]), rel_err(dw, ref[1]),
                           rel_err(db, ref[2])};
    std::printf("validate %s kernels: y %.2e, d_x %.2e, d_w %.2e, d_b %.2e\n", what, errs[0],
                errs[1], errs[2], errs[3]);
    for (double e : errs)
      if (!(e <= tol)) {
        std::printf("VALIDATION FAILED\n");
        return false;
      }
    return true;
  }
};

// GPT-2's rows with EMBER_LAYER_NORM_LEAN off and on, alternating (see the top). False
// when a check failed.
bool lean_rows(bench::Table& table, double copy_gbs) {
  constexpr int64_t rows = 16384, cols = 768;
  constexpr int kRounds = 5;
  const char* shape = "16384x768";
  Generator gen(24);
  const bool was_lean = cuda::layer_norm_lean(), was_warp = cuda::layer_norm_warp();
  cuda::set_layer_norm_warp(true);
  bool ok = true;
  for (DType dtype : {kFloat32, kBFloat16}) {
    const char* dn = dtype == kFloat32 ? "f32" : "bf16";
    const double tol = dtype == kFloat32 ? 1e-5 : 1e-2, n = static_cast<double>(rows * cols);
    const double es = static_cast<double>(element_size(dtype));
    KernelCase c(rows, cols, dtype, gen);
    for (bool lean : {false, true}) {
      cuda::set_layer_norm_lean(lean);
      char what[64];
      std::snprintf(what, sizeof(what), "%s %s lean=%d", dn, shape, lean ? 1 : 0);
      ok = c.check(what, tol) && ok;
    }
    if (!ok) break;
    auto fwd = [&] { c.fwd(); };
    auto bwd = [&] { c.bwd(); };
    std::vector<double> f[2], bw[2], ratio_f, ratio_b;
    for (int r = 0; r < kRounds; ++r)
      for (int lean : {0, 1}) {
        cuda::set_layer_norm_lean(lean == 1);
        f[lean].push_back(bench::median_ms(fwd, 5, 50));
        bw[lean].push_back(bench::median_ms(bwd, 5, 50));
        if (lean == 1) {
          ratio_f.push_back(f[1].back() / f[0].back());
          ratio_b.push_back(bw[1].back() / bw[0].back());
        }
      }
    char note[96];
    for (int lean : {0, 1}) {
      const char* impl = lean == 1 ? "ours lean" : "ours full";
      const bench::Spread sf = bench::spread_of(f[lean]), sb = bench::spread_of(bw[lean]);
      const double fb = 2.0 * n * es, bb = 3.0 * n * es;
      std::snprintf(note, sizeof(note), "%.2f of copy (read x, write y)",
                    fb / sf.median / 1e6 / copy_gbs);
      table.add({"ln fwd kernel", dn, shape, impl, sf.median, fb / sf.median / 1e6, "GB/s", note,
                 sf.min, sf.max});
      std::snprintf(note, sizeof(note), "%.2f of copy (read d_y, x; write d_x)",
                    bb / sb.median / 1e6 / copy_gbs);
      table.add({"ln bwd kernel", dn, shape, impl, sb.median, bb / sb.median / 1e6, "GB/s", note,
                 sb.min, sb.max});
    }
    const bench::Spread rf = bench::spread_of(ratio_f), rb = bench::spread_of(ratio_b);
    std::printf(
        "%s %s lean / full (%d alternating rounds): forward %.3fx [%.3f-%.3f], "
        "backward %.3fx [%.3f-%.3f]\n",
        dn, shape, kRounds, rf.median, rf.min, rf.max, rb.median, rb.min, rb.max);
  }
  cuda::set_layer_norm_lean(was_lean);
  cuda::set_layer_norm_warp(was_warp);
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  if (!bench::have_gpu("bench_layer_norm")) return 0;
  bench::Table table("layer_norm: forward + backward (x, weight, bias), 8192 x 4096");
  const char* shape = "8192x4096";

  const double copy_gbs = bench::copy_bandwidth_gbs(table, kRows * kCols, shape, 100);

  Generator gen(23);
  char note[96];
  for (DType dtype : {kFloat32, kBFloat16}) {
    const char* dn = dtype == kFloat32 ? "f32" : "bf16";
    const double tol = dtype == kFloat32 ? 1e-5 : 1e-2;
    const double es = static_cast<double>(element_size(dtype));
    const double n = static_cast<double>(kRows * kCols);
    KernelCase c(kRows, kCols, dtype, gen);

    // The kernels alone.
    if (!c.check(dn, tol)) return 1;
    auto fwd = [&] { c.fwd(); };
    auto bwd = [&] { c.bwd(); };
    const double fwd_bytes = 2.0 * n * es, bwd_bytes = 3.0 * n * es;
    const double ms_f = bench::median_ms(fwd, 5, 100);
    std::snprintf(note, sizeof(note), "%.2f of copy (read x, write y)",
                  fwd_bytes / ms_f / 1e6 / copy_gbs);
    table.add({"ln fwd kernel", dn, shape, "ours", ms_f, fwd_bytes / ms_f / 1e6, "GB/s", note});
    const double ms_b = bench::median_ms(bwd, 5, 100);
    std::snprintf(note, sizeof(note), "%.2f of copy (read d_y, x; write d_x)",
                  bwd_bytes / ms_b / 1e6 / copy_gbs);
    table.add({"ln bwd kernel", dn, shape, "ours", ms_b, bwd_bytes / ms_b / 1e6, "GB/s", note});

    // The op: forward + backward of x, weight and bias, as a training step runs it.
    Tensor xr = c.x.detach().set_requires_grad(true), wr = c.w.detach().set_requires_grad(true),
           br = c.b.detach().set_requires_grad(true);
    {
      Tensor yo = layer_norm(xr, {kCols}, wr, br);
      std::vector<Tensor> g = grad({yo}, {xr, wr, br}, {c.dy});
      const double e = std::max({rel_err(yo, c.ref_y), rel_err(g[0], c.ref[0]),
                                 rel_err(g[1], c.ref[1]), rel_err(g[2], c.ref[2])});
      std::printf("validate %s op: worst rel err %.2e\n", dn, e);
      if (!(e <= tol)) {
        std::printf("VALIDATION FAILED\n");
        return 1;
      }
    }
    auto op = [&] {
      Tensor yo = layer_norm(xr, {kCols}, wr, br);
      std::vector<Tensor> g = grad({yo}, {xr, wr, br}, {c.dy});
    };
    const double ms_op = bench::median_ms(op, 5, 100);
    std::snprintf(note, sizeof(note), "%.2f of copy (5 accesses/elem)",
                  (fwd_bytes + bwd_bytes) / ms_op / 1e6 / copy_gbs);
    table.add({"layer_norm fwd+bwd op", dn, shape, "ours", ms_op,
               (fwd_bytes + bwd_bytes) / ms_op / 1e6, "GB/s", note});
  }
  if (!lean_rows(table, copy_gbs)) return 1;
  table.write_json(bench::json_path(argc, argv));
  return 0;
}
