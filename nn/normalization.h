// nn::LayerNorm: normalises the trailing dims normalized_shape of its input to
// zero mean and unit (biased) variance, then applies a learned elementwise affine
// transform (weight ones, bias zeros at first), as torch.nn.LayerNorm. nn::RMSNorm:
// divides by the root mean square over those dims and scales by a learned weight
// (ones at first), as torch.nn.RMSNorm. On CUDA one fused kernel per direction
// (core/ops.h, layer_norm and rms_norm). An input whose trailing dims are not
// normalized_shape is an ember::Error naming both shapes.
#pragma once

#include <optional>
#include <string>
#include <utility>

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
  // Under autocast (where it applies), return the result in the autocast dtype
  // rather than float32 (PyTorch's autocast keeps layer_norm in float32). It is still
  // computed in float32 and rounded once, so a following Linear, which would cast it
  // to the autocast dtype, reads the same values. The fused kernels write it that way
  // and read its bfloat16 gradient, with no cast pass either way. Off by default.
  LayerNormOptions& autocast_output(bool on) {
    autocast_output_ = on;
    return *this;
  }
  const Shape& normalized_shape() const { return normalized_shape_; }
  double eps() const { return eps_; }
  bool elementwise_affine() const { return elementwise_affine_; }
  bool bias() const { return bias_; }
  bool autocast_output() const { return autocast_output_; }

 private:
  Shape normalized_shape_;
  double eps_ = 1e-5;
  bool elementwise_affine_ = true;
  bool bias_ = true;
  bool autocast_output_ = false;
};

class LayerNorm : public Module {
 public:
  explicit LayerNorm(const LayerNormOptions& options);

  Tensor forward(const Tensor& x) const;
  // {x + residual, forward(x + residual)} (core/ops.h, add_layer_norm): a pre-norm
  // transformer's residual add and this norm in one pass where the fused kernels run.
  // dropout > 0: the residual goes through dropout(residual, dropout, is_training())
  // first (dropout_add_layer_norm: the mask drawn inside the same pass).
  std::pair<Tensor, Tensor> forward_residual(const Tensor& x, const Tensor& residual,
                                             double dropout = 0.0) const;
  // Weight back to ones, bias to zeros.
  void reset_parameters();
  std::string extra_repr() const override;

  LayerNormOptions options;
  Tensor weight;  // normalized_shape, undefined without elementwise_affine
  Tensor bias;    // normalized_shape, undefined without it
};

// As libtorch's RMSNormOptions: eps unset means the machine epsilon of the type
// the op computes in (core/ops.h, rms_norm).
class RMSNormOptions {
 public:
  RMSNormOptions(Shape normalized_shape) : normalized_shape_(std::move(normalized_shape)) {}
  RMSNormOptions& eps(std::optional<double> e) {
    eps_ = e;
    return *this;
  }
  RMSNormOptions& elementwise_affine(bool on) {
    elementwise_affine_ = on;
    return *this;
  }
  const Shape& normalized_shape() const { return normalized_shape_; }
  std::optional<double> eps() const { return eps_; }
  bool elementwise_affine() const { return elementwise_affine_; }

 private:
  Shape normalized_shape_;
  std::optional<double> eps_;
  bool elementwise_affine_ = true;
};

class RMSNorm : public Module {
 public:
  explicit RMSNorm(const RMSNormOptions& options);

  Tensor forward(const Tensor& x) const;
  // Weight back to ones.
  void reset_parameters();
  std::string extra_repr() const override;

  RMSNormOptions options;
  Tensor weight;  // normalized_shape, undefined without elementwise_affine
};

}  // namespace ember::nn
