// Activation layers: parameter-free modules over the element-wise ops, so they
// can sit in a Sequential and print in a model's repr.
#pragma once

#include <string>

#include "core/ops.h"
#include "nn/module.h"

namespace ember::nn {

class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) const { return relu(x); }
};

// GELU with the tanh approximation (PyTorch's approximate="tanh").
class GELU : public Module {
 public:
  Tensor forward(const Tensor& x) const { return gelu(x); }
  std::string extra_repr() const override { return "approximate='tanh'"; }
};

class Tanh : public Module {
 public:
  Tensor forward(const Tensor& x) const { return tanh(x); }
};

class Sigmoid : public Module {
 public:
  Tensor forward(const Tensor& x) const { return sigmoid(x); }
};

}  // namespace ember::nn
