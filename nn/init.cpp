#include "nn/init.h"

#include <cmath>

#include "core/autograd.h"
#include "core/ops.h"

namespace ember::nn::init {

namespace {

double fan_for(const Tensor& t, FanMode mode) {
  auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(t);
  return static_cast<double>(mode == FanMode::FanIn ? fan_in : fan_out);
}

void check_target(const char* op, const Tensor& t) {
  EMBER_CHECK(t.defined(), op, ": tensor is undefined");
  EMBER_CHECK(is_floating(t.dtype()), op, ": expects a floating-point tensor, got ", t.dtype());
}

}  // namespace

std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& t) {
  EMBER_CHECK(t.defined() && t.dim() >= 2,
              "calculate_fan_in_and_fan_out: needs a tensor of at "
              "least 2 dims, got ",
              t.defined() ? shape_str(t.sizes()) : "an undefined tensor");
  int64_t receptive = 1;
  for (int64_t d = 2; d < t.dim(); ++d) receptive *= t.size(d);
  return {t.size(1) * receptive, t.size(0) * receptive};
}

double calculate_gain(Nonlinearity nonlinearity, double param) {
  switch (nonlinearity) {
    case Nonlinearity::Linear:
    case Nonlinearity::Sigmoid:
      return 1.0;
    case Nonlinearity::Tanh:
      return 5.0 / 3.0;
    case Nonlinearity::ReLU:
      return std::sqrt(2.0);
    case Nonlinearity::LeakyReLU:
      return std::sqrt(2.0 / (1.0 + param * param));
  }
  return 1.0;
}

Tensor kaiming_uniform_(Tensor t, double a, FanMode mode, Nonlinearity nonlinearity,
                        Generator* gen) {
  check_target("kaiming_uniform_", t);
  const double fan = fan_for(t, mode);
  EMBER_CHECK(fan > 0, "kaiming_uniform_: tensor of shape ", shape_str(t.sizes()), " has zero fan");
  const double bound = calculate_gain(nonlinearity, a) * std::sqrt(3.0 / fan);
  return init::uniform_(t, -bound, bound, gen);
}

Tensor kaiming_normal_(Tensor t, double a, FanMode mode, Nonlinearity nonlinearity,
                       Generator* gen) {
  check_target("kaiming_normal_", t);
  const double fan = fan_for(t, mode);
  EMBER_CHECK(fan > 0, "kaiming_normal_: tensor of shape ", shape_str(t.sizes()), " has zero fan");
  return init::normal_(t, 0.0, calculate_gain(nonlinearity, a) / std::sqrt(fan), gen);
}

Tensor xavier_uniform_(Tensor t, double gain, Generator* gen) {
  check_target("xavier_uniform_", t);
  auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(t);
  EMBER_CHECK(fan_in + fan_out > 0, "xavier_uniform_: tensor of shape ", shape_str(t.sizes()),
              " has zero fan");
  const double bound = gain * std::sqrt(6.0 / static_cast<double>(fan_in + fan_out));
  return init::uniform_(t, -bound, bound, gen);
}

Tensor xavier_normal_(Tensor t, double gain, Generator* gen) {
  check_target("xavier_normal_", t);
  auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(t);
  EMBER_CHECK(fan_in + fan_out > 0, "xavier_normal_: tensor of shape ", shape_str(t.sizes()),
              " has zero fan");
  return init::normal_(t, 0.0, gain * std::sqrt(2.0 / static_cast<double>(fan_in + fan_out)), gen);
}

Tensor uniform_(Tensor t, double a, double b, Generator* gen) {
  check_target("init::uniform_", t);
  NoGradGuard no_grad;
  ember::uniform_(t, a, b, gen);
  return t;
}

Tensor normal_(Tensor t, double mean, double std, Generator* gen) {
  check_target("init::normal_", t);
  NoGradGuard no_grad;
  ember::normal_(t, mean, std, gen);
  return t;
}

Tensor constant_(Tensor t, double value) {
  EMBER_CHECK(t.defined(), "init::constant_: tensor is undefined");
  NoGradGuard no_grad;
  t.fill_(value);
  return t;
}

Tensor zeros_(Tensor t) {
  return constant_(t, 0.0);
}
Tensor ones_(Tensor t) {
  return constant_(t, 1.0);
}

}  // namespace ember::nn::init
