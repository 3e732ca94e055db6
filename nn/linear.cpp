#include "nn/linear.h"

#include <cmath>
#include <sstream>

#include "core/ops.h"
#include "nn/init.h"

namespace ember::nn {

Linear::Linear(const LinearOptions& opts) : options(opts) {
  EMBER_CHECK(opts.in_features() > 0 && opts.out_features() > 0,
              "Linear: in_features and out_features must be positive, got ", opts.in_features(),
              " and ", opts.out_features());
  const TensorOptions where = TensorOptions().device(opts.device());
  weight = register_parameter("weight", empty({opts.out_features(), opts.in_features()}, where));
  if (opts.bias()) bias = register_parameter("bias", empty({opts.out_features()}, where));
  reset_parameters();
}

void Linear::reset_parameters() {
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(options.in_features()));
    init::uniform_(bias, -bound, bound);
  }
}

Tensor Linear::forward(const Tensor& x) const {
  ForwardScope scope(*this);
  return linear(x, weight, bias, options.activation());
}

std::string Linear::extra_repr() const {
  std::ostringstream os;
  os << "in_features=" << options.in_features() << ", out_features=" << options.out_features()
     << ", bias=" << (options.bias() ? "true" : "false");
  if (options.activation() != Activation::None)
    os << ", activation=" << activation_name(options.activation());
  return os.str();
}

}  // namespace ember::nn
