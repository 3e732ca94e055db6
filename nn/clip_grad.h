// nn::utils::clip_grad_norm_, as libtorch's: rescales the gradients of `parameters`
// in place so that their total norm (the norm of all gradient elements taken
// together) is at most max_norm, and returns that total norm as it was before.
//
//   loss.backward();
//   double norm = nn::utils::clip_grad_norm_(model->parameters(), 1.0);
//   optimizer.step();
//
// Parameters without a gradient are skipped (none at all: returns 0). Every
// gradient is multiplied by min(max_norm / (total_norm + 1e-6), 1), computed on
// the device (so a coefficient of 1 also multiplies, as in PyTorch, and nothing
// waits for the GPU until the returned norm is read). norm_type: any p > 0, inf
// (the largest |g|) or 0 (the count of non-zero gradient elements, as
// torch.linalg.vector_norm; libtorch's C++ counts parameters instead). With
// error_if_nonfinite a NaN or infinite total norm throws ember::Error before any
// gradient changes.
//
// On CUDA: the norm is one fused multi-tensor launch over all gradients (per 96
// of them) plus one single-block launch that finishes it, and the scaling one
// fused launch (core/ops.h multi_tensor_norm_clip_coef, multi_tensor_mul_).
// Gradients must all be on one device; float32, float64 or bfloat16.
#pragma once

#include <initializer_list>
#include <vector>

#include "core/tensor.h"

namespace ember::nn::utils {

// The same, returning the total norm as a float64 0-dim tensor on the gradients'
// device without waiting for it (PyTorch's Python clip_grad_norm_ returns a
// tensor too): no host synchronisation, so it runs on the meta device (for
// predict_memory) and inside a cuda::Graph capture. Only error_if_nonfinite
// reads the norm on the host (and so synchronises). No gradients at all: a CPU
// zero.
//
//   Tensor norm = nn::utils::clip_grad_norm_tensor_(model->parameters(), 1.0);
Tensor clip_grad_norm_tensor_(const std::vector<Tensor>& parameters, double max_norm,
                              double norm_type = 2.0, bool error_if_nonfinite = false);

double clip_grad_norm_(const std::vector<Tensor>& parameters, double max_norm,
                       double norm_type = 2.0, bool error_if_nonfinite = false);
double clip_grad_norm_(std::initializer_list<Tensor> parameters, double max_norm,
                       double norm_type = 2.0, bool error_if_nonfinite = false);
double clip_grad_norm_(const Tensor& parameter, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false);

}  // namespace ember::nn::utils
