#include "nn/flatten.h"

#include "core/ops.h"

namespace ember::nn {

Tensor Flatten::forward(const Tensor& x) const {
  ForwardScope scope(*this);
  return flatten(x, options.start_dim(), options.end_dim());
}

std::string Flatten::extra_repr() const {
  return "start_dim=" + std::to_string(options.start_dim()) +
         ", end_dim=" + std::to_string(options.end_dim());
}

}  // namespace ember::nn
