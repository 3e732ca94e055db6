#include "nn/clip_grad.h"

#include <cmath>

#include "core/autograd.h"
#include "core/ops.h"

namespace ember::nn::utils {

Tensor clip_grad_norm_tensor_(const std::vector<Tensor>& parameters, double max_norm,
                              double norm_type, bool error_if_nonfinite) {
  EMBER_CHECK(!std::isnan(max_norm), "clip_grad_norm_: max_norm is NaN");
  EMBER_CHECK(norm_type >= 0 && !std::isnan(norm_type),
              "clip_grad_norm_: norm_type must be >= 0 (or inf), got ", norm_type);
  std::vector<Tensor> grads;
  for (size_t i = 0; i < parameters.size(); ++i) {
    EMBER_CHECK(parameters[i].defined(), "clip_grad_norm_: parameter ", i, " is undefined");
    const Tensor& g = parameters[i].grad();
    if (!g.defined()) continue;
    EMBER_CHECK(grads.empty() || g.device() == grads.front().device(),
                "clip_grad_norm_: gradients on ",
                grads.empty() ? g.device() : grads.front().device(), " and on ", g.device(),
                " (parameter ", i, "); all must be on one device");
    EMBER_CHECK(g.dtype() == kFloat32 || g.dtype() == kFloat64 || g.dtype() == kBFloat16,
                "clip_grad_norm_: the gradient of parameter ", i, " is ", g.dtype());
    EMBER_CHECK(g.is_contiguous(), "clip_grad_norm_: the gradient of parameter ", i, " (shape ",
                shape_str(g.sizes()), ") is not contiguous");
    grads.push_back(g);
  }
  if (grads.empty()) return zeros({}, kFloat64);
  NoGradGuard no_grad;
  auto [norm, coef] = multi_tensor_norm_clip_coef(grads, norm_type, max_norm);
  if (error_if_nonfinite) {
    const double value = norm.item();
    EMBER_CHECK(std::isfinite(value), "clip_grad_norm_: the total norm of order ", norm_type,
                " of the gradients is ", value,
                ", so it cannot be clipped (no gradient was "
                "changed); pass error_if_nonfinite=false to scale them by it anyway");
  }
  multi_tensor_mul_(grads, coef);
  return norm;
}

double clip_grad_norm_(const std::vector<Tensor>& parameters, double max_norm, double norm_type,
                       bool error_if_nonfinite) {
  return clip_grad_norm_tensor_(parameters, max_norm, norm_type, error_if_nonfinite).item();
}

double clip_grad_norm_(std::initializer_list<Tensor> parameters, double max_norm, double norm_type,
                       bool error_if_nonfinite) {
  return clip_grad_norm_(std::vector<Tensor>(parameters), max_norm, norm_type, error_if_nonfinite);
}

double clip_grad_norm_(const Tensor& parameter, double max_norm, double norm_type,
                       bool error_if_nonfinite) {
  return clip_grad_norm_(std::vector<Tensor>{parameter}, max_norm, norm_type, error_if_nonfinite);
}

}  // namespace ember::nn::utils
