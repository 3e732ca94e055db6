// The convolution's column kernels (kernel families im2col and col2im). Both are
// memory-bound gathers; the grid's z names the (n, c) plane, so a thread divides once
// for its place (its column into (oi, oj), or its first pixel into (r, c)) and once per
// plane (into (ni, ci), for the columns' strides), and a warp reads and writes
// consecutive elements along a row. z loops where the planes pass the grid's 65,535.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "cuda/check.h"
#include "cuda/kernels/kernel_helpers.cuh"
#include "cuda/kernels/registration.h"
#include "cuda/runtime.h"

namespace ember::cuda {

namespace {

// im2col: cols = the columns of a contiguous (n, c, h, w) input, pad_value where a
// window reads outside the plane; col2im: x = their adjoint, written (not added),
// float32 and bfloat16 summed in float32 and rounded once, float64 in float64. The
// layout is kernel_families.h's Im2colArgs (image and row strides, so per image or as
// one matrix with the batch inside the columns); only this file's adapters call the
// launchers (CONTRIBUTING.md: no header for them).
struct ColumnGeometry {
  int64_t n, c, h, w;
  int64_t kh, kw, sh, sw, ph, pw, dh, dw;
  int64_t oh, ow;
  int64_t col_image, col_row;
};

constexpr int kThreads = 256;
constexpr int64_t kMaxGridZ = 65535;

// The geometry in 32-bit fields where every offset inside one plane's pixels or one
// row of columns fits (checked by the launchers); plane and row offsets in 64 bits.
struct Geo {
  int h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow;
  int64_t planes, c, col_image, col_row;
  int log2_sh, log2_sw;  // the strides' logarithms where both are powers of two, else -1
};

// Where plane p = ni c + ci's first row of columns starts.
__device__ __forceinline__ int64_t plane_offset(const Geo& g, int64_t p) {
  const int64_t ni = p / g.c, ci = p - ni * g.c;
  return ni * g.col_image + ci * (g.kh * g.kw) * g.col_row;
}

// log2(v) for v a power of two, else -1.
int log2_exact(int64_t v) {
  int k = 0;
  while (k < 31 && (int64_t{1} << k) < v) ++k;
  return (int64_t{1} << k) == v ? k : -1;
}

Geo narrow_geo(const ColumnGeometry& g) {
  const bool pow2 = log2_exact(g.sh) >= 0 && log2_exact(g.sw) >= 0;
  return {static_cast<int>(g.h),
          static_cast<int>(g.w),
          static_cast<int>(g.kh),
          static_cast<int>(g.kw),
          static_cast<int>(g.sh),
          static_cast<int>(g.sw),
          static_cast<int>(g.ph),
          static_cast<int>(g.pw),
          static_cast<int>(g.dh),
          static_cast<int>(g.dw),
          static_cast<int>(g.oh),
          static_cast<int>(g.ow),
          g.n * g.c,
          g.c,
          g.col_image,
          g.col_row,
          pow2 ? log2_exact(g.sh) : -1,
          pow2 ? log2_exact(g.sw) : -1};
}

// im2col: a thread owns one column of a plane, so a warp's loads and stores are
// consecutive elements (coalesced for stride 1), and loops over the kernel offsets
// kChunk at a time, their loads issued before the stores: kChunk loads in flight per
// thread. The first version, one element per thread, kept too few in flight (a bf16
// forward of 0.40 ms where the columns' bytes come to ~0.11 ms); the second, 16 bytes
// of consecutive columns per thread, read 2-byte elements 16 bytes apart across a warp
// (im2col ~150 us of the 0.20 ms bf16 forward in the profiler's table; ~130 us so).
// col2im keeps the second version's shape, 16 bytes of consecutive pixels per thread
// and one store: the one-pixel-per-thread form was slower there (the profiler's
// Im2colBackward, ResNet-8 step: 0.90 ms against 0.61 per step).
constexpr int kChunk = 9;  // a 3x3 kernel's offsets in one round

// cols[p, k, l] for plane p (z) and column l (the thread), every kernel offset k.
template <typename S>
__global__ void __launch_bounds__(kThreads)
    im2col_kernel(const S* __restrict__ x, S* __restrict__ cols, Geo g, S pad) {
  const int cols_per_plane = g.oh * g.ow;
  const int l = blockIdx.x * blockDim.x + threadIdx.x;
  if (l >= cols_per_plane) return;
  const int oi = l / g.ow, oj = l - oi * g.ow;
  const int r0 = oi * g.sh - g.ph, c0 = oj * g.sw - g.pw;
  const int kk = g.kh * g.kw;
  for (int64_t p = blockIdx.z; p < g.planes; p += gridDim.z) {
    const S* xp = x + p * static_cast<int64_t>(g.h) * g.w;
    S* out = cols + plane_offset(g, p) + l;
    int ki = 0, kj = 0;
    for (int k0 = 0; k0 < kk; k0 += kChunk) {
      S v[kChunk];
#pragma unroll
      for (int j = 0; j < kChunk; ++j) {
        const int r = r0 + ki * g.dh, c = c0 + kj * g.dw;
        v[j] = k0 + j < kk && r >= 0 && r < g.h && c >= 0 && c < g.w ? xp[r * g.w + c] : pad;
        if (++kj == g.kw) {
          kj = 0;
          ++ki;
        }
      }
#pragma unroll
      for (int j = 0; j < kChunk; ++j)
        if (k0 + j < kk) out[static_cast<int64_t>(k0 + j) * g.col_row] = v[j];
    }
  }
}

// col2im's pixels per thread: 16 bytes' worth.
template <typename S>
constexpr int kVec = static_cast<int>(16 / sizeof(S));

// Stores v at p: one 16-byte store when `vec`, else element by element (the first
// `count`: a row's tail).
template <typename S>
__device__ __forceinline__ void store_run(S* p, const S (&v)[kVec<S>], bool vec, int count) {
  if (vec) {
    *reinterpret_cast<uint4*>(p) = *reinterpret_cast<const uint4*>(v);
    return;
  }
#pragma unroll
  for (int j = 0; j < kVec<S>; ++j)
    if (j < count) p[j] = v[j];
}

// How col2im finds the output position (oi, oj) that reads a padded pixel through
// kernel offset (ki, kj), if any: t = pixel - offset must be a multiple of the stride.
// kUnitStride: t itself. kPow2Stride: a shift and a mask. kAnyStride: two integer
// divisions per pixel and offset (nine offsets, eight pixels a thread: 144 divisions
// per thread for a 3x3 kernel; by count, ~0.1 ms of instructions for the stride-2
// col2im of ResNet-8's bf16 step, whose calls took ~96 us on the H200, 2026-12-05,
// where their bytes come to ~20 us. benchmarks/NOTES.md, "col2im's stride-2 divisions").
enum StrideKind { kUnitStride, kPow2Stride, kAnyStride };

// x[p, i0 .. i0 + kVec - 1] (the plane's pixels in row-major order): each the sum over
// (ki, kj), in that order, of the columns that read it.
template <typename S, StrideKind kStride>
__global__ void __launch_bounds__(kThreads)
    col2im_kernel(const S* __restrict__ cols, S* __restrict__ x, Geo g, bool vec) {
  using C = typename CompOf<S>::type;
  constexpr int V = kVec<S>;
  const int pixels = g.h * g.w;
  const int i0 = (blockIdx.x * blockDim.x + threadIdx.x) * V;
  if (i0 >= pixels) return;
  const int count = min(V, pixels - i0);
  int rr[V], cc[V];  // each pixel's row and column in the padded plane
  {
    int r = i0 / g.w, c = i0 - r * g.w;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      rr[j] = r + g.ph;
      cc[j] = c + g.pw;
      if (++c == g.w) {
        c = 0;
        ++r;
      }
    }
  }
  for (int64_t p = blockIdx.z; p < g.planes; p += gridDim.z) {
    const S* cp = cols + plane_offset(g, p);
    C acc[V];
#pragma unroll
    for (int j = 0; j < V; ++j) acc[j] = 0;
    for (int ki = 0; ki < g.kh; ++ki)
      for (int kj = 0; kj < g.kw; ++kj) {
        const S* row = cp + (ki * g.kw + kj) * g.col_row;
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const int ti = rr[j] - ki * g.dh, tj = cc[j] - kj * g.dw;  // oi sh, oj sw
          int oi = ti, oj = tj;
          bool on_grid = true;
          if constexpr (kStride == kPow2Stride) {  // ti, tj < 0 miss below, whatever this says
            oi = ti >> g.log2_sh;
            oj = tj >> g.log2_sw;
            on_grid = ((ti & (g.sh - 1)) | (tj & (g.sw - 1))) == 0;
          } else if constexpr (kStride == kAnyStride) {
            oi = ti / g.sh;
            oj = tj / g.sw;
            on_grid = oi * g.sh == ti && oj * g.sw == tj;
          }
          const bool hit = j < count && ti >= 0 && tj >= 0 && oi < g.oh && oj < g.ow && on_grid;
          if (hit) acc[j] += widen(row[oi * g.ow + oj]);
        }
      }
    alignas(16) S v[V];
#pragma unroll
    for (int j = 0; j < V; ++j) v[j] = narrow<S>(acc[j]);
    store_run(x + p * static_cast<int64_t>(pixels) + i0, v, vec, count);
  }
}

// im2col's threads per block: a plane's columns rounded up to a warp, at most kThreads
// (small planes, as a ResNet's last stage's 8 x 8, leave no idle threads).
int block_for(int64_t n) {
  return static_cast<int>(std::min<int64_t>(kThreads, ceil_div(n, 32) * 32));
}

// One plane's pixels and columns, and the padded extents, in 30 bits.
void check_geometry(const char* op, const ColumnGeometry& g) {
  EMBER_CHECK(g.n >= 0 && g.c >= 0 && g.h >= 0 && g.w >= 0 && g.kh > 0 && g.kw > 0 && g.sh > 0 &&
                  g.sw > 0 && g.dh > 0 && g.dw > 0 && g.ph >= 0 && g.pw >= 0 && g.oh >= 0 &&
                  g.ow >= 0 && g.col_image >= 0 && g.col_row >= 0,
              op, ": bad geometry");
  const int64_t limit = int64_t{1} << 30;
  EMBER_CHECK(g.h * g.w < limit && g.kh * g.kw * g.oh * g.ow < limit && g.h + 2 * g.ph < limit &&
                  g.w + 2 * g.pw < limit && g.dh * g.kh < limit && g.dw * g.kw < limit &&
                  g.oh * g.sh < limit && g.ow * g.sw < limit,
              op, ": one plane's ", g.h, " x ", g.w, " pixels or ", g.kh * g.kw * g.oh * g.ow,
              " columns pass the CUDA kernel's 2^30 limit");
}

unsigned grid_dim(int64_t n) {
  return static_cast<unsigned>(std::max<int64_t>(1, std::min(n, kMaxGridZ)));
}

void launch_im2col(DType dtype, const void* x, void* cols, const ColumnGeometry& g,
                   double pad_value, cudaStream_t stream) {
  check_geometry("im2col", g);
  const int64_t l = g.oh * g.ow, planes = g.n * g.c;
  if (l == 0 || planes == 0) return;
  dispatch_float(dtype, "im2col", [&](auto* tag) {
    using S = std::remove_pointer_t<decltype(tag)>;
    S pad;
    if constexpr (std::is_same_v<S, __nv_bfloat16>)
      pad = __float2bfloat16_rn(static_cast<float>(pad_value));
    else
      pad = static_cast<S>(pad_value);
    const int block = block_for(l);
    const dim3 grid(static_cast<unsigned>(ceil_div(l, block)), 1, grid_dim(planes));
    im2col_kernel<S><<<grid, block, 0, stream>>>(static_cast<const S*>(x), static_cast<S*>(cols),
                                                 narrow_geo(g), pad);
  });
  EMBER_CUDA_CHECK(cudaGetLastError());
}

void launch_col2im(DType dtype, const void* cols, void* x, const ColumnGeometry& g,
                   cudaStream_t stream) {
  check_geometry("col2im", g);
  const int64_t pixels = g.h * g.w, planes = g.n * g.c;
  if (pixels == 0 || planes == 0) return;
  dispatch_float(dtype, "col2im", [&](auto* tag) {
    using S = std::remove_pointer_t<decltype(tag)>;
    const bool vec = pixels % kVec<S> == 0 && aligned16(x);
    const dim3 grid(static_cast<unsigned>(ceil_div(ceil_div(pixels, kVec<S>), kThreads)), 1,
                    grid_dim(planes));
    const S* src = static_cast<const S*>(cols);
    S* dst = static_cast<S*>(x);
    const Geo geo = narrow_geo(g);
    if (g.sh == 1 && g.sw == 1)
      col2im_kernel<S, kUnitStride><<<grid, kThreads, 0, stream>>>(src, dst, geo, vec);
    else if (geo.log2_sh >= 0)
      col2im_kernel<S, kPow2Stride><<<grid, kThreads, 0, stream>>>(src, dst, geo, vec);
    else
      col2im_kernel<S, kAnyStride><<<grid, kThreads, 0, stream>>>(src, dst, geo, vec);
  });
  EMBER_CUDA_CHECK(cudaGetLastError());
}

namespace entry {

ColumnGeometry geometry_of(const kernels::Im2colArgs& a) {
  return {a.n,  a.c,  a.h,  a.w,  a.kh, a.kw, a.sh,        a.sw,
          a.ph, a.pw, a.dh, a.dw, a.oh, a.ow, a.col_image, a.col_row};
}

void im2col(const kernels::Im2colArgs& a) {
  DeviceGuard guard(a.device.index);
  launch_im2col(a.dtype, a.src, a.dst, geometry_of(a), a.pad_value, current_stream(a.device.index));
}

void col2im(const kernels::Im2colArgs& a) {
  DeviceGuard guard(a.device.index);
  launch_col2im(a.dtype, a.src, a.dst, geometry_of(a), current_stream(a.device.index));
}

}  // namespace entry
}  // namespace

void register_conv(kernels::KernelFamilies& t) {
  t.im2col = &entry::im2col;
  t.col2im = &entry::col2im;
}

}  // namespace ember::cuda
