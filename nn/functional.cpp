#include "nn/functional.h"
#include "nn/functional_conv.h"

namespace ember::nn::functional {

Tensor dropout(const Tensor& x, double p, bool training, Generator* gen) {
  return ember::dropout(x, p, training, gen);
}

Tensor dropout2d(const Tensor& x, double p, bool training, Generator* gen) {
  EMBER_CHECK(p >= 0.0 && p <= 1.0, "dropout2d: probability must be in [0, 1], got ", p);
  check_defined("dropout2d", x);
  EMBER_CHECK(x.dim() == 3 || x.dim() == 4,
              "dropout2d: expected a 3-D (C, H, W) or 4-D (N, C, H, W) input, got shape ",
              shape_str(x.sizes()));
  if (!training || p == 0.0) return x;
  if (p == 1.0) return mul(x, 0.0);
  Shape mask_shape = x.sizes();  // one draw per channel, broadcast over the plane
  mask_shape[mask_shape.size() - 1] = 1;
  mask_shape[mask_shape.size() - 2] = 1;
  Tensor keep = ge(rand(mask_shape, TensorOptions().dtype(x.dtype()).device(x.device()), gen), p);
  return mul(x, mul(cast(keep, x.dtype()), 1.0 / (1.0 - p)));
}

}  // namespace ember::nn::functional
