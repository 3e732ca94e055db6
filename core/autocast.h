// Autocast: mixed precision for CUDA Linear layers, as torch.autocast(dtype=bf16)
// does for them. While an AutocastGuard is active on this thread:
//   * linear() casts its float32 CUDA operands (input, weight, bias) to the
//     autocast dtype and runs the GEMM in it; the output has that dtype; so do
//     scaled_dot_product_attention, conv2d (conv1d) and conv_transpose2d;
//   * batch_norm takes the bfloat16 result with its float32 weight, bias and
//     running statistics as they are, returning bfloat16 (as PyTorch's);
//   * mse_loss() computes in float32 when its operands' dtypes differ (PyTorch's
//     autocast runs mse_loss in float32 too).
// The casts are recorded by autograd, so gradients flow back to the float32
// parameters: they stay the optimizer's master weights, and the optimizer
// updates them in float32. Nothing else changes; CPU tensors are untouched.
#pragma once

#include <initializer_list>
#include <memory>
#include <vector>

#include "core/base/device.h"
#include "core/base/dtype.h"

namespace ember {

// The active autocast dtype on this thread, or false when autocast is off.
bool is_autocast_enabled();
DType autocast_dtype();  // meaningful only when enabled

class Tensor;

// --- the policy, one place for the ops that autocast (linear, attention, the
// convolutions, mse_loss)
// Whether autocast (when on) applies on `device`: CUDA devices, as
// torch.autocast("cuda"), and the meta device when it mirrors CUDA (core/meta.h).
bool autocast_applies(Device device);
// linear's rule: autocast is on, applies to the first operand's device, some
// defined operand is float32, and the first is float32 or the autocast dtype.
bool autocast_lowers(std::initializer_list<const Tensor*> operands);
// A float32 tensor cast (recorded, differentiable) to the autocast dtype; any
// other tensor, or an undefined one, as it is. A parameter that
// AutocastGuard::cast_parameters cast, unchanged since, gives that cast.
Tensor autocast_lower(const Tensor& t);
// mse_loss's rule: autocast is on and applies, and the two operands have
// different dtypes, each float32 or the autocast dtype (computed in float32).
bool autocast_widens(const Tensor& a, const Tensor& b);

class AutocastGuard {
 public:
  // dtype: bfloat16 (the one mixed-precision dtype ember's kernels support).
  explicit AutocastGuard(DType dtype = DType::BFloat16, bool enabled = true);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

  // Casts the parameters the ops will lower (float32, on a device autocast applies
  // to; others are skipped) now, all of a device's in one launch, and keeps the casts
  // until this guard ends: autocast_lower returns a parameter's cast instead of casting
  // it again, as torch.autocast's weight cache does, while the parameter is unchanged
  // (its version the same) and grad mode is as it was. A model's Linear weights, cast
  // one launch each as the layers run, become one launch for the step. Each cast is
  // recorded as cast records it (CastBackward: the float32 parameter gets the
  // gradient). Call it on the innermost guard; a disabled guard casts nothing, and so
  // does every call with EMBER_CAST_PARAMETERS=0.
  void cast_parameters(const std::vector<Tensor>& parameters);

  struct Cache;  // core/autocast.cpp

 private:
  bool previous_enabled_;
  DType previous_dtype_;
  std::unique_ptr<Cache> cache_;
  Cache* previous_cache_;
};

}  // namespace ember
