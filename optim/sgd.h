// optim::SGD: stochastic gradient descent with momentum, dampening, Nesterov
// momentum and L2 weight decay, following PyTorch's update rule exactly:
//   g = grad + wd * p;  buf = g (first step) or momentum * buf + (1 - dampening) * g
//   g = nesterov ? g + momentum * buf : buf;  p -= lr * g
#pragma once

#include <vector>

#include "optim/optimizer.h"

namespace ember::optim {

class SGDOptions : public OptimizerCloneableOptions<SGDOptions> {
 public:
  SGDOptions(double lr) : lr_(lr) {}
  SGDOptions& lr(double v) {
    lr_ = v;
    return *this;
  }
  SGDOptions& momentum(double v) {
    momentum_ = v;
    return *this;
  }
  SGDOptions& dampening(double v) {
    dampening_ = v;
    return *this;
  }
  SGDOptions& nesterov(bool v) {
    nesterov_ = v;
    return *this;
  }
  SGDOptions& weight_decay(double v) {
    weight_decay_ = v;
    return *this;
  }
  double lr() const { return lr_; }
  double momentum() const { return momentum_; }
  double dampening() const { return dampening_; }
  bool nesterov() const { return nesterov_; }
  double weight_decay() const { return weight_decay_; }

  double get_lr() const override { return lr_; }
  // Validated as the constructor validates (a bad value changes nothing).
  void set_lr(double v) override;
  std::vector<std::pair<std::string, double>> fields() const override;
  void set_field(const std::string& name, double value) override;
  void validate() const override;

 private:
  double lr_;
  double momentum_ = 0;
  double dampening_ = 0;
  bool nesterov_ = false;
  double weight_decay_ = 0;
};

class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, const SGDOptions& defaults);
  SGD(std::vector<ParamGroup> groups, const SGDOptions& defaults);
  void step() override;

 protected:
  std::vector<std::string> buffer_names(const OptimizerOptions& options) const override;
  const char* name() const override { return "SGD"; }
};

}  // namespace ember::optim
