// Every tensor op, as free functions. Each is defined in core/ops/<group>.cpp with
// its forward and its backward (attached right below); its kernels are the device
// table's (core/kernel_table.h): the CPU reference loops in core/kernels/cpu_*.cpp,
// the CUDA launchers in cuda/kernels/<group>.cu. Bad shapes, devices or dtypes
// throw ember::Error naming the op and the operands.
#pragma once

#include <array>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "core/base/elementwise_ops.h"
#include "core/base/optim_math.h"
#include "core/base/reduction.h"
#include "core/base/scalar.h"
#include "core/tensor.h"

namespace ember {

// --- element-wise (core/ops/elementwise.cpp), generated from the lists of
// core/base/elementwise_ops.h: name(t) for each unary op (neg, exp, log, sqrt,
// abs, relu, sigmoid, tanh, gelu (exact: x Phi(x), as PyTorch's default), gelu_tanh
// (PyTorch's approximate="tanh"), silu, sin, cos, softplus, erf); name(t, s) for each op with a
// scalar (pow, add, mul, rsub: s - t, rdiv: s / t, clamp_min, clamp_max, and the
// comparisons eq, ne, lt, le, ge, gt); name(a, b) for each binary op (add, sub,
// mul, div, maximum, minimum and the comparisons eq, ne, lt, le, gt, ge), with
// numpy broadcasting. Comparisons give bool tensors and have no gradient.
// maximum/minimum propagate NaN and split the gradient evenly on ties.
//
// Type promotion is PyTorch's: two tensors compute in result_type(a, b) (int64 +
// float32 -> float32, bfloat16 + float32 -> float32; a 0-dim tensor only counts
// when of a higher category); a Scalar never widens a tensor of its own category
// (float32 * 0.5 stays float32, int64 + 1 stays int64) but a floating-point one
// makes an integer tensor float32. int64 stays int64 under neg, abs, relu, add,
// sub, mul, maximum, minimum, clamp and pow by an exponent >= 0 (keeps_integers);
// div and / are true division (float32); every other op computes integer input
// in float32. Integer arithmetic computes in int64 (exact, wrapping on overflow
// as PyTorch's); an integer Scalar is exact below 2^53 (it travels as a double).
// Arithmetic on two bool tensors throws (convert one to int64).
#define EMBER_X(name, ...) Tensor name(const Tensor& a);
EMBER_UNARY_OPS(EMBER_X)
#undef EMBER_X
#define EMBER_X(name, ...) Tensor name(const Tensor& a, Scalar s);
EMBER_SCALAR_OPS(EMBER_X)
#undef EMBER_X
#define EMBER_X(name, ...) Tensor name(const Tensor& a, const Tensor& b);
EMBER_BINARY_OPS(EMBER_X)
#undef EMBER_X
Tensor add(const Tensor& a, const Tensor& b, double alpha);  // a + alpha * b
inline Tensor sub(const Tensor& a, Scalar s) {
  return add(a, -s);
}  // a - s
Tensor cast(const Tensor& a, DType t);  // differentiable dtype change
// The dtype a binary op of a and b computes in (torch.result_type).
DType result_type(const Tensor& a, const Tensor& b);

// --- GELU's two forms (core/ops/gelu.cpp), as torch.nn.functional.gelu:
// approximate "none" is gelu(a) (exact, 0.5 x (1 + erf(x / sqrt(2)))), "tanh"
// gelu_tanh(a) (0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))); anything else
// throws.
Tensor gelu(const Tensor& a, std::string_view approximate);

// --- selection (core/ops/elementwise.cpp)
// cond ? a : b element-wise, broadcasting all three; cond must be bool; a and b
// promote as a binary op. Gradients flow to the side that was chosen.
Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b);
// x with value where mask (bool, broadcast to x's shape) is true; x's dtype and shape.
Tensor masked_fill(const Tensor& x, const Tensor& mask, Scalar value);
// min <= x <= max element-wise (clamp_min then clamp_max: min > max gives max, as
// PyTorch); the gradient flows where min <= x <= max.
Tensor clamp(const Tensor& x, Scalar min, Scalar max);

namespace detail {
// The generic element-wise forward (with its backward attached) behind the
// generated ops; s is the scalar of ops that take one, alpha add's.
Tensor unary_op(UnaryOp op, const Tensor& a, Scalar s);
Tensor binary_op(BinaryOp op, const Tensor& a, const Tensor& b, double alpha);
// A unary op's d_x from the incoming gradient g and what its backward saves
// (unary_saves: its input or its output), without recording anything.
Tensor unary_backward_of(UnaryOp op, const Tensor& g, const Tensor& saved, double s);
// gather whose bad index is reported as op's (a class target when `targets`).
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index, const char* op, bool targets);
// cast's record: `out`, a's values in another floating dtype made without recording,
// gets CastBackward (the gradient cast back to a's dtype) when a requires grad.
void record_cast(Tensor& out, const Tensor& a);
}  // namespace detail

// In-place (bump the version; refuse tensors that require grad in grad mode). The
// other operand may be of another dtype when the result still fits t's (float32
// += bfloat16, float32 += int64), as PyTorch.
Tensor& fill_(Tensor& t, double value);
Tensor& copy_(Tensor& dst, const Tensor& src);  // broadcasting src to dst, any dtypes
Tensor& add_(Tensor& t, const Tensor& other, double alpha = 1.0);
Tensor& add_(Tensor& t, Scalar value);
Tensor& mul_(Tensor& t, const Tensor& other);
Tensor& mul_(Tensor& t, Scalar value);

// --- reductions (core/ops/reduce.cpp). sum of an int64 or bool tensor is int64,
// computed in int64 (exact, wrapping as PyTorch's); max and min of int64 give int64
// values (through double: exact below 2^53).
Tensor sum(const Tensor& a);
Tensor sum(const Tensor& a, int64_t dim, bool keepdim = false);
Tensor mean(const Tensor& a);
Tensor mean(const Tensor& a, int64_t dim, bool keepdim = false);
// The largest (smallest) element, a 0-dim tensor; NaN wins. Its gradient is split
// evenly among the elements equal to it (as PyTorch's max()).
Tensor max(const Tensor& a);
Tensor min(const Tensor& a);
// Values and int64 indices (the first on ties; NaN wins) over dim, as libtorch's
// tuple: auto [values, indices] = max(x, 1). The gradient goes to the index.
ValuesAndIndices max(const Tensor& a, int64_t dim, bool keepdim = false);
ValuesAndIndices min(const Tensor& a, int64_t dim, bool keepdim = false);
Tensor argmax(const Tensor& a, int64_t dim, bool keepdim = false);  // int64 indices
Tensor argmin(const Tensor& a, int64_t dim, bool keepdim = false);
// Sums `g` down to `shape` (the inverse of broadcasting), for backward of broadcast ops.
Tensor sum_to(const Tensor& g, const Shape& shape);

// --- softmax (core/ops/softmax.cpp): along dim, numerically stable (the maximum
// is subtracted), computed in float for bfloat16 and float32 input (double for
// float64), the output in the input's dtype.
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);

// --- indexing (core/ops/index.cpp). Indices are int64. One out of range throws
// ember::Error naming the op: at once on the CPU; on CUDA at the device's next
// synchronisation with the host (item(), to_vector(), to(kCPU), printing,
// cuda::synchronize()), without a host sync per call: the kernel zeroes what the
// bad index would have read and records it (cuda/device_error.h).
// The entries of x at `index` (1-D) along dim: out.size(dim) == index.numel().
// Backward adds the gradient rows back in index order (deterministic, also on CUDA).
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
// out[i][j][k] = x[i][index[i][j][k]][k] for dim 1 (any dim likewise); index has
// x's number of dims and sizes <= x's outside dim; out has index's shape.
// Backward scatters the gradient back, summing in order (deterministic).
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
// Rows of weight (num, dim) at indices (any shape): shape indices.shape + (dim).
// padding_idx >= 0: that row gets no gradient (as PyTorch's); -1: none.
Tensor embedding(const Tensor& weight, const Tensor& indices, int64_t padding_idx = -1);
// int64 one-hot rows: shape indices.shape + (num_classes); num_classes < 0 takes
// max(indices) + 1 (which synchronises), as torch.nn.functional.one_hot.
Tensor one_hot(const Tensor& indices, int64_t num_classes = -1);
// The tensors (all the same shape) joined along a new dim.
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);

// x with source's rows added at `index` along dim (torch.index_add): source has x's
// shape but index.numel() at dim; repeated indices accumulate, in index order (the
// same bits on every run, CUDA too). alpha scales source.
Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& source,
                 double alpha = 1.0);

// --- convolution and pooling (core/ops/conv.cpp), NCHW as PyTorch's; a 3-D (C, H, W)
// input is one image. Composed from index_select (im2col over a table of input
// positions; padding reads a constant slot) and matmul, so every device and
// autograd come from those ops. Int2 is (height, width).
using Int2 = std::array<int64_t, 2>;
// F::unfold: (N, C, H, W) -> (N, C*kh*kw, L), L the number of windows, zero padding.
Tensor unfold(const Tensor& input, Int2 kernel_size, Int2 dilation = {1, 1}, Int2 padding = {0, 0},
              Int2 stride = {1, 1});
// F::fold, unfold's adjoint: (N, C*kh*kw, L) summed into (N, C, output_size).
Tensor fold(const Tensor& input, Int2 output_size, Int2 kernel_size, Int2 dilation = {1, 1},
            Int2 padding = {0, 0}, Int2 stride = {1, 1});
// input (N, C, H, W), weight (O, C / groups, kh, kw), bias (O) or undefined.
Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(),
              Int2 stride = {1, 1}, Int2 padding = {0, 0}, Int2 dilation = {1, 1},
              int64_t groups = 1);
// input (N, C, L), weight (O, C / groups, k): conv2d over a plane of height 1.
Tensor conv1d(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(),
              int64_t stride = 1, int64_t padding = 0, int64_t dilation = 1, int64_t groups = 1);
namespace detail {
// The padding that keeps the size with stride 1 (PyTorch's padding="same"), for odd
// dilated kernel extents; even extents need asymmetric padding: an ember::Error.
Int2 same_padding(const char* op, Int2 kernel, Int2 stride, Int2 dilation);
// Whether convolution, pooling, unfold and fold gather their columns through the
// indexing ops (the reference composition) instead of the im2col/col2im kernels:
// EMBER_CONV_COMPOSED=1 in the environment, or set here (tests compare the two).
bool conv_composed();
void set_conv_composed(bool composed);
// How conv2d lays out the columns the kernels gather. per_image: (N, C kh kw, L), the
// weight's product broadcast over the batch (the output needs no copy; the weight's
// gradient is N per-image products, summed). matrix: one (C kh kw, N L) matrix, one
// product each way (the output and its gradient transposed by a copy). automatic: the
// matrix where the weight needs its gradient and C kh kw / groups > L (the per-image
// products would outweigh the output). EMBER_CONV_COLUMNS=auto|per_image|matrix in the
// environment, or set here (tests and benchmarks compare them).
enum class ConvColumns { automatic, per_image, matrix };
ConvColumns conv_columns();
void set_conv_columns(ConvColumns columns);
// Whether conv2d runs as an implicit GEMM where the device has one (CUDA on compute
// capability 9.0: bfloat16, groups 1, channels multiples of 64, stride 1 where the
// input needs its gradient, pixel grids the kernel's boxes tile): the columns are
// never written. On by default (measured against the columns on the H200, 2026-12-05:
// bf16 conv forward+backward 0.686x their time); EMBER_CONV_IMPLICIT=0 in the
// environment turns it off, or set here (tests compare the two).
bool conv_implicit();
void set_conv_implicit(bool on);
}  // namespace detail
// input (N, C, H, W), weight (C, O / groups, kh, kw): the gradient of conv2d with
// respect to its input, as PyTorch's conv_transpose2d (argument order as F's).
Tensor conv_transpose2d(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(),
                        Int2 stride = {1, 1}, Int2 padding = {0, 0}, Int2 output_padding = {0, 0},
                        int64_t groups = 1, Int2 dilation = {1, 1});
// stride {0, 0} means the kernel size (PyTorch's default); padding at most half the
// kernel; ceil_mode as PyTorch (the last window starts inside the input or padding).
Tensor max_pool2d(const Tensor& input, Int2 kernel_size, Int2 stride = {0, 0},
                  Int2 padding = {0, 0}, Int2 dilation = {1, 1}, bool ceil_mode = false);
// Also the int64 flat index (h * W + w) of each maximum in its input plane.
ValuesAndIndices max_pool2d_with_indices(const Tensor& input, Int2 kernel_size,
                                         Int2 stride = {0, 0}, Int2 padding = {0, 0},
                                         Int2 dilation = {1, 1}, bool ceil_mode = false);
// divisor_override 0: none.
Tensor avg_pool2d(const Tensor& input, Int2 kernel_size, Int2 stride = {0, 0},
                  Int2 padding = {0, 0}, bool ceil_mode = false, bool count_include_pad = true,
                  int64_t divisor_override = 0);
// Cells of rows [floor(i H / oh), ceil((i + 1) H / oh)) and likewise columns.
Tensor adaptive_avg_pool2d(const Tensor& input, Int2 output_size);

// --- batch statistics (core/ops/batch_norm.cpp): batch_norm composed from reductions;
// on CUDA fused kernels (float32 and bfloat16, contiguous; cuda/kernels/batch_norm.cu;
// EMBER_BATCH_NORM_FUSED=0 composes there too); group_norm composed.
// input (N, C, ...). Training: normalises by the batch's mean and biased variance
// per channel and, when running_mean/running_var are given, updates them in place
// (running = (1 - momentum) running + momentum batch, the variance unbiased), as
// PyTorch; eval: normalises by the running statistics. weight, bias: (C) or undefined.
// A bfloat16 input with float32 weight, bias and running statistics (autocast's mix)
// returns bfloat16, computed in float32.
Tensor batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight = Tensor(), const Tensor& bias = Tensor(),
                  bool training = true, double momentum = 0.1, double eps = 1e-5);
// relu(batch_norm(...)) in one op: on CUDA inside the fused batch-norm kernels, the
// ReLU adding no pass of its own (its mask recomputed in backward from the input,
// no tensor more saved); elsewhere composed.
Tensor batch_norm_relu(const Tensor& input, const Tensor& running_mean, const Tensor& running_var,
                       const Tensor& weight = Tensor(), const Tensor& bias = Tensor(),
                       bool training = true, double momentum = 0.1, double eps = 1e-5);
// input (N, C, ...) normalised over each group of C / num_groups channels and the
// trailing dims; weight, bias (C) per channel.
Tensor group_norm(const Tensor& input, int64_t num_groups, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);
// F::pad: padding holds (before, after) pairs from the last dim backwards, as
// PyTorch's; negative amounts crop. Reflect mirrors without repeating the edge;
// replicate repeats it.
enum class PadMode { Constant, Reflect, Replicate };
Tensor pad(const Tensor& input, const std::vector<int64_t>& padding,
           PadMode mode = PadMode::Constant, double value = 0.0);

// --- normalisation (core/ops/layer_norm.cpp): y = (x - mean) / sqrt(var + eps) *
// weight + bias over the trailing dims normalized_shape (biased variance, as
// PyTorch); weight and bias (shape normalized_shape) may be undefined. On CUDA
// (float32, bfloat16) one fused kernel per direction, the row mean and 1/std
// kept for backward; composed elsewhere.
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);
namespace detail {
// layer_norm computed as above (in the inputs' promoted dtype), its result stored in
// `output` (its gradient then arrives in `output` too): the same values as
// cast(layer_norm(...), output). The fused kernels write a bfloat16 result from
// float32 input, and read the bfloat16 gradient, themselves (no cast pass either
// way); elsewhere it is that cast. nn::LayerNormOptions::autocast_output uses it.
Tensor layer_norm_into_dtype(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                             const Tensor& bias, double eps, DType output);
}  // namespace detail
// {sum, y} with sum = x + residual (add's result: its dtype, its gradient rule) and y =
// layer_norm(sum, ...): a pre-norm transformer's residual add and the norm of the next
// sub-layer. Where layer_norm's fused kernels run (CUDA float32 and bfloat16, the CPU's
// float32), one pass reads x and residual, writes the sum and normalises it from
// registers (no second read of the sum); x and residual of one shape, residual of x's
// dtype or bfloat16 beside float32 x. Elsewhere, and with EMBER_ADD_LAYER_NORM=0, it is
// add then layer_norm. Either way the same values, bit for bit, and the same graph.
std::pair<Tensor, Tensor> add_layer_norm(const Tensor& x, const Tensor& residual,
                                         const Shape& normalized_shape,
                                         const Tensor& weight = Tensor(),
                                         const Tensor& bias = Tensor(), double eps = 1e-5);
namespace detail {
// add_layer_norm with y stored in `output`, as layer_norm_into_dtype.
std::pair<Tensor, Tensor> add_layer_norm_into_dtype(const Tensor& x, const Tensor& residual,
                                                    const Shape& normalized_shape,
                                                    const Tensor& weight, const Tensor& bias,
                                                    double eps, DType output);
// Whether add_layer_norm runs its one pass where it can (EMBER_ADD_LAYER_NORM, 0 or 1, on
// when unset); the setter is for tests and benchmarks.
bool add_layer_norm_fused();
void set_add_layer_norm_fused(bool on);
}  // namespace detail
// {sum, y} with sum = x + dropout(residual, p, train, gen) and y = layer_norm(sum, ...):
// add_layer_norm with dropout on the residual, a transformer's sub-layer output dropped
// as it joins the stream. The same generator counters as that dropout call, so the same
// mask and the same values, bit for bit. Where add_layer_norm runs its one pass, the
// mask is drawn inside it, and again inside the residual's gradient (one pass from the
// sum's gradient, cast to the residual's dtype and masked): no dropout kernels and no
// dropped copy of the residual. Otherwise, with p 1, and with
// EMBER_DROPOUT_ADD_LAYER_NORM=0, it is dropout then add_layer_norm; with no mask to draw
// (train false, p 0) it is add_layer_norm, its allocations and profile span so named.
std::pair<Tensor, Tensor> dropout_add_layer_norm(const Tensor& x, const Tensor& residual, double p,
                                                 bool train, const Shape& normalized_shape,
                                                 const Tensor& weight = Tensor(),
                                                 const Tensor& bias = Tensor(), double eps = 1e-5,
                                                 Generator* gen = nullptr);
namespace detail {
// dropout_add_layer_norm with y stored in `output`, as layer_norm_into_dtype.
std::pair<Tensor, Tensor> dropout_add_layer_norm_into_dtype(
    const Tensor& x, const Tensor& residual, double p, bool train, const Shape& normalized_shape,
    const Tensor& weight, const Tensor& bias, double eps, DType output, Generator* gen = nullptr);
// Whether dropout_add_layer_norm draws its mask inside add_layer_norm's pass
// (EMBER_DROPOUT_ADD_LAYER_NORM, 0 or 1, on when unset); the setter is for tests and
// benchmarks.
bool dropout_add_layer_norm_fused();
void set_dropout_add_layer_norm_fused(bool on);
}  // namespace detail
// y = x / sqrt(mean(x^2) + eps) * weight over the trailing dims normalized_shape, as
// torch.nn.functional.rms_norm; weight (shape normalized_shape) may be undefined,
// and eps defaults (nullopt) to the machine epsilon of the type the op computes in
// (float32's for float32 and bfloat16, float64's for float64). On CUDA (float32,
// bfloat16) one fused kernel per direction, the row's 1/rms kept for backward;
// composed elsewhere.
Tensor rms_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                std::optional<double> eps = std::nullopt);

// --- linear algebra (core/ops/matmul.cpp), as torch.matmul and torch.bmm.
// matmul: 1-D x 1-D is the dot product (a 0-dim result); a 1-D left operand gets a
// leading dim of 1 and a 1-D right operand a trailing dim of 1, removed from the
// result; otherwise (..., n, k) x (..., k, m) -> (..., n, m), the batch dims (...)
// of any rank broadcasting ([2, 1, 4, 5] x [3, 5, 6] -> [2, 3, 4, 6]). Transposed,
// sliced and expanded operands are read in place (a copy only where neither of an
// operand's last two dims has a unit stride). The gradient of a broadcast operand
// is summed back to its shape. CPU through OpenBLAS (or the reference loops),
// CUDA through cuBLAS's strided-batched GEMM.
Tensor matmul(const Tensor& a, const Tensor& b);
// bmm: (B, n, k) x (B, k, m) -> (B, n, m), both strictly 3-D with the same B (no
// broadcasting, as torch.bmm).
Tensor bmm(const Tensor& a, const Tensor& b);

// --- dropout (core/ops/dropout.cpp), as torch::dropout(input, p, train): p the drop
// probability in [0, 1]; input itself when !train or p = 0 (nothing drawn), zeros when
// p = 1. Otherwise one kernel (nn::functional::dropout and attention's dropout run it):
// input / (1 - p) where kept, 0 elsewhere, element i kept iff dropout_keeps(seed,
// offset + i, dropout_threshold(p)) (core/base/random.h: probability 1 - p), offset =
// gen->advance(numel) (the default generator if null), i row-major. The mask is drawn
// inside the kernel and drawn again by the backward: nothing is saved. float32,
// float64 and bfloat16 (scaled in float32, rounded once). Inside a CUDA graph each
// replay draws a fresh mask (core/device_services.h's draw_counters).
Tensor dropout(const Tensor& input, double p = 0.5, bool train = true, Generator* gen = nullptr);

// --- attention (core/ops/attention.cpp), as torch.nn.functional.scaled_dot_product_attention:
// softmax(q k^T * scale + mask) v with query (..., L, E), key (..., S, E), value
// (..., S, Ev) -> (..., L, Ev); the batch dims (...) broadcast. attn_mask, broadcast
// to (..., L, S): bool (true = take part, as PyTorch) or an additive mask of the
// query's dtype. is_causal: the upper-left-aligned lower triangle (query i attends
// keys j <= i); giving both a mask and is_causal is an error, as in PyTorch. scale
// unset (the default) means 1 / sqrt(E). A row whose keys are all masked out gives
// zeros (PyTorch's math backend since 2.5), not NaN. dropout_p > 0 zeroes
// attention weights as nn::functional::dropout does (always: PyTorch's function has
// no training flag), by dropout over the weights: weight i (row-major in the
// broadcast (..., L, S)) is kept iff dropout_keeps(seed, offset + i,
// dropout_threshold(dropout_p)) (core/base/random.h), offset being
// gen->advance((...) * L * S) at the call, so a fused kernel can reproduce it.
// Differentiable in query, key, value and a float mask. EMBER_ATTENTION=composed
// forces the composed path; =ours requires the fused kernel (an error where it
// cannot run); unset: fused where supported, composed elsewhere.
Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const Tensor& attn_mask = Tensor(), double dropout_p = 0.0,
                                    bool is_causal = false,
                                    std::optional<double> scale = std::nullopt,
                                    Generator* gen = nullptr);

// --- shape (core/ops/shape.cpp): views share storage where the layout allows
Tensor view(const Tensor& a, Shape sizes);     // -1 infers one size; needs viewable strides
Tensor reshape(const Tensor& a, Shape sizes);  // view when possible, else copy
// Merges dims start_dim..end_dim (inclusive, negative counts from the end) into
// one; a 0-dim tensor becomes 1-D. A reshape: a view when the layout allows.
Tensor flatten(const Tensor& a, int64_t start_dim = 0, int64_t end_dim = -1);
Tensor transpose(const Tensor& a, int64_t d0, int64_t d1);
Tensor slice(const Tensor& a, int64_t dim, int64_t start, int64_t end, int64_t step = 1);
Tensor select(const Tensor& a, int64_t dim, int64_t index);
Tensor unsqueeze(const Tensor& a, int64_t dim);
Tensor squeeze(const Tensor& a, int64_t dim);
Tensor expand(const Tensor& a, Shape sizes);
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor contiguous(const Tensor& a);

// --- shapeops (issue 26): triangles, pieces, reductions over dim lists, variance,
// scans, sorting and sampling, with libtorch's names and semantics.
// core/ops/triangle_split.cpp: the lower (upper) triangle of the last two dims,
// diagonal 0 the main one, > 0 above it, < 0 below; zeros elsewhere (a where).
Tensor tril(const Tensor& x, int64_t diagonal = 0);
Tensor triu(const Tensor& x, int64_t diagonal = 0);
// Views (slices) of x along dim: pieces of split_size (the last smaller), or of
// the given sizes (summing to x.size(dim)); chunk: `chunks` pieces of
// ceil(size / chunks) each (fewer pieces when that covers the dim, as torch.chunk);
// unbind: every index of dim, the dim removed.
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& split_sizes,
                          int64_t dim = 0);
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);
std::vector<Tensor> unbind(const Tensor& x, int64_t dim = 0);
// core/ops/reduce_dims.cpp: over a list of dims (negative count from the end; a
// repeated dim is an error; an empty list means every dim, as torch.sum).
Tensor sum(const Tensor& a, const std::vector<int64_t>& dims, bool keepdim = false);
Tensor mean(const Tensor& a, const std::vector<int64_t>& dims, bool keepdim = false);
// The largest (smallest) value over dims, NaN winning; the gradient is shared evenly
// by the elements equal to it (as torch.amax). An empty reduction is an error.
Tensor amax(const Tensor& a, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor amin(const Tensor& a, const std::vector<int64_t>& dims = {}, bool keepdim = false);
// sum((x - mean)^2) / max(0, N - correction) over dims (N their element count):
// correction 1 is the unbiased estimate (torch's default), 0 the biased one;
// N <= correction gives inf (nan where every deviation is 0), as torch. std = sqrt(var).
Tensor var(const Tensor& x, const std::vector<int64_t>& dims = {}, double correction = 1.0,
           bool keepdim = false);
Tensor var(const Tensor& x, int64_t dim, double correction = 1.0, bool keepdim = false);
Tensor std(const Tensor& x, const std::vector<int64_t>& dims = {}, double correction = 1.0,
           bool keepdim = false);
Tensor std(const Tensor& x, int64_t dim, double correction = 1.0, bool keepdim = false);
// The running sum along dim (int64 and bool give int64, as torch); its gradient is
// the running sum of the gradient from the end.
Tensor cumsum(const Tensor& x, int64_t dim);
// core/ops/sort.cpp: values and int64 indices along dim, ascending (descending),
// always stable (torch's stable=true: equal values keep their order), NaN the
// largest value. The values' gradient is scattered back through the indices.
ValuesAndIndices sort(const Tensor& x, int64_t dim = -1, bool descending = false,
                      bool stable = true);
Tensor argsort(const Tensor& x, int64_t dim = -1, bool descending = false, bool stable = true);
// The k largest (smallest) along dim, in order (sorted = false gives the same order);
// ties go to the lower index.
ValuesAndIndices topk(const Tensor& x, int64_t k, int64_t dim = -1, bool largest = true,
                      bool sorted = true);
// core/ops/multinomial.cpp: num_samples int64 category indices per row of probs (1-D
// (n) or 2-D (rows, n); non-negative, finite, each row's sum > 0, not necessarily
// normalised), drawn from gen (the default generator if null); without replacement
// no row repeats a category (num_samples <= its non-zero categories).
Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement = false,
                   Generator* gen = nullptr);

// --- optimizer updates (core/ops/optim.cpp), PyTorch's _fused_sgd_ and
// _fused_adam_: in place, one fused kernel call per device, the rules of
// core/base/optim_math.h. Parameters float32 or float64, contiguous; each list
// one entry per parameter. momentum_buffers may be empty (momentum 0) or hold
// undefined entries; max_exp_avg_sqs is read only with amsgrad. state_steps are
// one-element int64 tensors on each parameter's device: Adam's kernel adds one
// and takes its bias corrections from the new count, where it runs.
void fused_sgd_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                const std::vector<Tensor>& momentum_buffers, const std::vector<bool>& first_steps,
                const SgdConfig& config);
void fused_adam_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                 const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
                 const std::vector<Tensor>& max_exp_avg_sqs, const std::vector<Tensor>& state_steps,
                 const AdamConfig& config);

// --- multi-tensor (core/ops/multi_tensor.cpp): one kernel call over a list of
// tensors on one device (on CUDA: fused launches of up to 96 tensors each, no host
// sync, capturable). Tensors float32, float64 or bfloat16, contiguous; no autograd.
// The norm_type-norm of all their elements taken together, as
// torch.linalg.vector_norm of their concatenation: norm_type > 0, inf (max |x|) or
// 0 (the count of non-zeros); a float64 0-dim tensor on their device, accumulated
// in double.
Tensor multi_tensor_norm(const std::vector<Tensor>& tensors, double norm_type = 2.0);
// The same norm and, from the same call, clip_grad_norm_'s coefficient
// min(max_norm / (norm + 1e-6), 1): {norm, coefficient}, both float64 0-dim.
std::pair<Tensor, Tensor> multi_tensor_norm_clip_coef(const std::vector<Tensor>& tensors,
                                                      double norm_type, double max_norm);
// tensors[i] *= scale for every i, in place; scale a one-element float64 tensor on
// their device, read there. Each product is formed in double.
void multi_tensor_mul_(const std::vector<Tensor>& tensors, const Tensor& scale);

// --- operators (comparisons give bool tensors, as libtorch's)
// t / s: true division (an integer tensor gives float32).
inline Tensor div(const Tensor& a, Scalar s) {
  return mul(a, 1.0 / s.to_double());
}
inline Tensor operator+(const Tensor& a, const Tensor& b) {
  return add(a, b);
}
inline Tensor operator-(const Tensor& a, const Tensor& b) {
  return sub(a, b);
}
inline Tensor operator*(const Tensor& a, const Tensor& b) {
  return mul(a, b);
}
inline Tensor operator/(const Tensor& a, const Tensor& b) {
  return div(a, b);
}
inline Tensor operator-(const Tensor& a) {
  return neg(a);
}
inline Tensor operator+(const Tensor& a, Scalar s) {
  return add(a, s);
}
inline Tensor operator+(Scalar s, const Tensor& a) {
  return add(a, s);
}
inline Tensor operator-(const Tensor& a, Scalar s) {
  return add(a, -s);
}
inline Tensor operator-(Scalar s, const Tensor& a) {
  return rsub(a, s);
}
inline Tensor operator*(const Tensor& a, Scalar s) {
  return mul(a, s);
}
inline Tensor operator*(Scalar s, const Tensor& a) {
  return mul(a, s);
}
inline Tensor operator/(const Tensor& a, Scalar s) {
  return div(a, s);
}
inline Tensor operator/(Scalar s, const Tensor& a) {
  return rdiv(a, s);
}
inline Tensor operator==(const Tensor& a, const Tensor& b) {
  return eq(a, b);
}
inline Tensor operator!=(const Tensor& a, const Tensor& b) {
  return ne(a, b);
}
inline Tensor operator<(const Tensor& a, const Tensor& b) {
  return lt(a, b);
}
inline Tensor operator<=(const Tensor& a, const Tensor& b) {
  return le(a, b);
}
inline Tensor operator>(const Tensor& a, const Tensor& b) {
  return gt(a, b);
}
inline Tensor operator>=(const Tensor& a, const Tensor& b) {
  return ge(a, b);
}
inline Tensor operator==(const Tensor& a, Scalar s) {
  return eq(a, s);
}
inline Tensor operator!=(const Tensor& a, Scalar s) {
  return ne(a, s);
}
inline Tensor operator<(const Tensor& a, Scalar s) {
  return lt(a, s);
}
inline Tensor operator<=(const Tensor& a, Scalar s) {
  return le(a, s);
}
inline Tensor operator>(const Tensor& a, Scalar s) {
  return gt(a, s);
}
inline Tensor operator>=(const Tensor& a, Scalar s) {
  return ge(a, s);
}
inline Tensor operator==(Scalar s, const Tensor& a) {
  return eq(a, s);
}
inline Tensor operator!=(Scalar s, const Tensor& a) {
  return ne(a, s);
}
inline Tensor operator<(Scalar s, const Tensor& a) {
  return gt(a, s);
}
inline Tensor operator<=(Scalar s, const Tensor& a) {
  return ge(a, s);
}
inline Tensor operator>(Scalar s, const Tensor& a) {
  return lt(a, s);
}
inline Tensor operator>=(Scalar s, const Tensor& a) {
  return le(a, s);
}
inline Tensor& operator+=(Tensor& a, const Tensor& b) {
  return add_(a, b);
}
inline Tensor& operator-=(Tensor& a, const Tensor& b) {
  return add_(a, b, -1.0);
}
inline Tensor& operator*=(Tensor& a, const Tensor& b) {
  return mul_(a, b);
}
inline Tensor& operator+=(Tensor& a, Scalar s) {
  return add_(a, s);
}
inline Tensor& operator-=(Tensor& a, Scalar s) {
  return add_(a, -s);
}
inline Tensor& operator*=(Tensor& a, Scalar s) {
  return mul_(a, s);
}

// --- checks shared by ops
void check_same_device(const char* op, const Tensor& a, const Tensor& b);
void check_same_dtype(const char* op, const Tensor& a, const Tensor& b);
void check_floating(const char* op, const Tensor& a);
void check_defined(const char* op, const Tensor& a, const char* what = "input");
// Throws when `t` requires grad while grad mode is on (in-place ops can't be recorded).
void check_inplace(const char* op, const Tensor& t);

}  // namespace ember

// --- the seams that custom CUDA kernels replace: one function each, forward and
// backward together (core/ops/linear.cpp, core/ops/loss.cpp)
namespace ember {

// y = x w^T + b. x: (..., in), w: (out, in), b: (out) or undefined; y: (..., out).
// Backward: d_x = d_y w, d_w = d_y^T x, d_b = d_y summed over all leading dims.
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b = Tensor());

// y = act(x w^T + b), the activation fused into the GEMM's epilogue on CUDA
// (float32, TF32, bfloat16; composed elsewhere). The activations are the unary
// ops marked Act in core/base/elementwise_ops.h (ReLU, GELU exact and tanh, SiLU). Backward
// applies act' (read off y for ReLU, from the saved pre-activation for the others,
// as the list says), then the same d_x, d_w, d_b as linear.
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b, Activation act);

// (pred - target)^2, reduced. pred and target have the same shape. Backward:
// d_pred = 2 (pred - target) * g / N for Mean (N = numel), without / N for Sum,
// elementwise g for None; d_target = -d_pred.
Tensor mse_loss(const Tensor& pred, const Tensor& target, Reduction r = Reduction::Mean);

// Options of cross_entropy, as libtorch's CrossEntropyFuncOptions:
// CrossEntropyOptions().label_smoothing(0.1), or CrossEntropyOptions{Reduction::Sum}.
class CrossEntropyOptions {
 public:
  CrossEntropyOptions(Reduction reduction = Reduction::Mean, int64_t ignore_index = -100,
                      double label_smoothing = 0.0)
      : reduction_(reduction), ignore_index_(ignore_index), label_smoothing_(label_smoothing) {}
  CrossEntropyOptions& reduction(Reduction r) {
    reduction_ = r;
    return *this;
  }
  CrossEntropyOptions& ignore_index(int64_t i) {
    ignore_index_ = i;
    return *this;
  }
  CrossEntropyOptions& label_smoothing(double s) {
    label_smoothing_ = s;
    return *this;
  }
  Reduction reduction() const { return reduction_; }
  int64_t ignore_index() const { return ignore_index_; }
  double label_smoothing() const { return label_smoothing_; }

 private:
  Reduction reduction_;
  int64_t ignore_index_;
  double label_smoothing_;
};

// Cross-entropy of logits (N, C) or (N, C, d...) against int64 class indices (N)
// or (N, d...), as torch.nn.functional.cross_entropy: per element
//   (1 - ls) (logsumexp(x) - x[t]) + ls (logsumexp(x) - mean_c x[c]),
// ls = label_smoothing; elements whose target is ignore_index count 0 and are
// left out of Mean's count (Mean of none is NaN, as PyTorch). None keeps the
// shape of target. A target out of [0, C) (other than ignore_index) is an error
// (on CUDA, raised at the next synchronisation: see indexing above). On CUDA,
// 2-D float32/bfloat16 logits run one fused kernel that reads each row once and
// writes the loss and the gradient of the logits in the same pass
// (core/ops/cross_entropy.cpp); composed of log_softmax and nll_loss elsewhere.
Tensor cross_entropy(const Tensor& logits, const Tensor& target,
                     const CrossEntropyOptions& options = {});

// cross_entropy(linear(input, weight), target, options) without the logits: input
// (..., C), weight (classes, C) (a Linear's, without bias: a language model's head),
// target (...) of int64 class indices. Where the device has the fused cross-entropy
// kernel for the compute dtype (CUDA float32 and bfloat16, the CPU's float32) and the
// reduction is Mean or Sum, the rows run in chunks (chunk_rows each; 0 picks them so
// one chunk's logits take at most 256 MiB): per chunk the logits, the kernel's losses
// and logit gradient, then that chunk's input gradient and share of the weight
// gradient, so no (rows, classes) tensor outlives its chunk. The gradients are thus
// computed in the forward (3 GEMMs, as linear's forward and backward) and scaled by
// the incoming gradient in backward. Under autocast the products run in the autocast
// dtype and the loss and gradients keep the operands' float32; the weight gradient
// sums the chunks' shares in the weight's dtype. Reduction None, other dtypes, and
// EMBER_LINEAR_CROSS_ENTROPY=composed (read once) compose linear and cross_entropy.
// As Liger-Kernel's FusedLinearCrossEntropy; PyTorch has no such op.
Tensor linear_cross_entropy(const Tensor& input, const Tensor& weight, const Tensor& target,
                            const CrossEntropyOptions& options = {}, int64_t chunk_rows = 0);

// Options of nll_loss, as libtorch's NLLLossFuncOptions.
class NLLLossOptions {
 public:
  NLLLossOptions(Reduction reduction = Reduction::Mean, int64_t ignore_index = -100)
      : reduction_(reduction), ignore_index_(ignore_index) {}
  NLLLossOptions& reduction(Reduction r) {
    reduction_ = r;
    return *this;
  }
  NLLLossOptions& ignore_index(int64_t i) {
    ignore_index_ = i;
    return *this;
  }
  Reduction reduction() const { return reduction_; }
  int64_t ignore_index() const { return ignore_index_; }

 private:
  Reduction reduction_;
  int64_t ignore_index_;
};

// -log_probs[n, target[n]] (and likewise for (N, C, d...)), reduced as
// cross_entropy (Mean over the targets not ignored).
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const NLLLossOptions& options = {});

// -(t log(p) + (1 - t) log(1 - p)) with each log clamped to >= -100 (as PyTorch);
// probs in [0, 1], target of the same shape.
Tensor binary_cross_entropy(const Tensor& probs, const Tensor& target,
                            Reduction r = Reduction::Mean);
// The same from logits, stable for any logit: (1 - t) x + (1 + (pw - 1) t)
// softplus(-x), pw = pos_weight (broadcast along the last dim; undefined: 1). A
// bfloat16 result is computed in float32 and rounded once, as PyTorch does.
Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target,
                                        const Tensor& pos_weight = Tensor(),
                                        Reduction r = Reduction::Mean);
// |pred - target|, reduced; the gradient at pred == target is 0.
Tensor l1_loss(const Tensor& pred, const Tensor& target, Reduction r = Reduction::Mean);

namespace detail {
// scaled_dot_product_attention's fused path (core/ops/attention_fused.cpp, docs/attention.md):
// true when query (B, H, Tq, D), key and value (B, H, Tk, D) are of one dtype on one
// device whose kernel table has a fused attention for them (CUDA: bfloat16, D 64 or
// 128, compute capability 8.0 or later) and EMBER_ATTENTION is not "composed". Never
// throws for shapes; an EMBER_ATTENTION other than fused, atomic or composed throws.
bool fused_attention_supported(const Tensor& query, const Tensor& key, const Tensor& value);
// softmax(scale query key^T) value, causal as PyTorch's is_causal (query i sees keys
// 0..i), by the fused kernels, with a backward through the fused backward
// (deterministic unless EMBER_ATTENTION=atomic). dropout_p > 0: the weights dropped
// inside the kernels by the mask scaled_dot_product_attention's composed path draws
// (dropout's over the (B, H, Tq, Tk) weights, offset = gen->advance(B H Tq Tk);
// fresh at each replay inside a CUDA graph). Throws where fused_attention_supported is
// false. The result is (B, H, Tq, D) contiguous.
// mask (not with is_causal): bool (true = take part) or additive bfloat16 like the query
// and without a gradient, broadcasting to (B, H, Tq, Tk), read by the kernels
// (fused_attention_takes_mask says whether they can); rows with every key masked give
// zeros, as the composed path.
Tensor fused_attention(const Tensor& query, const Tensor& key, const Tensor& value, bool is_causal,
                       double scale, double dropout_p = 0.0, Generator* gen = nullptr,
                       const Tensor& mask = Tensor());
bool fused_attention_takes_mask(const Tensor& query, const Tensor& key, const Tensor& mask);
// Whether scaled_dot_product_attention's masks are read by the fused kernels: yes
// unless EMBER_ATTENTION_MASK=composed (read once; "fused" is the default), which sends
// every call with a mask to the composed path.
bool fused_attention_mask();
// Whether scaled_dot_product_attention's dropout runs inside the fused kernels: yes
// unless EMBER_ATTENTION_DROPOUT=composed (read once; "fused" is the default), which
// sends every call with dropout to the composed path.
bool fused_attention_dropout();
}  // namespace detail

}  // namespace ember
