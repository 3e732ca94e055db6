// Multi-tensor ops: the norm of many tensors together and their scaling by a
// device scalar, one call of the device's kernel (core/kernel_table.h) each.
// nn::utils::clip_grad_norm_ is made of them.
#include <cmath>
#include <vector>

#include "core/alloc_site.h"
#include "core/autograd.h"
#include "core/kernel_table.h"
#include "core/ops.h"

namespace ember {

namespace {

// The tensors as spans, after checking them; all on one device, returned.
Device spans_of(const char* op, const std::vector<Tensor>& tensors, std::vector<TensorSpan>& out) {
  EMBER_CHECK(!tensors.empty(), op, ": expects at least one tensor");
  const Device device = tensors.front().defined() ? tensors.front().device() : kCPU;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    EMBER_CHECK(t.defined(), op, ": tensor ", i, " is undefined");
    EMBER_CHECK(t.dtype() == kFloat32 || t.dtype() == kFloat64 || t.dtype() == kBFloat16, op,
                ": tensor ", i, " is ", t.dtype(), "; float32, float64 or bfloat16 expected");
    EMBER_CHECK(t.device() == device, op, ": tensor ", i, " is on ", t.device(), ", tensor 0 on ",
                device, "; all tensors must be on one device");
    EMBER_CHECK(t.is_contiguous(), op, ": tensor ", i, " of shape ", shape_str(t.sizes()),
                " is not contiguous");
    out.push_back(TensorSpan{t.raw_data(), t.numel(), t.dtype()});
  }
  return device;
}

void check_norm_type(const char* op, double p) {
  EMBER_CHECK(p >= 0 && !std::isnan(p), op, ": norm_type must be >= 0 (or inf), got ", p);
}

Tensor run_norm(const char* op, const std::vector<Tensor>& tensors, double p, double max_norm,
                Tensor* coef) {
  OpSite site(op);
  check_norm_type(op, p);
  std::vector<TensorSpan> spans;
  const Device device = spans_of(op, tensors, spans);
  const auto count = static_cast<int64_t>(spans.size());
  const kernels::KernelTable& k = kernels::kernels_for(device);
  const TensorOptions f64 = TensorOptions(kFloat64).device(device);
  const size_t ws_bytes = k.multi_tensor_norm_workspace_bytes({device, spans.data(), count});
  Tensor workspace = ws_bytes ? empty({static_cast<int64_t>((ws_bytes + 7) / 8)}, f64) : Tensor();
  Tensor total = empty({}, f64);
  if (coef) *coef = empty({}, f64);
  k.multi_tensor_norm({device, spans.data(), count, p, total.data_ptr<double>(), max_norm,
                       coef ? coef->data_ptr<double>() : nullptr,
                       workspace.defined() ? workspace.raw_data() : nullptr});
  return total;
}

}  // namespace

Tensor multi_tensor_norm(const std::vector<Tensor>& tensors, double norm_type) {
  return run_norm("multi_tensor_norm", tensors, norm_type, 0.0, nullptr);
}

std::pair<Tensor, Tensor> multi_tensor_norm_clip_coef(const std::vector<Tensor>& tensors,
                                                      double norm_type, double max_norm) {
  EMBER_CHECK(!std::isnan(max_norm), "multi_tensor_norm_clip_coef: max_norm is NaN");
  Tensor coef;
  Tensor norm = run_norm("multi_tensor_norm_clip_coef", tensors, norm_type, max_norm, &coef);
  return {norm, coef};
}

void multi_tensor_mul_(const std::vector<Tensor>& tensors, const Tensor& scale) {
  const char* op = "multi_tensor_mul_";
  std::vector<TensorSpan> spans;
  const Device device = spans_of(op, tensors, spans);
  check_defined(op, scale, "scale");
  EMBER_CHECK(scale.dtype() == kFloat64 && scale.numel() == 1 && scale.device() == device, op,
              ": scale must be a one-element float64 tensor on ", device, ", got ", scale.dtype(),
              " of shape ", shape_str(scale.sizes()), " on ", scale.device());
  for (size_t i = 0; i < tensors.size(); ++i) check_inplace(op, tensors[i]);
  kernels::kernels_for(device).multi_tensor_scale({device, spans.data(),
                                                   static_cast<int64_t>(spans.size()),
                                                   static_cast<const double*>(scale.raw_data())});
  for (const Tensor& t : tensors) t.bump_version();
}

}  // namespace ember
