// CUDA scans and sorting: adapters to cuda/kernels/sort.cu.
#include "core/kernels/registration.h"
#include "cuda/kernels/sort.h"
#include "cuda/runtime.h"

namespace ember::kernels {

namespace {

void cumsum(const CumsumArgs& a) {
  cuda::DeviceGuard guard(a.device.index);
  cuda::launch_cumsum(a.dtype, a.x, a.y, a.outer, a.n, a.inner, a.reverse,
                      cuda::current_stream(a.device.index));
}

void sort(const SortArgs& a) {
  cuda::DeviceGuard guard(a.device.index);
  cuda::launch_sort(a.dtype, a.x, a.indices, a.rows, a.n, a.descending, a.workspace,
                    cuda::current_stream(a.device.index));
}
size_t sort_workspace_bytes(const SortQuery& q) {
  return cuda::sort_workspace_bytes(q.rows, q.n);
}

}  // namespace

void register_cuda_sort(KernelTable& t) {
  t.cumsum = &cumsum;
  t.sort = &sort;
  t.sort_workspace_bytes = &sort_workspace_bytes;
}

}  // namespace ember::kernels
