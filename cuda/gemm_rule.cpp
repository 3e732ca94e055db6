#include "cuda/gemm_rule.h"

namespace ember::cuda {

namespace {
// Each edge from one run of bench_linear on an H200 (benchmarks/NOTES.md, "GEMM
// dispatch": 5 interleaved repetitions, ours' speed over cuBLAS(Lt)'s per shape).
// Ties (a range that straddles 1) go to cuBLAS.
constexpr double kTf32ForwardMinMnk = 1024.0 * 1024.0 * 1024.0;    // 1.064 [1.050-1.099]
constexpr double kTf32ForwardMaxMnk = 2048.0 * 2048.0 * 2048.0;    // 1.050 [1.017-1.068]
constexpr double kBf16WeightGradMaxMnk = 1024.0 * 1024.0 * 256.0;  // 1.193 [1.066-1.320]
}  // namespace

const char* to_string(LinearProduct p) {
  switch (p) {
    case LinearProduct::Forward:
      return "forward";
    case LinearProduct::InputGrad:
      return "input grad";
    default:
      return "weight grad";
  }
}

bool sm90_measured_faster(LinearProduct p, DType dtype, bool tf32, int64_t m, int64_t n,
                          int64_t k) {
  const double mnk = static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  if (dtype == DType::BFloat16) {
    switch (p) {
      // An output row that is not a multiple of 16 bytes sends cuBLASLt to a much
      // slower kernel (4097x4096->4095: 6.4x); elsewhere cuBLASLt is ahead (0.87-0.94
      // from 2048^3 to 8192^3).
      case LinearProduct::Forward:
        return n % 8 != 0;
      // d_x: cuBLAS ahead from 1024^3 up (0.88-0.95), a tie below.
      case LinearProduct::InputGrad:
        return false;
      // d_w + d_b: ours ahead of BGRADB up to 1024x1024 from 256 rows (1.19-1.30),
      // behind from 1024^3 up (0.58-0.92).
      case LinearProduct::WeightGrad:
        return mnk <= kBf16WeightGradMaxMnk;
    }
  }
  // TF32 runs ours for the forward only (K-major operands): output rows that are
  // not a multiple of 16 bytes as in bf16 (4097x4096->4095: 2.99x), and ahead at
  // 1024^3 and 2048^3; a tie at 4096^3 and 8192x4096x4096, behind at 8192^3 (0.85).
  if (p != LinearProduct::Forward || dtype != DType::Float32 || !tf32) return false;
  return n % 4 != 0 || (mnk >= kTf32ForwardMinMnk && mnk <= kTf32ForwardMaxMnk);
}

bool weight_grad_composes(DType dtype, int64_t rows, int64_t out, int64_t in, int64_t ldx) {
  const int64_t per16 = 16 / static_cast<int64_t>(element_size(dtype));
  const bool misaligned = out % per16 != 0 || ldx % per16 != 0 || in % per16 != 0;
  const double flops =
      2.0 * static_cast<double>(rows) * static_cast<double>(out) * static_cast<double>(in);
  return misaligned && flops >= kTinyForwardFlops;
}

}  // namespace ember::cuda
