// mse_loss: mean/sum/none of (pred - target)^2, the seam behind nn::MSELoss.
//
// A fused op with a composed fallback, chosen by one predicate (the device's
// mse_fused_supported for the dtype, and a Mean or Sum reduction). Fused (CUDA:
// cuda/kernels/mse.cu), one kernel reads pred and target once: it reduces the loss
// deterministically and, when a gradient will be needed, writes d_pred = scale
// (pred - target) in the same pass (3 accesses per element). Backward then only
// scales that stashed gradient by the incoming scalar, on the device, and skips
// even that when it is 1 (the usual loss.backward()). Without grad the same kernel
// runs without the gradient write. Elsewhere (CPU, Reduction::None) it is
// composed from the element-wise ops.
#include <limits>
#include <memory>

#include "core/alloc_site.h"
#include "core/autocast.h"
#include "core/autograd.h"
#include "core/kernel_table.h"
#include "core/ops.h"

namespace ember {

namespace {

void check_mse(const Tensor& pred, const Tensor& target) {
  check_defined("mse_loss", pred, "prediction");
  check_defined("mse_loss", target, "target");
  check_floating("mse_loss", pred);
  check_same_device("mse_loss", pred, target);
  check_same_dtype("mse_loss", pred, target);
  EMBER_CHECK(pred.sizes() == target.sizes(), "mse_loss: prediction of shape ",
              shape_str(pred.sizes()), " and target of shape ", shape_str(target.sizes()),
              " differ; reshape one so they match");
}

// The stashed gradient, handed to the engine on the first backward; a second
// backward through a retained graph recomputes it from the saved inputs.
struct MseStash {
  Tensor d_pred;  // scale * (pred - target), contiguous, shaped like pred
};

Tensor mse_loss_fused(const Tensor& pred, const Tensor& target, Reduction r, bool gp, bool gt) {
  const bool want_grad = gp || gt;
  const int64_t n = pred.numel();
  const double grad_scale = r == Reduction::Mean ? 2.0 / static_cast<double>(n) : 2.0;
  const double loss_scale = r == Reduction::Mean ? 1.0 / static_cast<double>(n) : 1.0;
  Tensor p, t, d_pred, loss;
  {
    NoGradGuard no_grad;
    p = pred.detach().contiguous();
    t = target.detach().contiguous();
    const TensorOptions opts = TensorOptions(pred.dtype()).device(pred.device());
    d_pred = want_grad ? empty(pred.sizes(), opts) : Tensor();
    loss = empty({}, opts);
    const kernels::KernelTable& k = kernels::kernels_for(pred.device());
    const size_t ws_bytes = k.mse_workspace_bytes({pred.device(), pred.dtype(), n});
    Tensor ws = empty({static_cast<int64_t>((ws_bytes + 7) / 8)},
                      TensorOptions(kFloat64).device(pred.device()));
    k.mse_fused({pred.device(), pred.dtype(), p.raw_data(), t.raw_data(),
                 want_grad ? d_pred.raw_data() : nullptr, loss.raw_data(), n, grad_scale,
                 n == 0 ? 0.0 : loss_scale, ws.raw_data()});
    if (n == 0 && r == Reduction::Mean) fill_(loss, std::numeric_limits<double>::quiet_NaN());
  }
  if (want_grad) {
    auto stash = std::make_shared<MseStash>(MseStash{d_pred});
    attach_grad_fn(loss, "MseLossBackward", {&pred, &target}, {p, t},
                   [stash, grad_scale, gp, gt](const Tensor& g, const SavedTensors& s) {
                     Tensor d;
                     if (stash->d_pred.defined()) {
                       d = std::move(stash->d_pred);  // ours alone, so scaling it in place is safe
                       stash->d_pred = Tensor();
                       const Tensor gc = g.contiguous();
                       kernels::kernels_for(d.device())
                           .scale_by_device_scalar(
                               {d.device(), d.dtype(), d.raw_data(), gc.raw_data(), d.numel()});
                     } else {
                       d = mul(mul(sub(s[0], s[1]), g), grad_scale);
                     }
                     return std::vector<Tensor>{gp ? d : Tensor(), gt ? neg(d) : Tensor()};
                   });
  }
  return loss;
}

}  // namespace

Tensor mse_loss(const Tensor& pred, const Tensor& target, Reduction r) {
  if (autocast_widens(pred, target)) [[unlikely]] {
    // Autocast (core/autocast.h): mixed operands are computed in float32, as
    // PyTorch's autocast does for mse_loss.
    auto up = [](const Tensor& t) { return t.dtype() == kFloat32 ? t : cast(t, kFloat32); };
    return mse_loss(up(pred), up(target), r);
  }
  OpSite site("mse_loss");  // names its allocations (core/alloc_site.h)
  check_mse(pred, target);
  const bool needs_grad = any_requires_grad({&pred, &target});
  if (r != Reduction::None &&
      kernels::kernels_for(pred.device()).mse_fused_supported({pred.device(), pred.dtype()}))
    return mse_loss_fused(pred, target, r, needs_grad && pred.requires_grad(),
                          needs_grad && target.requires_grad());
  Tensor diff, out;
  {
    NoGradGuard no_grad;
    diff = sub(pred.detach(), target.detach());
    Tensor sq = mul(diff, diff);
    out = r == Reduction::None ? sq : r == Reduction::Sum ? sum(sq) : mean(sq);
  }
  if (needs_grad) {
    const double scale = r == Reduction::Mean ? 2.0 / static_cast<double>(pred.numel()) : 2.0;
    const bool gp = pred.requires_grad(), gt = target.requires_grad();
    // diff is our own fresh tensor, so saving it cannot be invalidated by the user.
    attach_grad_fn(
        out, "MseLossBackward", {&pred, &target}, [diff, scale, gp, gt](const Tensor& g) {
          Tensor d_pred = mul(mul(diff, g), scale);  // g: () or like diff
          return std::vector<Tensor>{gp ? d_pred : Tensor(), gt ? neg(d_pred) : Tensor()};
        });
  }
  return out;
}

}  // namespace ember
