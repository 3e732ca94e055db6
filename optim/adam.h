// optim::Adam and optim::AdamW, with PyTorch's update rules exactly. Per
// parameter, at its step t:
//   Adam:  g += wd * p            AdamW: p *= 1 - lr * wd   (decoupled decay)
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;  v_max = max(v_max, v) (amsgrad)
//   p -= lr / (1 - b1^t) * m / (sqrt(v or v_max) / sqrt(1 - b2^t) + eps)
#pragma once

#include <tuple>
#include <vector>

#include "core/base/optim_math.h"
#include "optim/optimizer.h"

namespace ember::optim {

// What Adam's update reads from a group's options, whichever options type the
// group carries (AdamOptions or AdamWOptions).
class AdamConfigSource {
 public:
  virtual ~AdamConfigSource() = default;
  virtual AdamConfig adam_config() const = 0;
};

// Options shared by Adam and AdamW; AdamW's defaults differ in weight_decay only.
template <typename Derived>
class AdamOptionsBase : public OptimizerCloneableOptions<Derived>, public AdamConfigSource {
 public:
  Derived& lr(double v) {
    lr_ = v;
    return self();
  }
  Derived& betas(const std::tuple<double, double>& v) {
    betas_ = v;
    return self();
  }
  Derived& eps(double v) {
    eps_ = v;
    return self();
  }
  Derived& weight_decay(double v) {
    weight_decay_ = v;
    return self();
  }
  Derived& amsgrad(bool v) {
    amsgrad_ = v;
    return self();
  }
  double lr() const { return lr_; }
  const std::tuple<double, double>& betas() const { return betas_; }
  double eps() const { return eps_; }
  double weight_decay() const { return weight_decay_; }
  bool amsgrad() const { return amsgrad_; }

  double get_lr() const override { return lr_; }
  // Validated as the constructor validates (a bad value changes nothing).
  void set_lr(double v) override {
    const double old = lr_;
    lr_ = v;
    try {
      validate();
    } catch (...) {
      lr_ = old;
      throw;
    }
  }
  std::vector<std::pair<std::string, double>> fields() const override {
    return {{"lr", lr_},   {"beta1", std::get<0>(betas_)},  {"beta2", std::get<1>(betas_)},
            {"eps", eps_}, {"weight_decay", weight_decay_}, {"amsgrad", amsgrad_ ? 1.0 : 0.0}};
  }
  void set_field(const std::string& name, double value) override;
  void validate() const override;
  AdamConfig adam_config() const override {
    AdamConfig c;
    c.lr = lr_;
    c.beta1 = std::get<0>(betas_);
    c.beta2 = std::get<1>(betas_);
    c.eps = eps_;
    c.weight_decay = weight_decay_;
    c.amsgrad = amsgrad_;
    return c;
  }

 protected:
  AdamOptionsBase(double lr, double weight_decay) : lr_(lr), weight_decay_(weight_decay) {}
  virtual const char* optimizer_name() const = 0;

 private:
  Derived& self() { return static_cast<Derived&>(*this); }
  double lr_;
  std::tuple<double, double> betas_{0.9, 0.999};
  double eps_ = 1e-8;
  double weight_decay_;
  bool amsgrad_ = false;
};

class AdamOptions : public AdamOptionsBase<AdamOptions> {
 public:
  AdamOptions(double lr = 1e-3) : AdamOptionsBase(lr, 0.0) {}

 protected:
  const char* optimizer_name() const override { return "Adam"; }
};

class AdamWOptions : public AdamOptionsBase<AdamWOptions> {
 public:
  AdamWOptions(double lr = 1e-3) : AdamOptionsBase(lr, 1e-2) {}

 protected:
  const char* optimizer_name() const override { return "AdamW"; }
};

class Adam : public Optimizer {
 public:
  Adam(std::vector<Tensor> params, const AdamOptions& defaults = {});
  Adam(std::vector<ParamGroup> groups, const AdamOptions& defaults = {});
  void step() override;

 protected:
  Adam(std::vector<ParamGroup> groups, std::unique_ptr<OptimizerOptions> defaults, bool decoupled);
  std::vector<std::string> buffer_names(const OptimizerOptions& options) const override;
  const char* name() const override { return decoupled_ ? "AdamW" : "Adam"; }

 private:
  bool decoupled_ = false;
};

// Adam with decoupled weight decay (Loshchilov & Hutter).
class AdamW : public Adam {
 public:
  AdamW(std::vector<Tensor> params, const AdamWOptions& defaults = {});
  AdamW(std::vector<ParamGroup> groups, const AdamWOptions& defaults = {});
};

}  // namespace ember::optim
