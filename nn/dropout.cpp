#include "nn/dropout.h"

#include <sstream>

#include "nn/functional.h"
#include "nn/functional_conv.h"

namespace ember::nn {

Dropout::Dropout(const DropoutOptions& opts) : options(opts) {
  EMBER_CHECK(opts.p() >= 0.0 && opts.p() <= 1.0, "Dropout: probability must be in [0, 1], got ",
              opts.p());
}

Tensor Dropout::forward(const Tensor& x) const {
  return functional::dropout(x, options.p(), is_training());
}

std::string Dropout::extra_repr() const {
  std::ostringstream os;
  os << "p=" << options.p();
  return os.str();
}

Dropout2d::Dropout2d(const Dropout2dOptions& opts) : options(opts) {
  EMBER_CHECK(opts.p() >= 0.0 && opts.p() <= 1.0, "Dropout2d: probability must be in [0, 1], got ",
              opts.p());
}

Tensor Dropout2d::forward(const Tensor& x) const {
  return functional::dropout2d(x, options.p(), is_training());
}

std::string Dropout2d::extra_repr() const {
  std::ostringstream os;
  os << "p=" << options.p();
  return os.str();
}

}  // namespace ember::nn
