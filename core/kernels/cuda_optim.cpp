// CUDA optimizer updates: the fused multi-tensor kernels (cuda/kernels/fused_optim.cu).
#include "core/kernels/registration.h"
#include "cuda/kernels/fused_optim.h"
#include "cuda/runtime.h"

namespace ember::kernels {

namespace {

void fused_sgd(const FusedSgdArgs& a) {
  cuda::DeviceGuard guard(a.device.index);
  cuda::launch_fused_sgd(a.tensors, a.count, a.config, cuda::current_stream(a.device.index));
}

void fused_adam(const FusedAdamArgs& a) {
  cuda::DeviceGuard guard(a.device.index);
  cuda::launch_fused_adam(a.tensors, a.count, a.config, cuda::current_stream(a.device.index));
}

}  // namespace

void register_cuda_optim(KernelTable& t) {
  t.fused_sgd = &fused_sgd;
  t.fused_adam = &fused_adam;
}

}  // namespace ember::kernels
