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

#include "core/base/optim_math.h"  // OptimTensor, SgdConfig, AdamConfig

namespace ember::cuda {

// Tensors per launch: the table must fit the 4 KiB of kernel parameters.
inline constexpr int64_t kFusedOptimTensorsPerLaunch = 32;

void launch_fused_sgd(const OptimTensor* tensors, int64_t count, const SgdConfig& config,
                      cudaStream_t stream);
void launch_fused_adam(const OptimTensor* tensors, int64_t count, const AdamConfig& config,
                       cudaStream_t stream);

}  // namespace ember::cuda
