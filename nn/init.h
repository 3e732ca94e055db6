// Parameter initialisation, in place and outside autograd (each runs under
// NoGradGuard), with PyTorch's fan and gain conventions so that a model
// initialised here has the same distributions as its PyTorch twin.
#pragma once

#include <cstdint>
#include <utility>

#include "core/tensor.h"

namespace ember::nn::init {

enum class FanMode { FanIn, FanOut };
enum class Nonlinearity { Linear, Sigmoid, Tanh, ReLU, LeakyReLU };

// (fan_in, fan_out) of a weight of shape (out, in, k...): in * prod(k), out * prod(k).
// Throws for tensors of fewer than 2 dims.
std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& t);
// The recommended gain for a nonlinearity; `param` is LeakyReLU's negative slope.
double calculate_gain(Nonlinearity nonlinearity, double param = 0.01);

// U(-bound, bound), bound = gain * sqrt(3 / fan), gain = calculate_gain(nonlinearity, a).
Tensor kaiming_uniform_(Tensor t, double a = 0.0, FanMode mode = FanMode::FanIn,
                        Nonlinearity nonlinearity = Nonlinearity::LeakyReLU,
                        Generator* gen = nullptr);
// N(0, std^2), std = gain / sqrt(fan).
Tensor kaiming_normal_(Tensor t, double a = 0.0, FanMode mode = FanMode::FanIn,
                       Nonlinearity nonlinearity = Nonlinearity::LeakyReLU,
                       Generator* gen = nullptr);
// U(-bound, bound), bound = gain * sqrt(6 / (fan_in + fan_out)).
Tensor xavier_uniform_(Tensor t, double gain = 1.0, Generator* gen = nullptr);
// N(0, std^2), std = gain * sqrt(2 / (fan_in + fan_out)).
Tensor xavier_normal_(Tensor t, double gain = 1.0, Generator* gen = nullptr);
Tensor uniform_(Tensor t, double a = 0.0, double b = 1.0, Generator* gen = nullptr);
Tensor normal_(Tensor t, double mean = 0.0, double std = 1.0, Generator* gen = nullptr);
Tensor constant_(Tensor t, double value);
Tensor zeros_(Tensor t);
Tensor ones_(Tensor t);

}  // namespace ember::nn::init
