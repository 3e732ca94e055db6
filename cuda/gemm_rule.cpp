#include "cuda/gemm_rule.h"

namespace ember::cuda {

namespace {
// Each edge: the smallest measured size where ours was at least as fast
// (benchmarks/NOTES.md, "GEMM dispatch", with the run and the ratios).
constexpr double kBf16ForwardMnk = 8192.0 * 8192.0 * 8192.0;
constexpr double kTf32ForwardMnk = 8192.0 * 4096.0 * 4096.0;
}  // namespace

const char* to_string(LinearProduct p) {
  switch (p) {
    case LinearProduct::Forward: return "forward";
    case LinearProduct::InputGrad: return "input grad";
    default: return "weight grad";
  }
}

bool sm90_measured_faster(LinearProduct p, DType dtype, bool tf32, int64_t m, int64_t n,
                          int64_t k) {
  const double mnk = static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  if (p != LinearProduct::Forward) return false;  // d_x and d_w + d_b: cuBLASLt faster
  if (dtype == DType::BFloat16) {
    // An output row that is not a multiple of 16 bytes sends cuBLASLt to a much
    // slower kernel; at and above 8192^3 ours is ahead (NOTES.md).
    return n % 8 != 0 || mnk >= kBf16ForwardMnk;
  }
  return dtype == DType::Float32 && tf32 && mnk >= kTf32ForwardMnk;
}

bool weight_grad_composes(DType dtype, int64_t rows, int64_t out, int64_t in, int64_t ldx) {
  const int64_t per16 = 16 / static_cast<int64_t>(element_size(dtype));
  const bool misaligned = out % per16 != 0 || ldx % per16 != 0 || in % per16 != 0;
  const double flops =
      2.0 * static_cast<double>(rows) * static_cast<double>(out) * static_cast<double>(in);
  return misaligned && flops >= kTinyForwardFlops;
}

}  // namespace ember::cuda
