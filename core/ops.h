// Every tensor op, as free functions. Each is defined in core/ops/<group>.cpp with
// its forward, its backward (attached right below) and its CPU reference kernel;
// its CUDA launcher is in cuda/kernels/<group>.cu. Bad shapes, devices or dtypes
// throw ember::Error naming the op and the operands.
#pragma once

#include <utility>
#include <vector>

#include "core/base/elementwise_ops.h"
#include "core/base/optim_math.h"
#include "core/tensor.h"

namespace ember {

// --- element-wise (core/ops/elementwise.cpp), generated from the lists of
// core/base/elementwise_ops.h: name(t) for each unary op (neg, exp, log, sqrt,
// abs, relu, sigmoid, tanh, gelu (tanh approximation, as PyTorch's
// approximate="tanh"), silu, sin, cos); name(t, s) for each op with a scalar
// (pow, add, mul, rsub: s - t, rdiv: s / t, and the non-differentiable ge, gt:
// 1 where t >= s (t > s), else 0, in t's dtype); name(a, b) for each binary op
// (add, sub, mul, div), with numpy broadcasting.
#define EMBER_X(name, ...) Tensor name(const Tensor& a);
EMBER_UNARY_OPS(EMBER_X)
#undef EMBER_X
#define EMBER_X(name, ...) Tensor name(const Tensor& a, double s);
EMBER_SCALAR_OPS(EMBER_X)
#undef EMBER_X
#define EMBER_X(name, ...) Tensor name(const Tensor& a, const Tensor& b);
EMBER_BINARY_OPS(EMBER_X)
#undef EMBER_X
Tensor add(const Tensor& a, const Tensor& b, double alpha);  // a + alpha * b
Tensor cast(const Tensor& a, DType t);  // differentiable dtype change

namespace detail {
// The generic element-wise forward (with its backward attached) behind the
// generated ops; s is the scalar of ops that take one, alpha add's.
Tensor unary_op(UnaryOp op, const Tensor& a, double s);
Tensor binary_op(BinaryOp op, const Tensor& a, const Tensor& b, double alpha);
// A unary op's d_x from the incoming gradient g and what its backward saves
// (unary_saves: its input or its output), without recording anything.
Tensor unary_backward_of(UnaryOp op, const Tensor& g, const Tensor& saved, double s);
}  // namespace detail

// In-place (bump the version; refuse tensors that require grad in grad mode).
Tensor& fill_(Tensor& t, double value);
Tensor& copy_(Tensor& dst, const Tensor& src);  // broadcasting src to dst, any dtypes
Tensor& add_(Tensor& t, const Tensor& other, double alpha = 1.0);
Tensor& add_(Tensor& t, double value);
Tensor& mul_(Tensor& t, const Tensor& other);
Tensor& mul_(Tensor& t, double value);

// --- reductions (core/ops/reduce.cpp)
Tensor sum(const Tensor& a);
Tensor sum(const Tensor& a, int64_t dim, bool keepdim = false);
Tensor mean(const Tensor& a);
Tensor mean(const Tensor& a, int64_t dim, bool keepdim = false);
Tensor max(const Tensor& a, int64_t dim, bool keepdim = false);     // values
Tensor argmax(const Tensor& a, int64_t dim, bool keepdim = false);  // int64 indices
// Sums `g` down to `shape` (the inverse of broadcasting), for backward of broadcast ops.
Tensor sum_to(const Tensor& g, const Shape& shape);

// --- linear algebra (core/ops/matmul.cpp): 2-D x 2-D, or batched (B, n, k) x (B, k, m)
// and (B, n, k) x (k, m). CUDA through cuBLAS.
Tensor matmul(const Tensor& a, const Tensor& b);

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

// --- operators
inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator-(const Tensor& a) { return neg(a); }
inline Tensor operator+(const Tensor& a, double s) { return add(a, s); }
inline Tensor operator+(double s, const Tensor& a) { return add(a, s); }
inline Tensor operator-(const Tensor& a, double s) { return add(a, -s); }
inline Tensor operator-(double s, const Tensor& a) { return rsub(a, s); }
inline Tensor operator*(const Tensor& a, double s) { return mul(a, s); }
inline Tensor operator*(double s, const Tensor& a) { return mul(a, s); }
inline Tensor operator/(const Tensor& a, double s) { return mul(a, 1.0 / s); }
inline Tensor operator/(double s, const Tensor& a) { return rdiv(a, s); }
inline Tensor& operator+=(Tensor& a, const Tensor& b) { return add_(a, b); }
inline Tensor& operator-=(Tensor& a, const Tensor& b) { return add_(a, b, -1.0); }
inline Tensor& operator*=(Tensor& a, const Tensor& b) { return mul_(a, b); }
inline Tensor& operator*=(Tensor& a, double s) { return mul_(a, s); }

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
// ops marked Act in core/base/elementwise_ops.h (ReLU, GELU, SiLU). Backward
// applies act' (read off y for ReLU, from the saved pre-activation for the others,
// as the list says), then the same d_x, d_w, d_b as linear.
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b, Activation act);

enum class Reduction { None, Mean, Sum };
// (pred - target)^2, reduced. pred and target have the same shape. Backward:
// d_pred = 2 (pred - target) * g / N for Mean (N = numel), without / N for Sum,
// elementwise g for None; d_target = -d_pred.
Tensor mse_loss(const Tensor& pred, const Tensor& target, Reduction r = Reduction::Mean);

}  // namespace ember
