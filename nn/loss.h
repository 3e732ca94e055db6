// Loss modules. MSELoss goes through the mse_loss seam op (core/ops.h), where the
// fused CUDA loss+gradient kernel plugs in.
#pragma once

#include <string>

#include "core/ops.h"
#include "nn/module.h"

namespace ember::nn {

class MSELossOptions {
 public:
  MSELossOptions(Reduction r = Reduction::Mean) : reduction_(r) {}
  MSELossOptions& reduction(Reduction r) {
    reduction_ = r;
    return *this;
  }
  Reduction reduction() const { return reduction_; }

 private:
  Reduction reduction_;
};

class MSELoss : public Module {
 public:
  explicit MSELoss(const MSELossOptions& options = {}) : options(options) {}
  Tensor forward(const Tensor& pred, const Tensor& target) const {
    return mse_loss(pred, target, options.reduction());
  }
  std::string extra_repr() const override;

  MSELossOptions options;
};

}  // namespace ember::nn
