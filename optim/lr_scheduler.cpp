#include "optim/lr_scheduler.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <sstream>

#include "core/ops.h"

namespace ember::optim {

namespace {

Tensor f64_scalar(double v) {
  Tensor t = empty({}, kFloat64);
  *t.data_ptr<double>() = v;
  return t;
}
Tensor i64_scalar(int64_t v) {
  Tensor t = empty({}, kInt64);
  *t.data_ptr<int64_t>() = v;
  return t;
}
Tensor f64_vector(const std::vector<double>& v) {
  return from_vector(v, {static_cast<int64_t>(v.size())}, kFloat64);
}
std::vector<double> doubles(const Tensor& t) {
  return t.to(kCPU).to_vector<double>();
}

// An integer option read back from a double (a state_dict scalar): whole and in
// range, or an error, never an out-of-range conversion.
int64_t whole(const char* who, const std::string& field, double value) {
  EMBER_CHECK(std::isfinite(value) && value == std::floor(value) && std::fabs(value) < 9.0e15, who,
              ": option '", field, "' must be a whole number, got ", value);
  return static_cast<int64_t>(value);
}

// The entries of `sd` under "<prefix>", the prefix removed.
StateDict under(const StateDict& sd, const std::string& prefix) {
  StateDict out;
  for (const auto& [key, t] : sd)
    if (key.compare(0, prefix.size(), prefix) == 0) out.insert(key.substr(prefix.size()), t);
  return out;
}

std::string join(const std::vector<std::string>& parts) {
  std::string out;
  for (const std::string& p : parts) out += "\n  " + p;
  return out;
}

const std::vector<std::shared_ptr<LRScheduler>>& nonempty(
    const std::vector<std::shared_ptr<LRScheduler>>& s, const char* who) {
  EMBER_CHECK(!s.empty(), who, ": needs at least one scheduler");
  for (size_t i = 0; i < s.size(); ++i)
    EMBER_CHECK(s[i] != nullptr, who, ": scheduler ", i, " is null");
  return s;
}

// Every child must drive `optimizer`, the one the composite sets rates on.
void check_same_optimizer(const char* who, const Optimizer& optimizer,
                          const std::vector<std::shared_ptr<LRScheduler>>& children) {
  for (size_t i = 0; i < children.size(); ++i)
    EMBER_CHECK(&children[i]->optimizer() == &optimizer, who, ": scheduler ", i, " (",
                children[i]->name(), ") was built for another optimizer; every scheduler of a ",
                who, " must be built on the optimizer it drives");
}

}  // namespace

// ---------------------------------------------------------------- LRScheduler

LRScheduler::LRScheduler(Optimizer& optimizer) : optimizer_(&optimizer) {
  // PyTorch's initial_lr: the first scheduler on an optimizer records each group's
  // lr; later ones (built after it changed the lr) take the same base.
  for (ParamGroup& g : optimizer.param_groups()) {
    if (!g.has_initial_lr()) g.set_initial_lr(g.options().get_lr());
    base_lrs_.push_back(g.initial_lr());
  }
}

void LRScheduler::initialize() {
  validate();
  apply(0);
}

void LRScheduler::apply(int64_t t) {
  std::vector<ParamGroup>& groups = optimizer_->param_groups();
  EMBER_CHECK(groups.size() == base_lrs_.size(), name(), ": the optimizer has ", groups.size(),
              " parameter group", groups.size() == 1 ? "" : "s", ", the scheduler was built for ",
              base_lrs_.size(), " (build the scheduler after the last add_param_group)");
  std::vector<double> lrs;
  for (size_t g = 0; g < groups.size(); ++g) {
    lrs.push_back(lr_at(base_lrs_[g], t));
    // Validated on a copy first, so a bad rate for a later group changes no group.
    std::unique_ptr<OptimizerOptions> trial = groups[g].options().clone();
    try {
      trial->set_lr(lrs.back());
    } catch (const Error& e) {
      EMBER_FAIL(name(), ": step ", t, " gives parameter group ", g, " the learning rate ",
                 lrs.back(), ", which the optimizer refuses: ", e.what());
    }
  }
  for (size_t g = 0; g < groups.size(); ++g) groups[g].options().set_lr(lrs[g]);
  last_lrs_ = std::move(lrs);
}

void LRScheduler::step() {
  const int64_t t = last_epoch_ + 1;
  apply(t);
  last_epoch_ = t;
}

void LRScheduler::set_field(const std::string& field, double) {
  EMBER_FAIL(name(), ": no option named '", field, "'");
}

void LRScheduler::check_children(const StateDict& sd, std::vector<std::string>& problems) const {
  // A plain scheduler has no children: their keys mean the state is a composite's.
  for (const auto& [key, t] : sd)
    if (key.rfind("schedulers.", 0) == 0 || key == "milestones")
      problems.push_back("unexpected key '" + key + "' (the state is a composite scheduler's)");
}

StateDict LRScheduler::state_dict() const {
  StateDict sd;
  sd.insert("last_epoch", i64_scalar(last_epoch_));
  sd.insert("base_lrs", f64_vector(base_lrs_));
  sd.insert("last_lrs", f64_vector(last_lrs_));
  for (const auto& [field, value] : fields()) sd.insert(field, f64_scalar(value));
  save_children(sd);
  return sd;
}

void LRScheduler::visit_state(const StateDict& sd, std::vector<std::string>* problems,
                              bool restore) {
  auto problem = [&](const std::string& p) {
    if (problems) problems->push_back(p);
  };
  const size_t groups = optimizer_->param_groups().size();
  std::vector<std::string> known{"last_epoch", "base_lrs", "last_lrs"};
  const Tensor* last = sd.find("last_epoch");
  if (!last)
    problem("missing key 'last_epoch'");
  else if (last->dtype() != kInt64 || last->numel() != 1)
    problem("'last_epoch' must be an int64 scalar");
  else if (last->to(kCPU).item() < 0)
    problem("'last_epoch' is negative");
  for (const char* key : {"base_lrs", "last_lrs"}) {
    const Tensor* t = sd.find(key);
    if (!t)
      problem(std::string("missing key '") + key + "'");
    else if (t->dim() != 1 || static_cast<size_t>(t->numel()) != groups)
      problem(std::string("'") + key + "' holds " + std::to_string(t->numel()) +
              " values, the optimizer has " + std::to_string(groups) + " parameter groups");
    else if (!is_floating(t->dtype()))
      problem(std::string("'") + key + "' must be floating-point");
  }
  // Options: set the saved values, validate, and put the old ones back unless
  // restoring (a scheduler's options are a few scalars; this keeps one validate()).
  const std::vector<std::pair<std::string, double>> before = fields();
  bool fields_ok = true;
  for (const auto& [field, value] : before) {
    known.push_back(field);
    const Tensor* t = sd.find(field);
    if (!t || t->numel() != 1) {
      problem("missing or non-scalar option '" + field +
              "' (the state may be another kind of "
              "scheduler's)");
      fields_ok = false;
      continue;
    }
    try {
      set_field(field, t->to(kCPU).item());
    } catch (const Error& e) {
      problem(e.what());
      fields_ok = false;
    }
  }
  if (fields_ok) {
    try {
      validate();
    } catch (const Error& e) {
      problem(e.what());
      fields_ok = false;
    }
  }
  if (!restore || !fields_ok)
    for (const auto& [field, value] : before) set_field(field, value);
  for (const auto& [key, t] : sd)
    if (key.rfind("schedulers.", 0) != 0 && key != "milestones" &&
        std::find(known.begin(), known.end(), key) == known.end())
      problem("unexpected key '" + key + "'");
  if (problems) check_children(sd, *problems);
  if (!restore) return;
  last_epoch_ = static_cast<int64_t>(last->to(kCPU).item());
  base_lrs_ = doubles(sd.at("base_lrs"));
  last_lrs_ = doubles(sd.at("last_lrs"));
  load_children(sd);
}

void LRScheduler::check_state_dict(const StateDict& sd) const {
  std::vector<std::string> problems;
  // visit_state only reads when not restoring; the options it sets are put back.
  const_cast<LRScheduler*>(this)->visit_state(sd, &problems, false);
  EMBER_CHECK(problems.empty(), name(), "::load_state_dict: ", problems.size(), " problem",
              problems.size() == 1 ? "" : "s", " (nothing was changed):", join(problems));
}

void LRScheduler::load_state_dict(const StateDict& sd) {
  check_state_dict(sd);
  // The saved rates, validated by the options, before anything changes.
  std::vector<ParamGroup>& groups = optimizer_->param_groups();
  const std::vector<double> lrs = doubles(sd.at("last_lrs"));
  for (size_t g = 0; g < groups.size(); ++g) {
    std::unique_ptr<OptimizerOptions> trial = groups[g].options().clone();
    trial->set_lr(lrs[g]);
  }
  visit_state(sd, nullptr, true);
  for (size_t g = 0; g < groups.size(); ++g) groups[g].options().set_lr(lrs[g]);
}

// ---------------------------------------------------------------- StepLR

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler(optimizer), step_size_(step_size), gamma_(gamma) {
  initialize();
}

double StepLR::lr_at(double base_lr, int64_t t) const {
  return base_lr * std::pow(gamma_, static_cast<double>(t / step_size_));
}

std::vector<std::pair<std::string, double>> StepLR::fields() const {
  return {{"step_size", static_cast<double>(step_size_)}, {"gamma", gamma_}};
}

void StepLR::set_field(const std::string& field, double value) {
  if (field == "step_size")
    step_size_ = whole("StepLR", field, value);
  else if (field == "gamma")
    gamma_ = value;
  else
    LRScheduler::set_field(field, value);
}

void StepLR::validate() const {
  EMBER_CHECK(step_size_ > 0, "StepLR: step_size must be positive, got ", step_size_);
  EMBER_CHECK(std::isfinite(gamma_) && gamma_ >= 0, "StepLR: gamma must be finite and >= 0, got ",
              gamma_);
}

// ---------------------------------------------------------------- CosineAnnealingLR

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min)
    : LRScheduler(optimizer), t_max_(T_max), eta_min_(eta_min) {
  initialize();
}

double CosineAnnealingLR::lr_at(double base_lr, int64_t t) const {
  const double phase = std::numbers::pi * static_cast<double>(t) / static_cast<double>(t_max_);
  return eta_min_ + (base_lr - eta_min_) * (1.0 + std::cos(phase)) / 2.0;
}

std::vector<std::pair<std::string, double>> CosineAnnealingLR::fields() const {
  return {{"T_max", static_cast<double>(t_max_)}, {"eta_min", eta_min_}};
}

void CosineAnnealingLR::set_field(const std::string& field, double value) {
  if (field == "T_max")
    t_max_ = whole("CosineAnnealingLR", field, value);
  else if (field == "eta_min")
    eta_min_ = value;
  else
    LRScheduler::set_field(field, value);
}

void CosineAnnealingLR::validate() const {
  EMBER_CHECK(t_max_ > 0, "CosineAnnealingLR: T_max must be positive, got ", t_max_);
  EMBER_CHECK(std::isfinite(eta_min_) && eta_min_ >= 0,
              "CosineAnnealingLR: eta_min must be finite and >= 0, got ", eta_min_);
}

// ---------------------------------------------------------------- LinearLR

LinearLR::LinearLR(Optimizer& optimizer, double start_factor, double end_factor,
                   int64_t total_iters)
    : LRScheduler(optimizer),
      start_factor_(start_factor),
      end_factor_(end_factor),
      total_iters_(total_iters) {
  initialize();
}

double LinearLR::lr_at(double base_lr, int64_t t) const {
  const double done = static_cast<double>(std::min(t, total_iters_));
  return base_lr *
         (start_factor_ + (end_factor_ - start_factor_) * done / static_cast<double>(total_iters_));
}

std::vector<std::pair<std::string, double>> LinearLR::fields() const {
  return {{"start_factor", start_factor_},
          {"end_factor", end_factor_},
          {"total_iters", static_cast<double>(total_iters_)}};
}

void LinearLR::set_field(const std::string& field, double value) {
  if (field == "start_factor")
    start_factor_ = value;
  else if (field == "end_factor")
    end_factor_ = value;
  else if (field == "total_iters")
    total_iters_ = whole("LinearLR", field, value);
  else
    LRScheduler::set_field(field, value);
}

void LinearLR::validate() const {
  // PyTorch's ranges: a start factor of 0 would make the first steps no steps.
  EMBER_CHECK(start_factor_ > 0 && start_factor_ <= 1,
              "LinearLR: start_factor must be in (0, 1], got ", start_factor_);
  EMBER_CHECK(end_factor_ >= 0 && end_factor_ <= 1, "LinearLR: end_factor must be in [0, 1], got ",
              end_factor_);
  EMBER_CHECK(total_iters_ > 0, "LinearLR: total_iters must be positive, got ", total_iters_);
}

// ---------------------------------------------------------------- SequentialLR

SequentialLR::SequentialLR(Optimizer& optimizer,
                           std::vector<std::shared_ptr<LRScheduler>> schedulers,
                           std::vector<int64_t> milestones)
    : LRScheduler(optimizer),
      schedulers_(nonempty(schedulers, "SequentialLR")),
      milestones_(std::move(milestones)) {
  check_same_optimizer("SequentialLR", optimizer, schedulers_);
  EMBER_CHECK(milestones_.size() + 1 == schedulers_.size(), "SequentialLR: ", schedulers_.size(),
              " schedulers need ", schedulers_.size() - 1, " milestones, got ", milestones_.size());
  for (size_t i = 0; i < milestones_.size(); ++i)
    EMBER_CHECK(milestones_[i] > 0 && (i == 0 || milestones_[i] > milestones_[i - 1]),
                "SequentialLR: milestones must be positive and increasing, got ", milestones_[i],
                " at position ", i);
  for (const auto& s : schedulers_) s->set_base_lrs(base_lrs());
  initialize();
}

double SequentialLR::lr_at(double base_lr, int64_t t) const {
  // The scheduler of the last milestone reached, counting from that milestone.
  const size_t i = static_cast<size_t>(std::upper_bound(milestones_.begin(), milestones_.end(), t) -
                                       milestones_.begin());
  return schedulers_[i]->lr_at(base_lr, i == 0 ? t : t - milestones_[i - 1]);
}

void SequentialLR::save_children(StateDict& sd) const {
  std::vector<double> m(milestones_.begin(), milestones_.end());
  sd.insert("milestones", from_vector(m, {static_cast<int64_t>(m.size())}, kInt64));
  for (size_t i = 0; i < schedulers_.size(); ++i)
    for (const auto& [key, t] : schedulers_[i]->state_dict())
      sd.insert("schedulers." + std::to_string(i) + "." + key, t);
}

void SequentialLR::check_children(const StateDict& sd, std::vector<std::string>& problems) const {
  const Tensor* m = sd.find("milestones");
  if (!m) {
    problems.push_back("missing key 'milestones' (the state is another kind of scheduler's)");
  } else {
    const std::vector<double> saved = doubles(*m);
    if (saved != std::vector<double>(milestones_.begin(), milestones_.end()))
      problems.push_back("the state's milestones differ from this SequentialLR's");
  }
  for (size_t i = 0; i < schedulers_.size(); ++i) {
    const StateDict child = under(sd, "schedulers." + std::to_string(i) + ".");
    try {
      schedulers_[i]->check_state_dict(child);
    } catch (const Error& e) {
      problems.push_back("scheduler " + std::to_string(i) + ": " + e.what());
    }
  }
  if (sd.contains("schedulers." + std::to_string(schedulers_.size()) + ".last_epoch"))
    problems.push_back("the state has more schedulers than this SequentialLR's " +
                       std::to_string(schedulers_.size()));
}

void SequentialLR::load_children(const StateDict& sd) {
  for (size_t i = 0; i < schedulers_.size(); ++i)
    schedulers_[i]->visit_state(under(sd, "schedulers." + std::to_string(i) + "."), nullptr, true);
}

// ---------------------------------------------------------------- ChainedScheduler

ChainedScheduler::ChainedScheduler(std::vector<std::shared_ptr<LRScheduler>> schedulers)
    : LRScheduler(nonempty(schedulers, "ChainedScheduler").front()->optimizer()),
      schedulers_(std::move(schedulers)) {
  check_same_optimizer("ChainedScheduler", optimizer(), schedulers_);
  for (const auto& s : schedulers_) s->set_base_lrs(base_lrs());
  initialize();
}

double ChainedScheduler::lr_at(double base_lr, int64_t t) const {
  if (base_lr == 0) return 0;
  double lr = base_lr;
  for (const auto& s : schedulers_) lr *= s->lr_at(base_lr, t) / base_lr;
  return lr;
}

void ChainedScheduler::save_children(StateDict& sd) const {
  for (size_t i = 0; i < schedulers_.size(); ++i)
    for (const auto& [key, t] : schedulers_[i]->state_dict())
      sd.insert("schedulers." + std::to_string(i) + "." + key, t);
}

void ChainedScheduler::check_children(const StateDict& sd,
                                      std::vector<std::string>& problems) const {
  if (sd.contains("milestones")) problems.push_back("unexpected key 'milestones'");
  for (size_t i = 0; i < schedulers_.size(); ++i) {
    try {
      schedulers_[i]->check_state_dict(under(sd, "schedulers." + std::to_string(i) + "."));
    } catch (const Error& e) {
      problems.push_back("scheduler " + std::to_string(i) + ": " + e.what());
    }
  }
  if (sd.contains("schedulers." + std::to_string(schedulers_.size()) + ".last_epoch"))
    problems.push_back("the state has more schedulers than this ChainedScheduler's " +
                       std::to_string(schedulers_.size()));
}

void ChainedScheduler::load_children(const StateDict& sd) {
  for (size_t i = 0; i < schedulers_.size(); ++i)
    schedulers_[i]->visit_state(under(sd, "schedulers." + std::to_string(i) + "."), nullptr, true);
}

}  // namespace ember::optim
