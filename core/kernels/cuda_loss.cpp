// CUDA losses: the fused MSE and cross-entropy (loss and gradient in one pass,
// deterministic).
#include "core/kernels/registration.h"
#include "cuda/kernels/cross_entropy.h"
#include "cuda/kernels/mse.h"
#include "cuda/runtime.h"

namespace ember::kernels {

namespace {

bool mse_fused_supported(const DTypeQuery& q) {
  return is_floating(q.dtype);
}

void mse_fused(const MseArgs& a) {
  cuda::DeviceGuard guard(a.device.index);
  cuda::launch_mse_fused(a.dtype, a.pred, a.target, a.d_pred, a.loss, a.n, a.grad_scale,
                         a.loss_scale, a.workspace, cuda::current_stream(a.device.index));
}

size_t mse_workspace_bytes(const SizeQuery& q) {
  return cuda::mse_workspace_bytes(q.n);
}

void scale_by_device_scalar(const ScaleByScalarArgs& a) {
  cuda::DeviceGuard guard(a.device.index);
  cuda::launch_scale_by_device_scalar(a.dtype, a.d, a.g, a.n, cuda::current_stream(a.device.index));
}

bool cross_entropy_fused_supported(const CrossEntropyQuery& q) {
  return cuda::cross_entropy_supported(q.dtype, q.classes);
}

void cross_entropy_fused(const CrossEntropyArgs& a) {
  cuda::DeviceGuard guard(a.device.index);
  cuda::launch_cross_entropy(a.dtype, a.op, a.logits, a.target, a.d_logits, a.loss, a.rows,
                             a.classes, a.ignore_index, a.label_smoothing, a.reduction, a.workspace,
                             cuda::current_stream(a.device.index));
}

size_t cross_entropy_workspace_bytes(const CrossEntropyQuery& q) {
  return cuda::cross_entropy_workspace_bytes(q.rows);
}

}  // namespace

void register_cuda_loss(KernelTable& t) {
  t.cross_entropy_fused_supported = &cross_entropy_fused_supported;
  t.cross_entropy_fused = &cross_entropy_fused;
  t.cross_entropy_workspace_bytes = &cross_entropy_workspace_bytes;
  t.mse_fused_supported = &mse_fused_supported;
  t.mse_fused = &mse_fused;
  t.mse_workspace_bytes = &mse_workspace_bytes;
  t.scale_by_device_scalar = &scale_by_device_scalar;
}

}  // namespace ember::kernels
