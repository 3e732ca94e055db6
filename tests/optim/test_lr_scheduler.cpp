// Learning-rate schedulers: each closed form against hand-computed values, the
// composites, state round trips that continue a schedule, and the errors.
#include <doctest/doctest.h>

#include <cmath>
#include <memory>
#include <numbers>
#include <vector>

#include "core/ops.h"
#include "error_text.h"
#include "optim/optim.h"

using namespace ember;
using ember::testing::contains;
using ember::testing::error_of;

namespace {

Tensor param() {
  return zeros({2}, TensorOptions().requires_grad());
}

double lr_of(const optim::Optimizer& opt, size_t g = 0) {
  return opt.param_groups()[g].options().get_lr();
}

// The lr after construction and after each of `steps` steps.
std::vector<double> trace(optim::LRScheduler& s, int steps) {
  std::vector<double> out{lr_of(s.optimizer())};
  for (int i = 0; i < steps; ++i) {
    s.step();
    out.push_back(lr_of(s.optimizer()));
  }
  return out;
}

void check_close(const std::vector<double>& got, const std::vector<double>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-12));
  }
}

}  // namespace

TEST_CASE("optim/lr_scheduler: StepLR multiplies by gamma every step_size steps") {
  optim::SGD opt({param()}, optim::SGDOptions(1.0));
  optim::StepLR s(opt, 3, 0.5);
  check_close(trace(s, 7), {1, 1, 1, 0.5, 0.5, 0.5, 0.25, 0.25});
  CHECK(s.last_epoch() == 7);
  CHECK(s.get_last_lr() == std::vector<double>{0.25});
  CHECK(s.base_lrs() == std::vector<double>{1.0});
}

TEST_CASE("optim/lr_scheduler: CosineAnnealingLR follows half a cosine to eta_min") {
  optim::Adam opt({param()}, optim::AdamOptions(0.1));
  optim::CosineAnnealingLR s(opt, 4, 0.02);
  std::vector<double> want;
  for (int t = 0; t <= 6; ++t)
    want.push_back(0.02 + (0.1 - 0.02) * (1 + std::cos(std::numbers::pi * t / 4)) / 2);
  check_close(trace(s, 6), want);
  CHECK(want[4] == doctest::Approx(0.02));  // the bottom at T_max
  CHECK(want[2] == doctest::Approx(0.06));  // halfway
}

TEST_CASE("optim/lr_scheduler: LinearLR ramps the factor, then holds it") {
  optim::SGD opt({param()}, optim::SGDOptions(0.2));
  optim::LinearLR s(opt, 0.25, 1.0, 3);
  check_close(trace(s, 5), {0.05, 0.1, 0.15, 0.2, 0.2, 0.2});
}

TEST_CASE("optim/lr_scheduler: every parameter group has its own base") {
  Tensor a = param(), b = param();
  optim::SGD opt(std::vector<optim::ParamGroup>{optim::ParamGroup({a}),
                                                optim::ParamGroup({b}, optim::SGDOptions(0.01))},
                 optim::SGDOptions(1.0));
  optim::StepLR s(opt, 1, 0.1);
  s.step();
  CHECK(lr_of(opt, 0) == doctest::Approx(0.1));
  CHECK(lr_of(opt, 1) == doctest::Approx(0.001));
}

TEST_CASE(
    "optim/lr_scheduler: SequentialLR runs warm-up, then cosine counted from the "
    "milestone") {
  optim::SGD opt({param()}, optim::SGDOptions(1.0));
  auto warmup = std::make_shared<optim::LinearLR>(opt, 0.1, 1.0, 2);
  auto cosine = std::make_shared<optim::CosineAnnealingLR>(opt, 4);
  // The cosine was built after the warm-up changed the lr: it still bases on 1.0.
  CHECK(cosine->base_lrs() == std::vector<double>{1.0});
  optim::SequentialLR s(opt, {warmup, cosine}, {3});
  std::vector<double> want{0.1, 0.55, 1.0};  // warm-up at 0, 1, 2
  for (int t = 0; t <= 4; ++t) want.push_back((1 + std::cos(std::numbers::pi * t / 4)) / 2);
  check_close(trace(s, 7), want);
}

TEST_CASE("optim/lr_scheduler: ChainedScheduler multiplies the factors") {
  optim::SGD opt({param()}, optim::SGDOptions(2.0));
  auto warmup = std::make_shared<optim::LinearLR>(opt, 0.5, 1.0, 2);
  auto step = std::make_shared<optim::StepLR>(opt, 2, 0.1);
  optim::ChainedScheduler s({warmup, step});
  // factors: linear 0.5, 0.75, 1, 1, ...; step 1, 1, 0.1, 0.1, 0.01
  check_close(trace(s, 4), {1.0, 1.5, 0.2, 0.2, 0.02});
}

TEST_CASE("optim/lr_scheduler: a resumed schedule continues where it stopped") {
  Tensor p = param();
  optim::SGD opt({p}, optim::SGDOptions(1.0));
  auto warmup = std::make_shared<optim::LinearLR>(opt, 0.2, 1.0, 3);
  auto decay = std::make_shared<optim::StepLR>(opt, 2, 0.5);
  optim::SequentialLR s(opt, {warmup, decay}, {3});
  for (int i = 0; i < 4; ++i) s.step();
  const StateDict saved = s.state_dict();
  const StateDict saved_opt = opt.state_dict();
  std::vector<double> rest = trace(s, 5);

  // A fresh run, built the same way, loads the state and sees the same rates.
  Tensor p2 = param();
  optim::SGD opt2({p2}, optim::SGDOptions(1.0));
  auto warmup2 = std::make_shared<optim::LinearLR>(opt2, 0.2, 1.0, 3);
  auto decay2 = std::make_shared<optim::StepLR>(opt2, 2, 0.5);
  optim::SequentialLR s2(opt2, {warmup2, decay2}, {3});
  opt2.load_state_dict(saved_opt);
  s2.load_state_dict(saved);
  CHECK(s2.last_epoch() == 4);
  CHECK(trace(s2, 5) == rest);  // bit for bit
}

TEST_CASE(
    "optim/lr_scheduler: load_state_dict refuses another scheduler's state, changing "
    "nothing") {
  optim::SGD opt({param()}, optim::SGDOptions(1.0));
  optim::StepLR step(opt, 2, 0.5);
  optim::SGD opt2({param()}, optim::SGDOptions(1.0));
  optim::CosineAnnealingLR cos(opt2, 10);
  cos.step();
  const double before = lr_of(opt2);
  const std::string err = error_of([&] { cos.load_state_dict(step.state_dict()); });
  CHECK(contains(err, "CosineAnnealingLR::load_state_dict"));
  CHECK(contains(err, "missing or non-scalar option 'T_max'"));
  CHECK(contains(err, "unexpected key 'step_size'"));
  CHECK(cos.last_epoch() == 1);
  CHECK(cos.T_max() == 10);
  CHECK(lr_of(opt2) == before);
  // A bad option value, and a state for another number of groups.
  StateDict bad = step.state_dict();
  StateDict changed;
  for (const auto& [k, t] : bad) changed.insert(k, k == "gamma" ? full({}, -1.0, kFloat64) : t);
  CHECK(contains(error_of([&] { step.load_state_dict(changed); }),
                 "StepLR: gamma must be finite "
                 "and >= 0, got -1"));
  CHECK(step.gamma() == 0.5);
  StateDict huge;  // an integer option from a file must be a whole number in range
  for (const auto& [k, t] : bad) huge.insert(k, k == "step_size" ? full({}, 1e300, kFloat64) : t);
  CHECK(contains(error_of([&] { step.load_state_dict(huge); }),
                 "StepLR: option 'step_size' must be a whole number, got 1e+300"));
  CHECK(step.step_size() == 2);
  Tensor a = param(), b = param();
  optim::SGD two(std::vector<optim::ParamGroup>{optim::ParamGroup({a}), optim::ParamGroup({b})},
                 optim::SGDOptions(1.0));
  optim::StepLR step2(two, 2, 0.5);
  CHECK(contains(error_of([&] { step2.load_state_dict(step.state_dict()); }),
                 "'base_lrs' holds 1 values, the optimizer has 2 parameter groups"));
}

TEST_CASE("optim/lr_scheduler: a scheduler of another optimizer is refused") {
  optim::SGD a({param()}, optim::SGDOptions(1.0));
  optim::SGD b({param()}, optim::SGDOptions(1.0));
  auto sa = std::make_shared<optim::StepLR>(a, 2);
  auto sb = std::make_shared<optim::StepLR>(b, 2);
  CHECK(contains(error_of([&] {
                   optim::SequentialLR s(a, {sa, sb}, {2});
                 }),
                 "SequentialLR: scheduler 1 (StepLR) was built for another optimizer"));
  CHECK(contains(error_of([&] {
                   optim::ChainedScheduler s({sa, sb});
                 }),
                 "ChainedScheduler: scheduler 1 (StepLR) was built for another optimizer"));
  // Groups added after the scheduler was built.
  optim::StepLR s(a, 2);
  a.add_param_group(optim::ParamGroup({param()}));
  CHECK(contains(error_of([&] { s.step(); }),
                 "StepLR: the optimizer has 2 parameter groups, the scheduler was built for 1"));
}

TEST_CASE("optim/lr_scheduler: options are checked, and so is every lr set") {
  optim::SGD opt({param()}, optim::SGDOptions(1.0));
  CHECK(contains(error_of([&] { optim::StepLR(opt, 0); }), "StepLR: step_size must be positive"));
  CHECK(contains(error_of([&] { optim::CosineAnnealingLR(opt, 0); }),
                 "CosineAnnealingLR: T_max must be positive"));
  CHECK(contains(error_of([&] { optim::LinearLR(opt, 0.0); }),
                 "LinearLR: start_factor must be in (0, 1], got 0"));
  CHECK(contains(error_of([&] { optim::LinearLR(opt, 0.5, 1.5); }),
                 "LinearLR: end_factor must be in [0, 1], got 1.5"));
  auto a = std::make_shared<optim::StepLR>(opt, 2);
  CHECK(contains(error_of([&] {
                   optim::SequentialLR(opt, {a, a}, {});
                 }),
                 "SequentialLR: 2 schedulers need 1 milestones, got 0"));
  CHECK(contains(error_of([&] {
                   optim::SequentialLR(opt, {a, a, a}, {3, 3});
                 }),
                 "milestones must be positive and increasing"));
  CHECK(contains(error_of([&] {
                   optim::ChainedScheduler(std::vector<std::shared_ptr<optim::LRScheduler>>{});
                 }),
                 "ChainedScheduler: needs at least one scheduler"));
  // set_lr validates as the constructor does, and a bad value changes nothing.
  optim::OptimizerOptions& o = opt.param_groups()[0].options();
  CHECK(contains(error_of([&] { o.set_lr(-0.5); }), "SGD: learning rate must be >= 0, got -0.5"));
  CHECK(contains(error_of([&] { o.set_lr(std::nan("")); }), "SGD: learning rate must be >= 0"));
  CHECK(o.get_lr() == 1.0);
  optim::Adam adam({param()});
  CHECK(contains(error_of([&] { adam.param_groups()[0].options().set_lr(-1); }),
                 "Adam: learning rate must be >= 0, got -1"));
}
