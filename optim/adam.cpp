#include "optim/adam.h"

#include <cmath>

#include "core/autograd.h"
#include "core/ops/dispatch.h"
#include "cuda/kernels/fused_optim.h"
#include "cuda/runtime.h"

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
// options type (both name the same fields).
AdamConfig config_of(const OptimizerOptions& options, bool decoupled) {
  AdamConfig c;
  for (const auto& [name, value] : options.fields()) {
    if (name == "lr")
      c.lr = value;
    else if (name == "beta1")
      c.beta1 = value;
    else if (name == "beta2")
      c.beta2 = value;
    else if (name == "eps")
      c.eps = value;
    else if (name == "weight_decay")
      c.weight_decay = value;
    else if (name == "amsgrad")
      c.amsgrad = value != 0.0;
  }
  c.decoupled_weight_decay = decoupled;
  return c;
}

// Gives a CUDA parameter its step count in device memory (from the host count,
// on its first CUDA step or after it moved device), and a CPU parameter back its
// host count: the fused kernel advances the device one, graph replays included.
void place_step_count(ParamState& s, const Tensor& p, const char* who) {
  if (p.is_cuda()) {
    if (s.device_step.defined() && s.device_step.device() == p.device()) return;
    cuda::check_not_capturing(p.device().index, who,
                              "create optimizer state (run a few eager steps before capturing)");
    if (s.device_step.defined()) s.step = static_cast<int64_t>(s.device_step.item());
    s.device_step = full({}, static_cast<double>(s.step), TensorOptions(kInt64).device(p.device()));
  } else if (s.device_step.defined()) {
    s.step = static_cast<int64_t>(s.device_step.item());
    s.device_step = Tensor();
  }
}

}  // namespace

std::vector<std::string> Adam::buffer_names(const OptimizerOptions& options) const {
  if (config_of(options, decoupled_).amsgrad) return {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  return {"exp_avg", "exp_avg_sq"};
}

void Adam::step() {
  NoGradGuard no_grad;
  // Everything that can fail (checks, state buffers, device step counts) happens
  // for every group before any parameter or step count changes: a step that
  // throws (out of memory, say) leaves the model and the optimizer as they were.
  // On CUDA nothing here reads device memory, so a step can be captured in a CUDA
  // graph once its state exists; lr and the other options are then baked into
  // the graph (re-capture after changing them).
  std::vector<detail::StepTargets> all_targets;
  for (ParamGroup& group : param_groups())
    all_targets.push_back(detail::step_targets(name(), group));
  for (size_t g = 0; g < all_targets.size(); ++g) {
    std::vector<Tensor> params = all_targets[g].cpu;
    for (const auto& on_device : all_targets[g].cuda)
      params.insert(params.end(), on_device.begin(), on_device.end());
    reserve_state(params, buffer_names(param_groups()[g].options()));
    for (const Tensor& p : params)
      place_step_count(state_for(p), p, decoupled_ ? "AdamW.step()" : "Adam.step()");
  }

  for (size_t g = 0; g < all_targets.size(); ++g) {
    const AdamConfig config = config_of(param_groups()[g].options(), decoupled_);
    const detail::StepTargets& targets = all_targets[g];

    // Advances p's step and fills t with its state and bias corrections.
    auto prepare = [&](const Tensor& p, cuda::OptimTensor& t) {
      ParamState& s = state_for(p);
      ++s.step;
      Tensor m = s.get_or_zeros("exp_avg", p);
      Tensor v = s.get_or_zeros("exp_avg_sq", p);
      Tensor v_max = config.amsgrad ? s.get_or_zeros("max_exp_avg_sq", p) : Tensor();
      const double t_step = static_cast<double>(s.step);
      t.param = p.raw_data();
      t.grad = p.grad().raw_data();
      t.state[0] = m.raw_data();
      t.state[1] = v.raw_data();
      t.state[2] = v_max.defined() ? v_max.raw_data() : nullptr;
      t.numel = p.numel();
      t.is_double = p.dtype() == kFloat64;
      if (p.is_cuda())
        t.step = static_cast<int64_t*>(s.device_step.raw_data());  // the kernel advances it
      else
        adam_bias_corrections(config, t_step, t.step_size, t.bias_correction2_sqrt);
      p.bump_version();
    };

    for (const Tensor& p : targets.cpu) {
      cuda::OptimTensor t;
      prepare(p, t);
      ember::detail::dispatch_cpu(p.dtype(), [&](auto tag) {
        using T = decltype(tag);
        if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
          T* pd = static_cast<T*>(t.param);
          const T* gd = static_cast<const T*>(t.grad);
          T* md = static_cast<T*>(t.state[0]);
          T* vd = static_cast<T*>(t.state[1]);
          T* vmd = static_cast<T*>(t.state[2]);
          for (int64_t i = 0; i < t.numel; ++i) {
            double pv = pd[i], mv = md[i], vv = vd[i];
            double vm = vmd ? static_cast<double>(vmd[i]) : 0.0;
            adam_update(config, pv, static_cast<double>(gd[i]), mv, vv, vm, t.step_size,
                              t.bias_correction2_sqrt);
            pd[i] = static_cast<T>(pv);
            md[i] = static_cast<T>(mv);
            vd[i] = static_cast<T>(vv);
            if (vmd) vmd[i] = static_cast<T>(vm);
          }
        }
      });
    }

    for (size_t d = 0; d < targets.cuda.size(); ++d) {
      const std::vector<Tensor>& on_device = targets.cuda[d];
      std::vector<cuda::OptimTensor> table(on_device.size());
      for (size_t k = 0; k < on_device.size(); ++k) prepare(on_device[k], table[k]);
      const Device dev = on_device.front().device();
      cuda::DeviceGuard guard(dev.index);
      cuda::launch_fused_adam(table.data(), static_cast<int64_t>(table.size()), config,
                              cuda::current_stream(dev.index));
    }
  }
}

}  // namespace ember::optim
