#include "optim/optimizer.h"

#include <algorithm>
#include <sstream>

#include "core/alloc_site.h"
#include "core/autograd.h"
#include "core/device_services.h"
#include "core/ops.h"

namespace ember::optim {

// ---------------------------------------------------------------- ParamGroup

ParamGroup::ParamGroup(const ParamGroup& other)
    : params_(other.params_),
      options_(other.options_ ? other.options_->clone() : nullptr),
      initial_lr_(other.initial_lr_),
      has_initial_lr_(other.has_initial_lr_) {}

ParamGroup& ParamGroup::operator=(const ParamGroup& other) {
  if (this != &other) {
    params_ = other.params_;
    options_ = other.options_ ? other.options_->clone() : nullptr;
    initial_lr_ = other.initial_lr_;
    has_initial_lr_ = other.has_initial_lr_;
  }
  return *this;
}

OptimizerOptions& ParamGroup::options() {
  EMBER_CHECK(options_ != nullptr,
              "ParamGroup: the group has no options yet (add it to an "
              "optimizer, which gives it the defaults)");
  return *options_;
}

const OptimizerOptions& ParamGroup::options() const {
  EMBER_CHECK(options_ != nullptr,
              "ParamGroup: the group has no options yet (add it to an "
              "optimizer, which gives it the defaults)");
  return *options_;
}

// ---------------------------------------------------------------- ParamState

Tensor* ParamState::find(const std::string& name) {
  for (auto& [n, t] : buffers)
    if (n == name) return &t;
  return nullptr;
}

Tensor& ParamState::get_or_zeros(const std::string& name, const Tensor& param) {
  if (Tensor* t = find(name)) {
    // The parameter moved (Module::to) after this state was made: follow it.
    if (t->device() != param.device() || t->dtype() != param.dtype())
      *t = t->to(param.device()).to(param.dtype()).contiguous();
    return *t;
  }
  buffers.emplace_back(name, zeros_like(param.detach()));
  return buffers.back().second;
}

// ---------------------------------------------------------------- Optimizer

Optimizer::Optimizer(std::vector<ParamGroup> groups, std::unique_ptr<OptimizerOptions> defaults)
    : defaults_(std::move(defaults)) {
  EMBER_CHECK(defaults_ != nullptr, "Optimizer: default options are null");
  defaults_->validate();
  EMBER_CHECK(!groups.empty(), "Optimizer: got an empty list of parameter groups");
  for (auto& g : groups) add_param_group(std::move(g));
  // PyTorch's words; an empty list is nearly always a model whose submodules or
  // tensors were never registered, which would otherwise train silently not at all.
  EMBER_CHECK(num_parameters() > 0,
              "optimizer got an empty parameter list. If it came from model->parameters(), "
              "the model registered no parameters: register each submodule held as a member "
              "with register_module(\"name\", std::make_shared<...>(...)) and each tensor "
              "with register_parameter(\"name\", tensor)");
}

void Optimizer::add_param_group(ParamGroup group) {
  for (size_t i = 0; i < group.params().size(); ++i) {
    const Tensor& p = group.params()[i];
    EMBER_CHECK(p.defined(), "add_param_group: parameter ", i, " is an undefined tensor");
    EMBER_CHECK(p.is_leaf(), "add_param_group: parameter ", i,
                " is not a leaf tensor (it has a grad_fn); optimizers update leaves only");
    EMBER_CHECK(is_floating(p.dtype()), "add_param_group: parameter ", i, " is ", p.dtype(),
                ", not floating-point");
    for (const ParamGroup& g : groups_)
      for (const Tensor& q : g.params())
        EMBER_CHECK(!q.is_same(p), "add_param_group: parameter ", i,
                    " already appears in another parameter group");
    for (size_t j = 0; j < i; ++j)
      EMBER_CHECK(!group.params()[j].is_same(p), "add_param_group: parameter ", i,
                  " appears twice in the group (also at ", j, ")");
  }
  if (!group.has_options()) group.set_options(defaults_->clone());
  group.options().validate();
  groups_.push_back(std::move(group));
}

void Optimizer::zero_grad(bool set_to_none) {
  NoGradGuard no_grad;
  for (ParamGroup& g : groups_)
    for (const Tensor& p : g.params()) {
      if (!p.grad().defined()) continue;
      if (set_to_none)
        p.set_grad(Tensor());
      else
        p.mutable_grad().zero_();
    }
}

const ParamState* Optimizer::state(const Tensor& param) const {
  auto it = state_.find(param.impl_ptr().get());
  return it == state_.end() ? nullptr : &it->second;
}

ParamState& Optimizer::state_for(const Tensor& param) {
  return state_[param.impl_ptr().get()];
}

void Optimizer::reserve_state(const std::vector<Tensor>& params,
                              const std::vector<std::string>& names, bool step_count) {
  OpSite site("optimizer state");  // names the buffers in snapshots and predictions
  std::vector<std::pair<const TensorImpl*, size_t>> touched;  // buffers held before
  std::vector<const TensorImpl*> created;
  std::vector<std::pair<const TensorImpl*, Tensor>> replaced_steps;  // step tensors before
  try {
    for (const Tensor& p : params) {
      auto [it, inserted] = state_.try_emplace(p.impl_ptr().get());
      if (inserted) created.push_back(it->first);
      touched.emplace_back(it->first, it->second.buffers.size());
      if (is_capturing(p.device())) [[unlikely]]
        for (const std::string& buffer : names) {
          const Tensor* t = it->second.find(buffer);
          EMBER_CHECK(t != nullptr && t->device() == p.device() && t->dtype() == p.dtype(), name(),
                      ".step(): the parameter of shape ", shape_str(p.sizes()), " has no '", buffer,
                      "' state yet, and optimizer state cannot be created "
                      "while a CUDA graph is being captured (cuda::Graph::capture): run a few "
                      "eager steps before capturing");
        }
      for (const std::string& name : names) it->second.get_or_zeros(name, p);
      ParamState& s = it->second;
      if (step_count && !(s.device_step.defined() && s.device_step.device() == p.device())) {
        check_not_capturing(p.device(), name(),
                            "create optimizer state (run a few eager steps before capturing)");
        const int64_t count =
            s.device_step.defined() ? static_cast<int64_t>(s.device_step.item()) : s.step;
        Tensor fresh =
            full({}, static_cast<double>(count), TensorOptions(kInt64).device(p.device()));
        replaced_steps.emplace_back(it->first, s.device_step);
        s.step = count;
        s.device_step = std::move(fresh);
      }
    }
  } catch (...) {
    for (auto& [key, before] : replaced_steps) state_.at(key).device_step = std::move(before);
    for (auto& [key, before] : touched) {
      auto& buffers = state_.at(key).buffers;
      buffers.erase(buffers.begin() + static_cast<std::ptrdiff_t>(before), buffers.end());
    }
    for (const TensorImpl* key : created) state_.erase(key);
    throw;
  }
}

size_t Optimizer::num_parameters() const {
  size_t n = 0;
  for (const ParamGroup& g : groups_) n += g.params().size();
  return n;
}

namespace {

Tensor scalar_f64(double v) {
  return from_vector(std::vector<double>{v}, {}, kFloat64);
}
Tensor scalar_i64(int64_t v) {
  return from_vector(std::vector<double>{static_cast<double>(v)}, {}, kInt64);
}

std::string group_key(size_t g, const std::string& field) {
  return "param_groups." + std::to_string(g) + "." + field;
}
std::string state_key(size_t i, const std::string& field) {
  return "state." + std::to_string(i) + "." + field;
}

}  // namespace

StateDict Optimizer::state_dict() const {
  StateDict sd;
  size_t index = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (const auto& [field, value] : groups_[g].options().fields())
      sd.insert(group_key(g, field), scalar_f64(value));
    std::vector<double> ids;
    for (size_t k = 0; k < groups_[g].params().size(); ++k)
      ids.push_back(static_cast<double>(index + k));
    sd.insert(group_key(g, "params"), from_vector(ids, {static_cast<int64_t>(ids.size())}, kInt64));
    index += groups_[g].params().size();
  }
  index = 0;
  for (const ParamGroup& g : groups_)
    for (const Tensor& p : g.params()) {
      if (const ParamState* s = state(p)) {
        const int64_t step =
            s->device_step.defined() ? static_cast<int64_t>(s->device_step.item()) : s->step;
        sd.insert(state_key(index, "step"), scalar_i64(step));
        for (const auto& [name, buf] : s->buffers) sd.insert(state_key(index, name), buf.detach());
      }
      ++index;
    }
  return sd;
}

void Optimizer::check_state_dict(const StateDict& sd) const {
  std::ostringstream problems;
  int count = 0;
  auto problem = [&](const auto&... parts) {
    ++count;
    problems << "\n  ";
    (problems << ... << parts);
  };
  std::vector<std::string> known;  // every key this optimizer understands
  size_t index = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    // The group's options as they will be after loading (they decide which
    // state buffers are expected, e.g. amsgrad's max_exp_avg_sq).
    std::unique_ptr<OptimizerOptions> next = groups_[g].options().clone();
    for (const auto& [field, value] : groups_[g].options().fields()) {
      known.push_back(group_key(g, field));
      const Tensor* t = sd.find(group_key(g, field));
      if (!t)
        problem("missing key '", group_key(g, field), "'");
      else if (t->numel() != 1)
        problem("'", group_key(g, field), "' is not a scalar");
      else
        next->set_field(field, t->item());
    }
    try {
      next->validate();
    } catch (const Error& e) {
      problem("parameter group ", g, ": ", e.what());
    }
    known.push_back(group_key(g, "params"));
    const Tensor* ids = sd.find(group_key(g, "params"));
    const int64_t n = static_cast<int64_t>(groups_[g].params().size());
    if (!ids)
      problem("missing key '", group_key(g, "params"), "'");
    else if (ids->dim() != 1 || ids->size(0) != n)
      problem("parameter group ", g, " has ", n, " parameters, the state has ",
              ids->dim() == 1 ? ids->size(0) : ids->numel());
    for (const Tensor& p : groups_[g].params()) {
      const std::string step = state_key(index, "step");
      if (sd.contains(step)) {
        known.push_back(step);
        if (sd.at(step).numel() != 1) problem("'", step, "' is not a scalar");
        for (const std::string& b : buffer_names(*next)) {
          const std::string key = state_key(index, b);
          const Tensor* t = sd.find(key);
          if (!t) continue;  // created on demand (e.g. max_exp_avg_sq)
          known.push_back(key);
          if (t->sizes() != p.sizes())
            problem("shape mismatch for '", key, "': state has ", shape_str(t->sizes()),
                    ", parameter has ", shape_str(p.sizes()));
          else if (!is_floating(t->dtype()))
            problem("'", key, "' is ", t->dtype(), ", expected a floating-point tensor");
        }
      }
      ++index;
    }
  }
  for (const auto& [key, t] : sd)
    if (std::find(known.begin(), known.end(), key) == known.end())
      problem("unexpected key '", key, "'");
  EMBER_CHECK(count == 0, "load_state_dict: ", count, " problem", count == 1 ? "" : "s",
              " loading into ", name(), " (nothing was changed):", problems.str());
}

void Optimizer::load_state_dict(const StateDict& sd) {
  check_state_dict(sd);
  NoGradGuard no_grad;
  std::unordered_map<const TensorImpl*, ParamState> fresh;
  size_t index = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    OptimizerOptions& opts = groups_[g].options();
    std::unique_ptr<OptimizerOptions> next = opts.clone();
    for (const auto& [field, value] : opts.fields())
      next->set_field(field, sd.at(group_key(g, field)).item());
    next->validate();
    groups_[g].set_options(std::move(next));
    for (const Tensor& p : groups_[g].params()) {
      if (const Tensor* step = sd.find(state_key(index, "step"))) {
        ParamState s;
        s.step = static_cast<int64_t>(step->item());
        for (const std::string& b : buffer_names(groups_[g].options()))
          if (const Tensor* t = sd.find(state_key(index, b))) {
            Tensor copy = empty_like(p.detach());
            copy.copy_(*t);
            s.buffers.emplace_back(b, copy);
          }
        fresh.emplace(p.impl_ptr().get(), std::move(s));
      }
      ++index;
    }
  }
  state_ = std::move(fresh);
}

// ---------------------------------------------------------------- step targets

namespace detail {

std::vector<Tensor> step_targets(const char* optimizer, const ParamGroup& group) {
  std::vector<Tensor> out;
  for (const Tensor& p : group.params()) {
    const Tensor& g = p.grad();
    if (!g.defined()) continue;
    EMBER_CHECK(p.dtype() == kFloat32 || p.dtype() == kFloat64, optimizer,
                ": parameters must be float32 or float64, got ", p.dtype(), " of shape ",
                shape_str(p.sizes()));
    EMBER_CHECK(g.sizes() == p.sizes() && g.dtype() == p.dtype() && g.device() == p.device(),
                optimizer, ": gradient ", shape_str(g.sizes()), " ", g.dtype(), " on ", g.device(),
                " does not match its parameter ", shape_str(p.sizes()), " ", p.dtype(), " on ",
                p.device());
    EMBER_CHECK(p.is_contiguous() && g.is_contiguous(), optimizer,
                ": parameter and gradient must be contiguous (parameter of shape ",
                shape_str(p.sizes()), ")");
    out.push_back(p);
  }
  return out;
}

}  // namespace detail

}  // namespace ember::optim
