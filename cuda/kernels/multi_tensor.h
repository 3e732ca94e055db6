// Launchers for the multi-tensor kernels (cuda/kernels/multi_tensor.cu): the norm
// of many tensors taken together and their scaling by a device scalar, each over
// up to kMultiTensorSpansPerLaunch tensors per launch (the table travels in the
// kernel's parameters: no host copy, capturable in a CUDA graph), deterministic
// (fixed chunks, partials summed in index order, no atomics).
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "core/base/multi_tensor.h"  // TensorSpan, the norm math

namespace ember::cuda {

inline constexpr int64_t kMultiTensorSpansPerLaunch = 96;

// Bytes of workspace launch_multi_tensor_norm needs for these tensors.
size_t multi_tensor_norm_workspace_bytes(const TensorSpan* tensors, int64_t count);

// total[0] = the norm_type-norm of every element of `tensors` together (core/base/
// multi_tensor.h); clip_coef[0] (when not null) = min(max_norm / (total + 1e-6), 1).
// One launch per kMultiTensorSpansPerLaunch tensors writes one partial per chunk
// into the workspace, then one single-block launch combines them in index order.
void launch_multi_tensor_norm(const TensorSpan* tensors, int64_t count, double norm_type,
                              double* total, double max_norm, double* clip_coef, void* workspace,
                              cudaStream_t stream);

// tensors[i] *= scale[0] for every i; each product in double, rounded to the dtype.
void launch_multi_tensor_scale(const TensorSpan* tensors, int64_t count, const double* scale,
                               cudaStream_t stream);

// dst[i] = tensors[i] (float32) rounded to bfloat16, for every i; one launch per
// kMultiTensorSpansPerLaunch tensors.
void launch_multi_tensor_cast(const TensorSpan* tensors, void* const* dst, int64_t count,
                              cudaStream_t stream);

}  // namespace ember::cuda
