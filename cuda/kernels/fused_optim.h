// Launchers for the fused multi-tensor optimizer kernels: one launch updates
// every parameter of a group, whatever their number and sizes. The host passes a
// table of tensors (device pointers, sizes, per-parameter step values); the
// launcher uploads it with a chunk map into a caller-owned device workspace and
// launches one block per chunk of one tensor.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "cuda/kernels/fused_optim_math.h"

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
};

// Bytes of device workspace a launch over these tensors needs.
size_t fused_optim_workspace_bytes(const OptimTensor* tensors, int64_t count);

void launch_fused_sgd(const OptimTensor* tensors, int64_t count, const SgdConfig& config,
                      void* workspace, size_t workspace_bytes, cudaStream_t stream);
void launch_fused_adam(const OptimTensor* tensors, int64_t count, const AdamConfig& config,
                       void* workspace, size_t workspace_bytes, cudaStream_t stream);

}  // namespace ember::cuda
