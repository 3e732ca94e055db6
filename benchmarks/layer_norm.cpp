// bench_layer_norm: layer_norm forward + backward on 8192 x 4096 (float32 and
// bfloat16) with weight and bias: the fused kernels alone (forward: one read of x,
// one write of y; backward: reads of d_y and x, one write of d_x, the weight and
// bias gradients in the same pass) and the op as users call it (layer_norm +
// autograd::grad of x, weight and bias, allocations included), as GB/s counting
// those accesses, beside a device-to-device copy in the same run. Each row is
// validated first against the composed ops in float64 on the GPU; a failed check
// prints no row and exits non-zero.
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

}  // namespace

int main(int argc, char** argv) {
  if (!bench::have_gpu("bench_layer_norm")) return 0;
  bench::Table table("layer_norm: forward + backward (x, weight, bias), 8192 x 4096");
  const char* shape = "8192x4096";
  const TensorOptions on_gpu = TensorOptions(kFloat32).device(kCUDA);

  const double copy_gbs = bench::copy_bandwidth_gbs(table, kRows * kCols, shape, 100);

  Generator gen(23);
  char note[96];
  for (DType dtype : {kFloat32, kBFloat16}) {
    const char* dn = dtype == kFloat32 ? "f32" : "bf16";
    const double tol = dtype == kFloat32 ? 1e-5 : 1e-2;
    const double es = static_cast<double>(element_size(dtype));
    const double n = static_cast<double>(kRows * kCols);
    Tensor x = (randn({kRows, kCols}, on_gpu, &gen) * 3.0 + 1.0).to(dtype);
    Tensor w = (randn({kCols}, on_gpu, &gen) * 0.5 + 1.0).to(dtype);
    Tensor b = randn({kCols}, on_gpu, &gen).to(dtype);
    Tensor dy = randn({kRows, kCols}, on_gpu, &gen).to(dtype);
    // The reference: the composed ops in float64 on the GPU.
    std::vector<Tensor> ref;
    Tensor ref_y;
    {
      Tensor x64 = x.to(kFloat64).detach().set_requires_grad(true);
      Tensor w64 = w.to(kFloat64).detach().set_requires_grad(true);
      Tensor b64 = b.to(kFloat64).detach().set_requires_grad(true);
      ref_y = layer_norm(x64, {kCols}, w64, b64);
      ref = grad({ref_y}, {x64, w64, b64}, {dy.to(kFloat64)});
    }

    // The kernels alone.
    Tensor y = empty({kRows, kCols}, TensorOptions(dtype).device(kCUDA));
    Tensor mean = empty({kRows}, on_gpu), rstd = empty({kRows}, on_gpu);
    Tensor dx = empty({kRows, kCols}, TensorOptions(dtype).device(kCUDA));
    Tensor dw = empty({kCols}, TensorOptions(dtype).device(kCUDA)), db = empty_like(dw);
    Tensor ws =
        empty({static_cast<int64_t>(cuda::layer_norm_workspace_bytes(dtype, kRows, kCols) / 8 + 1)},
              TensorOptions(kFloat64).device(kCUDA));
    auto fwd = [&] {
      cuda::launch_layer_norm(dtype, x.raw_data(), w.raw_data(), b.raw_data(), y.raw_data(),
                              mean.raw_data(), rstd.raw_data(), kRows, kCols, 1e-5, nullptr);
    };
    auto bwd = [&] {
      cuda::launch_layer_norm_backward(
          dtype, dy.raw_data(), x.raw_data(), w.raw_data(), mean.raw_data(), rstd.raw_data(),
          dx.raw_data(), dw.raw_data(), db.raw_data(), kRows, kCols, ws.raw_data(), nullptr);
    };
    fwd();
    bwd();
    const double errs[] = {rel_err(y, ref_y), rel_err(dx, ref[0]), rel_err(dw, ref[1]),
                           rel_err(db, ref[2])};
    std::printf("validate %s kernels: y %.2e, d_x %.2e, d_w %.2e, d_b %.2e\n", dn, errs[0], errs[1],
                errs[2], errs[3]);
    for (double e : errs)
      if (!(e <= tol)) {
        std::printf("VALIDATION FAILED\n");
        return 1;
      }
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
    Tensor xr = x.detach().set_requires_grad(true), wr = w.detach().set_requires_grad(true),
           br = b.detach().set_requires_grad(true);
    {
      Tensor yo = layer_norm(xr, {kCols}, wr, br);
      std::vector<Tensor> g = grad({yo}, {xr, wr, br}, {dy});
      const double e = std::max({rel_err(yo, ref_y), rel_err(g[0], ref[0]), rel_err(g[1], ref[1]),
                                 rel_err(g[2], ref[2])});
      std::printf("validate %s op: worst rel err %.2e\n", dn, e);
      if (!(e <= tol)) {
        std::printf("VALIDATION FAILED\n");
        return 1;
      }
    }
    auto op = [&] {
      Tensor yo = layer_norm(xr, {kCols}, wr, br);
      std::vector<Tensor> g = grad({yo}, {xr, wr, br}, {dy});
    };
    const double ms_op = bench::median_ms(op, 5, 100);
    std::snprintf(note, sizeof(note), "%.2f of copy (5 accesses/elem)",
                  (fwd_bytes + bwd_bytes) / ms_op / 1e6 / copy_gbs);
    table.add({"layer_norm fwd+bwd op", dn, shape, "ours", ms_op,
               (fwd_bytes + bwd_bytes) / ms_op / 1e6, "GB/s", note});
  }
  table.write_json(bench::json_path(argc, argv));
  return 0;
}
