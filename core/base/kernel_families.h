// The kernel families: each family's argument struct (raw pointers, layouts,
// sizes: no Tensor), its line in EMBER_KERNEL_FAMILIES (name, result, argument
// struct, kind) and KernelFamilies, one function pointer per family. The ground
// floor because every device's kernels register into it from their own files: the
// CUDA kernel files of cuda/kernels/ (cuda/kernels/registration.h), the CPU loops of
// core/kernels/, and the meta device. Ops reach it through core/kernel_table.h.
//
// A family's kind (FamilyKind, the last column of EMBER_KERNEL_FAMILIES) says what
// a device that does not register it answers, and what the meta device does:
//   compute    does the work; unregistered, it throws naming the family and the
//              device; on meta it computes nothing.
//   query      answers a size (a workspace) from sizes and dtypes alone (no device
//              call: the meta device asks it of the mirrored device's table on a
//              machine without a GPU too); unregistered, it throws; on meta it
//              answers as the mirrored device.
//   predicate  `*_fused_supported`: whether the device's fused kernel takes
//              these sizes and dtype; unregistered, it answers false ("compose");
//              on meta it answers as the mirrored device.
//   decision   a fused kernel whose choice needs its operands' addresses (Linear's
//              backward products): it returns false, having done nothing, where
//              the op composes; registered where its fused op can run (meta: by
//              hand, as CUDA would decide).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/base/device.h"
#include "core/base/dtype.h"
#include "core/base/elementwise_ops.h"
#include "core/base/layout.h"
#include "core/base/multi_tensor.h"
#include "core/base/optim_math.h"
#include "core/base/reduction.h"

namespace ember::kernels {
// ------------------------------------------------------------------ element-wise

// y = unary_forward(op, x, a) over n elements; x is of dtype, y of out_dtype:
// dtype, or Bool for the comparisons (gives_bool). int64 inputs of the ops that
// keep integers and of the comparisons are computed in int64 (computes_in_int64:
// exact, wrapping), of any other op in double.
struct UnaryArgs {
  Device device;
  UnaryOp op;
  DType dtype;
  const void* x;
  StridedLayout xl;
  void* y;
  StridedLayout yl;
  int64_t n;
  double a;
  DType out_dtype;
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

// out = binary_forward(op, x, y, a); x and y of dtype, out of out_dtype (dtype,
// or Bool for the comparisons). With dtype float32, x_bf16 (y_bf16) says x (y) is
// stored as bfloat16 and widened as it is read: a float32 op on a bfloat16 operand
// without a cast pass first (the same values, so the same results).
struct BinaryArgs {
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
  DType out_dtype;
  bool x_bf16 = false;
  bool y_bf16 = false;
};

// out = cond ? a : b; cond bool, a, b and out of dtype, layouts over out's shape.
struct WhereArgs {
  Device device;
  DType dtype;
  const void* cond;
  StridedLayout cl;
  const void* a;
  StridedLayout al;
  const void* b;
  StridedLayout bl;
  void* out;
  StridedLayout ol;
  int64_t n;
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

// y[i] = value, or with step != 0 y[i] = fma(step, i, value) (arange: one rounding in
// double, then the store's into dtype, the same on every device), over n elements.
struct FillArgs {
  Device device;
  DType dtype;
  void* y;
  StridedLayout yl;
  int64_t n;
  double value;
  double step = 0.0;
};

// Dropout with its mask drawn inside: y[i] = x[i] * scale where dropout_keeps(seed,
// offset + i, threshold) (core/base/random.h), else 0, computed in float32 (float64 for
// float64) and rounded once; x and y contiguous, float32, float64 or bfloat16, y may be
// x. Its backward is the same call on the gradient: the mask is drawn again, never kept.
// y_bf16 (dtype float32): y is bfloat16, each x rounded to bfloat16 before it is scaled
// (what a cast and then dropout give, in one pass: a float32 gradient sent to a bfloat16
// branch through a dropout).
struct DropoutArgs {
  Device device;
  DType dtype;
  const void* x;
  void* y;
  int64_t n;
  uint64_t seed;
  uint64_t offset;
  uint32_t threshold;
  double scale;
  // Not null inside a CUDA graph (core/device_services.h's draw_counters): the counters
  // start at *offset_base + offset, read when the kernel runs.
  const uint64_t* offset_base = nullptr;
  bool y_bf16 = false;
};

// Dropout on an operand a fused kernel reads (add_layer_norm's residual), drawn as the
// dropout family draws it: element i of the operand (row-major) kept where
// dropout_bits_keyed(key, offset + i) >= threshold (core/base/random.h; key is
// dropout_key(seed)), then scaled by `scale` and rounded to the operand's storage type
// (the bits dropout's own kernel would have written), else 0. threshold 0: no dropout.
struct OperandDropout {
  uint32_t key = 0;
  uint32_t threshold = 0;
  uint64_t offset = 0;
  float scale = 1.f;
  const uint64_t* offset_base = nullptr;  // as DropoutArgs's
};

// y[i] = lo + (hi - lo) U(seed, offset + i), or mean + std N(seed, offset + i)
// (core/base/random.h), or with `integer` lo + floor((hi - lo) U(seed, offset + i))
// (randint: an integer in [lo, hi)); y contiguous.
struct RandomArgs {
  Device device;
  DType dtype;
  void* y;
  int64_t n;
  uint64_t seed;
  uint64_t offset;
  bool normal;
  double p0, p1;  // lo, hi or mean, std
  bool integer = false;
  // Not null inside a CUDA graph (core/device_services.h's draw_counters): the counters
  // start at *offset_base + offset, read when the kernel runs.
  const uint64_t* offset_base = nullptr;
};

// out (n) = a random permutation of 0..n-1: i ordered by random_bits(seed,
// offset + i), ties by i, so every device gives the same permutation.
struct RandpermArgs {
  Device device;
  int64_t* out;
  int64_t n;
  uint64_t seed;
  uint64_t offset;
  void* workspace;  // randperm_workspace_bytes of it
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
struct MaxArgs {  // values (may be null), indices = max (min) and its first index over n
  Device device;
  DType dtype;
  const void* x;
  void* values;
  int64_t* indices;
  int64_t outer, n, inner;
  void* workspace;   // max_workspace_bytes of it
  bool min = false;  // the minimum instead (NaN still wins)
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

// ------------------------------------------------------------------ scans and sorting

// y (outer, n, inner) = the running sum of x over n (from the end when `reverse`:
// y[k] = sum_{j >= k} x[j]), accumulated in double; x and y contiguous, n >= 1.
struct CumsumArgs {
  Device device;
  DType dtype;
  const void* x;
  void* y;
  int64_t outer, n, inner;
  bool reverse;
};
// indices (rows, n) = for each row of x (rows, n), contiguous, the positions 0..n-1
// in ascending (descending) order of value, stable (equal values keep their order;
// -0.0 equals 0.0), every NaN the largest value, as torch.sort(stable=True).
struct SortArgs {
  Device device;
  DType dtype;
  const void* x;
  int64_t* indices;
  int64_t rows, n;
  bool descending;
  void* workspace;  // sort_workspace_bytes of it
};
struct SortQuery {
  Device device;
  DType dtype;
  int64_t rows, n;
};

// ------------------------------------------------------------------ softmax

// y (outer, n, inner) = softmax (log_softmax when `log`) of x over n, computed in
// float (double for float64) with the row maximum subtracted; all contiguous.
struct SoftmaxArgs {
  Device device;
  DType dtype;
  const void* x;
  void* y;
  int64_t outer, n, inner;
  bool log;
};
// d_x from the forward's output y and d_y: y (d_y - sum(d_y y)) for softmax,
// d_y - exp(y) sum(d_y) for log_softmax; sums over n.
struct SoftmaxBackwardArgs {
  Device device;
  DType dtype;
  const void* y;
  const void* d_y;
  void* d_x;
  int64_t outer, n, inner;
  bool log;
};

// ------------------------------------------------------------------ indexing
//
// An index out of range cannot throw where a CUDA kernel meets it: the kernel
// writes zeros for that element, records the first bad index with `op` (the name
// of the op the user called) in the device's error record, and ember raises it
// as an ember::Error at the device's next synchronisation with the host
// (cuda/device_error.h). CPU kernels throw at once. No host sync per call.

// out (outer, k, inner) = x (outer, n, inner) at rows index[j] (0 <= index < n);
// all contiguous.
struct IndexSelectArgs {
  Device device;
  DType dtype;
  const char* op;
  const void* x;
  const int64_t* index;
  void* out;
  int64_t outer, n, k, inner;
};
// dst (outer, n, inner) += src (outer, k, inner) at rows index[j], summed in
// order of j for every row (deterministic, no atomics); rows whose index is out
// of range are skipped (index_select recorded them). All contiguous.
struct IndexAddArgs {
  Device device;
  DType dtype;
  const void* src;
  const int64_t* index;
  void* dst;
  int64_t outer, n, k, inner;
  void* workspace;  // index_add_workspace_bytes of it
};
// gather: out[p] = x[p with coordinate `dim` replaced by index[p]], for every
// multi-index p of index's shape `sizes` (index.size(d) <= x.size(d) for d != dim);
// x (x_sizes), index and out contiguous, ndim <= kMaxDims.
struct GatherArgs {
  Device device;
  DType dtype;
  const char* op;
  const void* x;
  const int64_t* index;
  void* out;
  int ndim;
  int dim;
  int64_t sizes[kMaxDims];
  int64_t x_sizes[kMaxDims];
  int64_t n;             // elements of index
  bool targets = false;  // the indices are class targets (the error says "target")
};
// scatter_add, gather's backward: dst (x_sizes) += src (sizes) at the positions
// gather read, summed in order of p for every destination (deterministic);
// out-of-range indices are skipped.
struct ScatterAddArgs {
  Device device;
  DType dtype;
  const void* src;
  const int64_t* index;
  void* dst;
  int ndim;
  int dim;
  int64_t sizes[kMaxDims];
  int64_t x_sizes[kMaxDims];
  int64_t n;
  void* workspace;  // scatter_add_workspace_bytes of it
};
struct ScatterQuery {  // n entries scattered into `rows` destinations
  Device device;
  int64_t n;
  int64_t rows;
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
  void* pre;  // may be null
  Activation act;
};
// d_w (n, k) = d_y^T x and, when d_b is not null, d_b (n) = column sums of d_y in
// the same pass. Returns false, having done nothing, when it cannot (the op then
// composes). d_y (m, n) contiguous. With d_w_float32, d_w is float32 whatever
// dtype is (bfloat16 products summed and stored in float32); with accumulate,
// d_w += d_y^T x (d_b must then be null). Devices that lack either return false.
struct LinearWeightGradArgs {
  Device device;
  DType dtype;
  int64_t m, n, k;
  const void* x;
  int64_t ldx;
  const void* d_y;
  void* d_w;
  void* d_b;  // may be null
  bool d_w_float32 = false;
  bool accumulate = false;
};
// d_x (m, k) = d_y (m, n) w (n, k), Linear's input gradient: rows K-contiguous
// (row strides ldd, ldw), d_x contiguous. Returns false, having done nothing,
// when the device leaves it to the op's composition (matmul).
struct LinearInputGradArgs {
  Device device;
  DType dtype;
  int64_t m, n, k;
  const void* d_y;
  int64_t ldd;
  const void* w;
  int64_t ldw;
  void* d_x;
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

// The fused cross-entropy over class-index targets: one pass over each row of
// logits (rows, classes), contiguous, computing its log-sum-exp, its loss
//   (1 - ls) (lse - x[t]) + ls (lse - mean_c x[c])   (ls: label_smoothing)
// and, when d_logits is not null, the gradient of the reduced loss (for an
// incoming gradient of 1) in the same pass:
//   scale (softmax(x) - (1 - ls) onehot(t) - ls / classes),
// scale = 1 / (rows whose target is not ignore_index) for Mean, 1 otherwise.
// Rows whose target is ignore_index give loss 0 and a zero gradient row. `loss`:
// one element (Mean, Sum) or (rows) (None), of dtype. A target out of [0,
// classes) is an error named `op` (as for indices, above; the row counts as
// ignored).
struct CrossEntropyArgs {
  Device device;
  DType dtype;
  const char* op;
  const void* logits;
  const int64_t* target;
  void* d_logits;
  void* loss;
  int64_t rows, classes;
  int64_t ignore_index;
  double label_smoothing;
  Reduction reduction;
  void* workspace;  // cross_entropy_workspace_bytes of it
};
struct CrossEntropyQuery {
  Device device;
  DType dtype;
  int64_t rows, classes;
};

// The fused layer norm over rows of `cols` elements: y = (x - mean) rstd w + b,
// rstd = 1 / sqrt(var + eps) (biased variance), keeping mean and rstd (rows, float32)
// for backward. float32 and bfloat16 (statistics in float32; float64 composes). w, b
// (cols) may be null. All contiguous. y_bf16 (dtype float32): y is stored as
// bfloat16, each value rounded once (what a cast of the float32 result would give).
// residual, when not null (the layer norm only, not the RMS norm): the row normalised is
// x + residual, rounded to dtype as add's result is, and written to `sum` (dtype) as
// well; residual is of dtype, or bfloat16 beside float32 x (residual_bf16), widened as
// read. A transformer's residual add and the norm after it, in one pass.
// residual_dropout (with a residual): the residual is read through that dropout first.
struct LayerNormArgs {
  Device device;
  DType dtype;
  const void* x;
  const void* w;
  const void* b;
  void* y;
  void* mean;
  void* rstd;
  int64_t rows, cols;
  double eps;
  bool y_bf16 = false;
  const void* residual = nullptr;
  void* sum = nullptr;
  bool residual_bf16 = false;
  OperandDropout residual_dropout = {};
};
// Its backward from the kept statistics: d_x (may be null), d_w and d_b (cols;
// null when not wanted), the column sums deterministic. d_x_add, when not null (and
// d_x not null), is added to d_x as it is written: d_x = d_x_add + the gradient,
// rounded once (d_x_add may be d_x itself; contiguous, of dtype).
struct LayerNormBackwardArgs {
  Device device;
  DType dtype;
  const void* d_y;
  const void* x;
  const void* w;
  const void* mean;
  const void* rstd;
  void* d_x;
  void* d_w;
  void* d_b;
  int64_t rows, cols;
  void* workspace;  // layer_norm_workspace_bytes of it
  const void* d_x_add = nullptr;
  bool d_y_bf16 = false;  // (dtype float32) d_y is stored as bfloat16, widened as read
};
struct LayerNormQuery {  // the norms' sizes (layer norm and RMS norm)
  Device device;
  DType dtype;
  int64_t rows, cols;
};

// The fused RMS norm over rows of `cols` elements: y = x rstd w, rstd = 1 /
// sqrt(mean(x^2) + eps), keeping rstd (rows, float32) for backward. float32 and
// bfloat16 (statistics in float32). w (cols) may be null. All contiguous.
struct RmsNormArgs {
  Device device;
  DType dtype;
  const void* x;
  const void* w;
  void* y;
  void* rstd;
  int64_t rows, cols;
  double eps;
};
// Its backward from the kept rstd: d_x (may be null) and d_w (cols; null when not
// wanted), the column sums deterministic.
struct RmsNormBackwardArgs {
  Device device;
  DType dtype;
  const void* d_y;
  const void* x;
  const void* w;
  const void* rstd;
  void* d_x;
  void* d_w;
  int64_t rows, cols;
  void* workspace;  // rms_norm_workspace_bytes of it
};

// The fused batch norm over a contiguous (n, c, m) input (m = H*W; 1 for (N, C)),
// statistics per channel over its n*m values: y = (x - mean) invstd w + b. Training:
// mean and invstd = 1 / sqrt(biased var + eps) of the batch are written to `mean`
// and `invstd` (c, float32) and running_mean/running_var (or null) move by momentum
// towards the batch mean and the unbiased variance. Eval: mean and invstd are
// computed from running_mean/running_var (read only) and written all the same.
// float32 and bfloat16, w, b and the running statistics (c, each may be null) in
// the input's dtype, or float32 with a bfloat16 input where params_f32 (autocast's
// mix, as PyTorch's batch norm takes it: y in the input's dtype). All contiguous.
struct BatchNormArgs {
  Device device;
  DType dtype;
  const void* x;
  const void* w;
  const void* b;
  void* running_mean;
  void* running_var;
  void* y;
  void* mean;
  void* invstd;
  int64_t n, c, m;
  bool training;
  double momentum, eps;
  void* workspace;          // batch_norm_workspace_bytes of it (training)
  bool params_f32 = false;  // w, b, running statistics float32 (a bfloat16 input)
  bool relu = false;        // y = max(0, the above): batch norm and a ReLU in one pass
};
// Its backward from the forward's mean and invstd: d_x (training: through the batch
// statistics; eval: d_y w invstd), d_w, d_b (c, in w's dtype); each may be null. The
// per-channel sums are deterministic.
struct BatchNormBackwardArgs {
  Device device;
  DType dtype;
  const void* d_y;
  const void* x;
  const void* w;
  const void* mean;
  const void* invstd;
  void* d_x;
  void* d_w;
  void* d_b;
  int64_t n, c, m;
  bool training;
  void* workspace;          // batch_norm_workspace_bytes of it
  bool params_f32 = false;  // as BatchNormArgs: w, d_w, d_b float32
  // The forward had relu: d_y is the gradient of its output, masked where the value
  // before the ReLU (recomputed from x, w and b) was not positive.
  bool relu = false;
  const void* b = nullptr;  // the forward's bias (with relu; may be null)
};
struct BatchNormQuery {
  Device device;
  DType dtype;
  int64_t n, c, m;
  bool params_f32 = false;  // as BatchNormArgs
  bool relu = false;        // as BatchNormArgs
};

// ------------------------------------------------------------------ convolution

// The columns of a convolution (im2col) over a contiguous (n, c, h, w) input and their
// adjoint (col2im). Column l = oi ow + oj of row (ci kh + ki) kw + kj of image ni holds
// x[ni, ci, oi sh - ph + ki dh, oj sw - pw + kj dw], or pad_value where that falls
// outside the plane; it lives at cols[ni col_image + ((ci kh + ki) kw + kj) col_row + l]
// (columns contiguous). Two layouts use this: per image, (n, c kh kw, oh ow) contiguous
// (col_image = c kh kw oh ow, col_row = oh ow), and one matrix (c kh kw, n oh ow) with the
// batch inside the columns (col_image = oh ow, col_row = n oh ow). col2im writes (not
// adds) x from cols: each pixel the sum, in (ki, kj) order, of the columns that read it
// (pad reads drop); deterministic, no atomics. float32, float64 and bfloat16 (col2im
// sums in float32 for bfloat16, rounding once).
struct Im2colArgs {
  Device device;
  DType dtype;
  const void* src;  // im2col: x; col2im: cols
  void* dst;        // im2col: cols; col2im: x
  int64_t n, c, h, w;
  int64_t kh, kw, sh, sw, ph, pw, dh, dw;
  int64_t oh, ow;
  int64_t col_image, col_row;  // cols' strides in elements (above)
  double pad_value;            // im2col only
};

// The implicit GEMM of a convolution (CUDA on compute capability 9.0,
// cuda/kernels/conv_gemm.cu): x (n, c, h, w) by w (o, c, kh, kw), groups 1, into
// y (n, o, oh, ow), bfloat16, c and o multiples of 64, without the columns. Its
// operands are channels-last copies the caller makes; its outputs are not:
//   pass 0, forward:     image = x as (n, h, w, c); other = w as (o, kh, kw, c);
//                        out = y (n, o, oh, ow), bfloat16.
//   pass 1, input grad:  image = d_y as (n, oh, ow, o); other = w as (c, kh, kw, o);
//                        out = d_x (n, c, h, w), bfloat16. Stride 1 only.
//   pass 2, weight grad: image = x as (n, h, w, c); other = d_y as (n oh ow, o);
//                        out = float32 (splits, o, kh kw c), part s the sum over its
//                        share of the pixels: conv_gemm_splits parts, which the
//                        caller sums (the order fixed by the sizes: deterministic).
// All contiguous, 16-byte aligned.
struct ConvGemmShape {
  int64_t n, c, h, w, o, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow;
};
struct ConvGemmQuery {
  Device device;
  DType dtype;
  int pass;
  ConvGemmShape shape;
};
struct ConvGemmArgs {
  Device device;
  DType dtype;
  int pass;
  ConvGemmShape shape;
  const void* image;
  const void* other;
  void* out;
  int64_t splits;  // pass 2: conv_gemm_splits of the same query
};

// ------------------------------------------------------------------ attention

// The fused attention (cuda/kernels/attention.h): O = softmax(scale Q K^T) V over
// (B, H, T, D) operands, bfloat16, float32 accumulation, keeping lse (B, H, q_len,
// float32 contiguous) for backward; causal: query i sees keys 0..i (top-left).
struct AttentionQuery {
  Device device;
  DType dtype;
  int64_t batch, heads, q_len, kv_len, head_dim;
  bool deterministic;  // the backward's mode (its workspace depends on it)
};
// A (B, H, T, D) operand: D contiguous, (b, h, t) strides in elements, multiples of
// 8, the base 16-byte aligned.
struct AttentionOperand {
  const void* data;
  int64_t stride_b, stride_h, stride_t;
};
struct AttentionArgs {
  Device device;
  DType dtype;
  int64_t batch, heads, q_len, kv_len, head_dim;
  double scale;
  bool causal;
  AttentionOperand q, k, v;
  void* o;    // (B, H, q_len, D): contiguous, or at o_strides
  void* lse;  // (B, H, q_len) float32
  // Attention dropout after the softmax (0: none): weight (b, h, i, j) kept iff
  // dropout_keeps(dropout_seed, dropout_offset + ((b H + h) q_len + i) kv_len + j,
  // dropout_threshold(dropout_p)) (core/base/random.h), kept ones scaled by 1 / (1 - p).
  double dropout_p = 0.0;
  uint64_t dropout_seed = 0, dropout_offset = 0;
  const uint64_t* dropout_base = nullptr;  // as DropoutArgs::offset_base
  // An attention mask (not with causal): 0 none, 1 bool (nonzero = take part), 2
  // additive bfloat16 (added to the scaled score); element (b, h, i, j) at
  // mask[b mask_strides[0] + h mask_strides[1] + i mask_strides[2] + j mask_strides[3]].
  int mask_kind = 0;
  const void* mask = nullptr;
  int64_t mask_strides[4] = {0, 0, 0, 0};
  // o's strides over (B, H, q_len) in elements (D contiguous; multiples of 8), as
  // AttentionOperand's; all 0: contiguous.
  int64_t o_strides[3] = {0, 0, 0};
};
// Its backward from the forward's o and lse: d_q, d_k, d_v (B, H, T, D), contiguous
// or at their strides (below); deterministic: dQ in its own pass (no atomics), else
// added atomically.
struct AttentionBackwardArgs {
  Device device;
  DType dtype;
  int64_t batch, heads, q_len, kv_len, head_dim;
  double scale;
  bool causal;
  AttentionOperand q, k, v, o, d_o;
  const void* lse;
  void* d_q;
  void* d_k;
  void* d_v;
  bool deterministic;
  void* workspace;  // attention_workspace_bytes of it, 256-byte aligned
  size_t workspace_bytes;
  double dropout_p = 0.0;  // the forward's dropout (AttentionArgs): the same mask
  uint64_t dropout_seed = 0, dropout_offset = 0;
  const uint64_t* dropout_base = nullptr;
  int mask_kind = 0;  // the forward's mask (AttentionArgs)
  const void* mask = nullptr;
  int64_t mask_strides[4] = {0, 0, 0, 0};
  // d_q's, d_k's and d_v's strides over (B, H, T) as AttentionArgs::o_strides (all 0:
  // contiguous).
  int64_t d_q_strides[3] = {0, 0, 0}, d_k_strides[3] = {0, 0, 0}, d_v_strides[3] = {0, 0, 0};
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
// dst[i] = tensors[i] (float32) rounded to bfloat16, each value as cast rounds it, for
// every i: many casts in one launch (autocast's weight casts). dst[i] contiguous, of
// tensors[i].numel elements.
struct MultiTensorCastArgs {
  Device device;
  const TensorSpan* tensors;
  void* const* dst;
  int64_t count;
};

// ------------------------------------------------------------------ the table

// What a family is (see the top of this file): what an unregistered one answers
// and what the meta device does with it.
enum class FamilyKind { compute, query, predicate, decision };

// X(name, result, args, kind): every kernel family. Adding one is a line here, its
// argument struct above, and a registration in the kernel file of each device that
// has it (none for a predicate a device answers false to, none on meta unless it
// is a decision).
#define EMBER_KERNEL_FAMILIES(X)                                        \
  X(unary, void, UnaryArgs, compute)                                    \
  X(unary_backward, void, UnaryBackwardArgs, compute)                   \
  X(binary, void, BinaryArgs, compute)                                  \
  X(binary_backward, void, BinaryBackwardArgs, compute)                 \
  X(where, void, WhereArgs, compute)                                    \
  X(cast, void, CastArgs, compute)                                      \
  X(fill, void, FillArgs, compute)                                      \
  X(random, void, RandomArgs, compute)                                  \
  X(dropout, void, DropoutArgs, compute)                                \
  X(randperm, void, RandpermArgs, compute)                              \
  X(randperm_workspace_bytes, size_t, ScatterQuery, query)              \
  X(copy_bytes, void, CopyBytesArgs, compute)                           \
  X(softmax, void, SoftmaxArgs, compute)                                \
  X(softmax_backward, void, SoftmaxBackwardArgs, compute)               \
  X(index_select, void, IndexSelectArgs, compute)                       \
  X(index_add, void, IndexAddArgs, compute)                             \
  X(index_add_workspace_bytes, size_t, ScatterQuery, query)             \
  X(gather, void, GatherArgs, compute)                                  \
  X(scatter_add, void, ScatterAddArgs, compute)                         \
  X(scatter_add_workspace_bytes, size_t, ScatterQuery, query)           \
  X(sum, void, SumArgs, compute)                                        \
  X(sum_workspace_bytes, size_t, ReduceShape, query)                    \
  X(max, void, MaxArgs, compute)                                        \
  X(max_workspace_bytes, size_t, ReduceShape, query)                    \
  X(max_backward, void, MaxBackwardArgs, compute)                       \
  X(cumsum, void, CumsumArgs, compute)                                  \
  X(sort, void, SortArgs, compute)                                      \
  X(sort_workspace_bytes, size_t, SortQuery, query)                     \
  X(gemm, void, GemmArgs, compute)                                      \
  X(linear_fused_supported, bool, DTypeQuery, predicate)                \
  X(linear_fused, void, LinearArgs, compute)                            \
  X(linear_weight_grad_fused, bool, LinearWeightGradArgs, decision)     \
  X(linear_input_grad, bool, LinearInputGradArgs, decision)             \
  X(linear_bias_grad_fused_supported, bool, DTypeQuery, predicate)      \
  X(mse_fused_supported, bool, DTypeQuery, predicate)                   \
  X(mse_fused, void, MseArgs, compute)                                  \
  X(mse_workspace_bytes, size_t, SizeQuery, query)                      \
  X(scale_by_device_scalar, void, ScaleByScalarArgs, compute)           \
  X(cross_entropy_fused_supported, bool, CrossEntropyQuery, predicate)  \
  X(cross_entropy_fused, void, CrossEntropyArgs, compute)               \
  X(cross_entropy_workspace_bytes, size_t, CrossEntropyQuery, query)    \
  X(layer_norm_fused_supported, bool, LayerNormQuery, predicate)        \
  X(layer_norm_fused, void, LayerNormArgs, compute)                     \
  X(layer_norm_backward_fused, void, LayerNormBackwardArgs, compute)    \
  X(layer_norm_workspace_bytes, size_t, LayerNormQuery, query)          \
  X(rms_norm_fused_supported, bool, LayerNormQuery, predicate)          \
  X(rms_norm_fused, void, RmsNormArgs, compute)                         \
  X(rms_norm_backward_fused, void, RmsNormBackwardArgs, compute)        \
  X(rms_norm_workspace_bytes, size_t, LayerNormQuery, query)            \
  X(batch_norm_fused_supported, bool, BatchNormQuery, predicate)        \
  X(batch_norm_fused, void, BatchNormArgs, compute)                     \
  X(batch_norm_backward_fused, void, BatchNormBackwardArgs, compute)    \
  X(batch_norm_workspace_bytes, size_t, BatchNormQuery, query)          \
  X(im2col, void, Im2colArgs, compute)                                  \
  X(col2im, void, Im2colArgs, compute)                                  \
  X(conv_gemm_supported, bool, ConvGemmQuery, predicate)                \
  X(conv_gemm_splits, size_t, ConvGemmQuery, query)                     \
  X(conv_gemm, void, ConvGemmArgs, compute)                             \
  X(attention_fused_supported, bool, AttentionQuery, predicate)         \
  X(attention_fused, void, AttentionArgs, compute)                      \
  X(attention_backward_fused, void, AttentionBackwardArgs, compute)     \
  X(attention_workspace_bytes, size_t, AttentionQuery, query)           \
  X(fused_sgd, void, FusedSgdArgs, compute)                             \
  X(fused_adam, void, FusedAdamArgs, compute)                           \
  X(multi_tensor_norm, void, MultiTensorNormArgs, compute)              \
  X(multi_tensor_norm_workspace_bytes, size_t, MultiTensorQuery, query) \
  X(multi_tensor_scale, void, MultiTensorScaleArgs, compute)            \
  X(multi_tensor_cast, void, MultiTensorCastArgs, compute)

// One function pointer per family, null until a device registers it (the registry
// fills what a device left out by the family's kind: core/kernels/registry.cpp).
struct KernelFamilies {
#define EMBER_KERNEL_FIELD(name, R, Args, kind) R (*name)(const Args&) = nullptr;
  EMBER_KERNEL_FAMILIES(EMBER_KERNEL_FIELD)
#undef EMBER_KERNEL_FIELD
};

}  // namespace ember::kernels
