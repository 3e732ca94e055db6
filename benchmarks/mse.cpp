// bench_mse: the fused MSE loss + gradient (one kernel, 3 accesses per element)
// on 2^28 elements, as GB/s counting those 3 accesses, against a device-to-device
// cudaMemcpy measured in the same run (bytes read + written), and through
// mse_loss + backward (the op as users call it: allocation included).
// Every timed path is checked first, on every output, against float64 on the CPU:
// the copy bit for bit on slices; the loss over all 2^28 elements and the
// gradient element by element on slices (first, middle and last 2^16 elements),
// at DESIGN.md's thresholds (fp32 element-wise 1e-6, bf16 1e-2), for the kernel
// and for the op. A failed check prints no row and the program exits 1.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "benchmarks/timing.h"
#include "core/autograd.h"
#include "core/ops.h"
#include "cuda/kernels/mse.h"

using namespace ember;

namespace {

constexpr int64_t kSlice = int64_t{1} << 16;

// The starts of the slices compared element by element.
std::vector<int64_t> slice_starts(int64_t n) {
  return {0, n / 2, n - kSlice};
}

std::vector<double> host(const Tensor& t) {
  return t.to(kCPU).to(kFloat64).to_vector<double>();
}

// The float64 loss over every element (the inputs' own values, widened).
double loss_f64(const Tensor& pred, const Tensor& target) {
  const Tensor p = pred.to(kCPU).to(kFloat32), t = target.to(kCPU).to(kFloat32);
  const float* a = p.data_ptr<float>();
  const float* b = t.data_ptr<float>();
  double sum = 0;
  for (int64_t i = 0; i < p.numel(); ++i) {
    const double d = double(a[i]) - double(b[i]);
    sum += d * d;
  }
  return sum / static_cast<double>(p.numel());
}

// Relative error of the gradient on the slices against 2 (p - t) / n in float64.
double grad_err(const Tensor& d, const Tensor& pred, const Tensor& target) {
  const double n = static_cast<double>(pred.numel());
  double num = 0, den = 0;
  for (int64_t s : slice_starts(pred.numel())) {
    const std::vector<double> g = host(d.slice(0, s, s + kSlice));
    const std::vector<double> p = host(pred.detach().slice(0, s, s + kSlice));
    const std::vector<double> t = host(target.slice(0, s, s + kSlice));
    for (size_t i = 0; i < g.size(); ++i) {
      const double want = 2.0 * (p[i] - t[i]) / n;
      num += (g[i] - want) * (g[i] - want);
      den += want * want;
    }
  }
  return std::sqrt(num / den);
}

bool check(const char* what, const char* dn, double loss, double want_loss, double gerr,
           double tol) {
  const double lerr = std::fabs(loss - want_loss) / want_loss;
  const bool ok = lerr <= tol && gerr <= tol;
  std::printf("validate %s %s: loss rel err %.2e, gradient rel err %.2e (limit %.0e)%s\n", what, dn,
              lerr, gerr, tol, ok ? "" : "  FAILED");
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  if (!bench::have_gpu("bench_mse")) return 0;
  const int64_t n = int64_t{1} << 28;
  bench::Table table("mse: loss + gradient, 2^28 elements");
  int failures = 0;

  // The copy ceiling: 1 GiB read + 1 GiB written.
  double copy_gbs = 0;
  {
    Tensor a = randn({n}, TensorOptions(kFloat32).device(kCUDA));
    Tensor b = empty({n}, TensorOptions(kFloat32).device(kCUDA));
    auto copy = [&] {
      EMBER_CUDA_CHECK(cudaMemcpyAsync(b.raw_data(), a.raw_data(), a.nbytes(),
                                       cudaMemcpyDeviceToDevice, nullptr));
    };
    copy();
    bool same = true;
    for (int64_t s : slice_starts(n))
      same = same && host(b.slice(0, s, s + kSlice)) == host(a.slice(0, s, s + kSlice));
    std::printf("validate d2d copy: slices %s\n", same ? "equal (bitwise)" : "DIFFER  FAILED");
    if (same) {
      const bench::Spread ms = bench::spread_ms(copy, 5, 50);
      copy_gbs = 2.0 * static_cast<double>(a.nbytes()) / ms.median / 1e6;
      table.add({"d2d copy", "f32", "2^28", "cudaMemcpy", ms.median, copy_gbs, "GB/s",
                 "read + write", ms.min, ms.max});
    } else {
      ++failures;
    }
  }
  char note[64];
  for (DType dtype : {kFloat32, kBFloat16}) {
    const char* dn = dtype == kFloat32 ? "f32" : "bf16";
    const double tol = dtype == kFloat32 ? 1e-6 : 1e-2;
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
    const double want_loss = loss_f64(p, t);
    // The kernel as timed.
    run();
    if (!check("mse fused kernel", dn, loss.item(), want_loss, grad_err(d, p, t), tol)) {
      ++failures;
    } else {
      const bench::Spread ms = bench::spread_ms(run, 5, 50);
      const double bytes = 3.0 * static_cast<double>(n) * static_cast<double>(element_size(dtype));
      const double gbs = bytes / ms.median / 1e6;
      std::snprintf(note, sizeof(note), "%.2f of copy", copy_gbs > 0 ? gbs / copy_gbs : 0.0);
      table.add(
          {"mse fused kernel", dn, "2^28", "ours", ms.median, gbs, "GB/s", note, ms.min, ms.max});
    }

    // The op: forward + backward as a training step runs it (allocations included).
    Tensor pr = p.detach().set_requires_grad(true);
    Tensor l_out, g_out;
    auto op = [&] {
      Tensor l = mse_loss(pr, t);
      std::vector<Tensor> g = grad({l}, {pr});
      l_out = l.detach();
      g_out = g[0];
    };
    op();
    const bool op_ok =
        check("mse_loss fwd+bwd op", dn, l_out.item(), want_loss, grad_err(g_out, p, t), tol);
    l_out = Tensor();
    g_out = Tensor();
    if (!op_ok) {
      ++failures;
      continue;
    }
    auto op_timed = [&] {
      Tensor l = mse_loss(pr, t);
      std::vector<Tensor> g = grad({l}, {pr});
    };
    const bench::Spread ms_op = bench::spread_ms(op_timed, 5, 30);
    const double bytes = 3.0 * static_cast<double>(n) * static_cast<double>(element_size(dtype));
    std::snprintf(note, sizeof(note), "%.2f of copy",
                  copy_gbs > 0 ? bytes / ms_op.median / 1e6 / copy_gbs : 0.0);
    table.add({"mse_loss fwd+bwd op", dn, "2^28", "ours", ms_op.median, bytes / ms_op.median / 1e6,
               "GB/s", note, ms_op.min, ms_op.max});
  }
  table.write_json(bench::json_path(argc, argv));
  if (failures) std::printf("%d validation failure(s): their rows are not printed\n", failures);
  return failures == 0 ? 0 : 1;
}
