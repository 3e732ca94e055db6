// Batch norm (and batch norm + ReLU in one op), group norm, and pad (constant,
// reflect, replicate).
//
// batch_norm is a fused op with a composed fallback, chosen by one predicate (the
// device's batch_norm_fused_supported for the dtype and sizes) after the op's own
// conditions (a contiguous input; weight, bias and running statistics contiguous
// and of the input's dtype; in eval, running statistics that take no gradient).
// Fused (CUDA: cuda/kernels/batch_norm.cu), training forward is a Welford pass over
// x for the channels' statistics and one pass writing y, keeping each channel's
// mean and 1/std (float32) for backward; eval is one pass. Backward is one pass for
// the channels' sums of d_y and d_y xhat and one writing d_x. Elsewhere (CPU,
// float64, views, mixed dtypes) it is composed of reductions and element-wise ops
// and autograd derives the gradient; that composition is the reference the fused
// kernels are tested against. Neither path differentiates twice through the fused
// backward (ember's autograd has no create_graph).
#include <algorithm>
#include <tuple>
#include <vector>

#include "core/alloc_site.h"
#include "core/autograd.h"
#include "core/kernel_table.h"
#include "core/ops.h"

namespace ember {

namespace {

void check_channel_param(const char* op, const char* what, const Tensor& p, const Tensor& x,
                         int64_t c) {
  if (!p.defined()) return;
  check_same_device(op, x, p);
  EMBER_CHECK(p.dim() == 1 && p.size(0) == c, op, ": ", what, " must be (", c, "), got ",
              shape_str(p.sizes()));
}

// Mean and biased variance of x (N, C, M) over dims 0 and 2, as (1, C, 1); each
// reduction in x's dtype's accumulation (the reductions' own).
std::pair<Tensor, Tensor> channel_moments(const Tensor& x3) {
  Tensor mean = ember::mean(ember::mean(x3, 2, true), 0, true);
  Tensor centred = sub(x3, mean);
  Tensor var = ember::mean(ember::mean(mul(centred, centred), 2, true), 0, true);
  return {mean, var};
}

const void* ptr_of(const Tensor& t) {
  return t.defined() ? t.raw_data() : nullptr;
}
void* mut_ptr_of(const Tensor& t) {
  return t.defined() ? t.raw_data() : nullptr;
}
// `bytes` of the device's memory (none for 0), so the meta device counts them.
Tensor scratch_of(size_t bytes, Device dev) {
  return bytes == 0
             ? Tensor()
             : empty({static_cast<int64_t>((bytes + 7) / 8)}, TensorOptions(kFloat64).device(dev));
}

// Autocast's mix, as PyTorch's batch norm takes it: a bfloat16 input with float32
// weight, bias and running statistics (every defined one; at least one defined). The
// result is bfloat16, the statistics float32 (both paths).
bool mixed_params(const Tensor& input, std::initializer_list<const Tensor*> params) {
  if (input.dtype() != kBFloat16) return false;
  bool any = false;
  for (const Tensor* p : params) {
    if (!p->defined()) continue;
    if (p->dtype() != kFloat32) return false;
    any = true;
  }
  return any;
}

// The op's side of "may the fused kernels take this call": what the kernels assume
// beyond the device's predicate (sizes and dtype). Other mixed dtypes promote in the
// composed path; eval's running statistics are constants to the fused backward.
bool fusable(const Tensor& input, const Tensor& running_mean, const Tensor& running_var,
             const Tensor& weight, const Tensor& bias, bool training, bool params_f32) {
  if (!input.is_contiguous()) return false;
  const DType want = params_f32 ? kFloat32 : input.dtype();
  for (const Tensor* p : {&running_mean, &running_var, &weight, &bias})
    if (p->defined() && (p->dtype() != want || !p->is_contiguous())) return false;
  return training || !(running_mean.requires_grad() || running_var.requires_grad());
}

using Grads = std::vector<Tensor>;

// relu: y = max(0, batch norm), its backward masking d_y where the value before the
// ReLU (recomputed from x, w and b) was not positive. Its mean and invstd then share
// one (2, c) tensor, so that the bias fits the node's four saved tensors.
Tensor batch_norm_fused(const Tensor& input, const Tensor& running_mean, const Tensor& running_var,
                        const Tensor& weight, const Tensor& bias, bool training, double momentum,
                        double eps, int64_t n, int64_t c, int64_t m, bool params_f32, bool relu) {
  const Device dev = input.device();
  const DType dtype = input.dtype();
  const Tensor xs = input.detach();
  const Tensor ws = weight.defined() ? weight.detach() : Tensor();
  Tensor y = empty(input.sizes(), input.options());
  const TensorOptions stat = TensorOptions(kFloat32).device(dev);
  const Tensor stats = relu ? empty({2, c}, stat) : Tensor();
  const Tensor mean = relu ? stats.select(0, 0) : empty({c}, stat);
  const Tensor invstd = relu ? stats.select(0, 1) : empty({c}, stat);
  const kernels::KernelTable& k = kernels::kernels_for(dev);
  const Tensor scratch =
      training
          ? scratch_of(k.batch_norm_workspace_bytes({dev, dtype, n, c, m, params_f32, relu}), dev)
          : Tensor();
  kernels::BatchNormArgs args{dev,
                              dtype,
                              xs.raw_data(),
                              ptr_of(weight),
                              ptr_of(bias),
                              mut_ptr_of(running_mean),
                              mut_ptr_of(running_var),
                              y.raw_data(),
                              mean.raw_data(),
                              invstd.raw_data(),
                              n,
                              c,
                              m,
                              training,
                              momentum,
                              eps,
                              mut_ptr_of(scratch),
                              params_f32};
  args.relu = relu;
  k.batch_norm_fused(args);
  if (training && running_mean.defined()) {  // updated in place, as mul_ and add_ would
    running_mean.bump_version();
    running_var.bump_version();
  }
  if (any_requires_grad({&input, &weight, &bias})) {
    const bool gx = input.requires_grad(), gw = weight.defined() && weight.requires_grad(),
               gb = bias.defined() && bias.requires_grad();
    SavedTensors saved =
        relu ? SavedTensors{xs, ws, stats, bias.defined() ? bias.detach() : Tensor()}
             : SavedTensors{xs, ws, mean, invstd};
    attach_grad_fn(
        y, relu ? "BatchNormReluBackward" : "BatchNormBackward", {&input, &weight, &bias},
        std::move(saved),
        [gx, gw, gb, training, n, c, m, params_f32, relu](const Tensor& g, const SavedTensors& s) {
          const Tensor& x = s[0];
          const Device d = x.device();
          const Tensor gc = contiguous(g);
          const TensorOptions po = params_f32 ? TensorOptions(kFloat32).device(d) : x.options();
          Tensor d_x = gx ? empty(x.sizes(), x.options()) : Tensor();
          Tensor d_w = gw ? empty({c}, po) : Tensor();
          Tensor d_b = gb ? empty({c}, po) : Tensor();
          const kernels::KernelTable& kt = kernels::kernels_for(d);
          const bool sums = gw || gb || (training && gx);  // eval's d_x needs none
          const Tensor work = scratch_of(
              sums ? kt.batch_norm_workspace_bytes({d, x.dtype(), n, c, m, params_f32, relu}) : 0,
              d);
          // With relu, s[2] holds mean and invstd as rows, s[3] the bias.
          const void* mean_p = s[2].raw_data();
          const void* invstd_p =
              relu ? static_cast<const void*>(static_cast<const float*>(mean_p) + c)
                   : s[3].raw_data();
          kernels::BatchNormBackwardArgs a{d,
                                           x.dtype(),
                                           gc.raw_data(),
                                           x.raw_data(),
                                           ptr_of(s[1]),
                                           mean_p,
                                           invstd_p,
                                           mut_ptr_of(d_x),
                                           mut_ptr_of(d_w),
                                           mut_ptr_of(d_b),
                                           n,
                                           c,
                                           m,
                                           training,
                                           mut_ptr_of(work),
                                           params_f32};
          a.relu = relu;
          a.b = relu ? ptr_of(s[3]) : nullptr;
          kt.batch_norm_backward_fused(a);
          return Grads{d_x, d_w, d_b};
        });
  }
  return y;
}

Tensor batch_norm_impl(const Tensor& input, const Tensor& running_mean, const Tensor& running_var,
                       const Tensor& weight, const Tensor& bias, bool training, double momentum,
                       double eps, bool relu);

}  // namespace

Tensor batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight, const Tensor& bias, bool training, double momentum,
                  double eps) {
  OpSite site("batch_norm");
  return batch_norm_impl(input, running_mean, running_var, weight, bias, training, momentum, eps,
                         false);
}

Tensor batch_norm_relu(const Tensor& input, const Tensor& running_mean, const Tensor& running_var,
                       const Tensor& weight, const Tensor& bias, bool training, double momentum,
                       double eps) {
  OpSite site("batch_norm_relu");
  return batch_norm_impl(input, running_mean, running_var, weight, bias, training, momentum, eps,
                         true);
}

namespace {

Tensor batch_norm_impl(const Tensor& input, const Tensor& running_mean, const Tensor& running_var,
                       const Tensor& weight, const Tensor& bias, bool training, double momentum,
                       double eps, bool relu) {
  check_defined("batch_norm", input);
  check_floating("batch_norm", input);
  EMBER_CHECK(input.dim() >= 2, "batch_norm: expected an input of at least 2 dims (N, C, ...), ",
              "got shape ", shape_str(input.sizes()));
  EMBER_CHECK(eps >= 0.0, "batch_norm: eps must be >= 0, got ", eps);
  const int64_t n = input.size(0), c = input.size(1);
  const int64_t m = c == 0 ? 0 : input.numel() / std::max<int64_t>(n * c, 1);
  check_channel_param("batch_norm", "running_mean", running_mean, input, c);
  check_channel_param("batch_norm", "running_var", running_var, input, c);
  check_channel_param("batch_norm", "weight", weight, input, c);
  check_channel_param("batch_norm", "bias", bias, input, c);
  EMBER_CHECK(running_mean.defined() == running_var.defined(),
              "batch_norm: running_mean and running_var must both be given or both be undefined");
  EMBER_CHECK(training || running_mean.defined(),
              "batch_norm: eval mode (training = false) needs running_mean and running_var");
  if (training)
    EMBER_CHECK(n * m > 1, "batch_norm: expected more than 1 value per channel when training, ",
                "got input of shape ", shape_str(input.sizes()));
  const bool params_f32 = mixed_params(input, {&running_mean, &running_var, &weight, &bias});
  if (fusable(input, running_mean, running_var, weight, bias, training, params_f32) &&
      kernels::kernels_for(input.device())
          .batch_norm_fused_supported({input.device(), input.dtype(), n, c, m, params_f32, relu}))
    return batch_norm_fused(input, running_mean, running_var, weight, bias, training, momentum, eps,
                            n, c, m, params_f32, relu);
  if (relu)  // composed: the batch norm (fused where it can be), then the ReLU
    return ember::relu(batch_norm_impl(input, running_mean, running_var, weight, bias, training,
                                       momentum, eps, false));
  if (params_f32)  // composed in float32, the result in the input's dtype (bfloat16)
    return cast(batch_norm(cast(input, kFloat32), running_mean, running_var, weight, bias, training,
                           momentum, eps),
                kBFloat16);
  const Tensor x3 = reshape(input, {n, c, m});
  Tensor mean, var;
  if (training) {
    std::tie(mean, var) = channel_moments(x3);
    if (running_mean.defined()) {
      // running = (1 - momentum) running + momentum batch (unbiased variance there).
      NoGradGuard no_grad;
      const double count = static_cast<double>(n * m);
      Tensor rm = running_mean, rv = running_var;
      mul_(rm, 1.0 - momentum);
      add_(rm, mean.detach().reshape({c}), momentum);
      mul_(rv, 1.0 - momentum);
      add_(rv, var.detach().reshape({c}), momentum * count / (count - 1.0));
    }
  } else {
    mean = running_mean.view({1, c, 1});
    var = running_var.view({1, c, 1});
  }
  Tensor y = mul(sub(x3, mean), pow(add(var, eps), -0.5));
  if (weight.defined()) y = mul(y, weight.view({1, c, 1}));
  if (bias.defined()) y = add(y, bias.view({1, c, 1}));
  return reshape(y, input.sizes());
}

}  // namespace

Tensor group_norm(const Tensor& input, int64_t num_groups, const Tensor& weight, const Tensor& bias,
                  double eps) {
  OpSite site("group_norm");
  check_defined("group_norm", input);
  check_floating("group_norm", input);
  EMBER_CHECK(input.dim() >= 2, "group_norm: expected an input of at least 2 dims (N, C, ...), ",
              "got shape ", shape_str(input.sizes()));
  const int64_t n = input.size(0), c = input.size(1);
  EMBER_CHECK(num_groups >= 1 && c % num_groups == 0, "group_norm: ", c,
              " channels are not divisible by num_groups = ", num_groups);
  EMBER_CHECK(eps >= 0.0, "group_norm: eps must be >= 0, got ", eps);
  check_channel_param("group_norm", "weight", weight, input, c);
  check_channel_param("group_norm", "bias", bias, input, c);
  if (input.dtype() == DType::BFloat16) {
    // In float32 (PyTorch's opmath type), as layer_norm: statistics and the
    // backward's sums rounded to bfloat16 at every step lose the gradient.
    DType out = DType::BFloat16;
    if (weight.defined()) out = promote_types(out, weight.dtype());
    if (bias.defined()) out = promote_types(out, bias.dtype());
    auto f32 = [](const Tensor& t) {
      return t.defined() && t.dtype() == DType::BFloat16 ? cast(t, DType::Float32) : t;
    };
    const Tensor y =
        group_norm(cast(input, DType::Float32), num_groups, f32(weight), f32(bias), eps);
    return y.dtype() == out ? y : cast(y, out);
  }
  const Tensor xg = reshape(input, {n, num_groups, -1});
  Tensor mean = ember::mean(xg, 2, true);
  Tensor centred = sub(xg, mean);
  Tensor var = ember::mean(mul(centred, centred), 2, true);
  Tensor y = reshape(mul(centred, pow(add(var, eps), -0.5)), {n, c, -1});
  if (weight.defined()) y = mul(y, weight.view({1, c, 1}));
  if (bias.defined()) y = add(y, bias.view({1, c, 1}));
  return reshape(y, input.sizes());
}

// ---------------------------------------------------------------- pad

namespace {

// x padded along dim by (before, after) in `mode`; negative amounts crop.
Tensor pad_dim(const Tensor& x, int64_t dim, int64_t before, int64_t after, PadMode mode,
               double value) {
  const int64_t n = x.size(dim);
  Tensor t = x;
  if (before < 0 || after < 0) {  // crop first, as PyTorch's negative padding
    const int64_t lo = before < 0 ? -before : 0, hi = after < 0 ? n + after : n;
    EMBER_CHECK(lo <= hi, "pad: cropping (", before, ", ", after, ") removes all of dim ", dim,
                " of size ", n);
    t = slice(t, dim, lo, hi);
    before = std::max<int64_t>(before, 0);
    after = std::max<int64_t>(after, 0);
  }
  if (before == 0 && after == 0) return t;
  const int64_t m = t.size(dim);
  if (mode == PadMode::Constant) {
    Shape s = t.sizes();
    std::vector<Tensor> parts;
    if (before > 0) {
      s[dim] = before;
      parts.push_back(full(s, value, t.options()));
    }
    parts.push_back(t);
    if (after > 0) {
      s[dim] = after;
      parts.push_back(full(s, value, t.options()));
    }
    return cat(parts, dim);
  }
  if (mode == PadMode::Reflect)
    EMBER_CHECK(before < m && after < m, "pad: reflect padding (", before, ", ", after,
                ") must be smaller than the size of dim ", dim, " (", m, ")");
  else
    EMBER_CHECK(m > 0, "pad: replicate padding of an empty dim ", dim);
  std::vector<double> idx;
  idx.reserve(static_cast<size_t>(before + m + after));
  for (int64_t i = -before; i < m + after; ++i) {
    int64_t j = i;
    if (mode == PadMode::Reflect) {
      if (j < 0) j = -j;
      if (j >= m) j = 2 * (m - 1) - j;
    } else {
      j = std::min(std::max<int64_t>(j, 0), m - 1);
    }
    idx.push_back(static_cast<double>(j));
  }
  Tensor index = from_vector(idx, {static_cast<int64_t>(idx.size())},
                             TensorOptions(kInt64).device(t.device()));
  return index_select(t, dim, index);
}

}  // namespace

Tensor pad(const Tensor& input, const std::vector<int64_t>& padding, PadMode mode, double value) {
  OpSite site("pad");
  check_defined("pad", input);
  EMBER_CHECK(padding.size() % 2 == 0, "pad: padding must have an even number of entries ",
              "(before, after) per dim, from the last dim backwards; got ", padding.size());
  const int64_t dims = static_cast<int64_t>(padding.size()) / 2;
  EMBER_CHECK(dims <= input.dim(), "pad: ", padding.size(), " padding entries pad ", dims,
              " dims, but the input has ", input.dim(), " (shape ", shape_str(input.sizes()), ")");
  if (mode != PadMode::Constant)
    EMBER_CHECK(dims <= input.dim() - 1,
                "pad: ", mode == PadMode::Reflect ? "reflect" : "replicate",
                " padding pads at most the trailing dim(s) after a batch or channel dim; got ",
                dims, " padded dims for shape ", shape_str(input.sizes()));
  Tensor t = input;
  for (int64_t i = 0; i < dims; ++i) {
    const int64_t dim = input.dim() - 1 - i;
    t = pad_dim(t, dim, padding[2 * i], padding[2 * i + 1], mode, value);
  }
  return t;
}

}  // namespace ember
