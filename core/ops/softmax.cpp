// softmax and log_softmax along a dim, through the device's softmax kernels
// (numerically stable: the row maximum is subtracted; bfloat16 and float32
// computed in float, float64 in double). Backward reads the saved output only.
#include "core/alloc_site.h"
#include "core/autograd.h"
#include "core/kernel_table.h"
#include "core/ops.h"

namespace ember {

namespace {

struct Split {
  int64_t outer = 1, n = 1, inner = 1;
};
Split split_at(const Shape& s, int64_t dim) {
  Split r;
  for (int64_t d = 0; d < static_cast<int64_t>(s.size()); ++d) {
    if (d < dim)
      r.outer *= s[d];
    else if (d == dim)
      r.n = s[d];
    else
      r.inner *= s[d];
  }
  return r;
}

Tensor softmax_impl(const Tensor& x, int64_t dim, bool log, const char* op) {
  OpSite site(op);
  check_defined(op, x);
  check_floating(op, x);
  // A 0-dim tensor is one row of one element, as in PyTorch.
  dim = wrap_dim(dim, x.dim() == 0 ? 1 : x.dim(), op);
  const Split s = x.dim() == 0 ? Split{} : split_at(x.sizes(), dim);
  Tensor out = empty(x.sizes(), x.options());
  if (out.numel() > 0) {
    const Tensor xc = contiguous(x.detach());
    kernels::kernels_for(x.device())
        .softmax(
            {x.device(), x.dtype(), xc.raw_data(), out.raw_data(), s.outer, s.n, s.inner, log});
  }
  if (any_requires_grad({&x}))
    attach_grad_fn(out, log ? "LogSoftmaxBackward" : "SoftmaxBackward", {&x}, {out},
                   [s, log](const Tensor& g, const SavedTensors& saved) {
                     const Tensor& y = saved[0];
                     Tensor d_x = empty(y.sizes(), y.options());
                     if (d_x.numel() == 0) return std::vector<Tensor>{d_x};
                     const Tensor gc = contiguous(g);
                     kernels::kernels_for(y.device())
                         .softmax_backward({y.device(), y.dtype(), y.raw_data(), gc.raw_data(),
                                            d_x.raw_data(), s.outer, s.n, s.inner, log});
                     return std::vector<Tensor>{d_x};
                   });
  return out;
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) {
  return softmax_impl(x, dim, false, "softmax");
}
Tensor log_softmax(const Tensor& x, int64_t dim) {
  return softmax_impl(x, dim, true, "log_softmax");
}

}  // namespace ember
