// layer_norm and rms_norm over the trailing dims normalized_shape, as
// torch.nn.functional.layer_norm and rms_norm.
//
// A fused op with a composed fallback, chosen by one predicate (the device's
// layer_norm_fused_supported for the dtype and row length). Fused (CUDA:
// cuda/kernels/layer_norm.cu), forward is one kernel that reads x once and keeps
// each row's mean and 1/std (float32) for backward, and backward one kernel that
// reads d_y and x once and writes d_x, summing the weight and bias gradients in
// the same pass (plus a small kernel adding the blocks' partial sums in order).
// Elsewhere (CPU, float64, rows too long for one block) it is composed of mean,
// sub, mul and pow, and autograd derives the gradient. rms_norm is the same with
// its own predicate and kernels (the same CUDA kernel without the mean and bias).
#include <atomic>
#include <limits>
#include <optional>
#include <utility>

#include "core/alloc_site.h"
#include "core/autograd.h"
#include "core/base/env_switch.h"
#include "core/base/random.h"
#include "core/kernel_table.h"
#include "core/ops.h"
#include "core/ops/dropout_draw.h"

namespace ember {

using Grads = std::vector<Tensor>;

namespace {

void check_norm(const char* op, const Tensor& x, const Shape& shape, const Tensor& w,
                const Tensor& b, double eps) {
  check_defined(op, x);
  check_floating(op, x);
  EMBER_CHECK(!shape.empty(), op,
              ": normalized_shape is empty; it names the trailing "
              "dims to normalise over");
  const size_t nd = shape.size();
  bool match = static_cast<size_t>(x.dim()) >= nd;
  for (size_t i = 0; match && i < nd; ++i) match = x.size(x.dim() - nd + i) == shape[i];
  EMBER_CHECK(match, op, ": normalized_shape ", shape_str(shape),
              " does not match the trailing dims of the input of shape ", shape_str(x.sizes()));
  EMBER_CHECK(numel_of(shape) > 0, op, ": normalized_shape ", shape_str(shape), " has no elements");
  for (const Tensor* p : {&w, &b}) {
    if (!p->defined()) continue;
    const char* what = p == &w ? "weight" : "bias";
    check_floating(op, *p);
    check_same_device(op, x, *p);
    EMBER_CHECK(p->sizes() == shape, op, ": ", what, " of shape ", shape_str(p->sizes()),
                " does not match normalized_shape ", shape_str(shape));
  }
  EMBER_CHECK(eps >= 0.0, op, ": eps must be >= 0, got ", eps);
}

// Mixed dtypes compute in their promoted type (a bfloat16 input with float32
// parameters in float32), the casts recorded for autograd.
DType norm_dtype(DType x, const Tensor& w, const Tensor& b) {
  DType dtype = x;
  if (w.defined()) dtype = promote_types(dtype, w.dtype());
  if (b.defined()) dtype = promote_types(dtype, b.dtype());
  return dtype;
}
Tensor as_dtype(const Tensor& t, DType dtype) {
  return !t.defined() || t.dtype() == dtype ? t : cast(t, dtype);
}
const void* ptr_of(const Tensor& t) {
  return t.defined() ? t.raw_data() : nullptr;
}
void* mut_ptr_of(const Tensor& t) {
  return t.defined() ? t.raw_data() : nullptr;
}
// The backward's scratch: `bytes` of the device's memory (none for 0).
Tensor scratch_of(size_t bytes, Device dev) {
  return bytes == 0
             ? Tensor()
             : empty({static_cast<int64_t>((bytes + 7) / 8)}, TensorOptions(kFloat64).device(dev));
}

// bfloat16 composes in float32 (PyTorch's opmath type): the statistics and the
// backward's row sums rounded to 8 bits at every step lose the gradient.
Tensor layer_norm_composed(const Tensor& input, int64_t rows, int64_t cols, const Tensor& w,
                           const Tensor& b, double eps) {
  if (input.dtype() == DType::BFloat16) {
    const Tensor y =
        layer_norm_composed(cast(input, DType::Float32), rows, cols, as_dtype(w, DType::Float32),
                            as_dtype(b, DType::Float32), eps);
    return cast(y, DType::BFloat16);
  }
  const Tensor& x = input;
  const Tensor x2 = reshape(x, {rows, cols});
  const Tensor centred = sub(x2, mean(x2, 1, true));
  const Tensor var = mean(mul(centred, centred), 1, true);  // biased, as PyTorch
  Tensor y = mul(centred, pow(add(var, eps), -0.5));
  if (w.defined()) y = mul(y, reshape(w, {cols}));
  if (b.defined()) y = add(y, reshape(b, {cols}));
  return reshape(y, x.sizes());
}

// The sum's gradient rule: add's (binary_op's AddBackward), each operand's gradient
// the sum's in that operand's dtype (a bfloat16 branch's cast back, as add's own).
// drop (not null: the residual went through that dropout): the residual's gradient is
// the sum's through the same draw, cast and mask in one pass (DropoutAddBackward).
void attach_add_backward(Tensor& sum, const Tensor& x, const Tensor& residual,
                         const detail::DropoutDraw* drop) {
  if (!any_requires_grad({&x, &residual})) return;
  const std::optional<detail::DropoutDraw> d =
      drop != nullptr ? std::optional(*drop) : std::nullopt;
  attach_grad_fn(sum, d ? "DropoutAddBackward" : "AddBackward", {&x, &residual},
                 [gx = x.requires_grad(), gr = residual.requires_grad(), tx = x.dtype(),
                  tr = residual.dtype(), d](const Tensor& g) {
                   const Tensor r = !gr ? Tensor()
                                    : d ? detail::apply_dropout_draw(g, *d, tr)
                                        : as_dtype(g, tr);
                   return Grads{gx ? as_dtype(g, tx) : Tensor(), r};
                 });
}

// out: the result's dtype, x's or (x float32) bfloat16, written so by the kernel.
// residual (of x's shape and dtype, or bfloat16 beside float32 x), when defined: the
// row normalised is x + residual, which the same kernel writes to *sum_out, recorded
// for autograd as add's result; the norm's input is then that sum. drop (not null,
// with a residual): the residual is read through that dropout.
Tensor layer_norm_fused(const Tensor& x, const Shape& shape, int64_t rows, int64_t cols,
                        const Tensor& w, const Tensor& b, double eps, DType out,
                        const Tensor& residual = Tensor(), Tensor* sum_out = nullptr,
                        const detail::DropoutDraw* drop = nullptr) {
  const Device device = x.device();
  const Tensor xc = contiguous(x.detach());
  const Tensor rc = residual.defined() ? contiguous(residual.detach()) : Tensor();
  Tensor sum =
      residual.defined() ? empty(x.sizes(), TensorOptions(x.dtype()).device(device)) : Tensor();
  const Tensor wc = w.defined() ? contiguous(w.detach()) : Tensor();
  const Tensor bc = b.defined() ? contiguous(b.detach()) : Tensor();
  Tensor y = empty(x.sizes(), TensorOptions(out).device(device));
  const TensorOptions stat = TensorOptions(kFloat32).device(device);
  const Tensor mu = empty({rows}, stat), rstd = empty({rows}, stat);
  kernels::LayerNormArgs fwd{device,
                             x.dtype(),
                             xc.raw_data(),
                             wc.defined() ? wc.raw_data() : nullptr,
                             bc.defined() ? bc.raw_data() : nullptr,
                             y.raw_data(),
                             mu.raw_data(),
                             rstd.raw_data(),
                             rows,
                             cols,
                             eps};
  fwd.y_bf16 = out != x.dtype();
  fwd.residual = ptr_of(rc);
  fwd.sum = mut_ptr_of(sum);
  fwd.residual_bf16 = rc.defined() && rc.dtype() != x.dtype();
  if (drop != nullptr)
    fwd.residual_dropout = {dropout_key(drop->seed), drop->threshold, drop->offset,
                            static_cast<float>(drop->scale), drop->base};
  kernels::kernels_for(device).layer_norm_fused(fwd);
  // The norm's input: x, or the sum (add's result, x and residual its inputs).
  const Tensor* in = &x;
  Tensor saved = xc;
  if (sum.defined()) {
    attach_add_backward(sum, x, residual, drop);
    saved = sum.detach();
    *sum_out = sum;
    in = sum_out;
  }
  if (any_requires_grad({in, &w, &b})) {
    const bool gx = in->requires_grad(), gw = w.defined() && w.requires_grad(),
               gb = b.defined() && b.requires_grad();
    attach_grad_fn(
        y, "LayerNormBackward", {in, &w, &b}, {saved, wc, mu, rstd},
        [gx, gw, gb, shape, rows, cols](const Tensor& g, const SavedTensors& s) {
          const Tensor& xs = s[0];
          const Tensor& ws = s[1];
          const Device dev = xs.device();
          const Tensor gc = contiguous(g);
          // d_x folded into the gradient the engine is summing for x (the residual
          // stream's, in a transformer) when one has arrived: the kernel writes their
          // sum, in place when the engine alone holds it, instead of d_x and then an
          // add pass.
          Tensor* sum = gx ? detail::backward_input_sum(0) : nullptr;
          const bool fold = sum != nullptr && sum->defined() && sum->dtype() == xs.dtype() &&
                            sum->device() == dev && sum->sizes() == xs.sizes() &&
                            sum->is_contiguous();
          const bool in_place = fold && detail::engine_holds_alone(*sum);
          Tensor d_x = !gx ? Tensor() : in_place ? *sum : empty(xs.sizes(), xs.options());
          Tensor d_w = gw ? empty(shape, xs.options()) : Tensor();
          Tensor d_b = gb ? empty(shape, xs.options()) : Tensor();
          const kernels::KernelTable& k = kernels::kernels_for(dev);
          const size_t ws_bytes =
              gw || gb ? k.layer_norm_workspace_bytes({dev, xs.dtype(), rows, cols}) : 0;
          const Tensor scratch = ws_bytes == 0 ? Tensor()
                                               : empty({static_cast<int64_t>((ws_bytes + 7) / 8)},
                                                       TensorOptions(kFloat64).device(dev));
          auto ptr = [](const Tensor& t) { return t.defined() ? t.raw_data() : nullptr; };
          kernels::LayerNormBackwardArgs args{dev,
                                              xs.dtype(),
                                              gc.raw_data(),
                                              xs.raw_data(),
                                              ptr(ws),
                                              s[2].raw_data(),
                                              s[3].raw_data(),
                                              ptr(d_x),
                                              ptr(d_w),
                                              ptr(d_b),
                                              rows,
                                              cols,
                                              ptr(scratch)};
          if (fold) args.d_x_add = sum->raw_data();
          args.d_y_bf16 = gc.dtype() != xs.dtype();  // the result's dtype: bfloat16
          k.layer_norm_backward_fused(args);
          if (!fold) return Grads{d_x, d_w, d_b};
          *sum = std::move(d_x);
          return Grads{Tensor(), d_w, d_b};
        });
  }
  return y;
}

Tensor rms_norm_composed(const Tensor& x, int64_t rows, int64_t cols, const Tensor& w, double eps) {
  if (x.dtype() == DType::BFloat16)  // in float32, as layer_norm_composed
    return cast(
        rms_norm_composed(cast(x, DType::Float32), rows, cols, as_dtype(w, DType::Float32), eps),
        DType::BFloat16);
  const Tensor x2 = reshape(x, {rows, cols});
  Tensor y = mul(x2, pow(add(mean(mul(x2, x2), 1, true), eps), -0.5));
  if (w.defined()) y = mul(y, reshape(w, {cols}));
  return reshape(y, x.sizes());
}

Tensor rms_norm_fused(const Tensor& x, const Shape& shape, int64_t rows, int64_t cols,
                      const Tensor& w, double eps) {
  const Device device = x.device();
  const Tensor xc = contiguous(x.detach());
  const Tensor wc = w.defined() ? contiguous(w.detach()) : Tensor();
  Tensor y = empty(x.sizes(), x.options());
  const Tensor rstd = empty({rows}, TensorOptions(kFloat32).device(device));
  kernels::kernels_for(device).rms_norm_fused({device, x.dtype(), xc.raw_data(), ptr_of(wc),
                                               y.raw_data(), rstd.raw_data(), rows, cols, eps});
  if (any_requires_grad({&x, &w})) {
    const bool gx = x.requires_grad(), gw = w.defined() && w.requires_grad();
    attach_grad_fn(y, "RmsNormBackward", {&x, &w}, {xc, wc, rstd},
                   [gx, gw, shape, rows, cols](const Tensor& g, const SavedTensors& s) {
                     const Tensor& xs = s[0];
                     const Device dev = xs.device();
                     const Tensor gc = contiguous(g);
                     Tensor d_x = gx ? empty(xs.sizes(), xs.options()) : Tensor();
                     Tensor d_w = gw ? empty(shape, xs.options()) : Tensor();
                     const kernels::KernelTable& k = kernels::kernels_for(dev);
                     const Tensor scratch = scratch_of(
                         gw ? k.rms_norm_workspace_bytes({dev, xs.dtype(), rows, cols}) : 0, dev);
                     k.rms_norm_backward_fused({dev, xs.dtype(), gc.raw_data(), xs.raw_data(),
                                                ptr_of(s[1]), s[2].raw_data(), mut_ptr_of(d_x),
                                                mut_ptr_of(d_w), rows, cols, mut_ptr_of(scratch)});
                     return Grads{d_x, d_w};
                   });
  }
  return y;
}

}  // namespace

namespace {

// layer_norm, its result in `output` (nullopt: the dtype it computes in). The fused
// kernels write float32's result as bfloat16 themselves; any other output dtype is a
// cast of the result.
Tensor layer_norm_to(const Tensor& input, const Shape& normalized_shape, const Tensor& weight,
                     const Tensor& bias, double eps, std::optional<DType> output) {
  OpSite site("layer_norm");
  check_norm("layer_norm", input, normalized_shape, weight, bias, eps);
  EMBER_CHECK(!output || is_floating(*output),
              "layer_norm: the result's dtype must be floating, got ", *output);
  const DType dtype = norm_dtype(input.dtype(), weight, bias);
  const DType out = output.value_or(dtype);
  const Tensor x = as_dtype(input, dtype), w = as_dtype(weight, dtype), b = as_dtype(bias, dtype);
  const int64_t cols = numel_of(normalized_shape);
  const int64_t rows = x.numel() / cols;
  if (kernels::kernels_for(x.device())
          .layer_norm_fused_supported({x.device(), dtype, rows, cols})) {
    const bool direct = out == dtype || (dtype == kFloat32 && out == kBFloat16);
    return as_dtype(
        layer_norm_fused(x, normalized_shape, rows, cols, w, b, eps, direct ? out : dtype), out);
  }
  return as_dtype(layer_norm_composed(x, rows, cols, w, b, eps), out);
}

}  // namespace

Tensor layer_norm(const Tensor& input, const Shape& normalized_shape, const Tensor& weight,
                  const Tensor& bias, double eps) {
  return layer_norm_to(input, normalized_shape, weight, bias, eps, std::nullopt);
}

Tensor detail::layer_norm_into_dtype(const Tensor& input, const Shape& normalized_shape,
                                     const Tensor& weight, const Tensor& bias, double eps,
                                     DType output) {
  return layer_norm_to(input, normalized_shape, weight, bias, eps, output);
}

namespace {

std::atomic<int> g_add_layer_norm{-1};          // -1: EMBER_ADD_LAYER_NORM not read yet
std::atomic<int> g_dropout_add_layer_norm{-1};  // -1: EMBER_DROPOUT_ADD_LAYER_NORM not read yet

// The residual's dropout in dropout_add_layer_norm: p, train and gen as dropout's.
struct ResidualDropout {
  double p = 0.0;
  bool train = false;
  Generator* gen = nullptr;
};

// {x + dropout(residual), layer_norm of it} (the norm's result in `output`, nullopt: the
// dtype it computes in; no dropout where drop.train is false or drop.p 0). One fused
// pass where the layer norm's kernels run and the operands fit them; otherwise
// (dropout,) add, then layer_norm_to: the same values either way.
std::pair<Tensor, Tensor> add_layer_norm_to(const char* op, const Tensor& x, const Tensor& residual,
                                            const ResidualDropout& drop,
                                            const Shape& normalized_shape, const Tensor& weight,
                                            const Tensor& bias, double eps,
                                            std::optional<DType> output) {
  // Where no mask is drawn (eval, p 0) the allocations are add_layer_norm's, so a model's
  // memory reads the same whether or not it configures dropout.
  const bool drops = drop.train && drop.p > 0.0;
  OpSite site(drops ? op : "add_layer_norm");
  check_defined(op, x, "input");
  check_defined(op, residual, "residual");
  check_same_device(op, x, residual);
  EMBER_CHECK(x.sizes() == residual.sizes(), op, ": the residual of shape ",
              shape_str(residual.sizes()), " does not match the input of shape ",
              shape_str(x.sizes()), " (add the broadcast with add, then layer_norm)");
  check_norm(op, x, normalized_shape, weight, bias, eps);
  check_floating(op, residual);
  EMBER_CHECK(!output || is_floating(*output), op, ": the result's dtype must be floating, got ",
              *output);
  EMBER_CHECK(drop.p >= 0.0 && drop.p <= 1.0, op, ": dropout probability must be in [0, 1], got ",
              drop.p);
  // The sum's dtype is add's; the norm computes in it unless the parameters promote it.
  const DType dtype = norm_dtype(promote_types(x.dtype(), residual.dtype()), weight, bias);
  const DType out = output.value_or(dtype);
  const int64_t cols = numel_of(normalized_shape);
  const int64_t rows = x.numel() / cols;
  const bool residual_fits =
      residual.dtype() == x.dtype() || (x.dtype() == kFloat32 && residual.dtype() == kBFloat16);
  const bool fused =
      detail::add_layer_norm_fused() && residual_fits && dtype == x.dtype() &&
      (out == dtype || (dtype == kFloat32 && out == kBFloat16)) &&
      kernels::kernels_for(x.device()).layer_norm_fused_supported({x.device(), dtype, rows, cols});
  // The dropout inside the pass: p below 1 (p 1 is dropout's multiply by 0) and the switch on.
  if (drops && (!fused || drop.p == 1.0 || !detail::dropout_add_layer_norm_fused())) {
    const Tensor dropped = dropout(residual, drop.p, true, drop.gen);
    return add_layer_norm_to(op, x, dropped, ResidualDropout{}, normalized_shape, weight, bias, eps,
                             output);
  }
  if (!fused) {
    Tensor sum = add(x, residual);
    return {sum, layer_norm_to(sum, normalized_shape, weight, bias, eps, output)};
  }
  const Tensor w = as_dtype(weight, dtype), b = as_dtype(bias, dtype);
  std::optional<detail::DropoutDraw> draw;
  if (drops) draw = detail::draw_dropout(residual, drop.p, drop.gen, op);
  Tensor sum;
  Tensor y = layer_norm_fused(x, normalized_shape, rows, cols, w, b, eps, out, residual, &sum,
                              draw ? &*draw : nullptr);
  return {std::move(sum), std::move(y)};
}

}  // namespace

bool detail::add_layer_norm_fused() {
  return env_switch(g_add_layer_norm, "EMBER_ADD_LAYER_NORM", true);
}

void detail::set_add_layer_norm_fused(bool on) {
  g_add_layer_norm.store(on ? 1 : 0, std::memory_order_relaxed);
}

bool detail::dropout_add_layer_norm_fused() {
  return env_switch(g_dropout_add_layer_norm, "EMBER_DROPOUT_ADD_LAYER_NORM", true);
}

void detail::set_dropout_add_layer_norm_fused(bool on) {
  g_dropout_add_layer_norm.store(on ? 1 : 0, std::memory_order_relaxed);
}

std::pair<Tensor, Tensor> add_layer_norm(const Tensor& x, const Tensor& residual,
                                         const Shape& normalized_shape, const Tensor& weight,
                                         const Tensor& bias, double eps) {
  return add_layer_norm_to("add_layer_norm", x, residual, ResidualDropout{}, normalized_shape,
                           weight, bias, eps, std::nullopt);
}

std::pair<Tensor, Tensor> detail::add_layer_norm_into_dtype(const Tensor& x, const Tensor& residual,
                                                            const Shape& normalized_shape,
                                                            const Tensor& weight,
                                                            const Tensor& bias, double eps,
                                                            DType output) {
  return add_layer_norm_to("add_layer_norm", x, residual, ResidualDropout{}, normalized_shape,
                           weight, bias, eps, output);
}

std::pair<Tensor, Tensor> dropout_add_layer_norm(const Tensor& x, const Tensor& residual, double p,
                                                 bool train, const Shape& normalized_shape,
                                                 const Tensor& weight, const Tensor& bias,
                                                 double eps, Generator* gen) {
  return add_layer_norm_to("dropout_add_layer_norm", x, residual, {p, train, gen}, normalized_shape,
                           weight, bias, eps, std::nullopt);
}

std::pair<Tensor, Tensor> detail::dropout_add_layer_norm_into_dtype(
    const Tensor& x, const Tensor& residual, double p, bool train, const Shape& normalized_shape,
    const Tensor& weight, const Tensor& bias, double eps, DType output, Generator* gen) {
  return add_layer_norm_to("dropout_add_layer_norm", x, residual, {p, train, gen}, normalized_shape,
                           weight, bias, eps, output);
}

Tensor rms_norm(const Tensor& input, const Shape& normalized_shape, const Tensor& weight,
                std::optional<double> eps) {
  OpSite site("rms_norm");
  const DType dtype =
      input.defined() ? norm_dtype(input.dtype(), weight, Tensor()) : DType::Float32;
  // torch's default: the machine epsilon of the type the op computes in.
  const double e = eps.has_value()           ? *eps
                   : dtype == DType::Float64 ? std::numeric_limits<double>::epsilon()
                                             : std::numeric_limits<float>::epsilon();
  check_norm("rms_norm", input, normalized_shape, weight, Tensor(), e);
  const Tensor x = as_dtype(input, dtype), w = as_dtype(weight, dtype);
  const int64_t cols = numel_of(normalized_shape);
  const int64_t rows = x.numel() / cols;
  if (kernels::kernels_for(x.device()).rms_norm_fused_supported({x.device(), dtype, rows, cols}))
    return rms_norm_fused(x, normalized_shape, rows, cols, w, e);
  return rms_norm_composed(x, rows, cols, w, e);
}

}  // namespace ember
