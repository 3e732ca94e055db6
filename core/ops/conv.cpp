// Convolution and pooling over NCHW tensors. The input's pixels are gathered into
// columns (im2col) by the device's im2col kernel (kernel families im2col and col2im:
// CPU loops over the thread pool, CUDA kernels in cuda/kernels/conv.cu, nothing on
// the meta device), whose backward is col2im, the deterministic gather of the
// columns that read each pixel; then one matmul per group does the convolution, over
// columns laid out per image or as one matrix (detail::ConvColumns says when which).
// fold is col2im, its backward im2col. Where the kernels do not take the dtype, or
// with EMBER_CONV_COMPOSED=1 (detail::set_conv_composed for tests), the columns are
// composed from the indexing ops instead: one index_select over a table of positions
// computed on the host (padding reads an appended constant slot: 0 for convolution
// and average pooling, -inf for max pooling), fold the scatter-add of the same table
// (index_add). That composition is the reference the kernels are tested against.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "core/alloc_site.h"
#include "core/autocast.h"
#include "core/autograd.h"
#include "core/base/env_switch.h"
#include "core/kernel_table.h"
#include "core/ops.h"

namespace ember {

namespace {

struct Geometry {
  int64_t h = 0, w = 0;    // input plane
  int64_t kh = 0, kw = 0;  // kernel
  Int2 stride{1, 1}, padding{0, 0}, dilation{1, 1};
  int64_t oh = 0, ow = 0;  // output plane
};

int64_t out_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode) {
  const int64_t span = in + 2 * p - d * (k - 1) - 1;
  if (span < 0) return 0;
  int64_t o = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
  // The last window must start inside the input or its left padding (PyTorch's rule).
  if (ceil_mode && (o - 1) * s >= in + p) --o;
  return o;
}

void check_pair(const char* op, const char* what, Int2 v, int64_t min) {
  EMBER_CHECK(v[0] >= min && v[1] >= min, op, ": ", what, " must be >= ", min, ", got (", v[0],
              ", ", v[1], ")");
}

Geometry geometry(const char* op, int64_t h, int64_t w, Int2 kernel, Int2 stride, Int2 padding,
                  Int2 dilation, bool ceil_mode = false) {
  check_pair(op, "kernel_size", kernel, 1);
  check_pair(op, "stride", stride, 1);
  check_pair(op, "padding", padding, 0);
  check_pair(op, "dilation", dilation, 1);
  Geometry g{h, w, kernel[0], kernel[1], stride, padding, dilation, 0, 0};
  g.oh = out_size(h, g.kh, stride[0], padding[0], dilation[0], ceil_mode);
  g.ow = out_size(w, g.kw, stride[1], padding[1], dilation[1], ceil_mode);
  EMBER_CHECK(g.oh > 0 && g.ow > 0, op, ": the input plane (", h, ", ", w, ") padded by (",
              padding[0], ", ", padding[1], ") is smaller than the dilated kernel (",
              dilation[0] * (g.kh - 1) + 1, ", ", dilation[1] * (g.kw - 1) + 1, ")");
  return g;
}

// For each kernel offset (ki, kj) then each output position (oi, oj): the input
// pixel it reads, as a flat index into the plane, or h * w (the appended slot)
// where it falls in the padding or past the input (ceil_mode's last windows).
std::vector<double> position_table(const Geometry& g) {
  std::vector<double> idx;
  idx.reserve(static_cast<size_t>(g.kh * g.kw * g.oh * g.ow));
  const int64_t pad_slot = g.h * g.w;
  for (int64_t ki = 0; ki < g.kh; ++ki)
    for (int64_t kj = 0; kj < g.kw; ++kj)
      for (int64_t oi = 0; oi < g.oh; ++oi)
        for (int64_t oj = 0; oj < g.ow; ++oj) {
          const int64_t r = oi * g.stride[0] - g.padding[0] + ki * g.dilation[0];
          const int64_t c = oj * g.stride[1] - g.padding[1] + kj * g.dilation[1];
          const bool inside = r >= 0 && r < g.h && c >= 0 && c < g.w;
          idx.push_back(static_cast<double>(inside ? r * g.w + c : pad_slot));
        }
  return idx;
}

Tensor table_tensor(const Geometry& g, Device device) {
  return from_vector(position_table(g), {g.kh * g.kw * g.oh * g.ow},
                     TensorOptions(kInt64).device(device));
}

// -1: not yet read from EMBER_CONV_COMPOSED; 0 or 1 after (or as set by a test).
std::atomic<int> g_conv_composed{-1};

bool columns_composed() {
  int v = g_conv_composed.load(std::memory_order_relaxed);
  if (v < 0) {
    const char* e = std::getenv("EMBER_CONV_COMPOSED");
    v = e != nullptr && std::strcmp(e, "1") == 0 ? 1 : 0;
    int expected = -1;
    g_conv_composed.compare_exchange_strong(expected, v, std::memory_order_relaxed);
    v = g_conv_composed.load(std::memory_order_relaxed);
  }
  return v == 1;
}

// Whether the im2col and col2im kernels take tensors of dtype t.
bool column_kernels(DType t) {
  return (t == kFloat32 || t == kFloat64 || t == kBFloat16) && !columns_composed();
}

// -1: not yet read from EMBER_CONV_COLUMNS; else a detail::ConvColumns.
std::atomic<int> g_conv_columns{-1};

detail::ConvColumns columns_setting() {
  int v = g_conv_columns.load(std::memory_order_relaxed);
  if (v < 0) {
    const char* e = std::getenv("EMBER_CONV_COLUMNS");
    detail::ConvColumns c = detail::ConvColumns::automatic;
    if (e != nullptr && *e != '\0') {
      if (std::strcmp(e, "per_image") == 0)
        c = detail::ConvColumns::per_image;
      else if (std::strcmp(e, "matrix") == 0)
        c = detail::ConvColumns::matrix;
      else
        EMBER_CHECK(std::strcmp(e, "auto") == 0,
                    "EMBER_CONV_COLUMNS must be auto, per_image or matrix, got \"", e, "\"");
    }
    int expected = -1;
    g_conv_columns.compare_exchange_strong(expected, static_cast<int>(c),
                                           std::memory_order_relaxed);
    v = g_conv_columns.load(std::memory_order_relaxed);
  }
  return static_cast<detail::ConvColumns>(v);
}

// Whether conv2d of n images, cg*kk rows of columns per group and l output positions
// gathers one (C kk, N L) matrix: where forced, else where the weight needs its
// gradient and its per-image products (N, O, C kk) would outweigh the output (N, O, L)
// that the matrix layout copies once each way.
bool columns_as_matrix(const Tensor& weight, int64_t n, int64_t cg_kk, int64_t l) {
  if (n == 1) return false;  // the two layouts are the same
  switch (columns_setting()) {
    case detail::ConvColumns::per_image:
      return false;
    case detail::ConvColumns::matrix:
      return true;
    case detail::ConvColumns::automatic:
      break;
  }
  return any_requires_grad({&weight}) && cg_kk > l;
}

kernels::Im2colArgs column_args(Device d, DType t, const void* src, void* dst, int64_t n, int64_t c,
                                const Geometry& g, double pad_value, bool matrix) {
  kernels::Im2colArgs a{};
  a.device = d;
  a.dtype = t;
  a.src = src;
  a.dst = dst;
  a.n = n, a.c = c, a.h = g.h, a.w = g.w;
  a.kh = g.kh, a.kw = g.kw;
  a.sh = g.stride[0], a.sw = g.stride[1];
  a.ph = g.padding[0], a.pw = g.padding[1];
  a.dh = g.dilation[0], a.dw = g.dilation[1];
  a.oh = g.oh, a.ow = g.ow;
  const int64_t l = g.oh * g.ow;
  a.col_image = matrix ? l : c * g.kh * g.kw * l;
  a.col_row = matrix ? n * l : l;
  a.pad_value = pad_value;
  return a;
}

// The columns' shape: (N, C*kh*kw, L) per image, (C*kh*kw, N*L) as one matrix.
Shape columns_shape(const Geometry& g, int64_t n, int64_t c, bool matrix) {
  const int64_t rows = c * g.kh * g.kw, l = g.oh * g.ow;
  return matrix ? Shape{rows, n * l} : Shape{n, rows, l};
}

// col2im of cols (columns_shape's, any strides) into a new (N, C, H, W) tensor, and
// im2col of x (N, C, H, W) into new columns: by the kernels, each with the other as
// its backward.
Tensor col2im_kernel(const Tensor& cols, const Geometry& g, int64_t n, int64_t c, bool matrix);

Tensor im2col_kernel(const Tensor& x, const Geometry& g, double pad_value, bool matrix) {
  const int64_t n = x.size(0), c = x.size(1);
  const Tensor xs = contiguous(x.detach());
  Tensor cols = empty(columns_shape(g, n, c, matrix), x.options());
  kernels::kernels_for(x.device())
      .im2col(column_args(x.device(), x.dtype(), xs.raw_data(), cols.raw_data(), n, c, g, pad_value,
                          matrix));
  if (any_requires_grad({&x}))
    attach_grad_fn(cols, "Im2colBackward", {&x},
                   [g, n, c, matrix](const Tensor& grad, const SavedTensors&) {
                     return std::vector<Tensor>{col2im_kernel(grad, g, n, c, matrix)};
                   });
  return cols;
}

Tensor col2im_kernel(const Tensor& cols, const Geometry& g, int64_t n, int64_t c, bool matrix) {
  EMBER_CHECK(cols.sizes() == columns_shape(g, n, c, matrix), "col2im: columns of shape ",
              shape_str(cols.sizes()), ", expected ", shape_str(columns_shape(g, n, c, matrix)));
  const Tensor cs = contiguous(cols.detach());
  Tensor x = empty({n, c, g.h, g.w}, cols.options());
  kernels::kernels_for(cols.device())
      .col2im(column_args(cols.device(), cols.dtype(), cs.raw_data(), x.raw_data(), n, c, g, 0.0,
                          matrix));
  if (any_requires_grad({&cols}))
    attach_grad_fn(x, "Col2imBackward", {&cols},
                   [g, n, c, matrix](const Tensor& grad, const SavedTensors&) {
                     return std::vector<Tensor>{im2col_kernel(grad, g, 0.0, matrix)};
                   });
  return x;
}

// x (B, C, H, W) -> (B, C, kh*kw, L): the columns, padding reading `pad_value`.
Tensor gather_columns(const Tensor& x, const Geometry& g, double pad_value) {
  if (column_kernels(x.dtype()))
    return im2col_kernel(x, g, pad_value, false)
        .view({x.size(0), x.size(1), g.kh * g.kw, g.oh * g.ow});
  const int64_t b = x.size(0), c = x.size(1);
  Tensor plane = reshape(x, {b, c, g.h * g.w});
  Tensor slot = full({b, c, 1}, pad_value, x.options());
  Tensor padded = cat({plane, slot}, 2);
  Tensor cols = index_select(padded, 2, table_tensor(g, x.device()));
  return cols.view({b, c, g.kh * g.kw, g.oh * g.ow});
}

// ---------------------------------------------------------------- implicit GEMM

// -1: not yet read from EMBER_CONV_IMPLICIT; 0 or 1 after (or as set by a test).
std::atomic<int> g_conv_implicit{-1};

bool implicit_setting() {
  return env_switch(g_conv_implicit, "EMBER_CONV_IMPLICIT", true);
}

kernels::ConvGemmShape conv_gemm_shape(const Geometry& g, int64_t n, int64_t c, int64_t o) {
  return {n,
          c,
          g.h,
          g.w,
          o,
          g.kh,
          g.kw,
          g.stride[0],
          g.stride[1],
          g.padding[0],
          g.padding[1],
          g.dilation[0],
          g.dilation[1],
          g.oh,
          g.ow};
}

// Whether conv2d (groups 1) runs as the implicit GEMM: switched on, and the device
// takes every pass this call needs (the forward; the input grad where x needs its
// gradient, the weight grad where the weight does).
bool implicit_gemm(const Tensor& x, const Tensor& weight, const kernels::ConvGemmShape& s) {
  if (!implicit_setting() || x.dtype() != kBFloat16) return false;
  const kernels::KernelTable& k = kernels::kernels_for(x.device());
  const Device d = x.device();
  if (!k.conv_gemm_supported(kernels::ConvGemmQuery{d, kBFloat16, 0, s})) return false;
  if (any_requires_grad({&x}) && !k.conv_gemm_supported(kernels::ConvGemmQuery{d, kBFloat16, 1, s}))
    return false;
  return !any_requires_grad({&weight}) ||
         k.conv_gemm_supported(kernels::ConvGemmQuery{d, kBFloat16, 2, s});
}

// (A, B, C, D) -> (A, C, D, B), contiguous: NCHW to channels-last (and a weight
// (O, C, kh, kw) to (O, kh, kw, C)). One strided copy.
Tensor channels_last(const Tensor& t) {
  return contiguous(transpose(transpose(t, 1, 2), 2, 3));
}

// conv2d of x (n, c, h, w) by w (o, c, kh, kw) through the implicit GEMM (no bias):
// x and w copied channels-last, one kernel writing y (channels-first); backward d_y
// copied channels-last, then the input grad's kernel (writing d_x channels-first) and
// the weight grad's (its float32 split parts summed by sum()).
Tensor conv2d_implicit(const Tensor& x, const Tensor& weight, const kernels::ConvGemmShape& s) {
  const Device dev = x.device();
  const kernels::KernelTable& k = kernels::kernels_for(dev);
  const bool gx = any_requires_grad({&x}), gw = any_requires_grad({&weight});
  Tensor xh;
  Tensor y = empty({s.n, s.o, s.oh, s.ow}, x.options());
  {
    NoGradGuard no_grad;
    xh = channels_last(x.detach());
    const Tensor wh = channels_last(weight.detach());  // (o, kh, kw, c)
    k.conv_gemm({dev, kBFloat16, 0, s, xh.raw_data(), wh.raw_data(), y.raw_data(), 1});
  }
  if (!gx && !gw) return y;
  attach_grad_fn(
      y, "ConvGemmBackward", {&x, &weight}, {gw ? xh : Tensor(), gx ? weight.detach() : Tensor()},
      [s, gx, gw](const Tensor& g, const SavedTensors& saved) {
        const Device d = g.device();
        const kernels::KernelTable& kt = kernels::kernels_for(d);
        const Tensor d_yh = channels_last(g);  // (n, oh, ow, o)
        Tensor d_x, d_w;
        if (gx) {
          // w (o, c, kh, kw) as (c, kh, kw, o)
          const Tensor wt = contiguous(transpose(transpose(transpose(saved[1], 0, 1), 1, 2), 2, 3));
          d_x = empty({s.n, s.c, s.h, s.w}, g.options());
          kt.conv_gemm({d, kBFloat16, 1, s, d_yh.raw_data(), wt.raw_data(), d_x.raw_data(), 1});
        }
        if (gw) {
          const kernels::ConvGemmQuery q{d, kBFloat16, 2, s};
          const auto splits = static_cast<int64_t>(kt.conv_gemm_splits(q));
          const Tensor parts =
              empty({splits, s.o, s.kh * s.kw * s.c}, TensorOptions(kFloat32).device(d));
          kt.conv_gemm(
              {d, kBFloat16, 2, s, saved[0].raw_data(), d_yh.raw_data(), parts.raw_data(), splits});
          // The parts summed (none to sum for one), then permuted and cast in one pass.
          const Tensor summed = (splits == 1 ? parts.view({s.o, s.kh * s.kw * s.c}) : sum(parts, 0))
                                    .view({s.o, s.kh, s.kw, s.c});
          d_w = cast(transpose(transpose(summed, 2, 3), 1, 2), kBFloat16);
        }
        return std::vector<Tensor>{d_x, d_w};
      });
  return y;
}

void check_4d(const char* op, const Tensor& x) {
  check_defined(op, x);
  EMBER_CHECK(x.dim() == 4, op, ": expected a 4-D (N, C, H, W) input, got shape ",
              shape_str(x.sizes()));
}

// Accepts (C, H, W) as one image, as PyTorch does; `batched` says which it was.
Tensor as_batch(const char* op, const Tensor& x, bool& batched) {
  check_defined(op, x);
  EMBER_CHECK(x.dim() == 3 || x.dim() == 4, op,
              ": expected a 3-D (C, H, W) or 4-D (N, C, H, W) input, got shape ",
              shape_str(x.sizes()));
  batched = x.dim() == 4;
  return batched ? x : unsqueeze(x, 0);
}

}  // namespace

// ---------------------------------------------------------------- unfold / fold

Tensor unfold(const Tensor& input, Int2 kernel_size, Int2 dilation, Int2 padding, Int2 stride) {
  OpSite site("unfold");
  check_4d("unfold", input);
  const Geometry g =
      geometry("unfold", input.size(2), input.size(3), kernel_size, stride, padding, dilation);
  Tensor cols = gather_columns(input, g, 0.0);
  return cols.view({input.size(0), input.size(1) * g.kh * g.kw, g.oh * g.ow});
}

Tensor fold(const Tensor& input, Int2 output_size, Int2 kernel_size, Int2 dilation, Int2 padding,
            Int2 stride) {
  OpSite site("fold");
  check_defined("fold", input);
  EMBER_CHECK(input.dim() == 3, "fold: expected a 3-D (N, C*kh*kw, L) input, got shape ",
              shape_str(input.sizes()));
  check_pair("fold", "output_size", output_size, 1);
  const Geometry g =
      geometry("fold", output_size[0], output_size[1], kernel_size, stride, padding, dilation);
  const int64_t kk = g.kh * g.kw, l = g.oh * g.ow, n = input.size(0);
  EMBER_CHECK(input.size(1) % kk == 0, "fold: input's dim 1 (", input.size(1),
              ") is not a multiple of the kernel's ", kk, " positions");
  EMBER_CHECK(input.size(2) == l, "fold: input has ", input.size(2), " blocks, but output_size (",
              output_size[0], ", ", output_size[1], ") with these kernel, stride, padding and ",
              "dilation gives ", l);
  const int64_t c = input.size(1) / kk;
  if (column_kernels(input.dtype())) return col2im_kernel(input, g, n, c, false);
  Tensor src = reshape(input, {n, c, kk * l});
  Tensor acc = zeros({n, c, g.h * g.w + 1}, input.options());
  Tensor out = index_add(acc, 2, table_tensor(g, input.device()), src);
  return reshape(slice(out, 2, 0, g.h * g.w), {n, c, g.h, g.w});
}

// ---------------------------------------------------------------- convolution

Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias, Int2 stride,
              Int2 padding, Int2 dilation, int64_t groups) {
  // Autocast (core/autocast.h): float32 operands run in the autocast dtype, as
  // PyTorch's autocast lists the convolutions; the casts are recorded.
  if (autocast_lowers({&input, &weight, &bias})) [[unlikely]] {
    AutocastGuard off(autocast_dtype(), false);
    return conv2d(autocast_lower(input), autocast_lower(weight), autocast_lower(bias), stride,
                  padding, dilation, groups);
  }
  OpSite site("conv2d");
  bool batched = true;
  const Tensor x = as_batch("conv2d", input, batched);
  check_defined("conv2d", weight, "weight");
  check_same_device("conv2d", x, weight);
  check_same_dtype("conv2d", x, weight);
  check_floating("conv2d", x);
  EMBER_CHECK(weight.dim() == 4, "conv2d: weight must be 4-D (out, in / groups, kh, kw), got ",
              shape_str(weight.sizes()));
  EMBER_CHECK(groups >= 1, "conv2d: groups must be >= 1, got ", groups);
  const int64_t n = x.size(0), c = x.size(1), o = weight.size(0);
  EMBER_CHECK(c % groups == 0 && o % groups == 0, "conv2d: ", c, " input and ", o,
              " output channels are not both divisible by groups = ", groups);
  EMBER_CHECK(weight.size(1) * groups == c, "conv2d: weight ", shape_str(weight.sizes()),
              " expects ", weight.size(1) * groups, " input channels (groups = ", groups,
              "), input ", shape_str(input.sizes()), " has ", c);
  if (bias.defined()) {
    check_same_device("conv2d", x, bias);
    check_same_dtype("conv2d", x, bias);
    EMBER_CHECK(bias.dim() == 1 && bias.size(0) == o, "conv2d: bias must be (", o, "), got ",
                shape_str(bias.sizes()));
  }
  const Geometry g = geometry("conv2d", x.size(2), x.size(3), {weight.size(2), weight.size(3)},
                              stride, padding, dilation);
  const int64_t kk = g.kh * g.kw, l = g.oh * g.ow, cg = c / groups, og = o / groups;
  // Per image: cols (N, C*kk, L); per group (og, cg*kk) @ (N, cg*kk, L) -> (N, og, L),
  // the weight broadcast over the batch, so the product lands in the output's layout
  // (and the weight's gradient is N products summed). As one matrix: cols (C*kk, N*L);
  // per group (og, cg*kk) @ (cg*kk, N*L) -> (og, N*L), one product each way, the output
  // (O, N, L) transposed into (N, O, L) by a copy.
  if (groups == 1) {
    const kernels::ConvGemmShape shape = conv_gemm_shape(g, n, c, o);
    if (implicit_gemm(x, weight, shape)) {
      Tensor y = conv2d_implicit(x, weight, shape);
      if (bias.defined()) y = add(y, bias.view({1, o, 1, 1}));
      return batched ? y : squeeze(y, 0);
    }
  }
  const bool matrix = column_kernels(x.dtype()) && columns_as_matrix(weight, n, cg * kk, l);
  const int64_t dim = matrix ? 0 : 1;  // the columns' row (and the products' channel) dim
  Tensor cols =
      matrix ? im2col_kernel(x, g, 0.0, true) : gather_columns(x, g, 0.0).view({n, c * kk, l});
  std::vector<Tensor> parts;
  for (int64_t gi = 0; gi < groups; ++gi) {
    Tensor cols_g = groups == 1 ? cols : slice(cols, dim, gi * cg * kk, (gi + 1) * cg * kk);
    Tensor w_g = groups == 1 ? weight : slice(weight, 0, gi * og, (gi + 1) * og);
    parts.push_back(matmul(reshape(w_g, {og, cg * kk}), cols_g));
  }
  Tensor y = groups == 1 ? parts[0] : cat(parts, dim);
  if (matrix) y = contiguous(transpose(y.view({o, n, l}), 0, 1));
  y = reshape(y, {n, o, g.oh, g.ow});
  if (bias.defined()) y = add(y, bias.view({1, o, 1, 1}));
  return batched ? y : squeeze(y, 0);
}

void detail::set_conv_composed(bool composed) {
  g_conv_composed.store(composed ? 1 : 0, std::memory_order_relaxed);
}

bool detail::conv_composed() {
  return columns_composed();
}

void detail::set_conv_columns(ConvColumns columns) {
  g_conv_columns.store(static_cast<int>(columns), std::memory_order_relaxed);
}

detail::ConvColumns detail::conv_columns() {
  return columns_setting();
}

void detail::set_conv_implicit(bool on) {
  g_conv_implicit.store(on ? 1 : 0, std::memory_order_relaxed);
}

bool detail::conv_implicit() {
  return implicit_setting();
}

Int2 detail::same_padding(const char* op, Int2 kernel, Int2 stride, Int2 dilation) {
  EMBER_CHECK(stride[0] == 1 && stride[1] == 1, op,
              ": padding=\"same\" needs stride 1 (PyTorch refuses strided 'same' too), got (",
              stride[0], ", ", stride[1], ")");
  Int2 p{};
  for (int i = 0; i < 2; ++i) {
    const int64_t total = dilation[i] * (kernel[i] - 1);
    EMBER_CHECK(total % 2 == 0, op,
                ": padding=\"same\" with an even dilated kernel extent needs asymmetric "
                "padding, which ember does not do yet; pad the input with pad() instead");
    p[i] = total / 2;
  }
  return p;
}

Tensor conv1d(const Tensor& input, const Tensor& weight, const Tensor& bias, int64_t stride,
              int64_t padding, int64_t dilation, int64_t groups) {
  check_defined("conv1d", input);
  check_defined("conv1d", weight, "weight");
  EMBER_CHECK(input.dim() == 2 || input.dim() == 3,
              "conv1d: expected a 2-D (C, L) or 3-D (N, C, L) input, got shape ",
              shape_str(input.sizes()));
  EMBER_CHECK(weight.dim() == 3, "conv1d: weight must be 3-D (out, in / groups, k), got ",
              shape_str(weight.sizes()));
  const Tensor x = unsqueeze(input, -2);  // (.., C, 1, L)
  Tensor y =
      conv2d(x, unsqueeze(weight, 2), bias, {1, stride}, {0, padding}, {1, dilation}, groups);
  return squeeze(y, -2);
}

Tensor conv_transpose2d(const Tensor& input, const Tensor& weight, const Tensor& bias, Int2 stride,
                        Int2 padding, Int2 output_padding, int64_t groups, Int2 dilation) {
  if (autocast_lowers({&input, &weight, &bias})) [[unlikely]] {  // as conv2d
    AutocastGuard off(autocast_dtype(), false);
    return conv_transpose2d(autocast_lower(input), autocast_lower(weight), autocast_lower(bias),
                            stride, padding, output_padding, groups, dilation);
  }
  OpSite site("conv_transpose2d");
  bool batched = true;
  const Tensor x = as_batch("conv_transpose2d", input, batched);
  check_defined("conv_transpose2d", weight, "weight");
  check_same_device("conv_transpose2d", x, weight);
  check_same_dtype("conv_transpose2d", x, weight);
  check_floating("conv_transpose2d", x);
  EMBER_CHECK(weight.dim() == 4,
              "conv_transpose2d: weight must be 4-D (in, out / groups, kh, kw), got ",
              shape_str(weight.sizes()));
  EMBER_CHECK(groups >= 1, "conv_transpose2d: groups must be >= 1, got ", groups);
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  EMBER_CHECK(weight.size(0) == c && c % groups == 0, "conv_transpose2d: weight ",
              shape_str(weight.sizes()), " expects ", weight.size(0),
              " input channels divisible by groups = ", groups, "; input has ", c);
  check_pair("conv_transpose2d", "stride", stride, 1);
  check_pair("conv_transpose2d", "dilation", dilation, 1);
  check_pair("conv_transpose2d", "padding", padding, 0);
  check_pair("conv_transpose2d", "output_padding", output_padding, 0);
  EMBER_CHECK(output_padding[0] < std::max(stride[0], dilation[0]) &&
                  output_padding[1] < std::max(stride[1], dilation[1]),
              "conv_transpose2d: output_padding must be smaller than stride or dilation, got (",
              output_padding[0], ", ", output_padding[1], ")");
  const int64_t kh = weight.size(2), kw = weight.size(3), og = weight.size(1), o = og * groups;
  const int64_t cg = c / groups;
  const Int2 out{
      (h - 1) * stride[0] - 2 * padding[0] + dilation[0] * (kh - 1) + output_padding[0] + 1,
      (w - 1) * stride[1] - 2 * padding[1] + dilation[1] * (kw - 1) + output_padding[1] + 1};
  EMBER_CHECK(out[0] > 0 && out[1] > 0, "conv_transpose2d: the output would be empty (", out[0],
              ", ", out[1], ")");
  if (bias.defined()) {
    check_same_device("conv_transpose2d", x, bias);
    check_same_dtype("conv_transpose2d", x, bias);
    EMBER_CHECK(bias.dim() == 1 && bias.size(0) == o, "conv_transpose2d: bias must be (", o,
                "), got ", shape_str(bias.sizes()));
  }
  // cols (N, og*kk, L=h*w) per group = W_g^T (og*kk, cg) @ x_g (cg, L); fold sums them.
  const Tensor x3 = reshape(x, {n, c, h * w});
  std::vector<Tensor> parts;
  for (int64_t gi = 0; gi < groups; ++gi) {
    Tensor x_g = groups == 1 ? x3 : slice(x3, 1, gi * cg, (gi + 1) * cg);
    Tensor w_g = groups == 1 ? weight : slice(weight, 0, gi * cg, (gi + 1) * cg);
    Tensor cols = matmul(transpose(x_g, 1, 2), reshape(w_g, {cg, og * kh * kw}));  // (N, L, og*kk)
    Tensor y = fold(transpose(cols, 1, 2), out, {kh, kw}, dilation, padding, stride);
    parts.push_back(y);
  }
  Tensor y = groups == 1 ? parts[0] : cat(parts, 1);
  if (bias.defined()) y = add(y, bias.view({1, o, 1, 1}));
  return batched ? y : squeeze(y, 0);
}

// ---------------------------------------------------------------- pooling

namespace {

// The max-pooling columns (N, C, kk, L) of x (N, C, H, W), padding reading -inf.
Tensor max_pool_columns(const Tensor& x, Int2 kernel_size, Int2& stride, Int2 padding,
                        Int2 dilation, bool ceil_mode, Geometry& g) {
  check_floating("max_pool2d", x);
  if (stride[0] == 0 && stride[1] == 0) stride = kernel_size;  // PyTorch's default
  EMBER_CHECK(padding[0] * 2 <= kernel_size[0] && padding[1] * 2 <= kernel_size[1],
              "max_pool2d: padding (", padding[0], ", ", padding[1],
              ") must be at most half the kernel size (", kernel_size[0], ", ", kernel_size[1],
              ")");
  g = geometry("max_pool2d", x.size(2), x.size(3), kernel_size, stride, padding, dilation,
               ceil_mode);
  return gather_columns(x, g, -std::numeric_limits<double>::infinity());
}

}  // namespace

ValuesAndIndices max_pool2d_with_indices(const Tensor& input, Int2 kernel_size, Int2 stride,
                                         Int2 padding, Int2 dilation, bool ceil_mode) {
  OpSite site("max_pool2d");
  bool batched = true;
  const Tensor x = as_batch("max_pool2d", input, batched);
  Geometry g;
  Tensor cols = max_pool_columns(x, kernel_size, stride, padding, dilation, ceil_mode, g);
  const int64_t n = x.size(0), c = x.size(1), l = g.oh * g.ow;
  auto [values, which] = max(cols, 2);  // (N, C, L): the value, and which kernel offset
  // The flat input index h * W + w of each maximum, as PyTorch's return_indices.
  Tensor flat = add(mul(which, Scalar(l)),
                    arange(static_cast<double>(l), TensorOptions(kInt64).device(x.device())));
  Tensor indices =
      index_select(table_tensor(g, x.device()), 0, reshape(flat, {-1})).view({n, c, g.oh, g.ow});
  Tensor v = values.view({n, c, g.oh, g.ow});
  if (!batched) return {squeeze(v, 0), squeeze(indices, 0)};
  return {v, indices};
}

Tensor max_pool2d(const Tensor& input, Int2 kernel_size, Int2 stride, Int2 padding, Int2 dilation,
                  bool ceil_mode) {
  OpSite site("max_pool2d");
  bool batched = true;
  const Tensor x = as_batch("max_pool2d", input, batched);
  Geometry g;
  Tensor cols = max_pool_columns(x, kernel_size, stride, padding, dilation, ceil_mode, g);
  Tensor v = max(cols, 2).values.view({x.size(0), x.size(1), g.oh, g.ow});
  return batched ? v : squeeze(v, 0);
}

Tensor avg_pool2d(const Tensor& input, Int2 kernel_size, Int2 stride, Int2 padding, bool ceil_mode,
                  bool count_include_pad, int64_t divisor_override) {
  OpSite site("avg_pool2d");
  bool batched = true;
  const Tensor x = as_batch("avg_pool2d", input, batched);
  check_floating("avg_pool2d", x);
  if (stride[0] == 0 && stride[1] == 0) stride = kernel_size;
  EMBER_CHECK(padding[0] * 2 <= kernel_size[0] && padding[1] * 2 <= kernel_size[1],
              "avg_pool2d: padding (", padding[0], ", ", padding[1],
              ") must be at most half the kernel size (", kernel_size[0], ", ", kernel_size[1],
              ")");
  EMBER_CHECK(divisor_override >= 0, "avg_pool2d: divisor_override must be > 0 (0: none), got ",
              divisor_override);
  const Geometry g =
      geometry("avg_pool2d", x.size(2), x.size(3), kernel_size, stride, padding, {1, 1}, ceil_mode);
  Tensor sums = sum(gather_columns(x, g, 0.0), 2);  // (N, C, L)
  // Each window's divisor, as PyTorch counts it: the window clipped to the padded
  // input (count_include_pad) or to the input itself.
  std::vector<double> divisor;
  divisor.reserve(static_cast<size_t>(g.oh * g.ow));
  for (int64_t oi = 0; oi < g.oh; ++oi)
    for (int64_t oj = 0; oj < g.ow; ++oj) {
      if (divisor_override > 0) {
        divisor.push_back(static_cast<double>(divisor_override));
        continue;
      }
      int64_t r0 = oi * g.stride[0] - g.padding[0], c0 = oj * g.stride[1] - g.padding[1];
      int64_t r1 = std::min(r0 + g.kh, g.h + g.padding[0]);
      int64_t c1 = std::min(c0 + g.kw, g.w + g.padding[1]);
      const int64_t padded = (r1 - r0) * (c1 - c0);
      r0 = std::max<int64_t>(r0, 0);
      c0 = std::max<int64_t>(c0, 0);
      r1 = std::min(r1, g.h);
      c1 = std::min(c1, g.w);
      const int64_t inside = std::max<int64_t>(r1 - r0, 0) * std::max<int64_t>(c1 - c0, 0);
      divisor.push_back(static_cast<double>(count_include_pad ? padded : inside));
    }
  Tensor d = from_vector(divisor, {g.oh * g.ow}, x.options());
  Tensor y = div(sums, d).view({x.size(0), x.size(1), g.oh, g.ow});
  return batched ? y : squeeze(y, 0);
}

Tensor adaptive_avg_pool2d(const Tensor& input, Int2 output_size) {
  OpSite site("adaptive_avg_pool2d");
  bool batched = true;
  const Tensor x = as_batch("adaptive_avg_pool2d", input, batched);
  check_floating("adaptive_avg_pool2d", x);
  check_pair("adaptive_avg_pool2d", "output_size", output_size, 1);
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  const int64_t oh = output_size[0], ow = output_size[1];
  EMBER_CHECK(h > 0 && w > 0, "adaptive_avg_pool2d: the input plane is empty, shape ",
              shape_str(input.sizes()));
  if (h % oh == 0 && w % ow == 0) {
    // Equal cells (global pooling among them): the means of (h / oh) x (w / ow) blocks,
    // one reduction of a view, with no host-built matrix to copy to the device (so a
    // CUDA graph can capture it).
    Tensor cells = reshape(x, {n, c, oh, h / oh, ow, w / ow});
    Tensor y = mean(cells, std::vector<int64_t>{3, 5});
    return batched ? y : squeeze(y, 0);
  }
  // out (N, C, oh*ow) = x (N, C, h*w) @ P (h*w, oh*ow), P's column of cell (i, j)
  // holding 1/count over rows [floor(i h / oh), ceil((i+1) h / oh)) and likewise cols.
  std::vector<double> p(static_cast<size_t>(h * w * oh * ow), 0.0);
  for (int64_t i = 0; i < oh; ++i) {
    const int64_t r0 = (i * h) / oh, r1 = ((i + 1) * h + oh - 1) / oh;
    for (int64_t j = 0; j < ow; ++j) {
      const int64_t c0 = (j * w) / ow, c1 = ((j + 1) * w + ow - 1) / ow;
      const double inv = 1.0 / static_cast<double>((r1 - r0) * (c1 - c0));
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t cc = c0; cc < c1; ++cc)
          p[static_cast<size_t>((r * w + cc) * oh * ow + i * ow + j)] = inv;
    }
  }
  Tensor pm = from_vector(p, {h * w, oh * ow}, x.options());
  Tensor y = matmul(reshape(x, {n, c, h * w}), pm).view({n, c, oh, ow});
  return batched ? y : squeeze(y, 0);
}

}  // namespace ember
