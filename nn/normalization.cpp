#include "nn/normalization.h"

#include <sstream>

#include "core/autocast.h"
#include "nn/init.h"

namespace ember::nn {

namespace {

void check_shape(const char* module, const Shape& shape) {
  EMBER_CHECK(!shape.empty(), module, ": normalized_shape must name at least one dim");
  for (int64_t s : shape)
    EMBER_CHECK(s > 0, module, ": normalized_shape ", shape_str(shape),
                " must have positive sizes");
}

// A Python tuple, as PyTorch prints it: (4,) or (3, 4).
void print_shape(std::ostream& os, const Shape& s) {
  os << '(';
  for (size_t i = 0; i < s.size(); ++i) os << (i > 0 ? ", " : "") << s[i];
  os << (s.size() == 1 ? ",)" : ")");
}

}  // namespace

LayerNorm::LayerNorm(const LayerNormOptions& opts) : options(opts) {
  const Shape& shape = opts.normalized_shape();
  check_shape("LayerNorm", shape);
  EMBER_CHECK(opts.eps() >= 0.0, "LayerNorm: eps must be >= 0, got ", opts.eps());
  if (opts.elementwise_affine()) {
    weight = register_parameter("weight", empty(shape));
    if (opts.bias()) bias = register_parameter("bias", empty(shape));
  }
  reset_parameters();
}

void LayerNorm::reset_parameters() {
  if (weight.defined()) init::ones_(weight);
  if (bias.defined()) init::zeros_(bias);
}

Tensor LayerNorm::forward(const Tensor& x) const {
  ForwardScope scope(*this);
  if (options.autocast_output() && autocast_lowers({&x}))
    return ember::detail::layer_norm_into_dtype(x, options.normalized_shape(), weight, bias,
                                                options.eps(), autocast_dtype());
  return layer_norm(x, options.normalized_shape(), weight, bias, options.eps());
}

std::pair<Tensor, Tensor> LayerNorm::forward_residual(const Tensor& x, const Tensor& residual,
                                                      double dropout) const {
  EMBER_CHECK(dropout >= 0.0 && dropout <= 1.0,
              "LayerNorm::forward_residual: dropout must be in [0, 1], got ", dropout);
  ForwardScope scope(*this);
  const bool train = is_training();
  if (options.autocast_output() && autocast_lowers({&x}))
    return ember::detail::dropout_add_layer_norm_into_dtype(x, residual, dropout, train,
                                                            options.normalized_shape(), weight,
                                                            bias, options.eps(), autocast_dtype());
  return dropout_add_layer_norm(x, residual, dropout, train, options.normalized_shape(), weight,
                                bias, options.eps());
}

std::string LayerNorm::extra_repr() const {
  std::ostringstream os;
  print_shape(os, options.normalized_shape());
  os << ", eps=" << options.eps()
     << ", elementwise_affine=" << (options.elementwise_affine() ? "True" : "False");
  return os.str();
}

RMSNorm::RMSNorm(const RMSNormOptions& opts) : options(opts) {
  check_shape("RMSNorm", opts.normalized_shape());
  if (opts.eps().has_value())
    EMBER_CHECK(*opts.eps() >= 0.0, "RMSNorm: eps must be >= 0, got ", *opts.eps());
  if (opts.elementwise_affine())
    weight = register_parameter("weight", empty(opts.normalized_shape()));
  reset_parameters();
}

void RMSNorm::reset_parameters() {
  if (weight.defined()) init::ones_(weight);
}

Tensor RMSNorm::forward(const Tensor& x) const {
  ForwardScope scope(*this);
  return rms_norm(x, options.normalized_shape(), weight, options.eps());
}

std::string RMSNorm::extra_repr() const {
  std::ostringstream os;
  print_shape(os, options.normalized_shape());
  os << ", eps=";
  if (options.eps().has_value())
    os << *options.eps();
  else
    os << "None";
  os << ", elementwise_affine=" << (options.elementwise_affine() ? "True" : "False");
  return os.str();
}

}  // namespace ember::nn
