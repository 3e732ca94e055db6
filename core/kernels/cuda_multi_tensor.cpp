// CUDA multi-tensor kernels: adapters to cuda/kernels/multi_tensor.cu.
#include "core/kernels/registration.h"
#include "cuda/kernels/multi_tensor.h"
#include "cuda/runtime.h"

namespace ember::kernels {

namespace {

void multi_tensor_norm(const MultiTensorNormArgs& a) {
  cuda::DeviceGuard guard(a.device.index);
  cuda::launch_multi_tensor_norm(a.tensors, a.count, a.norm_type, a.total, a.max_norm, a.clip_coef,
                                 a.workspace, cuda::current_stream(a.device.index));
}

size_t multi_tensor_norm_workspace_bytes(const MultiTensorQuery& q) {
  return cuda::multi_tensor_norm_workspace_bytes(q.tensors, q.count);
}

void multi_tensor_scale(const MultiTensorScaleArgs& a) {
  cuda::DeviceGuard guard(a.device.index);
  cuda::launch_multi_tensor_scale(a.tensors, a.count, a.scale,
                                  cuda::current_stream(a.device.index));
}

}  // namespace

void register_cuda_multi_tensor(KernelTable& t) {
  t.multi_tensor_norm = &multi_tensor_norm;
  t.multi_tensor_norm_workspace_bytes = &multi_tensor_norm_workspace_bytes;
  t.multi_tensor_scale = &multi_tensor_scale;
}

}  // namespace ember::kernels
