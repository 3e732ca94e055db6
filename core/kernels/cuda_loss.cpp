// CUDA losses: the fused MSE (loss and gradient in one pass, deterministic).
#include "core/kernels/registration.h"
#include "cuda/kernels/mse.h"
#include "cuda/runtime.h"

namespace ember::kernels {

namespace {

bool mse_fused_supported(const DTypeQuery& q) { return is_floating(q.dtype); }

void mse_fused(const MseArgs& a) {
  cuda::DeviceGuard guard(a.device.index);
  cuda::launch_mse_fused(a.dtype, a.pred, a.target, a.d_pred, a.loss, a.n, a.grad_scale,
                         a.loss_scale, a.workspace, cuda::current_stream(a.device.index));
}

size_t mse_workspace_bytes(const SizeQuery& q) { return cuda::mse_workspace_bytes(q.n); }

void scale_by_device_scalar(const ScaleByScalarArgs& a) {
  cuda::DeviceGuard guard(a.device.index);
  cuda::launch_scale_by_device_scalar(a.dtype, a.d, a.g, a.n, cuda::current_stream(a.device.index));
}

}  // namespace

void register_cuda_loss(KernelTable& t) {
  t.mse_fused_supported = &mse_fused_supported;
  t.mse_fused = &mse_fused;
  t.mse_workspace_bytes = &mse_workspace_bytes;
  t.scale_by_device_scalar = &scale_by_device_scalar;
}

}  // namespace ember::kernels
