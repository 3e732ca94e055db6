// The implicit GEMM of a convolution on ember's Hopper GEMM (gemm_kernel.cuh with
// kConv != 0; host side in cuda/kernels/conv_gemm.cu): which box of an NHWC image
// each TMA copy reads, so that the im2col columns are never written. Plain C++
// (host and device), so the CPU tests replay the kernel's copies against a direct
// convolution (tests/core/test_conv_gemm_plan.cpp).
//
// An NHWC image (n, h, w, c), c a multiple of 64, is read in 4-D boxes
// {64 channels, box_w pixels, box_h rows, box_n images} (TMA dims inner first:
// c, w, h, n), with element strides {1, sw, sh, 1}: a box covers box_w x box_h x
// box_n pixels of a pixel grid (grid_h, grid_w per image) and lands in shared
// memory as one 128-byte row (64 bf16 channels) per pixel, in the grid's order:
// exactly a 128-byte-swizzled tile of 64 k by box_w box_h box_n rows. Pixel (i, j)
// of the grid at tap (ki, kj) reads image pixel
//   (i sh + off_h + ki tap_h, j sw + off_w + kj tap_w);
// reads outside the image (padding) are TMA's zero fill.
//
// The three passes (x: the convolution's input; y: its output; w: its weight):
//   forward      y(pixel, o) = sum_{tap, c} x-box(pixel, tap, c) w(o, tap, c)
//                grid = (oh, ow), strides (sh, sw), off = -padding, tap = +dilation;
//                A = the boxes (K-major, 128 pixels a tile), B = w as (o, kh, kw, c);
//                y written channels-first (conv_out_offset).
//   input grad   d_x(pixel, c) = sum_{tap, o} d_y-box(pixel, tap, o) w(c, tap, o)
//                (stride 1 only) grid = (h, w), strides 1, off = +padding,
//                tap = -dilation; A = the boxes of d_y, B = w as (c, kh, kw, o);
//                d_x written channels-first.
//   weight grad  d_w(o, tap, c) = sum_pixel d_y(pixel, o) x-box(pixel, tap, c)
//                grid = (oh, ow) as forward; A = d_y (M-major), B = the boxes
//                (N-major, 64 pixels a K step), the K steps split across blocks
//                (each split writes its own float32 partial, summed after).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define EMBER_CONV_HD __host__ __device__ __forceinline__
#else
#define EMBER_CONV_HD inline
#endif

namespace ember::cuda::sm90 {

constexpr int kConvChannelBlock = 64;  // channels per box: one 128-byte bf16 row

// Where the boxes of one pass read (see the file comment). All int32: the host
// checks the sizes fit.
struct ConvBoxes {
  int n, h, w, c;           // the NHWC image read
  int grid_h, grid_w;       // the pixel grid the GEMM's pixel dimension walks
  int sh, sw;               // element strides
  int off_h, off_w;         // origin of pixel (0, 0) at tap (0, 0)
  int tap_h, tap_w;         // step per tap (the dilation, negated for the input grad)
  int kh, kw;               // taps
  int box_w, box_h, box_n;  // grid pixels per box along w, h, images
};

struct BoxStart {
  int c, w, h, n;  // TMA coordinates, inner first
};

// The box of grid pixels [pixel0, pixel0 + box pixels) at tap `tap` (ki kw + kj)
// and channels [c0, c0 + 64). pixel0 is a multiple of the box's pixel count.
EMBER_CONV_HD BoxStart conv_box_start(const ConvBoxes& b, int pixel0, int tap, int c0) {
  const int per_image = b.grid_h * b.grid_w;
  const int n0 = pixel0 / per_image, rem = pixel0 - n0 * per_image;
  const int i0 = rem / b.grid_w, j0 = rem - i0 * b.grid_w;
  const int ki = tap / b.kw, kj = tap - ki * b.kw;
  return {c0, j0 * b.sw + b.off_w + kj * b.tap_w, i0 * b.sh + b.off_h + ki * b.tap_h, n0};
}

// A box entirely outside the image (it reads zeros): for the column blocks of a
// tile past the GEMM's n, whose results the epilogue drops.
EMBER_CONV_HD BoxStart conv_box_outside(const ConvBoxes& b) {
  return {0, 0, 0, b.n};
}

// The forward's and the input grad's operand A for row tile `mb` (bm pixels) and K
// step `kb`: K runs over (tap, channel block), channels fastest, as the weight's
// (rows, kh, kw, channels) layout.
EMBER_CONV_HD BoxStart conv_a_box(const ConvBoxes& b, int mb, int bm, int kb) {
  const int cblocks = b.c / kConvChannelBlock;
  const int tap = kb / cblocks, cb = kb - tap * cblocks;
  return conv_box_start(b, mb * bm, tap, cb * kConvChannelBlock);
}

// The weight grad's operand B: the 64 columns from col0 (a multiple of 64) of the
// (kh kw c) columns, at K step kb (64 pixels from kb * 64); outside for col0 >= n.
EMBER_CONV_HD BoxStart conv_b_box(const ConvBoxes& b, int col0, int kb) {
  const int cols = b.kh * b.kw * b.c;
  if (col0 >= cols) return conv_box_outside(b);
  const int tap = col0 / b.c, c0 = col0 - tap * b.c;
  return conv_box_start(b, kb * kConvChannelBlock, tap, c0);
}

// Where the forward's and the input grad's D (pixel row, channel col) lands: the
// channels-first output (images, cols, pixels per image), so no copy turns it back.
EMBER_CONV_HD int64_t conv_out_offset(int row, int col, int cols, int pixels) {
  const int img = row / pixels, pix = row - img * pixels;
  return (static_cast<int64_t>(img) * cols + col) * pixels + pix;
}

// Fills box_w, box_h, box_n so a box covers `pixels` consecutive grid pixels
// starting at any multiple of `pixels` (whole rows of the grid, or whole images);
// returns why not ("" when it can).
inline const char* plan_conv_box(ConvBoxes& b, int pixels) {
  if (b.grid_h < 1 || b.grid_w < 1) return "empty pixel grid";
  if (b.grid_w >= pixels) {
    if (b.grid_w % pixels != 0) return "the grid's width is not a multiple of the box's pixels";
    b.box_w = pixels, b.box_h = 1, b.box_n = 1;
    return "";
  }
  if (pixels % b.grid_w != 0) return "the box's pixels are not a multiple of the grid's width";
  const int rows = pixels / b.grid_w;
  b.box_w = b.grid_w;
  if (b.grid_h >= rows) {
    if (b.grid_h % rows != 0) return "the grid's height is not a multiple of the box's rows";
    b.box_h = rows, b.box_n = 1;
    return "";
  }
  if (rows % b.grid_h != 0) return "the box's rows are not a multiple of the grid's height";
  b.box_h = b.grid_h, b.box_n = rows / b.grid_h;
  return "";
}

// The TMA box dims (elements traversed, inner first) of a planned ConvBoxes.
inline void conv_box_dims(const ConvBoxes& b, unsigned (&dims)[4], unsigned (&strides)[4]) {
  dims[0] = kConvChannelBlock;
  dims[1] = static_cast<unsigned>(b.box_w * b.sw);
  dims[2] = static_cast<unsigned>(b.box_h * b.sh);
  dims[3] = static_cast<unsigned>(b.box_n);
  strides[0] = 1;
  strides[1] = static_cast<unsigned>(b.sw);
  strides[2] = static_cast<unsigned>(b.sh);
  strides[3] = 1;
}

// One pass of a convolution of x (n, c, h, w) by w (o, c, kh, kw), groups 1, into
// y (n, o, oh, ow): stride (sh, sw), padding (ph, pw), dilation (dh, dw).
enum class ConvPass { Forward, InputGrad, WeightGrad };
struct ConvShape {
  int64_t n, c, h, w, o, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow;
};
// The GEMM of a pass: D (m, n) = sum_k A(m, k) B(n, k).
struct ConvGemmSizes {
  int64_t m, n, k;
};
inline ConvGemmSizes conv_gemm_sizes(const ConvShape& s, ConvPass pass) {
  switch (pass) {
    case ConvPass::Forward:
      return {s.n * s.oh * s.ow, s.o, s.kh * s.kw * s.c};
    case ConvPass::InputGrad:
      return {s.n * s.h * s.w, s.c, s.kh * s.kw * s.o};
    case ConvPass::WeightGrad:
      break;
  }
  return {s.o, s.kh * s.kw * s.c, s.n * s.oh * s.ow};
}
// Pixels per box: the forward's and input grad's row tile (the GEMM's BM), the
// weight grad's K step.
constexpr int kConvTilePixels = 128;
constexpr int kConvStepPixels = 64;

// Fills `b` for `pass` of `s`; returns why the implicit GEMM cannot run it ("" when
// it can).
inline const char* plan_conv_pass(const ConvShape& s, ConvPass pass, ConvBoxes& b) {
  if (s.n < 1 || s.c < 1 || s.o < 1 || s.h < 1 || s.w < 1 || s.oh < 1 || s.ow < 1)
    return "an empty size";
  if (s.c % kConvChannelBlock != 0 || s.o % kConvChannelBlock != 0)
    return "input and output channels must be multiples of 64";
  const int64_t limit = int64_t{1} << 31;
  const ConvGemmSizes g = conv_gemm_sizes(s, pass);
  if (s.n * s.h * s.w * s.c >= limit || s.n * s.oh * s.ow * s.o >= limit || g.m >= limit ||
      g.n >= limit || g.k >= limit || s.kh * s.kw > 4096)
    return "a size of 2^31 or more";
  if (s.sh > 8 || s.sw > 8) return "a stride over 8 (TMA's element strides)";
  auto i32 = [](int64_t v) { return static_cast<int>(v); };
  if (pass == ConvPass::InputGrad) {
    if (s.sh != 1 || s.sw != 1) return "the input gradient needs stride 1";
    b = {i32(s.n),  i32(s.oh),  i32(s.ow),  i32(s.o),  i32(s.h),  i32(s.w), 1, 1, i32(s.ph),
         i32(s.pw), i32(-s.dh), i32(-s.dw), i32(s.kh), i32(s.kw), 0,        0, 0};
  } else {
    b = {i32(s.n),  i32(s.h),  i32(s.w),   i32(s.c),   i32(s.oh), i32(s.ow),
         i32(s.sh), i32(s.sw), i32(-s.ph), i32(-s.pw), i32(s.dh), i32(s.dw),
         i32(s.kh), i32(s.kw), 0,          0,          0};
  }
  const char* why =
      plan_conv_box(b, pass == ConvPass::WeightGrad ? kConvStepPixels : kConvTilePixels);
  if (why[0] != '\0') return why;
  if (b.box_w * b.sw > 256 || b.box_h * b.sh > 256 || b.box_n > 256)
    return "a box over 256 elements in a dimension";
  return "";
}

}  // namespace ember::cuda::sm90
