#include "nn/functional.h"

namespace ember::nn::functional {

Tensor dropout(const Tensor& x, double p, bool training, Generator* gen) {
  EMBER_CHECK(p >= 0.0 && p <= 1.0, "dropout: probability must be in [0, 1], got ", p);
  check_defined("dropout", x);
  if (!training || p == 0.0) return x;
  if (p == 1.0) return mul(x, 0.0);
  // keep where u >= p: probability 1 - p. The mask (cast to x's dtype from the
  // comparison's bool) holds the scale, so one mul.
  Tensor keep = ge(rand(x.sizes(), TensorOptions().dtype(x.dtype()).device(x.device()), gen), p);
  return mul(x, mul(cast(keep, x.dtype()), 1.0 / (1.0 - p)));
}

}  // namespace ember::nn::functional
