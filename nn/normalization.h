// nn::LayerNorm: normalises the trailing dims normalized_shape of its input to
// zero mean and unit (biased) variance, then applies a learned elementwise affine
// transform (weight ones, bias zeros at first), as torch.nn.LayerNorm. On CUDA
// one fused kernel per direction (core/ops.h, layer_norm). An input whose
// trailing dims are not normalized_shape is an ember::Error naming both shapes.
#pragma once

#include <string>

#include "core/ops.h"
#include "nn/module.h"

namespace ember::nn {

class LayerNormOptions {
 public:
  LayerNormOptions(Shape normalized_shape) : normalized_shape_(std::move(normalized_shape)) {}
  LayerNormOptions& eps(double e) {
    eps_ = e;
    return *this;
  }
  LayerNormOptions& elementwise_affine(bool on) {
    elementwise_affine_ = on;
    return *this;
  }
  // With elementwise_affine: whether there is a bias (PyTorch's `bias=`).
  LayerNormOptions& bias(bool on) {
    bias_ = on;
    return *this;
  }
  const Shape& normalized_shape() const { return normalized_shape_; }
  double eps() const { return eps_; }
  bool elementwise_affine() const { return elementwise_affine_; }
  bool bias() const { return bias_; }

 private:
  Shape normalized_shape_;
  double eps_ = 1e-5;
  bool elementwise_affine_ = true;
  bool bias_ = true;
};

class LayerNorm : public Module {
 public:
  explicit LayerNorm(const LayerNormOptions& options);

  Tensor forward(const Tensor& x) const;
  // Weight back to ones, bias to zeros.
  void reset_parameters();
  std::string extra_repr() const override;

  LayerNormOptions options;
  Tensor weight;  // normalized_shape, undefined without elementwise_affine
  Tensor bias;    // normalized_shape, undefined without it
};

}  // namespace ember::nn
