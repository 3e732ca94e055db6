// The convolution's column kernels (conv.h). Both are memory-bound gathers; the
// grid's y and z name the kernel offset and the (n, c) plane, so a thread divides
// once (its first column into (oi, oj), or its first pixel into (r, c)) and a warp
// reads and writes consecutive elements along a row, 16 bytes' worth per thread. y
// and z loop where the sizes pass the grid's 65,535 limit.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "cuda/check.h"
#include "cuda/kernels/conv.h"
#include "cuda/kernels/kernel_helpers.cuh"
#include "cuda/kernels/registration.h"
#include "cuda/runtime.h"

namespace ember::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxGridYZ = 65535;

// The geometry in 32-bit fields where every offset of one plane fits (checked by the
// launchers), plane offsets in 64 bits.
struct Geo {
  int h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow;
  int64_t planes;
};

Geo narrow_geo(const ColumnGeometry& g) {
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
          g.n * g.c};
}

// Elements per thread: 16 bytes' worth. One element per thread left too few loads in
// flight to cover the memory's latency (bench_conv on the H200: a bf16 forward of
// 0.40 ms where the columns' bytes come to about 0.11).
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

// cols[p, k, l0 .. l0 + kVec - 1] for plane p (z), kernel offset k = ki kw + kj (y),
// the run of columns l0 (x). `vec`: rows of a whole number of runs and 16-byte
// aligned columns, so each run is one aligned store.
template <typename S>
__global__ void __launch_bounds__(kThreads)
    im2col_kernel(const S* __restrict__ x, S* __restrict__ cols, Geo g, S pad, bool vec) {
  constexpr int V = kVec<S>;
  const int cols_per_plane = g.oh * g.ow;
  const int l0 = (blockIdx.x * blockDim.x + threadIdx.x) * V;
  if (l0 >= cols_per_plane) return;
  const int count = min(V, cols_per_plane - l0);
  const int oi0 = l0 / g.ow, oj0 = l0 - oi0 * g.ow;
  const int kk = g.kh * g.kw;
  for (int k = blockIdx.y; k < kk; k += gridDim.y) {
    const int ki = k / g.kw, kj = k - ki * g.kw;
    const int dr = ki * g.dh - g.ph, dc = kj * g.dw - g.pw;
    for (int64_t p = blockIdx.z; p < g.planes; p += gridDim.z) {
      const S* xp = x + p * static_cast<int64_t>(g.h) * g.w;
      alignas(16) S v[V];
      int oi = oi0, oj = oj0;
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const int r = oi * g.sh + dr, c = oj * g.sw + dc;
        v[j] = j < count && r >= 0 && r < g.h && c >= 0 && c < g.w ? xp[r * g.w + c] : pad;
        if (++oj == g.ow) {
          oj = 0;
          ++oi;
        }
      }
      store_run(cols + (p * kk + k) * static_cast<int64_t>(cols_per_plane) + l0, v, vec, count);
    }
  }
}

// x[p, i0 .. i0 + kVec - 1] (the plane's pixels in row-major order): each the sum over
// (ki, kj), in that order, of the columns that read it. kUnit: stride 1 (no division
// to find a pixel's column).
template <typename S, bool kUnit>
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
  const int kk = g.kh * g.kw, cols_per_plane = g.oh * g.ow;
  for (int64_t p = blockIdx.z; p < g.planes; p += gridDim.z) {
    const S* cp = cols + p * kk * static_cast<int64_t>(cols_per_plane);
    C acc[V];
#pragma unroll
    for (int j = 0; j < V; ++j) acc[j] = 0;
    for (int ki = 0; ki < g.kh; ++ki)
      for (int kj = 0; kj < g.kw; ++kj) {
        const S* row = cp + (ki * g.kw + kj) * cols_per_plane;
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const int ti = rr[j] - ki * g.dh, tj = cc[j] - kj * g.dw;  // oi sh, oj sw
          int oi = ti, oj = tj;
          if constexpr (!kUnit) {
            oi = ti / g.sh;
            oj = tj / g.sw;
          }
          const bool hit = j < count && ti >= 0 && tj >= 0 && oi < g.oh && oj < g.ow &&
                           (kUnit || (oi * g.sh == ti && oj * g.sw == tj));
          if (hit) acc[j] += widen(row[oi * g.ow + oj]);
        }
      }
    alignas(16) S v[V];
#pragma unroll
    for (int j = 0; j < V; ++j) v[j] = narrow<S>(acc[j]);
    store_run(x + p * static_cast<int64_t>(pixels) + i0, v, vec, count);
  }
}

// One plane's pixels and columns, and the padded extents, in 30 bits.
void check_geometry(const char* op, const ColumnGeometry& g) {
  EMBER_CHECK(g.n >= 0 && g.c >= 0 && g.h >= 0 && g.w >= 0 && g.kh > 0 && g.kw > 0 && g.sh > 0 &&
                  g.sw > 0 && g.dh > 0 && g.dw > 0 && g.ph >= 0 && g.pw >= 0 && g.oh >= 0 &&
                  g.ow >= 0,
              op, ": bad geometry");
  const int64_t limit = int64_t{1} << 30;
  EMBER_CHECK(g.h * g.w < limit && g.kh * g.kw * g.oh * g.ow < limit && g.h + 2 * g.ph < limit &&
                  g.w + 2 * g.pw < limit && g.dh * g.kh < limit && g.dw * g.kw < limit &&
                  g.oh * g.sh < limit && g.ow * g.sw < limit,
              op, ": one plane's ", g.h, " x ", g.w, " pixels or ", g.kh * g.kw * g.oh * g.ow,
              " columns pass the CUDA kernel's 2^30 limit");
}

unsigned grid_dim(int64_t n) {
  return static_cast<unsigned>(std::max<int64_t>(1, std::min(n, kMaxGridYZ)));
}

}  // namespace

void launch_im2col(DType dtype, const void* x, void* cols, const ColumnGeometry& g,
                   double pad_value, cudaStream_t stream) {
  check_geometry("im2col", g);
  const int64_t l = g.oh * g.ow, kk = g.kh * g.kw, planes = g.n * g.c;
  if (l == 0 || planes == 0) return;
  dispatch_float(dtype, "im2col", [&](auto* tag) {
    using S = std::remove_pointer_t<decltype(tag)>;
    S pad;
    if constexpr (std::is_same_v<S, __nv_bfloat16>)
      pad = __float2bfloat16_rn(static_cast<float>(pad_value));
    else
      pad = static_cast<S>(pad_value);
    const bool vec = l % kVec<S> == 0 && aligned16(cols);
    const dim3 grid(static_cast<unsigned>(ceil_div(ceil_div(l, kVec<S>), kThreads)), grid_dim(kk),
                    grid_dim(planes));
    im2col_kernel<S><<<grid, kThreads, 0, stream>>>(static_cast<const S*>(x), static_cast<S*>(cols),
                                                    narrow_geo(g), pad, vec);
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
    if (g.sh == 1 && g.sw == 1)
      col2im_kernel<S, true><<<grid, kThreads, 0, stream>>>(src, dst, narrow_geo(g), vec);
    else
      col2im_kernel<S, false><<<grid, kThreads, 0, stream>>>(src, dst, narrow_geo(g), vec);
  });
  EMBER_CUDA_CHECK(cudaGetLastError());
}

namespace {
namespace entry {

ColumnGeometry geometry_of(const kernels::Im2colArgs& a) {
  return {a.n, a.c, a.h, a.w, a.kh, a.kw, a.sh, a.sw, a.ph, a.pw, a.dh, a.dw, a.oh, a.ow};
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
