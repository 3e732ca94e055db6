// optim::Optimizer: parameter groups, each with its own options, per-parameter
// state (step count and named buffers such as "exp_avg"), zero_grad and step,
// and the whole state as a flat StateDict:
//   param_groups.<g>.<option>   float64 scalar (bools as 0/1)
//   param_groups.<g>.params     int64 indices of the group's parameters
//   state.<i>.step              int64 scalar, i = index over all groups' params
//   state.<i>.<buffer>          tensor shaped like parameter i
#pragma once

#include <concepts>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/state_dict.h"
#include "core/tensor.h"

namespace ember::optim {

// Options of one parameter group. Each optimizer's options class derives from
// this (through OptimizerCloneableOptions) and names its fields for state_dict.
class OptimizerOptions {
 public:
  virtual ~OptimizerOptions() = default;
  virtual std::unique_ptr<OptimizerOptions> clone() const = 0;
  virtual double get_lr() const = 0;
  virtual void set_lr(double lr) = 0;
  // Every option as (name, value), bools as 0/1, in a fixed order.
  virtual std::vector<std::pair<std::string, double>> fields() const = 0;
  // Sets the option `name`; throws for a name fields() does not list.
  virtual void set_field(const std::string& name, double value) = 0;
  // Throws ember::Error naming the optimizer and the bad option.
  virtual void validate() const = 0;
};

template <typename Derived>
class OptimizerCloneableOptions : public OptimizerOptions {
 public:
  std::unique_ptr<OptimizerOptions> clone() const override {
    return std::make_unique<Derived>(static_cast<const Derived&>(*this));
  }
};

// A set of parameters sharing options. Without options it takes the optimizer's
// defaults when added.
class ParamGroup {
 public:
  ParamGroup(std::vector<Tensor> params) : params_(std::move(params)) {}
  ParamGroup(std::vector<Tensor> params, std::unique_ptr<OptimizerOptions> options)
      : params_(std::move(params)), options_(std::move(options)) {}
  template <typename O>
  requires std::derived_from<O, OptimizerOptions> ParamGroup(std::vector<Tensor> params,
                                                             const O& options)
      : params_(std::move(params)), options_(options.clone()) {}
  ParamGroup(const ParamGroup& other);
  ParamGroup& operator=(const ParamGroup& other);
  ParamGroup(ParamGroup&&) = default;
  ParamGroup& operator=(ParamGroup&&) = default;

  std::vector<Tensor>& params() { return params_; }
  const std::vector<Tensor>& params() const { return params_; }
  bool has_options() const { return options_ != nullptr; }
  // The group's learning rate before any scheduler changed it (PyTorch's
  // "initial_lr"): recorded by the first LRScheduler built on the optimizer, read
  // by later ones, so schedulers built one after another share their base.
  bool has_initial_lr() const { return has_initial_lr_; }
  double initial_lr() const { return initial_lr_; }
  void set_initial_lr(double lr) {
    initial_lr_ = lr;
    has_initial_lr_ = true;
  }
  OptimizerOptions& options();
  const OptimizerOptions& options() const;
  void set_options(std::unique_ptr<OptimizerOptions> options) { options_ = std::move(options); }

 private:
  std::vector<Tensor> params_;
  std::unique_ptr<OptimizerOptions> options_;
  double initial_lr_ = 0;
  bool has_initial_lr_ = false;
};
using OptimizerParamGroup = ParamGroup;

// What an optimizer keeps per parameter.
struct ParamState {
  int64_t step = 0;
  // Adam: the step count as an int64 scalar on the parameter's device (the
  // state_steps of fused_adam_), advanced by the update itself, so that a
  // replayed CUDA graph (cuda/graph.h) counts its steps. When defined it is the
  // true count (state_dict() reads it); `step` then counts only the host's calls
  // of step().
  Tensor device_step;
  std::vector<std::pair<std::string, Tensor>> buffers;
  // The buffer `name`, or null.
  Tensor* find(const std::string& name);
  // The buffer `name`, created as zeros like `param` if absent, and moved to the
  // parameter's device and dtype if the parameter has moved since.
  Tensor& get_or_zeros(const std::string& name, const Tensor& param);
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // Applies one update to every parameter that has a gradient.
  virtual void step() = 0;
  // Drops (set_to_none) or zeroes the gradients of all parameters.
  void zero_grad(bool set_to_none = true);
  // Adds a group; options default to a copy of the optimizer's defaults.
  void add_param_group(ParamGroup group);

  std::vector<ParamGroup>& param_groups() { return groups_; }
  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  const OptimizerOptions& defaults() const { return *defaults_; }
  // State of `param` (null before its first step).
  const ParamState* state(const Tensor& param) const;
  size_t num_parameters() const;

  // The state as a flat StateDict (layout above); tensors alias the live state.
  StateDict state_dict() const;
  // Throws ember::Error saying what does not match (group count, parameter count,
  // buffer shapes, unknown option) before changing anything; then replaces the
  // options and the state with copies on each parameter's device and dtype.
  void load_state_dict(const StateDict& state);
  void check_state_dict(const StateDict& state) const;

 protected:
  Optimizer(std::vector<ParamGroup> groups, std::unique_ptr<OptimizerOptions> defaults);
  // The state of `param`, created empty on first use.
  ParamState& state_for(const Tensor& param);
  // Makes every buffer in `names` for every parameter in `params` (as zeros)
  // before a step changes anything, all or nothing: if an allocation fails
  // (out of memory), what this call made is dropped and the error rethrown, so
  // the optimizer is exactly as it was. While a CUDA graph is being captured it
  // creates nothing (a replay would zero the state again): a missing buffer then
  // throws ember::Error asking for eager warm-up steps before the capture. With
  // step_count, each parameter also gets its step count as a tensor on its device
  // (ParamState::device_step), all or nothing with the buffers.
  void reserve_state(const std::vector<Tensor>& params, const std::vector<std::string>& names,
                     bool step_count = false);
  // The names of the buffers this optimizer keeps for a parameter with these options.
  virtual std::vector<std::string> buffer_names(const OptimizerOptions& options) const = 0;
  virtual const char* name() const = 0;

 private:
  std::vector<ParamGroup> groups_;
  std::unique_ptr<OptimizerOptions> defaults_;
  std::unordered_map<const TensorImpl*, ParamState> state_;
};

namespace detail {
// The parameters of `group` that have a gradient, after checking dtype,
// contiguity and that each gradient matches its parameter.
std::vector<Tensor> step_targets(const char* optimizer, const ParamGroup& group);
}  // namespace detail

}  // namespace ember::optim
