// Learning-rate schedulers, with PyTorch's names, arguments and formulas. Each is
// built on one optimizer, remembers the learning rate of each parameter group at
// that moment (base_lrs) and, from then on, sets every group's lr at step t to its
// closed form in (base_lr, t). Construction is step 0 (it sets the step-0 lr, as
// PyTorch does); call step() once per epoch or iteration, after optimizer.step():
//
//   optim::SGD opt(model->parameters(), optim::SGDOptions(0.1));
//   auto warmup = std::make_shared<optim::LinearLR>(opt, 0.1, 1.0, 5);
//   auto decay = std::make_shared<optim::CosineAnnealingLR>(opt, 95);
//   optim::SequentialLR sched(opt, {warmup, decay}, {5});   // 5 warm-up steps, then cosine
//   for (...) { ...; opt.step(); sched.step(); }
//
//   StepLR             base * gamma^floor(t / step_size)
//   CosineAnnealingLR  eta_min + (base - eta_min) (1 + cos(pi t / T_max)) / 2
//   LinearLR           base * (start + (end - start) min(t, total_iters) / total_iters)
//   SequentialLR       schedulers[i] with its own count restarted at milestone i-1
//   ChainedScheduler   base * the product of each scheduler's factor lr_i(t) / base
//                      (PyTorch's chaining of multiplicative schedules; it equals
//                      PyTorch's exactly unless CosineAnnealingLR's eta_min != 0)
//
// The state (step count, base_lrs, options, the children of a composite) is a
// StateDict that nn::Checkpoint saves, so a resumed run continues the schedule.
// Every learning rate set goes through the options' set_lr, which validates it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/state_dict.h"
#include "optim/optimizer.h"

namespace ember::optim {

class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  // Advances one step and sets every group's learning rate. Throws when the
  // optimizer's groups changed in number since the scheduler was built.
  void step();
  // Steps taken since construction (PyTorch's last_epoch; 0 right after it).
  int64_t last_epoch() const { return last_epoch_; }
  // The learning rates the last step (or the construction) set, one per group.
  const std::vector<double>& get_last_lr() const { return last_lrs_; }
  const std::vector<double>& base_lrs() const { return base_lrs_; }
  Optimizer& optimizer() const { return *optimizer_; }
  virtual const char* name() const = 0;

  // The learning rate of a group whose base is `base_lr`, at step t >= 0.
  virtual double lr_at(double base_lr, int64_t t) const = 0;

  // last_epoch (int64), base_lrs and last_lrs (float64, one per group), and each
  // option (float64 scalars); composites add their children under "schedulers.<i>.".
  StateDict state_dict() const;
  // Throws ember::Error saying what does not match (another kind of scheduler,
  // another number of groups, a bad option) before changing anything; then
  // restores the state and sets the optimizer's learning rates to get_last_lr().
  void load_state_dict(const StateDict& state);
  void check_state_dict(const StateDict& state) const;

 protected:
  explicit LRScheduler(Optimizer& optimizer);
  // Call at the end of a derived constructor, options validated: step 0.
  void initialize();
  // Options as (name, value), in a fixed order, for state_dict.
  virtual std::vector<std::pair<std::string, double>> fields() const { return {}; }
  virtual void set_field(const std::string& name, double value);
  virtual void validate() const {}
  // Composites: their children's state, and re-basing them on their parent.
  virtual void save_children(StateDict&) const {}
  virtual void check_children(const StateDict&, std::vector<std::string>& problems) const;
  virtual void load_children(const StateDict&) {}
  void set_base_lrs(std::vector<double> base) { base_lrs_ = std::move(base); }
  void set_last_epoch(int64_t t) { last_epoch_ = t; }
  // Sets group g's lr for every g to lrs_at(t) and records it.
  void apply(int64_t t);
  size_t num_groups() const { return base_lrs_.size(); }

 private:
  friend class SequentialLR;
  friend class ChainedScheduler;
  // Validates `state` (problems appended), or restores it when `restore`.
  void visit_state(const StateDict& state, std::vector<std::string>* problems, bool restore);

  Optimizer* optimizer_;
  std::vector<double> base_lrs_;
  std::vector<double> last_lrs_;
  int64_t last_epoch_ = 0;
};

// Multiplies the learning rate by gamma every step_size steps.
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);
  const char* name() const override { return "StepLR"; }
  double lr_at(double base_lr, int64_t t) const override;
  int64_t step_size() const { return step_size_; }
  double gamma() const { return gamma_; }

 protected:
  std::vector<std::pair<std::string, double>> fields() const override;
  void set_field(const std::string& name, double value) override;
  void validate() const override;

 private:
  int64_t step_size_;
  double gamma_;
};

// Half a cosine from the base learning rate down to eta_min over T_max steps
// (and, past T_max, back up, as PyTorch's closed form does).
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min = 0.0);
  const char* name() const override { return "CosineAnnealingLR"; }
  double lr_at(double base_lr, int64_t t) const override;
  int64_t T_max() const { return t_max_; }
  double eta_min() const { return eta_min_; }

 protected:
  std::vector<std::pair<std::string, double>> fields() const override;
  void set_field(const std::string& name, double value) override;
  void validate() const override;

 private:
  int64_t t_max_;
  double eta_min_;
};

// A linear ramp of the factor from start_factor to end_factor over total_iters
// steps, then end_factor: a warm-up when start_factor < end_factor.
class LinearLR : public LRScheduler {
 public:
  LinearLR(Optimizer& optimizer, double start_factor = 1.0 / 3.0, double end_factor = 1.0,
           int64_t total_iters = 5);
  const char* name() const override { return "LinearLR"; }
  double lr_at(double base_lr, int64_t t) const override;
  double start_factor() const { return start_factor_; }
  double end_factor() const { return end_factor_; }
  int64_t total_iters() const { return total_iters_; }

 protected:
  std::vector<std::pair<std::string, double>> fields() const override;
  void set_field(const std::string& name, double value) override;
  void validate() const override;

 private:
  double start_factor_, end_factor_;
  int64_t total_iters_;
};

// schedulers[0] until milestones[0], then schedulers[1] counted from 0, ... (one
// more scheduler than milestones, milestones increasing and positive). Every
// scheduler must have been built on `optimizer`; they are re-based on the
// learning rates the first one found.
class SequentialLR : public LRScheduler {
 public:
  SequentialLR(Optimizer& optimizer, std::vector<std::shared_ptr<LRScheduler>> schedulers,
               std::vector<int64_t> milestones);
  const char* name() const override { return "SequentialLR"; }
  double lr_at(double base_lr, int64_t t) const override;
  const std::vector<std::shared_ptr<LRScheduler>>& schedulers() const { return schedulers_; }
  const std::vector<int64_t>& milestones() const { return milestones_; }

 protected:
  void save_children(StateDict& sd) const override;
  void check_children(const StateDict& sd, std::vector<std::string>& problems) const override;
  void load_children(const StateDict& sd) override;

 private:
  std::vector<std::shared_ptr<LRScheduler>> schedulers_;
  std::vector<int64_t> milestones_;
};

// Every scheduler at once: lr(t) = base * prod_i lr_i(t) / base. The optimizer is
// the one every scheduler was built on (checked).
class ChainedScheduler : public LRScheduler {
 public:
  explicit ChainedScheduler(std::vector<std::shared_ptr<LRScheduler>> schedulers);
  const char* name() const override { return "ChainedScheduler"; }
  double lr_at(double base_lr, int64_t t) const override;
  const std::vector<std::shared_ptr<LRScheduler>>& schedulers() const { return schedulers_; }

 protected:
  void save_children(StateDict& sd) const override;
  void check_children(const StateDict& sd, std::vector<std::string>& problems) const override;
  void load_children(const StateDict& sd) override;

 private:
  std::vector<std::shared_ptr<LRScheduler>> schedulers_;
};

}  // namespace ember::optim
