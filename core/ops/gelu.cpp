// GELU chosen by name, as torch.nn.functional.gelu(x, approximate=...): the two
// forms are the element-wise list's gelu (exact) and gelu_tanh.
#include <string>
#include <string_view>

#include "core/ops.h"

namespace ember {

Tensor gelu(const Tensor& a, std::string_view approximate) {
  EMBER_CHECK(approximate == "none" || approximate == "tanh",
              "gelu: approximate must be \"none\" or \"tanh\", got \"", std::string(approximate),
              "\"");
  return approximate == "tanh" ? gelu_tanh(a) : gelu(a);
}

}  // namespace ember
