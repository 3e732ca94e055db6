#include "optim/adam.h"

#include <cmath>

#include "core/autograd.h"
#include "core/ops.h"

namespace ember::optim {

template <typename Derived>
void AdamOptionsBase<Derived>::set_field(const std::string& name, double value) {
  if (name == "lr")
    lr_ = value;
  else if (name == "beta1")
    std::get<0>(betas_) = value;
  else if (name == "beta2")
    std::get<1>(betas_) = value;
  else if (name == "eps")
    eps_ = value;
  else if (name == "weight_decay")
    weight_decay_ = value;
  else if (name == "amsgrad")
    amsgrad_ = value != 0.0;
  else
    EMBER_FAIL(optimizer_name(), "Options: no option named '", name, "'");
}

template <typename Derived>
void AdamOptionsBase<Derived>::validate() const {
  const char* who = optimizer_name();
  const auto [b1, b2] = betas_;
  EMBER_CHECK(std::isfinite(lr_) && lr_ >= 0, who, ": learning rate must be >= 0, got ", lr_);
  EMBER_CHECK(std::isfinite(eps_) && eps_ >= 0, who, ": eps must be >= 0, got ", eps_);
  EMBER_CHECK(b1 >= 0 && b1 < 1, who, ": beta1 must be in [0, 1), got ", b1);
  EMBER_CHECK(b2 >= 0 && b2 < 1, who, ": beta2 must be in [0, 1), got ", b2);
  EMBER_CHECK(std::isfinite(weight_decay_) && weight_decay_ >= 0, who,
              ": weight_decay must be >= 0, got ", weight_decay_);
}

template class AdamOptionsBase<AdamOptions>;
template class AdamOptionsBase<AdamWOptions>;

Adam::Adam(std::vector<Tensor> params, const AdamOptions& defaults)
    : Adam(std::vector<ParamGroup>{ParamGroup(std::move(params))}, defaults) {}

Adam::Adam(std::vector<ParamGroup> groups, const AdamOptions& defaults)
    : Adam(std::move(groups), defaults.clone(), false) {}

Adam::Adam(std::vector<ParamGroup> groups, std::unique_ptr<OptimizerOptions> defaults,
           bool decoupled)
    : Optimizer(std::move(groups), std::move(defaults)), decoupled_(decoupled) {}

AdamW::AdamW(std::vector<Tensor> params, const AdamWOptions& defaults)
    : AdamW(std::vector<ParamGroup>{ParamGroup(std::move(params))}, defaults) {}

AdamW::AdamW(std::vector<ParamGroup> groups, const AdamWOptions& defaults)
    : Adam(std::move(groups), defaults.clone(), true) {}

namespace {

// The options of a group as the update rule wants them; groups may carry either
// options type (both are AdamConfigSources).
AdamConfig config_of(const OptimizerOptions& options, bool decoupled) {
  const auto* source = dynamic_cast<const AdamConfigSource*>(&options);
  EMBER_CHECK(source != nullptr, decoupled ? "AdamW" : "Adam",
              ": a parameter group carries options of another optimizer");
  AdamConfig c = source->adam_config();
  c.decoupled_weight_decay = decoupled;
  return c;
}

}  // namespace

std::vector<std::string> Adam::buffer_names(const OptimizerOptions& options) const {
  if (config_of(options, decoupled_).amsgrad) return {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  return {"exp_avg", "exp_avg_sq"};
}

void Adam::step() {
  NoGradGuard no_grad;
  // Everything that can fail (checks, state buffers, step counts) happens for
  // every group before any parameter or step count changes: a step that throws
  // (out of memory, say) leaves the model and the optimizer as they were. Nothing
  // here reads device memory, so a step can be captured in a CUDA graph once its
  // state exists; lr and the other options are then baked into the graph
  // (re-capture after changing them).
  std::vector<std::vector<Tensor>> all_targets;
  for (ParamGroup& group : param_groups())
    all_targets.push_back(detail::step_targets(name(), group));
  for (size_t g = 0; g < all_targets.size(); ++g)
    reserve_state(all_targets[g], buffer_names(param_groups()[g].options()), /*step_count=*/true);

  for (size_t g = 0; g < all_targets.size(); ++g) {
    const AdamConfig config = config_of(param_groups()[g].options(), decoupled_);
    const std::vector<Tensor>& params = all_targets[g];
    std::vector<Tensor> grads, m, v, v_max, steps;
    for (const Tensor& p : params) {
      ParamState& s = state_for(p);
      ++s.step;
      grads.push_back(p.grad());
      m.push_back(s.get_or_zeros("exp_avg", p));
      v.push_back(s.get_or_zeros("exp_avg_sq", p));
      if (config.amsgrad) v_max.push_back(s.get_or_zeros("max_exp_avg_sq", p));
      steps.push_back(s.device_step);
    }
    fused_adam_(params, grads, m, v, v_max, steps, config);
  }
}

}  // namespace ember::optim
