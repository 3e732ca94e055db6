// The meta device (core/meta.h): a kernel for every family that computes nothing,
// while every query (fused-op predicates, workspace sizes) is answered by the
// table of the device the meta device mirrors, so ops take the same paths and ask
// the same bytes as they would there. Kernels that would make the mirrored CUDA
// device create a library workspace outside its allocator (cuBLAS, cuBLASLt) take
// it from the meta device's capacity. Its memory is this thread's meta allocator.
#include "core/base/error.h"
#include "core/kernels/registration.h"
#include "core/meta.h"
#include "cuda/blas.h"
#include "cuda/gemm_dispatch.h"

namespace ember::kernels {

namespace {

bool mirrors_cuda() { return meta_mirror() == DeviceType::CUDA; }

// `a` addressed to the mirrored device's table (index 0: its queries depend on
// sizes and dtypes alone).
template <typename Args>
Args on_mirror(Args a) {
  a.device = Device(meta_mirror());
  return a;
}
const KernelTable& mirror_table() { return table(meta_mirror()); }

// --- hooks
void check(int index) {
  EMBER_CHECK(index == 0, "device meta:", index, " does not exist; the meta device is meta");
}
memory::CachingAllocator& allocator(int) { return meta_allocator(); }
memory::Allocator& tensor_allocator(int) { return meta_allocator(); }
void* current_stream(int) { return nullptr; }
void check_not_capturing(int, const char*, const char*) {}
bool is_capturing(int) { return false; }
void synchronize(int) {}
int count() { return 1; }
bool autocasts(int) { return mirrors_cuda(); }

// --- kernels that compute nothing
template <typename Args>
void nothing(const Args&) {}

// Host -> meta copies nothing (there is nowhere to put it); reading a meta
// tensor's bytes out is refused before it gets here (Tensor::to).
void copy_bytes(const CopyBytesArgs& a) {
  if (!a.dst_device.is_meta()) ember::detail::throw_no_data(a.src_device, "copy to a real device");
}

void gemm(const GemmArgs&) {
  if (mirrors_cuda()) ember::detail::meta_uses_library(MetaLibrary::cublas);
}

void linear_fused(const LinearArgs& a) {
  if (mirrors_cuda() &&
      cuda::choose_linear_backend(a.dtype, a.m, a.n, a.k) == cuda::GemmBackend::Cublas)
    ember::detail::meta_uses_library(MetaLibrary::cublaslt);
}

bool linear_weight_grad_fused(const LinearWeightGradArgs& a) {
  // CUDA's answer (cuBLASLt with the BGRADB epilogue); the CPU has no fused Linear
  // and never gets here (its linear_fused_supported is false).
  if (!mirrors_cuda()) return false;
  if (!cuda::lt_linear_backward_weight_attempts(a.dtype, a.m, a.n, a.k, a.ldx)) return false;
  ember::detail::meta_uses_library(MetaLibrary::cublaslt);
  return true;
}

// --- queries, answered as the mirrored device answers them
size_t sum_workspace_bytes(const ReduceShape& s) {
  return mirror_table().sum_workspace_bytes(on_mirror(s));
}
size_t max_workspace_bytes(const ReduceShape& s) {
  return mirror_table().max_workspace_bytes(on_mirror(s));
}
bool linear_fused_supported(const DTypeQuery& q) {
  return mirror_table().linear_fused_supported(on_mirror(q));
}
bool linear_fuses_bias_grad(const DTypeQuery& q) {
  return mirror_table().linear_fuses_bias_grad(on_mirror(q));
}
bool mse_fused_supported(const DTypeQuery& q) {
  return mirror_table().mse_fused_supported(on_mirror(q));
}
size_t mse_workspace_bytes(const SizeQuery& q) {
  return mirror_table().mse_workspace_bytes(on_mirror(q));
}

}  // namespace

void register_meta(KernelTable& t) {
  t.hooks.check = &check;
  t.hooks.allocator = &allocator;
  t.hooks.tensor_allocator = &tensor_allocator;
  t.hooks.current_stream = &current_stream;
  t.hooks.check_not_capturing = &check_not_capturing;
  t.hooks.is_capturing = &is_capturing;
  t.hooks.synchronize = &synchronize;
  t.hooks.count = &count;
  t.hooks.autocasts = &autocasts;
  t.hooks.pinned_staging = false;
  t.hooks.holds_data = false;

  t.unary = &nothing<UnaryArgs>;
  t.unary_backward = &nothing<UnaryBackwardArgs>;
  t.binary = &nothing<BinaryArgs>;
  t.binary_backward = &nothing<BinaryBackwardArgs>;
  t.cast = &nothing<CastArgs>;
  t.fill = &nothing<FillArgs>;
  t.random = &nothing<RandomArgs>;
  t.copy_bytes = &copy_bytes;
  t.sum = &nothing<SumArgs>;
  t.sum_workspace_bytes = &sum_workspace_bytes;
  t.max = &nothing<MaxArgs>;
  t.max_workspace_bytes = &max_workspace_bytes;
  t.max_backward = &nothing<MaxBackwardArgs>;
  t.gemm = &gemm;
  t.linear_fused_supported = &linear_fused_supported;
  t.linear_fused = &linear_fused;
  t.linear_weight_grad_fused = &linear_weight_grad_fused;
  t.linear_fuses_bias_grad = &linear_fuses_bias_grad;
  t.mse_fused_supported = &mse_fused_supported;
  t.mse_fused = &nothing<MseArgs>;
  t.mse_workspace_bytes = &mse_workspace_bytes;
  t.scale_by_device_scalar = &nothing<ScaleByScalarArgs>;
  t.fused_sgd = &nothing<FusedSgdArgs>;
  t.fused_adam = &nothing<FusedAdamArgs>;
}

}  // namespace ember::kernels

namespace ember::detail {

void throw_no_data(Device device, const char* what) {
  EMBER_FAIL(what, ": a tensor on ", device,
             " has a shape but no values; memory prediction (predict_memory) runs the step on "
             "the meta device and needs shape-only code: read values (item(), to_vector(), "
             "printing, copies to a real device) only when the device is not meta "
             "(device.is_meta()), or outside the predicted step");
}

}  // namespace ember::detail
