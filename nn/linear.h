// nn::Linear: y = x W^T + b through the linear seam op, initialised as PyTorch
// does (kaiming_uniform_ with a = sqrt(5) on W, U(-1/sqrt(in), 1/sqrt(in)) on b).
// An optional activation (ReLU, GELU) is applied by the same op, so on CUDA it
// runs in the GEMM's epilogue: Linear(LinearOptions(n, n).activation(Relu)).
#pragma once

#include <cstdint>
#include <string>

#include "core/ops.h"
#include "nn/module.h"

namespace ember::nn {

class LinearOptions {
 public:
  LinearOptions(int64_t in_features, int64_t out_features)
      : in_features_(in_features), out_features_(out_features) {}
  LinearOptions& bias(bool on) {
    bias_ = on;
    return *this;
  }
  LinearOptions& activation(Activation act) {
    activation_ = act;
    return *this;
  }
  // Where the parameters are made and initialised (as PyTorch's device= factory
  // argument): the same values on every device (ember's RNG is counter-based),
  // without a host copy; on the meta device, without any work.
  LinearOptions& device(Device d) {
    device_ = d;
    return *this;
  }
  int64_t in_features() const { return in_features_; }
  int64_t out_features() const { return out_features_; }
  bool bias() const { return bias_; }
  Activation activation() const { return activation_; }
  Device device() const { return device_; }

 private:
  int64_t in_features_;
  int64_t out_features_;
  bool bias_ = true;
  Activation activation_ = Activation::None;
  Device device_ = kCPU;
};

class Linear : public Module {
 public:
  explicit Linear(const LinearOptions& options);
  Linear(int64_t in_features, int64_t out_features)
      : Linear(LinearOptions(in_features, out_features)) {}

  // x: (..., in_features) -> (..., out_features)
  Tensor forward(const Tensor& x) const;
  // Redraws weight and bias from the default initialisation.
  void reset_parameters();
  std::string extra_repr() const override;

  LinearOptions options;
  Tensor weight;  // (out_features, in_features)
  Tensor bias;    // (out_features), undefined without bias
};

}  // namespace ember::nn
