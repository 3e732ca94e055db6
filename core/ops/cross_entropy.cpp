// Classification losses: nll_loss, cross_entropy, binary_cross_entropy(_with_logits)
// and l1_loss, with PyTorch's semantics (ignore_index, label_smoothing, Mean over
// the targets not ignored).
//
// cross_entropy is a fused op with a composed fallback, chosen by one predicate
// (the device's cross_entropy_fused_supported for the dtype and class count, on
// 2-D logits). Fused (CUDA: cuda/kernels/cross_entropy.cu), one kernel reads each
// row of logits once and writes the loss and, when a gradient will be needed, the
// gradient of the logits for an incoming gradient of 1, in the same pass; backward
// then only scales that stashed gradient by the incoming one on the device (not
// at all when it is 1, the usual loss.backward()). Elsewhere (CPU, float64,
// (N, C, d...) logits) it is log_softmax followed by nll_loss, whose gradient
// autograd derives.
#include <algorithm>
#include <memory>

#include "core/alloc_site.h"
#include "core/autocast.h"
#include "core/autograd.h"
#include "core/kernel_table.h"
#include "core/ops.h"
#include "core/ops/switches.h"

namespace ember {

using Grads = std::vector<Tensor>;

namespace {

// logits (N, C, d...) with target (N, d...), or (C) with a 0-dim target.
void check_class_targets(const char* op, const Tensor& input, const Tensor& target,
                         const char* input_name) {
  check_defined(op, input, input_name);
  check_defined(op, target, "target");
  check_floating(op, input);
  EMBER_CHECK(target.dtype() == kInt64, op,
              ": target must be an int64 tensor of class indices, "
              "got ",
              target.dtype(), " of shape ", shape_str(target.sizes()));
  check_same_device(op, input, target);
  EMBER_CHECK(input.dim() >= 1, op, ": ", input_name, " must have a class dim, got a 0-dim tensor");
  if (input.dim() == 1) {
    EMBER_CHECK(target.dim() == 0, op, ": ", input_name, " of shape ", shape_str(input.sizes()),
                " (one sample) needs a 0-dim target, got shape ", shape_str(target.sizes()));
  } else {
    EMBER_CHECK(target.dim() >= 1 && target.size(0) == input.size(0), op, ": ", input_name,
                " of shape ", shape_str(input.sizes()), " and target of shape ",
                shape_str(target.sizes()), " have different batch sizes (", input.size(0), " and ",
                target.dim() >= 1 ? target.size(0) : 0, ")");
    Shape want = input.sizes();
    want.erase(want.begin() + 1);  // (N, C, d...) -> (N, d...)
    EMBER_CHECK(target.sizes() == want, op, ": target of shape ", shape_str(target.sizes()),
                " does not match ", input_name, " of shape ", shape_str(input.sizes()),
                " (expected ", shape_str(want), ")");
  }
  EMBER_CHECK(input.size(input.dim() == 1 ? 0 : 1) >= 1, op, ": ", input_name,
              " has no classes (shape ", shape_str(input.sizes()), ")");
}

// Per-element losses reduced; Mean divides by the count of `valid` elements (the
// targets not ignored): 0 / 0 gives NaN, as PyTorch.
Tensor reduce_over(const Tensor& per, const Tensor& valid, Reduction r) {
  if (r == Reduction::None) return per;
  if (r == Reduction::Sum) return sum(per);
  return div(sum(per), sum(valid));
}

Tensor reduce_all(const Tensor& per, Reduction r) {
  return r == Reduction::None ? per : r == Reduction::Sum ? sum(per) : mean(per);
}

// -log_probs at the targets, 0 where the target is ignore_index; shape of target.
Tensor picked_nll(const Tensor& log_probs, const Tensor& target, const Tensor& valid,
                  int64_t class_dim, const char* op) {
  const Tensor safe =
      where(valid, target, zeros({}, TensorOptions(kInt64).device(target.device())));
  Tensor picked = squeeze(
      detail::gather(log_probs, class_dim, unsqueeze(safe, class_dim), op, true), class_dim);
  return where(valid, neg(picked), zeros({}, picked.options()));
}

// The fused kernel on contiguous logits x (rows, classes) and targets t (rows),
// reduced by r, writing the gradient of the reduced loss into d when it is defined;
// returns the loss ((rows) for None, 0-dim otherwise), of x's dtype.
Tensor run_fused_kernel(const char* op, const Tensor& x, const Tensor& t, const Tensor& d,
                        const CrossEntropyOptions& o, Reduction r) {
  const Device device = x.device();
  const int64_t rows = x.size(0), classes = x.size(1);
  const kernels::KernelTable& kt = kernels::kernels_for(device);
  Tensor loss = r == Reduction::None ? empty({rows}, x.options()) : empty({}, x.options());
  const size_t ws_bytes = kt.cross_entropy_workspace_bytes({device, x.dtype(), rows, classes});
  const Tensor ws =
      empty({static_cast<int64_t>((ws_bytes + 7) / 8)}, TensorOptions(kFloat64).device(device));
  kt.cross_entropy_fused({device, x.dtype(), op, x.raw_data(), t.data_ptr<int64_t>(),
                          d.defined() ? d.raw_data() : nullptr, loss.raw_data(), rows, classes,
                          o.ignore_index(), o.label_smoothing(), r, ws.raw_data()});
  return loss;
}

// The stashed gradient of the fused kernel, handed to the engine on the first
// backward; a second backward through a retained graph recomputes it.
struct CrossEntropyStash {
  Tensor d_logits;
};

Tensor cross_entropy_fused(const Tensor& logits, const Tensor& target, const CrossEntropyOptions& o,
                           bool want_grad) {
  const int64_t rows = logits.size(0), classes = logits.size(1);
  const TensorOptions opts = logits.options();
  // Runs the kernel on (x, t), writing d (when defined) and returning the loss.
  auto run = [o](const Tensor& x, const Tensor& t, const Tensor& d) {
    return run_fused_kernel("cross_entropy", x, t, d, o, o.reduction());
  };
  Tensor x, t, d, loss;
  {
    NoGradGuard no_grad;
    x = contiguous(logits.detach());
    t = contiguous(target);
    d = want_grad ? empty({rows, classes}, opts) : Tensor();
    loss = run(x, t, d);
  }
  if (want_grad) {
    auto stash = std::make_shared<CrossEntropyStash>(CrossEntropyStash{d});
    const Reduction r = o.reduction();
    attach_grad_fn(
        loss, "CrossEntropyLossBackward", {&logits}, {x, t},
        [stash, run, r, rows, classes](const Tensor& g, const SavedTensors& s) {
          Tensor grad_logits = std::move(stash->d_logits);
          stash->d_logits = Tensor();
          if (!grad_logits.defined()) {  // a second backward: recompute it
            grad_logits = empty({rows, classes}, s[0].options());
            run(s[0], s[1], grad_logits);
          }
          if (r == Reduction::None) return Grads{mul(grad_logits, unsqueeze(g, 1))};
          // Ours alone, so scaling it in place is safe; skipped on the
          // device when g is 1.
          const Tensor gc = contiguous(g);
          kernels::kernels_for(grad_logits.device())
              .scale_by_device_scalar({grad_logits.device(), grad_logits.dtype(),
                                       grad_logits.raw_data(), gc.raw_data(), grad_logits.numel()});
          return Grads{grad_logits};
        });
  }
  return loss;
}

}  // namespace

// ---------------------------------------------------------------- nll_loss

Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const NLLLossOptions& o) {
  OpSite site("nll_loss");
  check_class_targets("nll_loss", log_probs, target, "log_probs");
  const int64_t class_dim = log_probs.dim() == 1 ? 0 : 1;
  const Tensor valid = ne(target, o.ignore_index());
  return reduce_over(picked_nll(log_probs, target, valid, class_dim, "nll_loss"), valid,
                     o.reduction());
}

// ---------------------------------------------------------------- cross_entropy

Tensor cross_entropy(const Tensor& logits, const Tensor& target, const CrossEntropyOptions& o) {
  OpSite site("cross_entropy");
  check_class_targets("cross_entropy", logits, target, "logits");
  const double ls = o.label_smoothing();
  EMBER_CHECK(ls >= 0.0 && ls <= 1.0, "cross_entropy: label_smoothing must be in [0, 1], got ", ls);
  if (logits.dim() == 2 && kernels::kernels_for(logits.device())
                               .cross_entropy_fused_supported({logits.device(), logits.dtype(),
                                                               logits.size(0), logits.size(1)}))
    return cross_entropy_fused(logits, target, o, any_requires_grad({&logits}));
  const int64_t class_dim = logits.dim() == 1 ? 0 : 1;
  const Tensor log_probs = log_softmax(logits, class_dim);
  const Tensor valid = ne(target, o.ignore_index());
  Tensor per = picked_nll(log_probs, target, valid, class_dim, "cross_entropy");
  if (ls > 0.0) {
    // PyTorch's smoothing: (1 - ls) nll + ls / C * (-sum_c log_probs), 0 where ignored.
    const double classes = static_cast<double>(logits.size(class_dim));
    const Tensor smooth = where(valid, neg(sum(log_probs, class_dim)), zeros({}, per.options()));
    per = add(mul(per, 1.0 - ls), mul(smooth, ls / classes));
  }
  return reduce_over(per, valid, o.reduction());
}

// ---------------------------------------------------------------- linear_cross_entropy

namespace {

// The logits one chunk may hold: 256 MiB, so GPT-2's (16 x 1024 rows, 50,304 classes,
// bfloat16: 1.54 GiB of logits) runs in 7 chunks of 2,341 rows. Fewer chunks add fewer
// passes over the weight gradient's accumulator (V x C float32 each); more hold less.
constexpr int64_t kChunkLogitsBytes = int64_t{256} << 20;

int64_t rows_per_chunk(int64_t rows, int64_t classes, DType dtype, int64_t asked) {
  if (asked > 0) return std::min(asked, std::max<int64_t>(rows, 1));
  const int64_t row_bytes =
      std::max<int64_t>(classes * static_cast<int64_t>(element_size(dtype)), 1);
  const int64_t total = rows * row_bytes;
  const int64_t chunks = std::max<int64_t>(1, (total + kChunkLogitsBytes - 1) / kChunkLogitsBytes);
  return std::max<int64_t>(1, (rows + chunks - 1) / chunks);
}

// EMBER_LINEAR_CROSS_ENTROPY=composed sends every call to the composed path (read once).
bool chunked_switch() {
  static const bool on = detail::own_path_unless_composed("linear_cross_entropy",
                                                          "EMBER_LINEAR_CROSS_ENTROPY", "chunked");
  return on;
}

Tensor as_dtype(const Tensor& t, DType d) {
  return t.dtype() == d ? t : cast(t, d);
}

// d_w (V, C) in w's dtype gets one chunk's share d^T x (d (rows, V), x (rows, C), both
// contiguous in the compute dtype): the device's weight-gradient GEMM summing into
// d_w in its own dtype when it can (CUDA: cuBLASLt with a float32 output and beta 1,
// so bfloat16 shares are summed in float32 with no cast or add pass); otherwise a
// product in the compute dtype added (cast) into d_w. The first share makes d_w.
void add_weight_share(Tensor& d_w, const Tensor& d, const Tensor& x, const Tensor& w) {
  const bool first = !d_w.defined();
  const int64_t rows = x.size(0), classes = d.size(1), in = x.size(1);
  if (first) d_w = empty({classes, in}, w.options());
  kernels::LinearWeightGradArgs a{x.device(),   x.dtype(), rows,         classes,        in,
                                  x.raw_data(), in,        d.raw_data(), d_w.raw_data(), nullptr};
  a.d_w_float32 = d_w.dtype() == DType::Float32;
  a.accumulate = !first;
  // The GEMM writes d_w in the compute dtype or in float32, nothing else (a float64
  // weight beside a float32 input under autocast takes the product and the cast).
  const bool gemm_writes = d_w.dtype() == x.dtype() || a.d_w_float32;
  if (rows > 0 && gemm_writes && kernels::kernels_for(x.device()).linear_weight_grad_fused(a))
    return;
  const Tensor share = matmul(d.t(), x);  // (V, C), compute dtype
  if (first)
    copy_(d_w, share);
  else
    add_(d_w, share);
}

// What the chunked forward leaves for backward: the gradients for an incoming
// gradient of 1 and a Sum reduction (Mean divides by `count` in backward).
struct LinearCrossEntropyGrads {
  Tensor d_input, d_weight;
};

// The chunked forward, no autograd: x (N, C) and w (V, C) in their own dtypes
// (float32 under autocast), computed in `compute`. Per chunk of rows: the logits,
// the kernel's per-row losses and gradient of the logits, the logits freed, then
// the chunk's d_input rows (written in place) and its share of d_weight (summed in
// d_weight's dtype, w's). Returns the per-row losses (N) in x's dtype.
Tensor chunked_forward(const Tensor& x_in, const Tensor& w_in, const Tensor& t,
                       const CrossEntropyOptions& o, DType compute, int64_t chunk, bool gx, bool gw,
                       LinearCrossEntropyGrads* grads) {
  NoGradGuard no_grad;
  AutocastGuard no_autocast(DType::BFloat16, false);
  const Tensor x = contiguous(as_dtype(x_in, compute));
  const Tensor w = contiguous(as_dtype(w_in, compute));
  const int64_t rows = x.size(0);
  Tensor per = empty({rows}, x_in.options());
  if (gx) grads->d_input = empty(x_in.sizes(), x_in.options());
  grads->d_weight = Tensor();
  for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
    const int64_t r1 = std::min(rows, r0 + chunk);
    const Tensor xc = slice(x, 0, r0, r1);
    Tensor logits = linear(xc, w);
    const Tensor d = gx || gw ? empty(logits.sizes(), logits.options()) : Tensor();
    Tensor per_c = slice(per, 0, r0, r1);
    copy_(per_c, run_fused_kernel("linear_cross_entropy", logits, slice(t, 0, r0, r1), d, o,
                                  Reduction::None));
    logits = Tensor();  // freed before the products: at most one chunk's logits and d live
    if (gx) {
      Tensor dx_c = slice(grads->d_input, 0, r0, r1);
      copy_(dx_c, matmul(d, w));
    }
    if (gw) add_weight_share(grads->d_weight, d, xc, w_in);
  }
  return per;
}

}  // namespace

Tensor linear_cross_entropy(const Tensor& input, const Tensor& weight, const Tensor& target,
                            const CrossEntropyOptions& o, int64_t chunk_rows) {
  OpSite site("linear_cross_entropy");
  const char* op = "linear_cross_entropy";
  check_defined(op, input, "input");
  check_defined(op, weight, "weight");
  check_defined(op, target, "target");
  check_floating(op, input);
  check_floating(op, weight);
  check_same_device(op, input, weight);
  check_same_device(op, input, target);
  EMBER_CHECK(target.dtype() == kInt64, op,
              ": target must be an int64 tensor of class indices, got ", target.dtype(),
              " of shape ", shape_str(target.sizes()));
  EMBER_CHECK(input.dim() >= 1, op, ": input must have a feature dim, got a 0-dim tensor");
  EMBER_CHECK(weight.dim() == 2, op, ": weight must be 2-D (classes, in_features), got shape ",
              shape_str(weight.sizes()));
  EMBER_CHECK(input.size(-1) == weight.size(1), op, ": input has ", input.size(-1),
              " features (shape ", shape_str(input.sizes()), "), weight expects ", weight.size(1),
              " (shape ", shape_str(weight.sizes()), ")");
  Shape want = input.sizes();
  want.pop_back();
  EMBER_CHECK(target.sizes() == want, op, ": target of shape ", shape_str(target.sizes()),
              " does not match input of shape ", shape_str(input.sizes()), " (expected ",
              shape_str(want), ")");
  EMBER_CHECK(chunk_rows >= 0, op, ": chunk_rows must be >= 0 (0: automatic), got ", chunk_rows);
  const double ls = o.label_smoothing();
  EMBER_CHECK(ls >= 0.0 && ls <= 1.0, op, ": label_smoothing must be in [0, 1], got ", ls);
  const bool lowers = autocast_lowers({&input, &weight});
  EMBER_CHECK(lowers || input.dtype() == weight.dtype(), op,
              ": input and weight have different dtypes (", input.dtype(), " and ", weight.dtype(),
              ")");
  const DType compute = lowers ? autocast_dtype() : input.dtype();
  const int64_t in = weight.size(1), classes = weight.size(0);
  const Tensor x2 = input.dim() == 2 ? input : reshape(input, {-1, in});
  const Tensor t1 = target.dim() == 1 ? target : reshape(target, {-1});
  const int64_t rows = x2.size(0);
  const bool chunked = o.reduction() != Reduction::None && rows > 0 && classes > 0 && in > 0 &&
                       chunked_switch() &&
                       kernels::kernels_for(input.device())
                           .cross_entropy_fused_supported({input.device(), compute, rows, classes});
  if (!chunked) {  // linear then cross_entropy; linear autocasts as it would alone
    Tensor loss = cross_entropy(linear(x2, weight), t1, o);
    return o.reduction() == Reduction::None ? reshape(loss, target.sizes()) : loss;
  }
  const bool want_grad = any_requires_grad({&input, &weight});
  const bool gx = want_grad && input.requires_grad(), gw = want_grad && weight.requires_grad();
  const int64_t chunk = rows_per_chunk(rows, classes, compute, chunk_rows);
  auto stash = std::make_shared<LinearCrossEntropyGrads>();
  Tensor loss, count;
  {
    NoGradGuard no_grad;
    const Tensor t = contiguous(t1);
    const Tensor per =
        chunked_forward(x2.detach(), weight.detach(), t, o, compute, chunk, gx, gw, stash.get());
    // Summed, counted and divided in float32 at least (a bfloat16 count is exact only
    // to 256), then returned in the losses' dtype.
    const DType acc = promote_types(per.dtype(), kFloat32);
    loss = sum(as_dtype(per, acc));
    if (o.reduction() == Reduction::Mean) {
      count = sum(as_dtype(ne(t, o.ignore_index()), acc));
      loss = div(loss, count);  // 0 / 0: NaN, as PyTorch
    }
    loss = as_dtype(loss, per.dtype());
  }
  if (want_grad) {
    const Tensor xs = x2.detach(), ws = weight.detach(), ts = contiguous(t1);
    attach_grad_fn(
        loss, "LinearCrossEntropyBackward", {&x2, &weight}, {xs, ws, ts, count},
        [stash, o, compute, chunk, gx, gw](const Tensor& g, const SavedTensors& s) {
          LinearCrossEntropyGrads grads = std::move(*stash);
          *stash = LinearCrossEntropyGrads{};
          if (!grads.d_input.defined() && !grads.d_weight.defined())  // a second backward
            chunked_forward(s[0], s[1], s[2], o, compute, chunk, gx, gw, &grads);
          // The kernel's gradients are those of a Sum for an incoming 1: scale by
          // g (/ count for Mean), in place (they are ours alone).
          const Tensor scale = s[3].defined() ? div(g, s[3]) : g;
          if (gx) mul_(grads.d_input, as_dtype(scale, grads.d_input.dtype()));
          if (gw) mul_(grads.d_weight, as_dtype(scale, grads.d_weight.dtype()));
          return Grads{grads.d_input, grads.d_weight};
        });
  }
  return loss;
}

// ---------------------------------------------------------------- binary and l1

namespace {

void check_same_shape(const char* op, const Tensor& input, const Tensor& target) {
  check_defined(op, input, "input");
  check_defined(op, target, "target");
  check_floating(op, input);
  check_floating(op, target);
  check_same_device(op, input, target);
  EMBER_CHECK(input.sizes() == target.sizes(), op, ": input of shape ", shape_str(input.sizes()),
              " and target of shape ", shape_str(target.sizes()), " differ; they must match");
}

// The incoming gradient of a reduced loss, per element of `shape`.
Tensor per_element(const Tensor& g, Reduction r, const Shape& shape) {
  if (r == Reduction::None) return g;
  const Tensor scaled =
      r == Reduction::Mean ? mul(g, 1.0 / static_cast<double>(numel_of(shape))) : g;
  return expand(scaled, shape);
}

}  // namespace

Tensor binary_cross_entropy(const Tensor& probs, const Tensor& target, Reduction r) {
  OpSite site("binary_cross_entropy");
  check_same_shape("binary_cross_entropy", probs, target);
  Tensor out;
  {
    NoGradGuard no_grad;
    const Tensor p = probs.detach(), t = target.detach();
    // Each log clamped to >= -100, as PyTorch, so p = 0 or 1 gives a finite loss.
    const Tensor log_p = clamp_min(log(p), -100.0);
    const Tensor log_q = clamp_min(log(rsub(p, 1.0)), -100.0);
    out = reduce_all(neg(add(mul(t, log_p), mul(rsub(t, 1.0), log_q))), r);
  }
  if (any_requires_grad({&probs, &target})) {
    const bool gp = probs.requires_grad(), gt = target.requires_grad();
    // PyTorch's gradients: d_p = (p - t) / max(p (1 - p), 1e-12), finite at 0 and 1;
    // d_t = log(1 - p) - log(p), each log clamped as in forward.
    attach_grad_fn(
        out, "BinaryCrossEntropyBackward", {&probs, &target}, {probs, target},
        [r, gp, gt](const Tensor& g, const SavedTensors& s) {
          const Tensor& p = s[0];
          const Tensor& t = s[1];
          const Tensor ge = per_element(g, r, p.sizes());
          Tensor d_p, d_t;
          if (gp) d_p = mul(ge, div(sub(p, t), clamp_min(mul(p, rsub(p, 1.0)), 1e-12)));
          if (gt)
            d_t = mul(ge, sub(clamp_min(log(rsub(p, 1.0)), -100.0), clamp_min(log(p), -100.0)));
          return Grads{d_p, d_t};
        });
  }
  return out;
}

Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target,
                                        const Tensor& pos_weight, Reduction r) {
  OpSite site("binary_cross_entropy_with_logits");
  check_same_shape("binary_cross_entropy_with_logits", logits, target);
  // A bfloat16 result: the chain below runs in float32 and rounds once at the end, as
  // PyTorch's kernels compute reduced-precision inputs. Run op by op in bfloat16, each
  // op rounds, and the gradient (1 - t) - (1 + (pw - 1) t) sigmoid(-x) cancels where
  // its terms meet: 1.15% from the float64 result on the op table's samples, against
  // at most 0.31% this way (benchmarks/NOTES.md).
  DType result = promote_types(logits.dtype(), target.dtype());
  if (pos_weight.defined()) result = promote_types(result, pos_weight.dtype());
  if (result == kBFloat16) {
    auto wide = [](const Tensor& t) { return t.defined() ? cast(t, kFloat32) : t; };
    return cast(binary_cross_entropy_with_logits(wide(logits), wide(target), wide(pos_weight), r),
                kBFloat16);
  }
  // (1 - t) x + (1 + (pw - 1) t) softplus(-x): softplus never overflows, so any
  // logit is fine; autograd derives the gradient (1 - t) - (1 + (pw - 1) t) sigmoid(-x).
  Tensor weight_of_softplus;
  if (pos_weight.defined()) {
    check_floating("binary_cross_entropy_with_logits", pos_weight);
    check_same_device("binary_cross_entropy_with_logits", logits, pos_weight);
    bool fits = pos_weight.dim() <= logits.dim();
    for (int64_t i = 1; fits && i <= pos_weight.dim(); ++i)
      fits = pos_weight.size(-i) == 1 || pos_weight.size(-i) == logits.size(-i);
    EMBER_CHECK(fits, "binary_cross_entropy_with_logits: pos_weight of shape ",
                shape_str(pos_weight.sizes()), " does not broadcast to the logits' shape ",
                shape_str(logits.sizes()));
    weight_of_softplus = add(mul(add(pos_weight, -1.0), target), 1.0);
  }
  const Tensor sp = softplus(neg(logits));
  const Tensor per = add(mul(rsub(target, 1.0), logits),
                         weight_of_softplus.defined() ? mul(weight_of_softplus, sp) : sp);
  return reduce_all(per, r);
}

Tensor l1_loss(const Tensor& pred, const Tensor& target, Reduction r) {
  OpSite site("l1_loss");
  check_same_shape("l1_loss", pred, target);
  return reduce_all(abs(sub(pred, target)), r);
}

}  // namespace ember
