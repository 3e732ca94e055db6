// Activation layers: parameter-free modules over the element-wise ops (and
// softmax), so they can sit in a Sequential and print in a model's repr.
#pragma once

#include <cstdint>
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

// Options of Softmax and LogSoftmax: the dim to normalise over.
class SoftmaxOptions {
 public:
  SoftmaxOptions(int64_t dim) : dim_(dim) {}
  SoftmaxOptions& dim(int64_t d) {
    dim_ = d;
    return *this;
  }
  int64_t dim() const { return dim_; }

 private:
  int64_t dim_;
};
using LogSoftmaxOptions = SoftmaxOptions;

class Softmax : public Module {
 public:
  explicit Softmax(const SoftmaxOptions& options) : options(options) {}
  explicit Softmax(int64_t dim) : options(dim) {}
  Tensor forward(const Tensor& x) const { return softmax(x, options.dim()); }
  std::string extra_repr() const override { return "dim=" + std::to_string(options.dim()); }

  SoftmaxOptions options;
};

class LogSoftmax : public Module {
 public:
  explicit LogSoftmax(const LogSoftmaxOptions& options) : options(options) {}
  explicit LogSoftmax(int64_t dim) : options(dim) {}
  Tensor forward(const Tensor& x) const { return log_softmax(x, options.dim()); }
  std::string extra_repr() const override { return "dim=" + std::to_string(options.dim()); }

  LogSoftmaxOptions options;
};

}  // namespace ember::nn
