// Autocast: mixed precision for CUDA Linear layers, as torch.autocast(dtype=bf16)
// does for them. While an AutocastGuard is active on this thread:
//   * linear() casts its float32 CUDA operands (input, weight, bias) to the
//     autocast dtype and runs the GEMM in it; the output has that dtype;
//   * mse_loss() computes in float32 when its operands' dtypes differ (PyTorch's
//     autocast runs mse_loss in float32 too).
// The casts are recorded by autograd, so gradients flow back to the float32
// parameters: they stay the optimizer's master weights, and the optimizer
// updates them in float32. Nothing else changes; CPU tensors are untouched.
#pragma once

#include "core/base/dtype.h"

namespace ember {

// The active autocast dtype on this thread, or false when autocast is off.
bool is_autocast_enabled();
DType autocast_dtype();  // meaningful only when enabled

class AutocastGuard {
 public:
  // dtype: bfloat16 (the one mixed-precision dtype ember's kernels support).
  explicit AutocastGuard(DType dtype = DType::BFloat16, bool enabled = true);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool previous_enabled_;
  DType previous_dtype_;
};

}  // namespace ember
