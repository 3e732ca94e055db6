// CUDA indexing: adapters to cuda/kernels/index.cu (bounds recorded on the device,
// raised at the next synchronisation; deterministic backward by sorting) and
// randperm.
#include "core/kernels/registration.h"
#include "cuda/kernels/index.h"
#include "cuda/runtime.h"

namespace ember::kernels {

namespace {

void index_select(const IndexSelectArgs& a) {
  cuda::DeviceGuard guard(a.device.index);
  cuda::launch_index_select(a.dtype, a.op, a.x, a.index, a.out, a.outer, a.n, a.k, a.inner,
                            cuda::current_stream(a.device.index));
}

void index_add(const IndexAddArgs& a) {
  cuda::DeviceGuard guard(a.device.index);
  cuda::launch_index_add(a.dtype, a.src, a.index, a.dst, a.outer, a.n, a.k, a.inner, a.workspace,
                         cuda::current_stream(a.device.index));
}

size_t scatter_workspace_bytes(const ScatterQuery& q) {
  cuda::DeviceGuard guard(q.device.index);
  return cuda::scatter_workspace_bytes(q.n, q.rows);
}

void gather(const GatherArgs& a) {
  cuda::DeviceGuard guard(a.device.index);
  cuda::launch_gather(a.dtype, a.op, a.x, a.index, a.out, a.ndim, a.dim, a.sizes, a.x_sizes, a.n,
                      a.targets, cuda::current_stream(a.device.index));
}

void scatter_add(const ScatterAddArgs& a) {
  cuda::DeviceGuard guard(a.device.index);
  cuda::launch_scatter_add(a.dtype, a.src, a.index, a.dst, a.ndim, a.dim, a.sizes, a.x_sizes, a.n,
                           a.workspace, cuda::current_stream(a.device.index));
}

void randperm(const RandpermArgs& a) {
  cuda::DeviceGuard guard(a.device.index);
  cuda::launch_randperm(a.out, a.n, a.seed, a.offset, a.workspace,
                        cuda::current_stream(a.device.index));
}

size_t randperm_workspace_bytes(const ScatterQuery& q) {
  cuda::DeviceGuard guard(q.device.index);
  return cuda::randperm_workspace_bytes(q.n);
}

}  // namespace

void register_cuda_index(KernelTable& t) {
  t.index_select = &index_select;
  t.index_add = &index_add;
  t.index_add_workspace_bytes = &scatter_workspace_bytes;
  t.gather = &gather;
  t.scatter_add = &scatter_add;
  t.scatter_add_workspace_bytes = &scatter_workspace_bytes;
  t.randperm = &randperm;
  t.randperm_workspace_bytes = &randperm_workspace_bytes;
}

}  // namespace ember::kernels
