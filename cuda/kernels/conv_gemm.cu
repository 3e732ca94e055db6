// The convolutions' implicit GEMMs (kernel families conv_gemm_supported,
// conv_gemm_splits, conv_gemm; kernel_families.h): the Hopper GEMM
// (sm90/gemm_kernel.cuh) with one operand read as 4-D TMA boxes of a channels-last
// image (sm90/conv_gemm_plan.h says which box each K step reads), so the im2col
// columns are never written. This file checks the problem, makes the tensor maps,
// picks the tile and the weight grad's K split, and launches.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "core/base/error.h"
#include "cuda/check.h"
#include "cuda/kernels/gemm_sm90.h"
#include "cuda/kernels/kernel_helpers.cuh"
#include "cuda/kernels/registration.h"
#include "cuda/kernels/sm90/gemm_launch.h"
#include "cuda/runtime.h"
#include "cuda/tensor_map.h"

namespace ember::cuda {

namespace {

using sm90::ConvBoxes;
using sm90::ConvPass;
using sm90::ConvShape;

constexpr int kStep = 64;  // K per step: one 128-byte row of bf16
// The weight grad's split is planned for this many blocks (an H100's or H200's
// multiprocessors), whatever the GPU: the split fixes the float32 parts' summation
// order, so the bits, and the parts' bytes the meta device predicts, depend on the
// sizes alone (as batch_norm.cu's splits_for).
constexpr int kSplitBlocks = 132;

ConvShape shape_of(const kernels::ConvGemmShape& s) {
  return {s.n, s.c, s.h, s.w, s.o, s.kh, s.kw, s.sh, s.sw, s.ph, s.pw, s.dh, s.dw, s.oh, s.ow};
}

bool pass_of(int pass, ConvPass& out) {
  if (pass < 0 || pass > 2) return false;
  out = static_cast<ConvPass>(pass);
  return true;
}

// 64 output columns fill a 128x64 tile; more take 128x128.
Sm90Tile tile_for(int64_t n) {
  return n <= 64 ? Sm90Tile::k128x64 : Sm90Tile::k128x128;
}
int tile_columns(Sm90Tile t) {
  return t == Sm90Tile::k128x64 ? 64 : 128;
}

// Whether `device` runs the sm_90a kernels; with no CUDA device at all (the meta
// device predicting CUDA on a machine without one) as an H200 would: yes.
bool runs_sm90(int device) {
  if (device_count() == 0) return true;
  return sm90_gemm_unsupported(DType::BFloat16, 0, 0, 0, {}, {}, {}, device)[0] == '\0';
}

// The weight grad's K split: enough parts that the tiles times the parts fill
// kSplitBlocks blocks once, each part of kper K steps, none empty.
struct Split {
  int splits, kper;
};
// The weight grad runs transposed (kConv 3: D = d_w^T, (kh kw c, o)) where o fits a
// 64-column tile, which would fill only half of kConv 2's 128-row tile as its M.
bool weight_grad_transposed(const ConvShape& s) {
  return s.o <= 64;
}

Split split_for(const ConvShape& s) {
  sm90::ConvGemmSizes g = sm90::conv_gemm_sizes(s, ConvPass::WeightGrad);
  if (weight_grad_transposed(s)) std::swap(g.m, g.n);
  const int64_t tiles = ceil_div(g.m, 128) * ceil_div(g.n, tile_columns(tile_for(g.n)));
  const int64_t kblocks = std::max<int64_t>(1, ceil_div(g.k, kStep));
  const int64_t want = std::clamp<int64_t>(kSplitBlocks / std::max<int64_t>(tiles, 1), 1, kblocks);
  const int64_t kper = ceil_div(kblocks, want);
  return {static_cast<int>(ceil_div(kblocks, kper)), static_cast<int>(kper)};
}

const char* unsupported(const kernels::ConvGemmQuery& q, ConvBoxes& boxes) {
  if (q.dtype != DType::BFloat16) return "the implicit GEMM runs bfloat16 only";
  ConvPass pass{};
  if (!pass_of(q.pass, pass)) return "pass must be 0 (forward), 1 (input grad) or 2 (weight grad)";
  const char* why = sm90::plan_conv_pass(shape_of(q.shape), pass, boxes);
  if (why[0] != '\0') return why;
  if (!runs_sm90(q.device.index)) return "the device cannot run the Hopper GEMM";
  return "";
}

CUtensorMap image_map(const void* image, const ConvBoxes& b) {
  unsigned box[4], elem[4];
  sm90::conv_box_dims(b, box, elem);
  const int64_t dims[4] = {b.c, b.w, b.h, b.n};
  const int64_t strides[3] = {int64_t{b.c}, int64_t{b.w} * b.c, int64_t{b.h} * b.w * b.c};
  return make_tensor_map_4d(DType::BFloat16, image, dims, strides, box, elem);
}

void check_aligned(const void* p, const char* what) {
  EMBER_CHECK(p != nullptr && reinterpret_cast<uintptr_t>(p) % 16 == 0, "conv_gemm: ", what,
              " is null or not 16-byte aligned");
}

namespace entry {

bool conv_gemm_supported(const kernels::ConvGemmQuery& q) {
  ConvBoxes boxes{};
  return unsupported(q, boxes)[0] == '\0';
}

size_t conv_gemm_splits(const kernels::ConvGemmQuery& q) {
  if (q.pass != 2) return 1;
  return static_cast<size_t>(split_for(shape_of(q.shape)).splits);
}

void conv_gemm(const kernels::ConvGemmArgs& a) {
  DeviceGuard guard(a.device.index);
  ConvBoxes boxes{};
  const kernels::ConvGemmQuery q{a.device, a.dtype, a.pass, a.shape};
  const char* why = unsupported(q, boxes);
  EMBER_CHECK(why[0] == '\0', "conv_gemm: ", why);
  check_aligned(a.image, "the image");
  check_aligned(a.other, "the other operand");
  check_aligned(a.out, "the output");
  const ConvShape s = shape_of(a.shape);
  const ConvPass pass = static_cast<ConvPass>(a.pass);
  const sm90::ConvGemmSizes g = sm90::conv_gemm_sizes(s, pass);
  const int sms = sm_count(a.device.index);
  const Sm90Tile tile = tile_for(g.n);
  const int bn = tile_columns(tile);
  sm90::Params p{};
  p.m = static_cast<int>(g.m), p.n = static_cast<int>(g.n), p.k = static_cast<int>(g.k);
  p.d = a.out, p.ldc = g.n;
  p.act = Activation::None;
  sm90::ConvParams cp{};
  cp.boxes = boxes;
  cp.splits = 1;
  cp.kper = static_cast<int>(ceil_div(g.k, kStep));
  cp.split_stride = 0;
  const cudaStream_t stream = current_stream(a.device.index);
  if (pass == ConvPass::WeightGrad) {
    const Split split = split_for(s);
    EMBER_CHECK(a.splits == split.splits, "conv_gemm: the weight grad is split in ", split.splits,
                " parts (conv_gemm_splits), the caller gave ", a.splits);
    p.out_f32 = 1;
    cp.splits = split.splits, cp.kper = split.kper;
    cp.split_stride = g.m * g.n;
    // d_y (pixels, o) read o-major, 64 pixels a K step; the boxes of x likewise.
    const CUtensorMap dy = make_tensor_map_2d(DType::BFloat16, a.other, s.o, g.k, s.o, 64, kStep);
    const CUtensorMap xb = image_map(a.image, boxes);
    if (weight_grad_transposed(s)) {
      // D (kh kw c, o) = boxes^T d_y, stored transposed into the (o, kh kw c) parts.
      p.m = static_cast<int>(g.n), p.n = static_cast<int>(g.m), p.ldc = g.m;
      sm90::launch_conv<3>(tile_for(g.m), xb, dy, p, cp, sms, stream);
    } else {
      // A: d_y, M-major; B: the boxes of x, N-major.
      sm90::launch_conv<2>(tile, dy, xb, p, cp, sms, stream);
    }
  } else {
    // A: the boxes of the image, 128 pixels a tile; B: the weight (n rows, k), K-major.
    p.out_f32 = 0;
    const CUtensorMap ma = image_map(a.image, boxes);
    const CUtensorMap mb = make_tensor_map_2d(DType::BFloat16, a.other, g.k, g.n, g.k, kStep, bn);
    sm90::launch_conv<1>(tile, ma, mb, p, cp, sms, stream);
  }
}

}  // namespace entry
}  // namespace

void register_conv_gemm(kernels::KernelFamilies& t) {
  t.conv_gemm_supported = &entry::conv_gemm_supported;
  t.conv_gemm_splits = &entry::conv_gemm_splits;
  t.conv_gemm = &entry::conv_gemm;
}

}  // namespace ember::cuda
