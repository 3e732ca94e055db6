// The per-element update rules of SGD and Adam/AdamW, as PyTorch publishes them,
// shared by the CPU loops (optim/*.cpp) and the fused CUDA kernels
// (cuda/kernels/fused_optim.cu) so both devices apply one formula, in double.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/base/hd.h"

namespace ember {

// One parameter and its optimizer state for a fused multi-tensor update, as raw
// pointers into the parameter's device memory (all of one tensor in float32 or
// float64, contiguous).
struct OptimTensor {
  void* param = nullptr;
  const void* grad = nullptr;
  void* state[3] = {};  // SGD: momentum buffer; Adam: exp_avg, exp_avg_sq, max_exp_avg_sq
  int64_t numel = 0;
  bool is_double = false;
  bool first_step = false;  // SGD: the momentum buffer starts as the gradient
  // Adam: the parameter's step count (int64, on its device). The update adds one
  // to it and derives the bias corrections from the new count where it runs, so a
  // replayed CUDA graph advances the count and its corrections every step.
  int64_t* step = nullptr;
};

struct SgdConfig {
  double lr = 0;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
};

struct AdamConfig {
  double lr = 0;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;
  bool amsgrad = false;
  bool decoupled_weight_decay = false;  // AdamW
};

// One SGD step of one element. `buf` (the momentum buffer) is used only when
// momentum != 0; on a parameter's first step it starts as the gradient.
EMBER_HD void sgd_update(const SgdConfig& c, double& p, double g, double& buf, bool first_step) {
  if (c.weight_decay != 0) g += c.weight_decay * p;
  if (c.momentum != 0) {
    buf = first_step ? g : c.momentum * buf + (1 - c.dampening) * g;
    g = c.nesterov ? g + c.momentum * buf : buf;
  }
  p -= c.lr * g;
}

// Adam's bias corrections at a parameter's step t (1 on its first step): the
// step_size and bc2_sqrt that adam_update takes. On the host for the CPU loop, on
// the device for the fused kernel (from the step count in device memory).
EMBER_HD void adam_bias_corrections(const AdamConfig& c, double t, double& step_size,
                                    double& bc2_sqrt) {
  using std::pow;
  using std::sqrt;
  step_size = c.lr / (1.0 - pow(c.beta1, t));
  bc2_sqrt = sqrt(1.0 - pow(c.beta2, t));
}

// One Adam/AdamW step of one element. step_size = lr / (1 - beta1^t) and
// bc2_sqrt = sqrt(1 - beta2^t) for this parameter's step t (adam_bias_corrections).
// The configuration's switches as template arguments (weight decay on, decoupled,
// AMSGrad), so a loop over elements has no branch in it and vectorises (the CPU's,
// core/kernels/cpu_optim.cpp); adam_update below picks the instance at run time.
template <bool kWeightDecay, bool kDecoupled, bool kAmsgrad>
EMBER_HD void adam_update_as(const AdamConfig& c, double& p, double g, double& m, double& v,
                             double& v_max, double step_size, double bc2_sqrt) {
  if constexpr (kWeightDecay) {
    if constexpr (kDecoupled)
      p *= 1 - c.lr * c.weight_decay;
    else
      g += c.weight_decay * p;
  }
  m = c.beta1 * m + (1 - c.beta1) * g;
  v = c.beta2 * v + (1 - c.beta2) * g * g;
  double second = v;
  if constexpr (kAmsgrad) {
    v_max = v_max > v ? v_max : v;
    second = v_max;
  }
  using std::sqrt;
  p -= step_size * m / (sqrt(second) / bc2_sqrt + c.eps);
}

// Calls f.template operator()<kWeightDecay, kDecoupled, kAmsgrad>() with c's switches:
// the one place a run-time configuration picks its adam_update_as instance.
template <typename F>
EMBER_HD void with_adam_switches(const AdamConfig& c, F&& f) {
  const bool wd = c.weight_decay != 0, dec = c.decoupled_weight_decay;
  if (c.amsgrad) {
    if (!wd)
      f.template operator()<false, false, true>();
    else if (dec)
      f.template operator()<true, true, true>();
    else
      f.template operator()<true, false, true>();
  } else {
    if (!wd)
      f.template operator()<false, false, false>();
    else if (dec)
      f.template operator()<true, true, false>();
    else
      f.template operator()<true, false, false>();
  }
}

EMBER_HD void adam_update(const AdamConfig& c, double& p, double g, double& m, double& v,
                          double& v_max, double step_size, double bc2_sqrt) {
  with_adam_switches(c, [&]<bool kWeightDecay, bool kDecoupled, bool kAmsgrad>() {
    adam_update_as<kWeightDecay, kDecoupled, kAmsgrad>(c, p, g, m, v, v_max, step_size, bc2_sqrt);
  });
}

}  // namespace ember
