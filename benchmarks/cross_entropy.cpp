// bench_cross_entropy: cross-entropy forward + backward on 8192 x 32768 logits
// (float32 and bfloat16): the fused kernel (one read of the logits, one write of
// their gradient, the loss in the same pass; the streamed shape reads them twice) in
// each of its long-row shapes, and
// the op as users call it (cross_entropy + autograd::grad, allocations included),
// as GB/s counting that one read and one write, beside a device-to-device copy
// measured in the same run. Each row is validated first against an independent
// float64 computation on the GPU (log_softmax + nll_loss); a failed check prints
// no row and exits non-zero.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <utility>
#include <vector>

#include "benchmarks/check.h"
#include "benchmarks/timing.h"
#include "core/autograd.h"
#include "core/ops.h"
#include "cuda/kernels/cross_entropy.h"

using namespace ember;

namespace {

constexpr int64_t kRows = 8192, kClasses = 32768;

// ||a - b|| / ||b|| on the GPU, in float64.
const auto rel_err = bench::rel_err_on_device;

}  // namespace

int main(int argc, char** argv) {
  if (!bench::have_gpu("bench_cross_entropy")) return 0;
  bench::Table table("cross_entropy: loss + gradient of the logits, 8192 x 32768");
  const char* shape = "8192x32768";

  const double copy_gbs = bench::copy_bandwidth_gbs(table, kRows * kClasses, shape, 50);

  Generator gen(17);
  const Tensor target = randint(0, kClasses, {kRows}, TensorOptions(kInt64).device(kCUDA), &gen);
  char note[96];
  for (DType dtype : {kFloat32, kBFloat16}) {
    const char* dn = dtype == kFloat32 ? "f32" : "bf16";
    const double tol = dtype == kFloat32 ? 1e-5 : 1e-2;
    Tensor x =
        (randn({kRows, kClasses}, TensorOptions(kFloat32).device(kCUDA), &gen) * 2.0).to(dtype);
    // The reference: float64 on the GPU through the composed path (log_softmax,
    // gather, their backward), another implementation entirely.
    Tensor ref_loss, ref_grad;
    {
      Tensor x64 = x.to(kFloat64).detach().set_requires_grad(true);
      ref_loss = cross_entropy(x64, target);
      ref_grad = grad({ref_loss}, {x64})[0];
    }
    const double bytes =
        2.0 * static_cast<double>(kRows * kClasses) * static_cast<double>(element_size(dtype));

    // The kernel alone, in each long-row shape: 512 threads x 16 logits (a cluster of
    // 4 per row, two blocks per SM), 1024 x 16 (one block per SM), 512 x 32 (two per
    // SM, some register spills) and streamed (a 512-thread block per row, read twice;
    // Auto's unless EMBER_CROSS_ENTROPY_STREAM=0).
    Tensor d = empty({kRows, kClasses}, TensorOptions(dtype).device(kCUDA));
    Tensor loss = empty({}, TensorOptions(dtype).device(kCUDA));
    Tensor ws = empty({static_cast<int64_t>(cuda::cross_entropy_workspace_bytes(kRows) / 8 + 1)},
                      TensorOptions(kFloat64).device(kCUDA));
    const std::pair<cuda::CrossEntropyShape, const char*> shapes[] = {
        {cuda::CrossEntropyShape::T512x16, "512x16, cluster 4"},
        {cuda::CrossEntropyShape::T1024x16, "1024x16, cluster 2"},
        {cuda::CrossEntropyShape::T512x32, "512x32, cluster 2"},
        {cuda::CrossEntropyShape::Stream, "streamed, 512 a row"}};
    for (const auto& [block_shape, label] : shapes) {
      auto run = [&, bs = block_shape] {
        cuda::launch_cross_entropy(dtype, "cross_entropy", x.raw_data(), target.data_ptr<int64_t>(),
                                   d.raw_data(), loss.raw_data(), kRows, kClasses, -100, 0.0,
                                   Reduction::Mean, ws.raw_data(), nullptr, bs);
      };
      run();
      const double el = rel_err(loss, ref_loss), eg = rel_err(d, ref_grad);
      std::printf("validate %s %s: loss rel err %.2e, gradient rel err %.2e\n", dn, label, el, eg);
      if (!(el <= tol) || !(eg <= tol)) {
        std::printf("VALIDATION FAILED\n");
        return 1;
      }
      const double ms = bench::median_ms(run, 5, 30);
      std::snprintf(note, sizeof(note), "%.2f of copy (%s)", bytes / ms / 1e6 / copy_gbs, label);
      table.add({"ce fused kernel", dn, shape, "ours", ms, bytes / ms / 1e6, "GB/s", note});
    }

    // The op: forward + backward as a training step runs it.
    Tensor xr = x.detach().set_requires_grad(true);
    {
      Tensor l = cross_entropy(xr, target);
      Tensor g = grad({l}, {xr})[0];
      const double el = rel_err(l, ref_loss), eg = rel_err(g, ref_grad);
      std::printf("validate %s op: loss rel err %.2e, gradient rel err %.2e\n", dn, el, eg);
      if (!(el <= tol) || !(eg <= tol)) {
        std::printf("VALIDATION FAILED\n");
        return 1;
      }
    }
    auto op = [&] {
      Tensor l = cross_entropy(xr, target);
      std::vector<Tensor> g = grad({l}, {xr});
    };
    const double ms_op = bench::median_ms(op, 5, 30);
    std::snprintf(note, sizeof(note), "%.2f of copy", bytes / ms_op / 1e6 / copy_gbs);
    table.add(
        {"cross_entropy fwd+bwd op", dn, shape, "ours", ms_op, bytes / ms_op / 1e6, "GB/s", note});
  }
  table.write_json(bench::json_path(argc, argv));
  return 0;
}
