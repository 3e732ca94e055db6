#include "nn/normalization.h"

#include <sstream>

#include "nn/init.h"

namespace ember::nn {

LayerNorm::LayerNorm(const LayerNormOptions& opts) : options(opts) {
  const Shape& shape = opts.normalized_shape();
  EMBER_CHECK(!shape.empty(), "LayerNorm: normalized_shape must name at least one dim");
  for (int64_t s : shape)
    EMBER_CHECK(s > 0, "LayerNorm: normalized_shape ", shape_str(shape),
                " must have positive sizes");
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
  return layer_norm(x, options.normalized_shape(), weight, bias, options.eps());
}

std::string LayerNorm::extra_repr() const {
  std::ostringstream os;
  const Shape& s = options.normalized_shape();
  os << '(';  // a Python tuple, as PyTorch prints it: (4,) or (3, 4)
  for (size_t i = 0; i < s.size(); ++i) os << (i > 0 ? ", " : "") << s[i];
  os << (s.size() == 1 ? ",)" : ")") << ", eps=" << options.eps()
     << ", elementwise_affine=" << (options.elementwise_affine() ? "True" : "False");
  return os.str();
}

}  // namespace ember::nn
