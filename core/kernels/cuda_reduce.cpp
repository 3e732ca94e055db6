// CUDA reductions: adapters to cuda/kernels/reduce.cu (deterministic, two passes
// through a workspace when one would leave the GPU idle).
#include "core/kernels/registration.h"
#include "cuda/kernels/reduce.h"
#include "cuda/runtime.h"

namespace ember::kernels {

namespace {

void sum(const SumArgs& a) {
  cuda::DeviceGuard guard(a.device.index);
  cuda::launch_sum(a.dtype, a.x, a.y, a.outer, a.n, a.inner,
                   a.mean ? 1.0 / static_cast<double>(a.n) : 1.0, a.workspace,
                   cuda::current_stream(a.device.index));
}
size_t sum_workspace_bytes(const ReduceShape& s) {
  return cuda::reduce_workspace_bytes(cuda::ReduceKind::Sum, s.dtype, s.outer, s.n, s.inner);
}

void max(const MaxArgs& a) {
  cuda::DeviceGuard guard(a.device.index);
  cuda::launch_max(a.dtype, a.x, a.values, a.indices, a.outer, a.n, a.inner, a.workspace,
                   cuda::current_stream(a.device.index), a.min);
}
size_t max_workspace_bytes(const ReduceShape& s) {
  return cuda::reduce_workspace_bytes(cuda::ReduceKind::Max, s.dtype, s.outer, s.n, s.inner);
}

void max_backward(const MaxBackwardArgs& a) {
  cuda::DeviceGuard guard(a.device.index);
  cuda::launch_max_backward(a.dtype, a.d_out, a.indices, a.d_inp, a.outer, a.n, a.inner,
                            cuda::current_stream(a.device.index));
}

}  // namespace

void register_cuda_reduce(KernelTable& t) {
  t.sum = &sum;
  t.sum_workspace_bytes = &sum_workspace_bytes;
  t.max = &max;
  t.max_workspace_bytes = &max_workspace_bytes;
  t.max_backward = &max_backward;
}

}  // namespace ember::kernels
