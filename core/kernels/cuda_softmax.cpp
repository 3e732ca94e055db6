// CUDA softmax and log_softmax: adapters to cuda/kernels/softmax.cu.
#include "core/kernels/registration.h"
#include "cuda/kernels/softmax.h"
#include "cuda/runtime.h"

namespace ember::kernels {

namespace {

void softmax(const SoftmaxArgs& a) {
  cuda::DeviceGuard guard(a.device.index);
  cuda::launch_softmax(a.dtype, a.x, a.y, a.outer, a.n, a.inner, a.log,
                       cuda::current_stream(a.device.index));
}

void softmax_backward(const SoftmaxBackwardArgs& a) {
  cuda::DeviceGuard guard(a.device.index);
  cuda::launch_softmax_backward(a.dtype, a.y, a.d_y, a.d_x, a.outer, a.n, a.inner, a.log,
                                cuda::current_stream(a.device.index));
}

}  // namespace

void register_cuda_softmax(KernelTable& t) {
  t.softmax = &softmax;
  t.softmax_backward = &softmax_backward;
}

}  // namespace ember::kernels
