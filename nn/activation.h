// Activation layers: parameter-free modules over the element-wise ops (and
// softmax), so they can sit in a Sequential and print in a model's repr.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "core/ops.h"
#include "nn/module.h"

namespace ember::nn {

class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) const { return relu(x); }
};

// Options of GELU (and F::gelu), as libtorch's GELUOptions: approximate "none"
// (exact, x Phi(x); the default) or "tanh" (the tanh approximation).
class GELUOptions {
 public:
  GELUOptions() = default;
  GELUOptions& approximate(std::string a) {
    check_approximate(a);
    approximate_ = std::move(a);
    return *this;
  }
  const std::string& approximate() const { return approximate_; }

 private:
  static void check_approximate(const std::string& a) {
    EMBER_CHECK(a == "none" || a == "tanh",
                "GELUOptions: approximate must be \"none\" or \"tanh\", got \"", a, "\"");
  }
  std::string approximate_ = "none";
};

// GELU, exact by default (PyTorch's nn.GELU()); GELUOptions().approximate("tanh")
// for the tanh form. Its repr is PyTorch's: GELU(approximate='none').
class GELU : public Module {
 public:
  explicit GELU(GELUOptions options = {}) : options(std::move(options)) {}
  Tensor forward(const Tensor& x) const { return gelu(x, options.approximate()); }
  std::string extra_repr() const override { return "approximate='" + options.approximate() + "'"; }

  GELUOptions options;
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
