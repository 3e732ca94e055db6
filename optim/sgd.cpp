#include "optim/sgd.h"

#include <algorithm>
#include <cmath>

#include "core/autograd.h"
#include "core/ops/dispatch.h"
#include "cuda/kernels/fused_optim.h"
#include "cuda/runtime.h"

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
  std::vector<detail::StepTargets> all_targets;
  for (ParamGroup& group : param_groups())
    all_targets.push_back(detail::step_targets("SGD", group));
  // A parameter without a momentum buffer yet takes its first step (buf = grad).
  std::vector<const TensorImpl*> first_step;
  for (size_t g = 0; g < all_targets.size(); ++g) {
    std::vector<Tensor> params = all_targets[g].cpu;
    for (const auto& on_device : all_targets[g].cuda)
      params.insert(params.end(), on_device.begin(), on_device.end());
    for (const Tensor& p : params) {
      const ParamState* s = state(p);
      const bool has_buffer =
          s != nullptr && std::any_of(s->buffers.begin(), s->buffers.end(),
                                      [](const auto& b) { return b.first == "momentum_buffer"; });
      if (!has_buffer) first_step.push_back(p.impl_ptr().get());
    }
    reserve_state(params, buffer_names(param_groups()[g].options()));
  }

  for (size_t g = 0; g < all_targets.size(); ++g) {
    const auto& o = static_cast<const SGDOptions&>(param_groups()[g].options());
    const SgdConfig config{o.lr(), o.momentum(), o.dampening(), o.weight_decay(),
                                 o.nesterov()};
    const detail::StepTargets& targets = all_targets[g];

    // Per parameter: its state before the update.
    auto prepare = [&](const Tensor& p, Tensor& buf) {
      ParamState& s = state_for(p);
      const bool first = std::find(first_step.begin(), first_step.end(),
                                   p.impl_ptr().get()) != first_step.end();
      ++s.step;
      if (o.momentum() != 0) buf = s.get_or_zeros("momentum_buffer", p);
      p.bump_version();
      return first;
    };

    for (const Tensor& p : targets.cpu) {
      Tensor buf;
      const bool first = prepare(p, buf);
      ember::detail::dispatch_cpu(p.dtype(), [&](auto tag) {
        using T = decltype(tag);
        if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
          T* pd = p.data_ptr<T>();
          const T* gd = p.grad().data_ptr<T>();
          T* bd = buf.defined() ? buf.data_ptr<T>() : nullptr;
          for (int64_t i = 0; i < p.numel(); ++i) {
            double pv = pd[i], bv = bd ? static_cast<double>(bd[i]) : 0.0;
            sgd_update(config, pv, static_cast<double>(gd[i]), bv, first);
            pd[i] = static_cast<T>(pv);
            if (bd) bd[i] = static_cast<T>(bv);
          }
        }
      });
    }

    for (size_t d = 0; d < targets.cuda.size(); ++d) {
      const std::vector<Tensor>& on_device = targets.cuda[d];
      std::vector<cuda::OptimTensor> table;
      for (const Tensor& p : on_device) {
        Tensor buf;
        cuda::OptimTensor t;
        t.first_step = prepare(p, buf);
        t.param = p.raw_data();
        t.grad = p.grad().raw_data();
        t.state[0] = buf.defined() ? buf.raw_data() : nullptr;
        t.numel = p.numel();
        t.is_double = p.dtype() == kFloat64;
        table.push_back(t);
      }
      const Device dev = on_device.front().device();
      cuda::DeviceGuard guard(dev.index);
      cuda::launch_fused_sgd(table.data(), static_cast<int64_t>(table.size()), config,
                             cuda::current_stream(dev.index));
    }
  }
}

}  // namespace ember::optim
