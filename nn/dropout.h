// nn::Dropout: zeroes elements with probability p while training (scaling the
// rest by 1/(1-p)); the identity in eval mode.
#pragma once

#include <string>

#include "nn/module.h"

namespace ember::nn {

class DropoutOptions {
 public:
  DropoutOptions(double p = 0.5) : p_(p) {}
  DropoutOptions& p(double v) {
    p_ = v;
    return *this;
  }
  double p() const { return p_; }

 private:
  double p_;
};

class Dropout : public Module {
 public:
  explicit Dropout(const DropoutOptions& options = {});
  explicit Dropout(double p) : Dropout(DropoutOptions(p)) {}
  Tensor forward(const Tensor& x) const;
  std::string extra_repr() const override;

  DropoutOptions options;
};

}  // namespace ember::nn
