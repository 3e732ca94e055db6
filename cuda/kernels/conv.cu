// The convolution's column kernels (conv.h). Both are memory-bound gathers; the
// grid's y and z name the kernel offset and the (n, c) plane, so a thread divides
// once (its column into (oi, oj), or its pixel into (r, c)) and a warp reads and
// writes consecutive elements along a row. y and z loop where the sizes pass the
// grid's 65,535 limit.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

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

// cols[p, k, l] for plane p (z), kernel offset k = ki kw + kj (y), column l = oi ow + oj (x).
template <typename S>
__global__ void im2col_kernel(const S* __restrict__ x, S* __restrict__ cols, Geo g, S pad) {
  const int l = blockIdx.x * blockDim.x + threadIdx.x;
  const int cols_per_plane = g.oh * g.ow;
  if (l >= cols_per_plane) return;
  const int oi = l / g.ow, oj = l - oi * g.ow;
  const int kk = g.kh * g.kw;
  for (int k = blockIdx.y; k < kk; k += gridDim.y) {
    const int ki = k / g.kw, kj = k - ki * g.kw;
    const int r = oi * g.sh - g.ph + ki * g.dh;
    const int c = oj * g.sw - g.pw + kj * g.dw;
    const bool inside = r >= 0 && r < g.h && c >= 0 && c < g.w;
    for (int64_t p = blockIdx.z; p < g.planes; p += gridDim.z) {
      const S* xp = x + p * static_cast<int64_t>(g.h) * g.w;
      S* out = cols + (p * kk + k) * static_cast<int64_t>(cols_per_plane);
      out[l] = inside ? xp[r * g.w + c] : pad;
    }
  }
}

// x[p, r, c] = sum over (ki, kj), in that order, of the columns that read (r, c).
template <typename S>
__global__ void col2im_kernel(const S* __restrict__ cols, S* __restrict__ x, Geo g) {
  using C = typename CompOf<S>::type;
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= g.h * g.w) return;
  const int r = i / g.w, c = i - r * g.w;
  const int kk = g.kh * g.kw, cols_per_plane = g.oh * g.ow;
  for (int64_t p = blockIdx.z; p < g.planes; p += gridDim.z) {
    const S* cp = cols + p * kk * static_cast<int64_t>(cols_per_plane);
    C acc = 0;
    for (int ki = 0; ki < g.kh; ++ki) {
      const int ti = r + g.ph - ki * g.dh;  // oi sh
      if (ti < 0) break;                    // ti falls as ki grows
      const int oi = ti / g.sh;
      if (oi * g.sh != ti || oi >= g.oh) continue;
      for (int kj = 0; kj < g.kw; ++kj) {
        const int tj = c + g.pw - kj * g.dw;
        if (tj < 0) break;
        const int oj = tj / g.sw;
        if (oj * g.sw != tj || oj >= g.ow) continue;
        acc += widen(cp[(ki * g.kw + kj) * cols_per_plane + oi * g.ow + oj]);
      }
    }
    x[p * static_cast<int64_t>(g.h) * g.w + i] = narrow<S>(acc);
  }
}

// One plane's columns (c kk... per plane: kk * oh * ow) and pixels in 31 bits.
void check_geometry(const char* op, const ColumnGeometry& g) {
  EMBER_CHECK(g.n >= 0 && g.c >= 0 && g.h >= 0 && g.w >= 0 && g.kh > 0 && g.kw > 0 && g.sh > 0 &&
                  g.sw > 0 && g.dh > 0 && g.dw > 0 && g.ph >= 0 && g.pw >= 0 && g.oh >= 0 &&
                  g.ow >= 0,
              op, ": bad geometry");
  const int64_t limit = int64_t{1} << 30;
  EMBER_CHECK(g.h * g.w < limit && g.kh * g.kw * g.oh * g.ow < limit && g.h + 2 * g.ph < limit &&
                  g.w + 2 * g.pw < limit && g.dh * g.kh < limit && g.dw * g.kw < limit,
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
    const dim3 grid(static_cast<unsigned>(ceil_div(l, kThreads)), grid_dim(kk), grid_dim(planes));
    im2col_kernel<S><<<grid, kThreads, 0, stream>>>(static_cast<const S*>(x), static_cast<S*>(cols),
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
    const dim3 grid(static_cast<unsigned>(ceil_div(pixels, kThreads)), 1, grid_dim(planes));
    col2im_kernel<S><<<grid, kThreads, 0, stream>>>(static_cast<const S*>(cols), static_cast<S*>(x),
                                                    narrow_geo(g));
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
