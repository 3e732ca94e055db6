// Softmax kernels (see softmax.h). Three shapes of work:
//  - short rows (inner == 1, n <= 1024): a warp per row;
//  - long rows (inner == 1): a block per row;
//  - columns (inner > 1): a thread per (o, i), warps reading consecutive i.
// Each sweeps its row once keeping an online (maximum, sum of exp(x - maximum))
// pair, rescaling the sum when the maximum grows, combines the pairs with CUB's
// warp or block reduction, then sweeps again to write the output (the second
// read mostly hits the cache). Backward sweeps twice likewise.
#include <cuda_bf16.h>

#include <cub/block/block_reduce.cuh>
#include <cub/warp/warp_reduce.cuh>

#include <cmath>
#include <cstdint>

#include "cuda/check.h"
#include "cuda/kernels/kernel_helpers.cuh"
#include "cuda/kernels/registration.h"
#include "cuda/kernels/softmax.h"
#include "cuda/runtime.h"

namespace ember::cuda {

namespace {

constexpr int kBlock = 256;
constexpr int kWarp = 32;
constexpr int kShortRow = 1024;
constexpr int64_t kMaxBlocks = 65535;

inline unsigned grid_of(int64_t blocks) {
  return static_cast<unsigned>(blocks < 1 ? 1 : blocks > kMaxBlocks ? kMaxBlocks : blocks);
}

__device__ __forceinline__ float ex(float v) {
  return expf(v);
}
__device__ __forceinline__ double ex(double v) {
  return ::exp(v);
}
__device__ __forceinline__ float lg(float v) {
  return logf(v);
}
__device__ __forceinline__ double lg(double v) {
  return ::log(v);
}

// The online softmax state: the maximum so far and the sum of exp(x - m).
template <typename C>
struct MaxSum {
  C m;
  C s;
};

template <typename C>
__device__ __forceinline__ MaxSum<C> empty_state() {
  return {C(-INFINITY), C(0)};
}

// Adds one element (one exp per element).
template <typename C>
__device__ __forceinline__ void update(MaxSum<C>& a, C x) {
  if (x > a.m) {
    a.s = a.s * ex(a.m - x) + C(1);  // exp(-inf) = 0 for the first element
    a.m = x;
  } else if (x != x) {
    a.m = x;  // NaN: the row's results are NaN, as PyTorch's
    a.s = x;
  } else if (x != C(-INFINITY)) {
    a.s += ex(x - a.m);
  }  // -inf adds nothing; a row of only -inf ends with s = 0: NaN, as PyTorch's
}

template <typename C>
struct CombineMaxSum {
  __device__ __forceinline__ MaxSum<C> operator()(const MaxSum<C>& a, const MaxSum<C>& b) const {
    if (a.m != a.m || b.m != b.m) return {a.m + b.m, a.s + b.s};  // NaN wins
    if (a.m == C(-INFINITY) && b.m == C(-INFINITY)) return {a.m, a.s + b.s};
    const C m = a.m > b.m ? a.m : b.m;
    return {m, a.s * ex(a.m - m) + b.s * ex(b.m - m)};
  }
};

template <typename C>
__device__ __forceinline__ C output(C x, MaxSum<C> st, C log_s, bool take_log) {
  return take_log ? x - st.m - log_s : ex(x - st.m) / st.s;
}

// ------------------------------------------------------------------ forward

// inner == 1, n <= kShortRow: a warp per row.
template <typename S>
__global__ void __launch_bounds__(kBlock)
    softmax_warp_kernel(const S* __restrict__ x, S* __restrict__ y, int64_t rows, int64_t n,
                        bool take_log) {
  using C = typename CompOf<S>::type;
  using WarpReduce = cub::WarpReduce<MaxSum<C>>;
  __shared__ typename WarpReduce::TempStorage temp[kBlock / kWarp];
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  for (int64_t row = blockIdx.x * int64_t{kBlock / kWarp} + warp; row < rows;
       row += int64_t{gridDim.x} * (kBlock / kWarp)) {
    const S* xr = x + row * n;
    MaxSum<C> st = empty_state<C>();
    for (int64_t k = lane; k < n; k += kWarp) update(st, widen(xr[k]));
    st = WarpReduce(temp[warp]).Reduce(st, CombineMaxSum<C>());
    st.m = __shfl_sync(0xffffffffu, st.m, 0);  // the result is lane 0's
    st.s = __shfl_sync(0xffffffffu, st.s, 0);
    const C log_s = lg(st.s);
    for (int64_t k = lane; k < n; k += kWarp)
      y[row * n + k] = narrow<S>(output(widen(xr[k]), st, log_s, take_log));
    __syncwarp();  // temp is reused by the next row
  }
}

// inner == 1: a block per row.
template <typename S>
__global__ void __launch_bounds__(kBlock)
    softmax_block_kernel(const S* __restrict__ x, S* __restrict__ y, int64_t rows, int64_t n,
                         bool take_log) {
  using C = typename CompOf<S>::type;
  using BlockReduce = cub::BlockReduce<MaxSum<C>, kBlock>;
  __shared__ typename BlockReduce::TempStorage temp;
  __shared__ MaxSum<C> result;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const S* xr = x + row * n;
    MaxSum<C> st = empty_state<C>();
    for (int64_t k = threadIdx.x; k < n; k += kBlock) update(st, widen(xr[k]));
    st = BlockReduce(temp).Reduce(st, CombineMaxSum<C>());
    if (threadIdx.x == 0) result = st;
    __syncthreads();
    st = result;
    const C log_s = lg(st.s);
    for (int64_t k = threadIdx.x; k < n; k += kBlock)
      y[row * n + k] = narrow<S>(output(widen(xr[k]), st, log_s, take_log));
    __syncthreads();  // temp and result are reused by the next row
  }
}

// inner > 1: a thread per column (o, i).
template <typename S>
__global__ void __launch_bounds__(kBlock)
    softmax_col_kernel(const S* __restrict__ x, S* __restrict__ y, int64_t outer, int64_t n,
                       int64_t inner, bool take_log) {
  using C = typename CompOf<S>::type;
  const int64_t cols = outer * inner;
  for (int64_t c = blockIdx.x * int64_t{kBlock} + threadIdx.x; c < cols;
       c += int64_t{gridDim.x} * kBlock) {
    const int64_t o = c / inner, i = c % inner;
    const S* xc = x + o * n * inner + i;
    MaxSum<C> st = empty_state<C>();
    for (int64_t k = 0; k < n; ++k) update(st, widen(xc[k * inner]));
    const C log_s = lg(st.s);
    for (int64_t k = 0; k < n; ++k)
      y[o * n * inner + k * inner + i] =
          narrow<S>(output(widen(xc[k * inner]), st, log_s, take_log));
  }
}

// ------------------------------------------------------------------ backward

template <typename C>
__device__ __forceinline__ C dot_term(C y, C g, bool take_log) {
  return take_log ? g : g * y;
}
template <typename C>
__device__ __forceinline__ C grad_in(C y, C g, C dot, bool take_log) {
  return take_log ? g - ex(y) * dot : y * (g - dot);
}

template <typename S>
__global__ void __launch_bounds__(kBlock)
    softmax_backward_warp_kernel(const S* __restrict__ y, const S* __restrict__ dy,
                                 S* __restrict__ dx, int64_t rows, int64_t n, bool take_log) {
  using C = typename CompOf<S>::type;
  using WarpReduce = cub::WarpReduce<C>;
  __shared__ typename WarpReduce::TempStorage temp[kBlock / kWarp];
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  for (int64_t row = blockIdx.x * int64_t{kBlock / kWarp} + warp; row < rows;
       row += int64_t{gridDim.x} * (kBlock / kWarp)) {
    const int64_t base = row * n;
    C dot = C(0);
    for (int64_t k = lane; k < n; k += kWarp)
      dot += dot_term(widen(y[base + k]), widen(dy[base + k]), take_log);
    dot = WarpReduce(temp[warp]).Sum(dot);
    dot = __shfl_sync(0xffffffffu, dot, 0);
    for (int64_t k = lane; k < n; k += kWarp)
      dx[base + k] = narrow<S>(grad_in(widen(y[base + k]), widen(dy[base + k]), dot, take_log));
    __syncwarp();
  }
}

template <typename S>
__global__ void __launch_bounds__(kBlock)
    softmax_backward_block_kernel(const S* __restrict__ y, const S* __restrict__ dy,
                                  S* __restrict__ dx, int64_t rows, int64_t n, bool take_log) {
  using C = typename CompOf<S>::type;
  using BlockReduce = cub::BlockReduce<C, kBlock>;
  __shared__ typename BlockReduce::TempStorage temp;
  __shared__ C result;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t base = row * n;
    C dot = C(0);
    for (int64_t k = threadIdx.x; k < n; k += kBlock)
      dot += dot_term(widen(y[base + k]), widen(dy[base + k]), take_log);
    dot = BlockReduce(temp).Sum(dot);
    if (threadIdx.x == 0) result = dot;
    __syncthreads();
    dot = result;
    for (int64_t k = threadIdx.x; k < n; k += kBlock)
      dx[base + k] = narrow<S>(grad_in(widen(y[base + k]), widen(dy[base + k]), dot, take_log));
    __syncthreads();
  }
}

template <typename S>
__global__ void __launch_bounds__(kBlock)
    softmax_backward_col_kernel(const S* __restrict__ y, const S* __restrict__ dy,
                                S* __restrict__ dx, int64_t outer, int64_t n, int64_t inner,
                                bool take_log) {
  using C = typename CompOf<S>::type;
  const int64_t cols = outer * inner;
  for (int64_t c = blockIdx.x * int64_t{kBlock} + threadIdx.x; c < cols;
       c += int64_t{gridDim.x} * kBlock) {
    const int64_t o = c / inner, i = c % inner;
    const int64_t base = o * n * inner + i;
    C dot = C(0);
    for (int64_t k = 0; k < n; ++k)
      dot += dot_term(widen(y[base + k * inner]), widen(dy[base + k * inner]), take_log);
    for (int64_t k = 0; k < n; ++k) {
      const int64_t e = base + k * inner;
      dx[e] = narrow<S>(grad_in(widen(y[e]), widen(dy[e]), dot, take_log));
    }
  }
}

}  // namespace

void launch_softmax(DType dtype, const void* x, void* y, int64_t outer, int64_t n, int64_t inner,
                    bool take_log, cudaStream_t stream) {
  if (outer * n * inner == 0) return;
  dispatch_float(dtype, take_log ? "log_softmax" : "softmax", [&](auto* tag) {
    using S = std::remove_pointer_t<decltype(tag)>;
    const S* xs = static_cast<const S*>(x);
    S* ys = static_cast<S*>(y);
    if (inner > 1)
      softmax_col_kernel<S><<<grid_of(ceil_div(outer * inner, kBlock)), kBlock, 0, stream>>>(
          xs, ys, outer, n, inner, take_log);
    else if (n <= kShortRow)
      softmax_warp_kernel<S><<<grid_of(ceil_div(outer, kBlock / kWarp)), kBlock, 0, stream>>>(
          xs, ys, outer, n, take_log);
    else
      softmax_block_kernel<S><<<grid_of(outer), kBlock, 0, stream>>>(xs, ys, outer, n, take_log);
  });
  EMBER_CUDA_CHECK(cudaGetLastError());
}

void launch_softmax_backward(DType dtype, const void* y, const void* d_y, void* d_x, int64_t outer,
                             int64_t n, int64_t inner, bool take_log, cudaStream_t stream) {
  if (outer * n * inner == 0) return;
  dispatch_float(dtype, take_log ? "log_softmax backward" : "softmax backward", [&](auto* tag) {
    using S = std::remove_pointer_t<decltype(tag)>;
    const S* ys = static_cast<const S*>(y);
    const S* gs = static_cast<const S*>(d_y);
    S* ds = static_cast<S*>(d_x);
    if (inner > 1)
      softmax_backward_col_kernel<S>
          <<<grid_of(ceil_div(outer * inner, kBlock)), kBlock, 0, stream>>>(ys, gs, ds, outer, n,
                                                                            inner, take_log);
    else if (n <= kShortRow)
      softmax_backward_warp_kernel<S>
          <<<grid_of(ceil_div(outer, kBlock / kWarp)), kBlock, 0, stream>>>(ys, gs, ds, outer, n,
                                                                            take_log);
    else
      softmax_backward_block_kernel<S>
          <<<grid_of(outer), kBlock, 0, stream>>>(ys, gs, ds, outer, n, take_log);
  });
  EMBER_CUDA_CHECK(cudaGetLastError());
}

// ------------------------------------------------------------------ registration

namespace {
namespace entry {

void softmax(const kernels::SoftmaxArgs& a) {
  DeviceGuard guard(a.device.index);
  launch_softmax(a.dtype, a.x, a.y, a.outer, a.n, a.inner, a.log, current_stream(a.device.index));
}

void softmax_backward(const kernels::SoftmaxBackwardArgs& a) {
  DeviceGuard guard(a.device.index);
  launch_softmax_backward(a.dtype, a.y, a.d_y, a.d_x, a.outer, a.n, a.inner, a.log,
                          current_stream(a.device.index));
}

}  // namespace entry
}  // namespace

void register_softmax(kernels::KernelFamilies& t) {
  t.softmax = &entry::softmax;
  t.softmax_backward = &entry::softmax_backward;
}

}  // namespace ember::cuda
