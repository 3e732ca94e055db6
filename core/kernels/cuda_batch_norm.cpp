// CUDA batch norm: the adapter of the fused kernels (cuda/kernels/batch_norm.cu)
// and its four registrations, all in register_cuda_batch_norm below.
#include <cstdlib>
#include <string>

#include "core/kernels/registration.h"
#include "cuda/kernels/batch_norm.h"
#include "cuda/runtime.h"

namespace ember::kernels {

namespace {

// On unless EMBER_BATCH_NORM_FUSED=0 (then batch_norm composes on CUDA too, as
// EMBER_RMS_NORM_FUSED does for rms_norm).
bool batch_norm_fused_supported(const BatchNormQuery& q) {
  static const bool on = [] {
    const char* e = std::getenv("EMBER_BATCH_NORM_FUSED");
    return e == nullptr || std::string(e) != "0";
  }();
  return on && cuda::batch_norm_supported(q.dtype, q.n, q.c, q.m);
}

void batch_norm_fused(const BatchNormArgs& a) {
  cuda::DeviceGuard guard(a.device.index);
  cuda::launch_batch_norm(a.dtype, a.x, a.w, a.b, a.running_mean, a.running_var, a.y, a.mean,
                          a.invstd, a.n, a.c, a.m, a.training, a.momentum, a.eps, a.workspace,
                          cuda::current_stream(a.device.index));
}

void batch_norm_backward_fused(const BatchNormBackwardArgs& a) {
  cuda::DeviceGuard guard(a.device.index);
  cuda::launch_batch_norm_backward(a.dtype, a.d_y, a.x, a.w, a.mean, a.invstd, a.d_x, a.d_w, a.d_b,
                                   a.n, a.c, a.m, a.training, a.workspace,
                                   cuda::current_stream(a.device.index));
}

// The sizes decide it (no device call): the meta device asks it without a GPU.
size_t batch_norm_workspace_bytes(const BatchNormQuery& q) {
  return cuda::batch_norm_workspace_bytes(q.dtype, q.n, q.c, q.m);
}

}  // namespace

void register_cuda_batch_norm(KernelTable& t) {
  t.batch_norm_fused_supported = &batch_norm_fused_supported;
  t.batch_norm_fused = &batch_norm_fused;
  t.batch_norm_backward_fused = &batch_norm_backward_fused;
  t.batch_norm_workspace_bytes = &batch_norm_workspace_bytes;
}

}  // namespace ember::kernels
