// nn::functional: the stateless forms of the layers. linear and mse_loss call the
// seam ops of core/ops.h (where the custom CUDA kernels plug in); dropout draws
// its mask from ember's seedable generator.
#pragma once

#include "core/ops.h"

namespace ember::nn::functional {

// y = x w^T + b; x: (..., in), w: (out, in), b: (out) or undefined.
inline Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b = Tensor()) {
  return ember::linear(x, w, b);
}
inline Tensor mse_loss(const Tensor& pred, const Tensor& target,
                       Reduction reduction = Reduction::Mean) {
  return ember::mse_loss(pred, target, reduction);
}
inline Tensor relu(const Tensor& x) {
  return ember::relu(x);
}
inline Tensor gelu(const Tensor& x) {
  return ember::gelu(x);
}
inline Tensor tanh(const Tensor& x) {
  return ember::tanh(x);
}
inline Tensor sigmoid(const Tensor& x) {
  return ember::sigmoid(x);
}
// Zeroes each element with probability p and scales the rest by 1 / (1 - p)
// ("inverted" dropout, so eval needs no rescaling). Identity when !training.
Tensor dropout(const Tensor& x, double p = 0.5, bool training = true, Generator* gen = nullptr);

}  // namespace ember::nn::functional
