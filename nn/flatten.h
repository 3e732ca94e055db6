// nn::Flatten: merges dims start_dim..end_dim of its input into one (by default
// every dim after the batch dim: (N, C, H, W) -> (N, C*H*W)), as PyTorch's
// nn.Flatten. A view when the input's layout allows, else a copy.
#pragma once

#include <cstdint>
#include <string>

#include "nn/module.h"

namespace ember::nn {

class FlattenOptions {
 public:
  FlattenOptions() = default;
  FlattenOptions& start_dim(int64_t d) {
    start_dim_ = d;
    return *this;
  }
  FlattenOptions& end_dim(int64_t d) {
    end_dim_ = d;
    return *this;
  }
  int64_t start_dim() const { return start_dim_; }
  int64_t end_dim() const { return end_dim_; }

 private:
  int64_t start_dim_ = 1;
  int64_t end_dim_ = -1;
};

class Flatten : public Module {
 public:
  explicit Flatten(const FlattenOptions& options = {}) : options(options) {}
  Tensor forward(const Tensor& x) const;
  std::string extra_repr() const override;

  FlattenOptions options;
};

}  // namespace ember::nn
