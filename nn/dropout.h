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

// nn::Dropout2d: zeroes whole channels of (N, C, H, W) or (C, H, W) inputs with
// probability p while training (functional::dropout2d); the identity in eval mode.
using Dropout2dOptions = DropoutOptions;
class Dropout2d : public Module {
 public:
  explicit Dropout2d(const Dropout2dOptions& options = {});
  explicit Dropout2d(double p) : Dropout2d(Dropout2dOptions(p)) {}
  Tensor forward(const Tensor& x) const;
  std::string extra_repr() const override;

  Dropout2dOptions options;
};

}  // namespace ember::nn
