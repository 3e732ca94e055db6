#include "optim/sgd.h"

#include <algorithm>
#include <cmath>

#include "core/autograd.h"
#include "core/ops.h"

namespace ember::optim {

std::vector<std::pair<std::string, double>> SGDOptions::fields() const {
  return {{"lr", lr_},
          {"momentum", momentum_},
          {"dampening", dampening_},
          {"nesterov", nesterov_ ? 1.0 : 0.0},
          {"weight_decay", weight_decay_}};
}

void SGDOptions::set_field(const std::string& name, double value) {
  if (name == "lr")
    lr_ = value;
  else if (name == "momentum")
    momentum_ = value;
  else if (name == "dampening")
    dampening_ = value;
  else if (name == "nesterov")
    nesterov_ = value != 0.0;
  else if (name == "weight_decay")
    weight_decay_ = value;
  else
    EMBER_FAIL("SGDOptions: no option named '", name, "'");
}

void SGDOptions::set_lr(double v) {
  const double old = lr_;
  lr_ = v;
  try {
    validate();
  } catch (...) {
    lr_ = old;
    throw;
  }
}

void SGDOptions::validate() const {
  EMBER_CHECK(std::isfinite(lr_) && lr_ >= 0, "SGD: learning rate must be >= 0, got ", lr_);
  EMBER_CHECK(std::isfinite(momentum_) && momentum_ >= 0, "SGD: momentum must be >= 0, got ",
              momentum_);
  EMBER_CHECK(std::isfinite(dampening_), "SGD: dampening must be finite, got ", dampening_);
  EMBER_CHECK(std::isfinite(weight_decay_) && weight_decay_ >= 0,
              "SGD: weight_decay must be >= 0, got ", weight_decay_);
  EMBER_CHECK(!nesterov_ || (momentum_ > 0 && dampening_ == 0),
              "SGD: nesterov momentum needs momentum > 0 and dampening = 0 (got momentum ",
              momentum_, ", dampening ", dampening_, ")");
}

SGD::SGD(std::vector<Tensor> params, const SGDOptions& defaults)
    : SGD(std::vector<ParamGroup>{ParamGroup(std::move(params))}, defaults) {}

SGD::SGD(std::vector<ParamGroup> groups, const SGDOptions& defaults)
    : Optimizer(std::move(groups), defaults.clone()) {}

std::vector<std::string> SGD::buffer_names(const OptimizerOptions& options) const {
  const auto& o = static_cast<const SGDOptions&>(options);
  if (o.momentum() == 0) return {};
  return {"momentum_buffer"};
}

void SGD::step() {
  NoGradGuard no_grad;
  // As Adam::step: checks and momentum buffers for every group first, so a step
  // that throws leaves the model and the optimizer as they were. Capturable in a
  // CUDA graph once the momentum buffers exist (lr and the options are baked in).
  std::vector<std::vector<Tensor>> all_targets;
  for (ParamGroup& group : param_groups())
    all_targets.push_back(detail::step_targets("SGD", group));
  // A parameter without a momentum buffer yet takes its first step (buf = grad).
  std::vector<const TensorImpl*> first_step;
  for (size_t g = 0; g < all_targets.size(); ++g) {
    for (const Tensor& p : all_targets[g]) {
      const ParamState* s = state(p);
      const bool has_buffer =
          s != nullptr && std::any_of(s->buffers.begin(), s->buffers.end(),
                                      [](const auto& b) { return b.first == "momentum_buffer"; });
      if (!has_buffer) first_step.push_back(p.impl_ptr().get());
    }
    reserve_state(all_targets[g], buffer_names(param_groups()[g].options()));
  }

  for (size_t g = 0; g < all_targets.size(); ++g) {
    const auto& o = static_cast<const SGDOptions&>(param_groups()[g].options());
    const SgdConfig config{o.lr(), o.momentum(), o.dampening(), o.weight_decay(), o.nesterov()};
    const std::vector<Tensor>& params = all_targets[g];
    std::vector<Tensor> grads, buffers;
    std::vector<bool> first;
    for (const Tensor& p : params) {
      ParamState& s = state_for(p);
      ++s.step;
      grads.push_back(p.grad());
      buffers.push_back(o.momentum() != 0 ? s.get_or_zeros("momentum_buffer", p) : Tensor());
      first.push_back(std::find(first_step.begin(), first_step.end(), p.impl_ptr().get()) !=
                      first_step.end());
    }
    fused_sgd_(params, grads, buffers, first, config);
  }
}

}  // namespace ember::optim
