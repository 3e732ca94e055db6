#include "nn/dropout.h"

#include <sstream>

#include "nn/functional.h"

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

}  // namespace ember::nn
