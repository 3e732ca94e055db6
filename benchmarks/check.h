// What the benchmarks check their results with: relative errors in float64,
// on the host for slices and small results, on the GPU for whole large tensors,
// and the device-to-device copy bandwidth the memory-bound kernels are read against.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "benchmarks/timing.h"
#include "core/autograd.h"
#include "core/ops.h"

namespace bench {

// ||a - b|| / ||b||, +inf when the sizes differ.
inline double rel_err(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return INFINITY;
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-300);
}

// The same over two tensors' elements, brought to the host in float64.
inline double rel_err(const ember::Tensor& got, const ember::Tensor& want) {
  ember::NoGradGuard no_grad;
  return rel_err(got.to(ember::kCPU).to(ember::kFloat64).to_vector<double>(),
                 want.to(ember::kCPU).to(ember::kFloat64).to_vector<double>());
}

// The same computed where the tensors are (for tensors too large to copy out).
inline double rel_err_on_device(const ember::Tensor& a, const ember::Tensor& b) {
  using namespace ember;
  NoGradGuard no_grad;
  Tensor d = sub(a.to(kFloat64), b.to(kFloat64));
  Tensor bb = b.to(kFloat64);
  return std::sqrt(sum(mul(d, d)).item() / sum(mul(bb, bb)).item());
}

// A float64 CPU copy.
inline ember::Tensor f64(const ember::Tensor& t) {
  ember::NoGradGuard no_grad;
  return t.detach().to(ember::kCPU).to(ember::kFloat64);
}

// GB/s of a device-to-device copy of `numel` floats (a read and a write of each),
// the median of `iters` copies, added to `table` as the "d2d copy" row.
inline double copy_bandwidth_gbs(Table& table, int64_t numel, const char* shape, int iters) {
  using namespace ember;
  const TensorOptions on_gpu = TensorOptions(kFloat32).device(kCUDA);
  Tensor a = randn({numel}, on_gpu), b = empty({numel}, on_gpu);
  const double ms = median_ms(
      [&] {
        EMBER_CUDA_CHECK(cudaMemcpyAsync(b.raw_data(), a.raw_data(), a.nbytes(),
                                         cudaMemcpyDeviceToDevice, nullptr));
      },
      5, iters);
  const double gbs = 2.0 * static_cast<double>(a.nbytes()) / ms / 1e6;
  table.add({"d2d copy", "f32", shape, "cudaMemcpy", ms, gbs, "GB/s", "read + write"});
  return gbs;
}

}  // namespace bench
