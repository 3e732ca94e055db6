// Kernels chosen by device from one table. Each kernel family is declared once
// here, with its argument struct (raw pointers, layouts, sizes: no Tensor); each
// device registers its implementation of every family it has (CPU loops in
// core/kernels/cpu_*.cpp, adapters to cuda/kernels/ in core/kernels/cuda_*.cpp),
// and ops call kernels_for(device).family(args) without ever testing the device.
// A device without a family's kernel throws, naming the family and the device.
//
// Fused ops (Linear with its epilogue, MSE with its gradient) also have a
// `*_supported` predicate: an op runs its fused kernel where the predicate says
// yes, and its composition of simpler ops (the reference) elsewhere, as MLX's
// fast primitives do. A device is one registration (core/kernels/registry.cpp).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/base/device.h"
#include "core/base/dtype.h"
#include "core/base/elementwise_ops.h"
#include "core/base/layout.h"
#include "core/base/multi_tensor.h"
#include "core/base/optim_math.h"
#include "core/memory/caching_allocator.h"

namespace ember::kernels {

// ------------------------------------------------------------------ element-wise

struct UnaryArgs {  // y = unary_forward(op, x, a) over n elements
  Device device;
  UnaryOp op;
  DType dtype;
  const void* x;
  StridedLayout xl;
  void* y;
  StridedLayout yl;
  int64_t n;
  double a;
};

struct UnaryBackwardArgs {  // out = unary_backward(op, g, s, a)
  Device device;
  UnaryOp op;
  DType dtype;
  const void* g;
  StridedLayout gl;
  const void* s;
  StridedLayout sl;
  void* out;
  StridedLayout ol;
  int64_t n;
  double a;
};

struct BinaryArgs {  // out = binary_forward(op, x, y, a)
  Device device;
  BinaryOp op;
  DType dtype;
  const void* x;
  StridedLayout xl;
  const void* y;
  StridedLayout yl;
  void* out;
  StridedLayout ol;
  int64_t n;
  double a;
};

struct BinaryBackwardArgs {  // out = binary_backward(op, side, g, x, y, a)
  Device device;
  BinaryOp op;
  int side;
  DType dtype;
  const void* g;
  StridedLayout gl;
  const void* x;
  StridedLayout xl;
  const void* y;
  StridedLayout yl;
  void* out;
  StridedLayout ol;
  int64_t n;
  double a;
};

struct CastArgs {  // y = (to) x, any two dtypes, strided
  Device device;
  DType from;
  const void* x;
  StridedLayout xl;
  DType to;
  void* y;
  StridedLayout yl;
  int64_t n;
};

struct FillArgs {
  Device device;
  DType dtype;
  void* y;
  StridedLayout yl;
  int64_t n;
  double value;
};

// y[i] = lo + (hi - lo) U(seed, offset + i), or mean + std N(seed, offset + i)
// (core/base/random.h); y contiguous.
struct RandomArgs {
  Device device;
  DType dtype;
  void* y;
  int64_t n;
  uint64_t seed;
  uint64_t offset;
  bool normal;
  double p0, p1;  // lo, hi or mean, std
};

// Copies n contiguous bytes between two devices (either may be the host); the
// copy has finished when the call returns if the destination is the host. The
// table of the device that is not the host does the work.
struct CopyBytesArgs {
  Device device;  // whose table runs it
  void* dst;
  Device dst_device;
  const void* src;
  Device src_device;
  size_t n;
};

// ------------------------------------------------------------------ reductions

// x contiguous, seen as (outer, n, inner); the reduction runs over n (n >= 1).
struct SumArgs {  // y (outer, inner) = sum_k x[o, k, i], divided by n when mean
  Device device;
  DType dtype;
  const void* x;
  void* y;
  int64_t outer, n, inner;
  bool mean;
  void* workspace;  // sum_workspace_bytes of it, from the device's allocator
};
struct MaxArgs {  // values (may be null), indices = max and its first index over n
  Device device;
  DType dtype;
  const void* x;
  void* values;
  int64_t* indices;
  int64_t outer, n, inner;
  void* workspace;  // max_workspace_bytes of it
};
struct MaxBackwardArgs {  // d_inp[o, k, i] = k == indices[o, i] ? d_out[o, i] : 0
  Device device;
  DType dtype;
  const void* d_out;
  const int64_t* indices;
  void* d_inp;
  int64_t outer, n, inner;
};
struct ReduceShape {
  Device device;
  DType dtype;
  int64_t outer, n, inner;
};

// ------------------------------------------------------------------ matrix products

// One row-major operand: element (r, c) of batch b at
// data + b * batch_stride + (transposed ? c * ld + r : r * ld + c).
struct MatrixOperand {
  const void* data = nullptr;
  bool transposed = false;
  int64_t ld = 0;
  int64_t batch_stride = 0;  // 0: shared by every batch
};
struct GemmArgs {  // c_b (m, n) = a_b (m, k) b_b (k, n), c contiguous; m, n, k >= 1
  Device device;
  DType dtype;
  int64_t batch, m, n, k;
  MatrixOperand a, b;
  void* c;
};

// The fused Linear: y (m, n) = act(x (m, k) w (n, k)^T + b), rows K-contiguous
// (row strides ldx, ldw), y contiguous; pre (when not null) gets x w^T + b.
struct LinearArgs {
  Device device;
  DType dtype;
  int64_t m, n, k;
  const void* x;
  int64_t ldx;
  const void* w;
  int64_t ldw;
  const void* b;  // may be null
  void* y;
  void* pre;      // may be null
  Activation act;
};
// d_w (n, k) = d_y^T x and, when d_b is not null, d_b (n) = column sums of d_y in
// the same pass. Returns false, having done nothing, when it cannot (the op then
// composes). d_y (m, n) contiguous.
struct LinearWeightGradArgs {
  Device device;
  DType dtype;
  int64_t m, n, k;
  const void* x;
  int64_t ldx;
  const void* d_y;
  void* d_w;
  void* d_b;  // may be null
};
struct DTypeQuery {
  Device device;
  DType dtype;
};

// ------------------------------------------------------------------ losses

// The fused MSE: loss[0] = loss_scale * sum (pred - target)^2 and, when d_pred is
// not null, d_pred = grad_scale (pred - target) in the same pass; all contiguous.
struct MseArgs {
  Device device;
  DType dtype;
  const void* pred;
  const void* target;
  void* d_pred;
  void* loss;
  int64_t n;
  double grad_scale, loss_scale;
  void* workspace;  // mse_workspace_bytes of it
};
struct ScaleByScalarArgs {  // d[i] *= g[0], g a one-element tensor of dtype on the device
  Device device;
  DType dtype;
  void* d;
  const void* g;
  int64_t n;
};
struct SizeQuery {
  Device device;
  DType dtype;
  int64_t n;
};

// ------------------------------------------------------------------ optimizers

struct FusedSgdArgs {
  Device device;
  const OptimTensor* tensors;
  int64_t count;
  SgdConfig config;
};
struct FusedAdamArgs {
  Device device;
  const OptimTensor* tensors;
  int64_t count;
  AdamConfig config;
};

// ------------------------------------------------------------------ multi-tensor

// total[0] = the norm_type-norm of every element of every tensor taken together
// ((sum |x|^p)^(1/p) for finite p > 0; max |x| for p = inf; the count of non-zero
// elements for p = 0), accumulated in double, NaN propagating. When clip_coef is
// not null, clip_coef[0] = min(max_norm / (total + 1e-6), 1) by the same call.
// total and clip_coef are float64 on the device. On CUDA: one launch over all the
// tensors (per kMultiTensorSpansPerLaunch of them) writing partial sums to the
// workspace, and one single-block launch that sums them in a fixed order.
struct MultiTensorNormArgs {
  Device device;
  const TensorSpan* tensors;
  int64_t count;
  double norm_type;
  double* total;
  double max_norm;
  double* clip_coef;  // may be null
  void* workspace;    // multi_tensor_norm_workspace_bytes of it
};
struct MultiTensorQuery {
  Device device;
  const TensorSpan* tensors;
  int64_t count;
};
// tensors[i] *= scale[0] for every i (scale float64 on the device, read there: no
// host sync), each product formed in double and rounded to the tensor's dtype.
struct MultiTensorScaleArgs {
  Device device;
  const TensorSpan* tensors;
  int64_t count;
  const double* scale;
};

// ------------------------------------------------------------------ the table

// X(name, result, args): every kernel family. Adding one is a line here, its
// argument struct above, and a registration per device that has it.
#define EMBER_KERNEL_FAMILIES(X)                             \
  X(unary, void, UnaryArgs)                                  \
  X(unary_backward, void, UnaryBackwardArgs)                 \
  X(binary, void, BinaryArgs)                                \
  X(binary_backward, void, BinaryBackwardArgs)               \
  X(cast, void, CastArgs)                                    \
  X(fill, void, FillArgs)                                    \
  X(random, void, RandomArgs)                                \
  X(copy_bytes, void, CopyBytesArgs)                         \
  X(sum, void, SumArgs)                                      \
  X(sum_workspace_bytes, size_t, ReduceShape)                \
  X(max, void, MaxArgs)                                      \
  X(max_workspace_bytes, size_t, ReduceShape)                \
  X(max_backward, void, MaxBackwardArgs)                     \
  X(gemm, void, GemmArgs)                                    \
  X(linear_fused_supported, bool, DTypeQuery)                \
  X(linear_fused, void, LinearArgs)                          \
  X(linear_weight_grad_fused, bool, LinearWeightGradArgs)    \
  X(linear_fuses_bias_grad, bool, DTypeQuery)                \
  X(mse_fused_supported, bool, DTypeQuery)                   \
  X(mse_fused, void, MseArgs)                                \
  X(mse_workspace_bytes, size_t, SizeQuery)                  \
  X(scale_by_device_scalar, void, ScaleByScalarArgs)         \
  X(fused_sgd, void, FusedSgdArgs)                           \
  X(fused_adam, void, FusedAdamArgs)                         \
  X(multi_tensor_norm, void, MultiTensorNormArgs)            \
  X(multi_tensor_norm_workspace_bytes, size_t, MultiTensorQuery) \
  X(multi_tensor_scale, void, MultiTensorScaleArgs)

// What a device is, beside its kernels: where its memory comes from and how it
// synchronises.
struct DeviceHooks {
  // Throws ember::Error naming the device when `index` is not a usable one.
  void (*check)(int index) = nullptr;
  // The caching allocator of device `index` and the stream allocations are made
  // on (the current one of this thread; null for the host).
  memory::CachingAllocator& (*allocator)(int index) = nullptr;
  void* (*current_stream)(int index) = nullptr;
  // Throws when work on `index` is being captured into a CUDA graph, naming `what`
  // and the action a capture forbids; never for devices without graphs.
  void (*check_not_capturing)(int index, const char* what, const char* action) = nullptr;
  bool (*is_capturing)(int index) = nullptr;
  // Waits until the device has finished the work queued so far.
  void (*synchronize)(int index) = nullptr;
  // How many such devices there are (1 for the host).
  int (*count)() = nullptr;
  // Batches for it are assembled in pinned host memory and copied asynchronously
  // (nn::DataLoader); otherwise assembled in ordinary host tensors.
  bool pinned_staging = false;
};

struct KernelTable {
#define EMBER_KERNEL_FIELD(name, R, Args) R (*name)(const Args&) = nullptr;
  EMBER_KERNEL_FAMILIES(EMBER_KERNEL_FIELD)
#undef EMBER_KERNEL_FIELD
  DeviceHooks hooks;
};

inline constexpr int kDeviceTypes = 2;  // DeviceType's values: CPU, CUDA

// The table of `type`, built once (every device's registration runs on first use).
const KernelTable& table(DeviceType type);
inline const KernelTable& kernels_for(Device device) { return table(device.type); }

// Registration: each device's file fills its table (core/kernels/registry.cpp
// calls them in order, once); families a device leaves out throw when called,
// naming the family and the device.
void register_cpu(KernelTable& t);
void register_cuda(KernelTable& t);

}  // namespace ember::kernels

namespace ember {

// Device services for ops and tensors, through the table: no caller tests the
// device type.
// Throws ember::Error naming `device` when it does not exist.
inline void check_device(Device device) { kernels::kernels_for(device).hooks.check(device.index); }
// Throws when `device`'s work is being captured into a CUDA graph (cuda/graph.h):
// "<what>: cannot <action> while a CUDA graph is being captured ...".
inline void check_not_capturing(Device device, const char* what,
                                const char* action = "synchronise with the host") {
  kernels::kernels_for(device).hooks.check_not_capturing(device.index, what, action);
}
inline bool is_capturing(Device device) {
  return kernels::kernels_for(device).hooks.is_capturing(device.index);
}

}  // namespace ember
