// bench_mse: the fused MSE loss + gradient (one kernel, 3 accesses per element)
// on 2^28 elements, as GB/s counting those 3 accesses, against a device-to-device
// cudaMemcpy measured in the same run (bytes read + written), and through
// mse_loss + backward (the op as users call it: allocation included).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "benchmarks/timing.h"
#include "core/autograd.h"
#include "core/ops.h"
#include "cuda/kernels/mse.h"

using namespace ember;

int main(int argc, char** argv) {
  if (!bench::have_gpu("bench_mse")) return 0;
  const int64_t n = int64_t{1} << 28;
  bench::Table table("mse: loss + gradient, 2^28 elements");

  // The copy ceiling: 1 GiB read + 1 GiB written.
  double copy_gbs = 0;
  {
    Tensor a = randn({n}, TensorOptions(kFloat32).device(kCUDA));
    Tensor b = empty({n}, TensorOptions(kFloat32).device(kCUDA));
    const double ms = bench::median_ms(
        [&] {
          EMBER_CUDA_CHECK(cudaMemcpyAsync(b.raw_data(), a.raw_data(), a.nbytes(),
                                           cudaMemcpyDeviceToDevice, nullptr));
        },
        5, 50);
    copy_gbs = 2.0 * static_cast<double>(a.nbytes()) / ms / 1e6;
    table.add({"d2d copy", "f32", "2^28", "cudaMemcpy", ms, copy_gbs, "GB/s", "read + write"});
  }
  char note[64];
  for (DType dtype : {kFloat32, kBFloat16}) {
    const char* dn = dtype == kFloat32 ? "f32" : "bf16";
    Tensor p = randn({n}, TensorOptions(dtype).device(kCUDA));
    Tensor t = randn({n}, TensorOptions(dtype).device(kCUDA));
    Tensor d = empty({n}, TensorOptions(dtype).device(kCUDA));
    Tensor loss = empty({}, TensorOptions(dtype).device(kCUDA));
    Tensor ws = empty({static_cast<int64_t>(cuda::mse_workspace_bytes(n) / 8 + 1)},
                      TensorOptions(kFloat64).device(kCUDA));
    const double scale = 2.0 / static_cast<double>(n);
    auto run = [&] {
      cuda::launch_mse_fused(dtype, p.raw_data(), t.raw_data(), d.raw_data(), loss.raw_data(), n,
                             scale, 1.0 / static_cast<double>(n), ws.raw_data(), nullptr);
    };
    // Validate before timing, on the GPU in float64 through other kernels (the
    // element-wise ops and the double-accumulating reduction).
    run();
    {
      NoGradGuard no_grad;
      Tensor diff = sub(p.to(kFloat64), t.to(kFloat64));
      const double ref_loss = mean(mul(diff, diff)).item();
      Tensor ref_grad = mul(diff, scale);
      Tensor e = sub(d.to(kFloat64), ref_grad);
      const double err = std::fabs(loss.item() - ref_loss) / ref_loss;
      const double gerr = std::sqrt(sum(mul(e, e)).item() / sum(mul(ref_grad, ref_grad)).item());
      std::printf("validate %s: loss rel err %.2e, gradient rel err %.2e\n", dn, err, gerr);
      const double tol = dtype == kFloat32 ? 1e-6 : 1e-2;
      if (!(err <= tol) || !(gerr <= tol)) {
        std::printf("VALIDATION FAILED\n");
        return 1;
      }
    }
    const double ms = bench::median_ms(run, 5, 50);
    const double bytes = 3.0 * static_cast<double>(n) * static_cast<double>(element_size(dtype));
    const double gbs = bytes / ms / 1e6;
    std::snprintf(note, sizeof(note), "%.2f of copy", gbs / copy_gbs);
    table.add({"mse fused kernel", dn, "2^28", "ours", ms, gbs, "GB/s", note});

    // The op: forward + backward as a training step runs it (allocations included).
    Tensor pr = p.detach().set_requires_grad(true);
    auto op = [&] {
      Tensor l = mse_loss(pr, t);
      std::vector<Tensor> g = grad({l}, {pr});
    };
    const double ms_op = bench::median_ms(op, 5, 30);
    std::snprintf(note, sizeof(note), "%.2f of copy", bytes / ms_op / 1e6 / copy_gbs);
    table.add(
        {"mse_loss fwd+bwd op", dn, "2^28", "ours", ms_op, bytes / ms_op / 1e6, "GB/s", note});
  }
  table.write_json(bench::json_path(argc, argv));
  return 0;
}
