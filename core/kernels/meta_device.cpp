// The meta device (core/meta.h): a kernel for every family that computes nothing,
// while every query (fused-op predicates, workspace sizes) is answered by the
// table of the device the meta device mirrors (both generated from the family
// list, core/base/kernel_families.h), so ops take the same paths and ask
// the same bytes as they would there. Kernels that would make the mirrored CUDA
// device create a library workspace outside its allocator (cuBLAS, cuBLASLt) take
// it from the meta device's capacity. Its memory is this thread's meta allocator.
#include "core/base/error.h"
#include "core/kernels/cpu_linalg.h"
#include "core/kernels/registration.h"
#include "core/meta.h"
#include "cuda/blas.h"
#include "cuda/gemm_dispatch.h"

namespace ember::kernels {

namespace {

bool mirrors_cuda() {
  return meta_mirror() == DeviceType::CUDA;
}

// `a` addressed to the mirrored device's table.
template <typename Args>
Args on_mirror(Args a) {
  a.device = Device(meta_mirror());
  return a;
}
const KernelTable& mirror_table() {
  return table(meta_mirror());
}

// --- hooks
void check(int index) {
  EMBER_CHECK(index == 0, "device meta:", index, " does not exist; the meta device is meta");
}
memory::CachingAllocator& allocator(int) {
  return meta_allocator();
}
memory::Allocator& tensor_allocator(int) {
  return meta_allocator();
}
void* current_stream(int) {
  return nullptr;
}
// A MetaCaptureScope's simulated capture: CUDA's refusals (cuda/runtime.cpp's words).
bool is_capturing(int) {
  return ember::detail::meta_capturing();
}
void check_not_capturing(int, const char* what, const char* action) {
  EMBER_CHECK(!ember::detail::meta_capturing(), what, ": cannot ", action,
              " while a CUDA graph is being captured (cuda::Graph::capture; simulated on the "
              "meta device); move it outside the captured step");
}
// A draw inside the simulated capture: the generator advances as a replay's would; the
// counters' word is one the meta device's kernels never read.
const uint64_t* capture_random(int, const void*, uint64_t* host_offset, uint64_t n,
                               uint64_t* offset_in_step) {
  static const uint64_t word = 0;
  *offset_in_step = 0;
  *host_offset += n;
  return &word;
}
void synchronize(int index) {  // nothing to wait for; refused in a capture, as on CUDA
  check_not_capturing(index, "synchronize()", "synchronise with the host");
}
int count() {
  return 1;
}
bool autocasts(int) {
  return mirrors_cuda();
}

// --- kernels that compute nothing, but tell the scope's observer (core/meta.h)
template <auto method, typename Args>
void tell(const Args& a) {
  if (MetaKernelObserver* o = ember::detail::meta_observer()) (o->*method)(a);
}
// A hand-written compute kernel (below), then the observer.
template <auto method, auto kernel, typename Args>
void run_then_tell(const Args& a) {
  kernel(a);
  tell<method>(a);
}
// A hand-written decision (below); the observer hears of the kernels taken.
template <auto method, auto decide, typename Args>
bool decide_then_tell(const Args& a) {
  const bool taken = decide(a);
  if (taken) tell<method>(a);
  return taken;
}

// Host -> meta copies nothing (there is nowhere to put it); reading a meta
// tensor's bytes out is refused before it gets here (Tensor::to).
void copy_bytes(const CopyBytesArgs& a) {
  if (!a.dst_device.is_meta()) ember::detail::throw_no_data(a.src_device, "copy to a real device");
}

void gemm(const GemmArgs&) {
  if (mirrors_cuda()) ember::detail::meta_uses_library(MetaLibrary::cublas);
}

// Linear's products: where the mirrored CUDA device would run them (cuda/
// gemm_dispatch.h plans from sizes, dtypes, alignment and EMBER_GEMM; the meta
// device's addresses keep the allocator's alignment), and the cuBLAS(Lt)
// workspace that path makes outside the allocator. Mirroring the CPU: its fused
// Linear allocates nothing of its own, and its backward products are taken where
// the CPU would take them (cpu_linalg.h's *_takes), so linear() allocates alike.
cuda::GemmKernel plan(cuda::LinearGemm& g) {
  return cuda::plan_linear(g, 0);
}

void linear_fused(const LinearArgs& a) {
  if (!mirrors_cuda()) return;
  cuda::LinearGemm g;
  g.product = cuda::LinearProduct::Forward;
  g.dtype = a.dtype;
  g.rows = a.m, g.out = a.n, g.in = a.k;
  g.x = a.x, g.ldx = a.ldx, g.w = a.w, g.ldw = a.ldw;
  g.b = a.b, g.pre = a.pre, g.act = a.act, g.result = a.y;
  if (plan(g) == cuda::GemmKernel::Cublas) ember::detail::meta_uses_library(MetaLibrary::cublaslt);
}

bool linear_input_grad(const LinearInputGradArgs& a) {
  if (!mirrors_cuda()) return cpu::linear_input_grad_takes(a);
  cuda::LinearGemm g;
  g.product = cuda::LinearProduct::InputGrad;
  g.dtype = a.dtype;
  g.rows = a.m, g.out = a.n, g.in = a.k;
  g.d_y = a.d_y, g.ldd = a.ldd, g.w = a.w, g.ldw = a.ldw, g.result = a.d_x;
  const cuda::GemmKernel k = plan(g);
  if (k == cuda::GemmKernel::Cublas) ember::detail::meta_uses_library(MetaLibrary::cublas);
  return k != cuda::GemmKernel::None;
}

bool linear_weight_grad_fused(const LinearWeightGradArgs& a) {
  if (!mirrors_cuda()) return cpu::linear_weight_grad_takes(a);
  if (cuda::weight_grad_into(a)) {  // cuBLASLt alone, as the CUDA device
    if (a.d_b != nullptr ||
        !cuda::lt_linear_backward_weight_attempts(a.dtype, a.m, a.n, a.k, a.ldx))
      return false;
    ember::detail::meta_uses_library(MetaLibrary::cublaslt);
    return true;
  }
  cuda::LinearGemm g;
  g.product = cuda::LinearProduct::WeightGrad;
  g.dtype = a.dtype;
  g.rows = a.m, g.out = a.n, g.in = a.k;
  g.x = a.x, g.ldx = a.ldx, g.d_y = a.d_y, g.ldd = a.n, g.result = a.d_w, g.d_b = a.d_b;
  const cuda::GemmKernel k = plan(g);
  if (k != cuda::GemmKernel::Cublas) return k != cuda::GemmKernel::None;
  // cuBLASLt's BGRADB, attempted for 32-bit sizes. Beyond them CUDA falls back to
  // ours where TMA can address the operands, else composes; the prediction assumes
  // the composition (sizes no test or benchmark reaches).
  if (!cuda::lt_linear_backward_weight_attempts(a.dtype, a.m, a.n, a.k, a.ldx)) return false;
  ember::detail::meta_uses_library(MetaLibrary::cublaslt);
  return true;
}

// --- the generated registrations: compute families compute nothing; queries and
// predicates answer as the mirrored device (index 0: its answers depend on sizes
// and dtypes alone). Decisions are registered by hand above.
template <auto family, typename R, typename Args>
R as_mirror(const Args& a) {
  return (mirror_table().*family)(on_mirror(a));
}

template <FamilyKind kind, auto family, auto method, typename R, typename Args>
void generate(R (*&slot)(const Args&)) {
  if constexpr (kind == FamilyKind::compute)
    slot = &tell<method, Args>;
  else if constexpr (kind == FamilyKind::query || kind == FamilyKind::predicate)
    slot = &as_mirror<family, R, Args>;
}

}  // namespace

void register_meta(KernelTable& t) {
  t.hooks.check = &check;
  t.hooks.allocator = &allocator;
  t.hooks.tensor_allocator = &tensor_allocator;
  t.hooks.current_stream = &current_stream;
  t.hooks.check_not_capturing = &check_not_capturing;
  t.hooks.is_capturing = &is_capturing;
  t.hooks.capture_random = &capture_random;
  t.hooks.synchronize = &synchronize;
  t.hooks.count = &count;
  t.hooks.autocasts = &autocasts;
  t.hooks.pinned_staging = false;
  t.hooks.holds_data = false;

#define EMBER_META_FAMILY(name, R, Args, kind) \
  generate<FamilyKind::kind, &KernelTable::name, &MetaKernelObserver::name>(t.name);
  EMBER_KERNEL_FAMILIES(EMBER_META_FAMILY)
#undef EMBER_META_FAMILY
  // The families whose meta kernel differs from the generated one.
  t.copy_bytes = &run_then_tell<&MetaKernelObserver::copy_bytes, &copy_bytes, CopyBytesArgs>;
  t.gemm = &run_then_tell<&MetaKernelObserver::gemm, &gemm, GemmArgs>;
  t.linear_fused = &run_then_tell<&MetaKernelObserver::linear_fused, &linear_fused, LinearArgs>;
  t.linear_weight_grad_fused = &decide_then_tell<&MetaKernelObserver::linear_weight_grad_fused,
                                                 &linear_weight_grad_fused, LinearWeightGradArgs>;
  t.linear_input_grad = &decide_then_tell<&MetaKernelObserver::linear_input_grad,
                                          &linear_input_grad, LinearInputGradArgs>;
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
