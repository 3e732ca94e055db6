// Launchers for the fused multi-tensor optimizer kernels: one launch updates up
// to kFusedOptimTensorsPerLaunch parameters, whatever their sizes (longer lists
// take several). The table of tensors (device pointers, sizes, per-parameter step
// values) travels in the kernel's parameters, not through a copy from the host,
// so a launch needs no workspace, never synchronises, and can be captured in a
// CUDA graph (cuda/graph.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "core/base/optim_math.h"

namespace ember::cuda {

// One parameter and its optimizer state, as device pointers (float or double,
// all of one tensor in the same type).
struct OptimTensor {
  void* param = nullptr;
  const void* grad = nullptr;
  void* state[3] = {};  // SGD: momentum buffer; Adam: exp_avg, exp_avg_sq, max_exp_avg_sq
  int64_t numel = 0;
  bool is_double = false;
  bool first_step = false;           // SGD: the momentum buffer starts as the gradient
  double step_size = 0;              // Adam: lr / (1 - beta1^step)
  double bias_correction2_sqrt = 1;  // Adam: sqrt(1 - beta2^step)
  // Adam: the parameter's step count in device memory (int64). When set, the
  // launch adds one to it and derives step_size and bias_correction2_sqrt from
  // the new count on the device (the two fields above are then unused), so a
  // replayed CUDA graph advances the count and its bias corrections every step.
  int64_t* step = nullptr;
};

// Tensors per launch: the table must fit the 4 KiB of kernel parameters.
inline constexpr int64_t kFusedOptimTensorsPerLaunch = 32;

void launch_fused_sgd(const OptimTensor* tensors, int64_t count, const SgdConfig& config,
                      cudaStream_t stream);
void launch_fused_adam(const OptimTensor* tensors, int64_t count, const AdamConfig& config,
                       cudaStream_t stream);

}  // namespace ember::cuda
