// Fused batch norm (see batch_norm.h; its bandwidth floor is in benchmarks/NOTES.md).
// x is (N, C, M) contiguous; a channel's N*M values lie in N runs of M.
//
// The per-channel reductions (forward statistics, backward sums) run on a (C, S)
// grid: block (c, s) walks channel c's values in 16-byte vectors (when M and the
// pointers allow), vector k of the channel at (k / Mv, c, (k % Mv) V), taking every
// S-th stride of kThreads vectors, so a warp reads consecutive vectors of one run.
// Forward keeps a Welford triple (count, mean, M2) per thread, merging one vector's
// exact mean and M2 at a time (Chan et al.), then across the block; the block's
// triple goes to the workspace and one thread per channel merges the S triples in
// split order (deterministic), writing mean and invstd and moving the running
// statistics. The element-wise passes (y; d_x) walk the whole tensor in vectors,
// reading the channel's float32 statistics per vector.
#include <cuda_bf16.h>

#include <cub/block/block_reduce.cuh>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>
#include <type_traits>

#include "cuda/check.h"
#include "cuda/kernels/batch_norm.h"
#include "cuda/kernels/kernel_helpers.cuh"
#include "cuda/kernels/registration.h"
#include "cuda/kernels/vec16.cuh"
#include "cuda/runtime.h"

namespace ember::cuda {

namespace {

constexpr int kThreads = 256;

// V consecutive values at p as float (one 16-byte access when V > 1), and back.
template <typename S, int V>
__device__ __forceinline__ void load(const S* __restrict__ p, float (&out)[V]) {
  if constexpr (V == 1)
    out[0] = widen(p[0]);
  else
    Vec16<S>::unpack(*reinterpret_cast<const uint4*>(p), out);
}
template <typename S, int V>
__device__ __forceinline__ void store(S* __restrict__ p, const float (&in)[V]) {
  if constexpr (V == 1)
    p[0] = narrow<S>(in[0]);
  else
    *reinterpret_cast<uint4*>(p) = Vec16<S>::pack(in);
}

template <typename S, bool kVec>
constexpr int kV = kVec ? Vec16<S>::N : 1;

// The element offset of vector k (of V values) of channel c in (N, C, M), mv = M / V.
template <int V>
__device__ __forceinline__ int64_t channel_offset(uint32_t k, uint32_t mv, int64_t c,
                                                  int64_t channels, int64_t m) {
  const uint32_t n = k / mv;
  return (static_cast<int64_t>(n) * channels + c) * m + static_cast<int64_t>(k - n * mv) * V;
}

// count, mean and the sum of squared deviations (M2) of a set of values.
struct Welford {
  float n, mean, m2;
};
struct WelfordMerge {
  __device__ __forceinline__ Welford operator()(const Welford& a, const Welford& b) const {
    const float n = a.n + b.n;
    if (n == 0.f) return a;
    const float d = b.mean - a.mean, fb = b.n / n;
    return {n, a.mean + d * fb, a.m2 + b.m2 + d * d * a.n * fb};
  }
};

struct Pair {
  float a, b;
};
struct PairSum {
  __device__ __forceinline__ Pair operator()(const Pair& x, const Pair& y) const {
    return {x.a + y.a, x.b + y.b};
  }
};

// part[3 (c S + s) + {0, 1, 2}] = the Welford triple of block (c, s)'s values;
// vecs = N M / V vectors per channel.
template <typename S, bool kVec>
__global__ void __launch_bounds__(kThreads)
    batch_norm_stats_kernel(const S* __restrict__ x, int64_t channels, int64_t m, uint32_t vecs,
                            uint32_t mv, float* __restrict__ part) {
  constexpr int V = kV<S, kVec>;
  using BlockReduce = cub::BlockReduce<Welford, kThreads>;
  __shared__ typename BlockReduce::TempStorage temp;
  const int64_t c = blockIdx.x;
  const uint32_t splits = gridDim.y;
  Welford acc{0.f, 0.f, 0.f};
  for (uint32_t k = blockIdx.y * kThreads + threadIdx.x; k < vecs; k += splits * kThreads) {
    float v[V];
    load<S, V>(x + channel_offset<V>(k, mv, c, channels, m), v);
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < V; ++i) s += v[i];
    const float mu = s * (1.f / V);
    float q = 0.f;
#pragma unroll
    for (int i = 0; i < V; ++i) q += (v[i] - mu) * (v[i] - mu);
    acc = WelfordMerge()(acc, Welford{static_cast<float>(V), mu, q});
  }
  acc = BlockReduce(temp).Reduce(acc, WelfordMerge());
  if (threadIdx.x == 0) {
    float* p = part + 3 * (c * splits + blockIdx.y);
    p[0] = acc.n;
    p[1] = acc.mean;
    p[2] = acc.m2;
  }
}

// One thread per channel: the S triples merged in split order, the batch's mean and
// invstd written, the running statistics (or null) moved by momentum (running_var
// towards the unbiased variance, M2 / (count - 1)).
template <typename P>
__global__ void batch_norm_finalize_kernel(const float* __restrict__ part, int64_t channels,
                                           int64_t splits, float inv_count, float inv_count_m1,
                                           P* __restrict__ running_mean,
                                           P* __restrict__ running_var, float momentum, float eps,
                                           float* __restrict__ mean, float* __restrict__ invstd) {
  const int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (c >= channels) return;
  Welford acc{0.f, 0.f, 0.f};
  for (int64_t s = 0; s < splits; ++s) {
    const float* p = part + 3 * (c * splits + s);
    acc = WelfordMerge()(acc, Welford{p[0], p[1], p[2]});
  }
  mean[c] = acc.mean;
  invstd[c] = 1.f / sqrtf(acc.m2 * inv_count + eps);
  if (running_mean != nullptr) {
    running_mean[c] = narrow<P>((1.f - momentum) * widen(running_mean[c]) + momentum * acc.mean);
    running_var[c] =
        narrow<P>((1.f - momentum) * widen(running_var[c]) + momentum * acc.m2 * inv_count_m1);
  }
}

// Eval: the running statistics as the float32 mean and invstd the passes read.
template <typename P>
__global__ void batch_norm_eval_stats_kernel(const P* __restrict__ running_mean,
                                             const P* __restrict__ running_var, int64_t channels,
                                             float eps, float* __restrict__ mean,
                                             float* __restrict__ invstd) {
  const int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (c >= channels) return;
  mean[c] = widen(running_mean[c]);
  invstd[c] = 1.f / sqrtf(widen(running_var[c]) + eps);
}

// Channel c's affine: scale = invstd w, shift = b (w, b may be null).
template <typename P>
__device__ __forceinline__ void channel_affine(const float* __restrict__ invstd,
                                               const P* __restrict__ w, const P* __restrict__ b,
                                               int64_t c, float& scale, float& shift) {
  scale = invstd[c] * (w != nullptr ? widen(w[c]) : 1.f);
  shift = b != nullptr ? widen(b[c]) : 0.f;
}
// The normalised, scaled and shifted value: the forward's output before any ReLU. The
// backward of the fused ReLU recomputes it with this same function (same operations,
// same rounding) for the mask, so the mask is the forward's exactly.
__device__ __forceinline__ float affine_value(float v, float mu, float scale, float shift) {
  return (v - mu) * scale + shift;
}

// The fused ReLU's backward: g (the gradient of max(0, y)) zeroed where y, recomputed
// from x's values v, was not positive.
template <int V>
__device__ __forceinline__ void mask_relu(float (&g)[V], const float (&v)[V], float mu, float scale,
                                          float shift) {
#pragma unroll
  for (int i = 0; i < V; ++i)
    if (!(affine_value(v[i], mu, scale, shift) > 0.f)) g[i] = 0.f;
}

// y = (x - mean) invstd w + b over the whole tensor (kRelu: then max(0, .)): vecs
// vectors, mv per run of M. P: the per-channel parameters' type (S, or float under
// autocast's mix).
template <typename S, typename P, bool kVec, bool kRelu, typename I>
__global__ void __launch_bounds__(kThreads)
    batch_norm_apply_kernel(const S* __restrict__ x, const float* __restrict__ mean,
                            const float* __restrict__ invstd, const P* __restrict__ w,
                            const P* __restrict__ b, S* __restrict__ y, I vecs, I mv, I channels) {
  constexpr int V = kV<S, kVec>;
  const I stride = static_cast<I>(gridDim.x) * kThreads;
  for (I k = static_cast<I>(blockIdx.x) * kThreads + threadIdx.x; k < vecs; k += stride) {
    const I c = (k / mv) % channels;
    const float mu = mean[c];
    float scale, shift;
    channel_affine(invstd, w, b, c, scale, shift);
    float v[V];
    load<S, V>(x + static_cast<int64_t>(k) * V, v);
#pragma unroll
    for (int i = 0; i < V; ++i) {
      v[i] = affine_value(v[i], mu, scale, shift);
      if constexpr (kRelu) v[i] = v[i] > 0.f ? v[i] : 0.f;
    }
    store<S, V>(y + static_cast<int64_t>(k) * V, v);
  }
}

// part[2 (c S + s) + {0, 1}] = block (c, s)'s sum(d_y) and sum(d_y xhat). kRelu: d_y
// is the gradient of max(0, y), so it counts only where the forward's y was positive
// (recomputed from x: affine_value).
template <typename S, typename P, bool kVec, bool kRelu>
__global__ void __launch_bounds__(kThreads)
    batch_norm_backward_reduce_kernel(const S* __restrict__ dy, const S* __restrict__ x,
                                      const float* __restrict__ mean,
                                      const float* __restrict__ invstd, const P* __restrict__ w,
                                      const P* __restrict__ b, int64_t channels, int64_t m,
                                      uint32_t vecs, uint32_t mv, float* __restrict__ part) {
  constexpr int V = kV<S, kVec>;
  using BlockReduce = cub::BlockReduce<Pair, kThreads>;
  __shared__ typename BlockReduce::TempStorage temp;
  const int64_t c = blockIdx.x;
  const uint32_t splits = gridDim.y;
  const float mu = mean[c];
  float scale = 0.f, shift = 0.f;
  if constexpr (kRelu) channel_affine(invstd, w, b, c, scale, shift);
  Pair acc{0.f, 0.f};
  for (uint32_t k = blockIdx.y * kThreads + threadIdx.x; k < vecs; k += splits * kThreads) {
    const int64_t off = channel_offset<V>(k, mv, c, channels, m);
    float g[V], v[V];
    load<S, V>(dy + off, g);
    load<S, V>(x + off, v);
    if constexpr (kRelu) mask_relu(g, v, mu, scale, shift);
#pragma unroll
    for (int i = 0; i < V; ++i) {
      acc.a += g[i];
      acc.b += g[i] * (v[i] - mu);
    }
  }
  acc = BlockReduce(temp).Reduce(acc, PairSum());
  if (threadIdx.x == 0) {
    float* p = part + 2 * (c * splits + blockIdx.y);
    p[0] = acc.a;
    p[1] = acc.b * invstd[c];
  }
}

// One thread per channel: the S pairs summed in split order; d_w = sum(d_y xhat),
// d_b = sum(d_y) (either may be null); coef[c] = mean(d_y), coef[C + c] =
// mean(d_y xhat) for the d_x pass.
template <typename P>
__global__ void batch_norm_backward_finalize_kernel(const float* __restrict__ part,
                                                    int64_t channels, int64_t splits,
                                                    float inv_count, P* __restrict__ d_w,
                                                    P* __restrict__ d_b, float* __restrict__ coef) {
  const int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (c >= channels) return;
  float sdy = 0.f, sdyx = 0.f;
  for (int64_t s = 0; s < splits; ++s) {
    sdy += part[2 * (c * splits + s)];
    sdyx += part[2 * (c * splits + s) + 1];
  }
  if (d_w != nullptr) d_w[c] = narrow<P>(sdyx);
  if (d_b != nullptr) d_b[c] = narrow<P>(sdy);
  coef[c] = sdy * inv_count;
  coef[channels + c] = sdyx * inv_count;
}

// d_x = w invstd (d_y - mean(d_y) - xhat mean(d_y xhat)) (training; coef from the
// finalize kernel), or w invstd d_y (eval: coef is not read, nor x without kRelu).
// kRelu: d_y masked as in the reduce kernel.
template <typename S, typename P, bool kVec, bool kTraining, bool kRelu, typename I>
__global__ void __launch_bounds__(kThreads)
    batch_norm_backward_dx_kernel(const S* __restrict__ dy, const S* __restrict__ x,
                                  const P* __restrict__ w, const P* __restrict__ b,
                                  const float* __restrict__ mean, const float* __restrict__ invstd,
                                  const float* __restrict__ coef, S* __restrict__ dx, I vecs, I mv,
                                  I channels) {
  constexpr int V = kV<S, kVec>;
  const I stride = static_cast<I>(gridDim.x) * kThreads;
  for (I k = static_cast<I>(blockIdx.x) * kThreads + threadIdx.x; k < vecs; k += stride) {
    const I c = (k / mv) % channels;
    const float r = invstd[c];
    const float a = r * (w != nullptr ? widen(w[c]) : 1.f);
    float g[V], v[V];
    load<S, V>(dy + static_cast<int64_t>(k) * V, g);
    if constexpr (kRelu || kTraining) load<S, V>(x + static_cast<int64_t>(k) * V, v);
    if constexpr (kRelu) {
      float scale, shift;
      channel_affine(invstd, w, b, c, scale, shift);
      mask_relu(g, v, mean[c], scale, shift);
    }
    if constexpr (kTraining) {
      const float mu = mean[c], mean_dy = coef[c], mean_dyx = coef[channels + c];
#pragma unroll
      for (int i = 0; i < V; ++i) g[i] = a * (g[i] - mean_dy - (v[i] - mu) * r * mean_dyx);
    } else {
#pragma unroll
      for (int i = 0; i < V; ++i) g[i] *= a;
    }
    store<S, V>(dx + static_cast<int64_t>(k) * V, g);
  }
}

// ------------------------------------------------------------------ host side

// The splits S of each channel's reduction: about kReduceBlocks blocks over all
// channels (a wave of 8 blocks per multiprocessor on a 132-SM H200), at least 4
// values per thread, at most grid.y's limit. The workspace depends on it, so
// forward, backward and the query all take it from here; it depends on the sizes
// alone (not the GPU), so the meta device answers without one and the bits do not
// change from one GPU model to another.
constexpr int64_t kReduceBlocks = 1024;
int64_t splits_for(int64_t c, int64_t count) {
  const int64_t most = std::min<int64_t>(ceil_div(count, kThreads * 4), 65535);
  return std::max<int64_t>(1, std::min(ceil_div(kReduceBlocks, c), most));
}

// The element-wise passes' grid: a block per kThreads vectors, at most 8 blocks per
// multiprocessor (they loop).
unsigned elementwise_grid(int64_t vecs) {
  const int64_t most = 8 * static_cast<int64_t>(sm_count(current_device()));
  return static_cast<unsigned>(std::max<int64_t>(1, std::min(ceil_div(vecs, kThreads), most)));
}

// f(std::bool_constant<vec>): the vectorised or the scalar instantiation.
template <typename F>
void dispatch_vec(bool vec, F&& f) {
  if (vec)
    f(std::true_type{});
  else
    f(std::false_type{});
}
// f(index type): 32-bit indices where the tensor's vectors (plus a grid stride) fit.
template <typename F>
void dispatch_index(int64_t vecs, F&& f) {
  if (vecs < (int64_t{1} << 31))
    f(uint32_t{});
  else
    f(uint64_t{});
}

unsigned channel_grid(int64_t c) {
  return static_cast<unsigned>(ceil_div(c, 256));
}

// f(S*, P*) as null tags: the input's type S (float32 or bfloat16) and the
// per-channel parameters' P (S, or float for a bfloat16 input with params_f32).
template <typename F>
void dispatch_types(DType dtype, bool params_f32, const char* what, F&& f) {
  EMBER_CHECK(!params_f32 || dtype == DType::BFloat16, what,
              ": float32 parameters go with a bfloat16 input only, got ", dtype);
  if (params_f32) {
    f(static_cast<__nv_bfloat16*>(nullptr), static_cast<float*>(nullptr));
    return;
  }
  dispatch_float32_bf16(dtype, what, [&](auto* tag) { f(tag, tag); });
}

}  // namespace

bool batch_norm_supported(DType dtype, int64_t n, int64_t c, int64_t m) {
  const int64_t kMax = std::numeric_limits<int32_t>::max();
  return (dtype == DType::Float32 || dtype == DType::BFloat16) && n >= 1 && m >= 1 && c >= 1 &&
         c <= kMax && n * m <= kMax;
}

size_t batch_norm_workspace_bytes(DType dtype, int64_t n, int64_t c, int64_t m) {
  if (!batch_norm_supported(dtype, n, c, m)) return 0;
  const int64_t s = splits_for(c, n * m);
  // Forward: a triple per block; backward: a pair per block and two coefficients
  // per channel.
  return static_cast<size_t>(std::max(3 * c * s, 2 * c * s + 2 * c)) * sizeof(float);
}

void launch_batch_norm(DType dtype, const void* x, const void* w, const void* b, void* running_mean,
                       void* running_var, void* y, void* mean, void* invstd, int64_t n, int64_t c,
                       int64_t m, bool training, double momentum, double eps, void* workspace,
                       cudaStream_t stream, bool params_f32, bool relu) {
  EMBER_CHECK(batch_norm_supported(dtype, n, c, m), "batch_norm: the fused kernel does not take (",
              n, ", ", c, ", ", m, ") of ", dtype);
  EMBER_CHECK(training || (running_mean != nullptr && running_var != nullptr),
              "batch_norm: eval needs the running statistics");
  dispatch_types(dtype, params_f32, "batch_norm", [&](auto* tag, auto* ptag) {
    using S = std::remove_pointer_t<decltype(tag)>;
    using P = std::remove_pointer_t<decltype(ptag)>;
    constexpr int kVec16 = Vec16<S>::N;
    const S* xs = static_cast<const S*>(x);
    float* mu = static_cast<float*>(mean);
    float* rstd = static_cast<float*>(invstd);
    const int64_t count = n * m;
    if (training) {
      EMBER_CHECK(workspace != nullptr, "batch_norm: training needs the workspace");
      const int64_t s = splits_for(c, count);
      float* part = static_cast<float*>(workspace);
      dispatch_vec(m % kVec16 == 0 && aligned16(x), [&](auto vec) {
        constexpr bool kVec = decltype(vec)::value;
        constexpr int V = kV<S, kVec>;
        batch_norm_stats_kernel<S, kVec>
            <<<dim3(static_cast<unsigned>(c), static_cast<unsigned>(s)), kThreads, 0, stream>>>(
                xs, c, m, static_cast<uint32_t>(count / V), static_cast<uint32_t>(m / V), part);
      });
      EMBER_CUDA_CHECK(cudaGetLastError());
      const float inv_count_m1 = count > 1
                                     ? static_cast<float>(1.0 / static_cast<double>(count - 1))
                                     : std::numeric_limits<float>::quiet_NaN();
      batch_norm_finalize_kernel<P><<<channel_grid(c), 256, 0, stream>>>(
          part, c, s, static_cast<float>(1.0 / static_cast<double>(count)), inv_count_m1,
          static_cast<P*>(running_mean), static_cast<P*>(running_var), static_cast<float>(momentum),
          static_cast<float>(eps), mu, rstd);
    } else {
      batch_norm_eval_stats_kernel<P><<<channel_grid(c), 256, 0, stream>>>(
          static_cast<const P*>(running_mean), static_cast<const P*>(running_var), c,
          static_cast<float>(eps), mu, rstd);
    }
    EMBER_CUDA_CHECK(cudaGetLastError());
    dispatch_vec(m % kVec16 == 0 && aligned16(x) && aligned16(y), [&](auto vec) {
      constexpr bool kVec = decltype(vec)::value;
      constexpr int V = kV<S, kVec>;
      const int64_t vecs = n * c * m / V;
      dispatch_index(vecs, [&](auto index) {
        using I = decltype(index);
        auto run = [&](auto kernel) {
          kernel<<<elementwise_grid(vecs), kThreads, 0, stream>>>(
              xs, mu, rstd, static_cast<const P*>(w), static_cast<const P*>(b), static_cast<S*>(y),
              static_cast<I>(vecs), static_cast<I>(m / V), static_cast<I>(c));
        };
        if (relu)
          run(batch_norm_apply_kernel<S, P, kVec, true, I>);
        else
          run(batch_norm_apply_kernel<S, P, kVec, false, I>);
      });
    });
  });
  EMBER_CUDA_CHECK(cudaGetLastError());
}

void launch_batch_norm_backward(DType dtype, const void* d_y, const void* x, const void* w,
                                const void* mean, const void* invstd, void* d_x, void* d_w,
                                void* d_b, int64_t n, int64_t c, int64_t m, bool training,
                                void* workspace, cudaStream_t stream, bool params_f32, bool relu,
                                const void* b) {
  EMBER_CHECK(batch_norm_supported(dtype, n, c, m),
              "batch_norm backward: the fused kernel does not take (", n, ", ", c, ", ", m, ") of ",
              dtype);
  dispatch_types(dtype, params_f32, "batch_norm backward", [&](auto* tag, auto* ptag) {
    using S = std::remove_pointer_t<decltype(tag)>;
    using P = std::remove_pointer_t<decltype(ptag)>;
    constexpr int kVec16 = Vec16<S>::N;
    const S* dys = static_cast<const S*>(d_y);
    const S* xs = static_cast<const S*>(x);
    const float* mu = static_cast<const float*>(mean);
    const float* rstd = static_cast<const float*>(invstd);
    const int64_t count = n * m;
    float* part = static_cast<float*>(workspace);
    const int64_t s = splits_for(c, count);
    // Eval's d_x needs no sums (nor a workspace): they are only for d_w and d_b there.
    const bool sums = d_w != nullptr || d_b != nullptr || (training && d_x != nullptr);
    EMBER_CHECK(!sums || part != nullptr, "batch_norm backward: no workspace given");
    float* coef = sums ? part + 2 * c * s : nullptr;
    if (sums) {
      dispatch_vec(m % kVec16 == 0 && aligned16(d_y) && aligned16(x), [&](auto vec) {
        constexpr bool kVec = decltype(vec)::value;
        constexpr int V = kV<S, kVec>;
        auto run = [&](auto kernel) {
          kernel<<<dim3(static_cast<unsigned>(c), static_cast<unsigned>(s)), kThreads, 0, stream>>>(
              dys, xs, mu, rstd, static_cast<const P*>(w), static_cast<const P*>(b), c, m,
              static_cast<uint32_t>(count / V), static_cast<uint32_t>(m / V), part);
        };
        if (relu)
          run(batch_norm_backward_reduce_kernel<S, P, kVec, true>);
        else
          run(batch_norm_backward_reduce_kernel<S, P, kVec, false>);
      });
      EMBER_CUDA_CHECK(cudaGetLastError());
      batch_norm_backward_finalize_kernel<P><<<channel_grid(c), 256, 0, stream>>>(
          part, c, s, static_cast<float>(1.0 / static_cast<double>(count)), static_cast<P*>(d_w),
          static_cast<P*>(d_b), coef);
      EMBER_CUDA_CHECK(cudaGetLastError());
    }
    if (d_x == nullptr) return;
    const bool vec = m % kVec16 == 0 && aligned16(d_y) && aligned16(d_x) && aligned16(x);
    dispatch_vec(vec, [&](auto v) {
      constexpr bool kVec = decltype(v)::value;
      constexpr int V = kV<S, kVec>;
      const int64_t vecs = n * c * m / V;
      dispatch_index(vecs, [&](auto index) {
        using I = decltype(index);
        auto run = [&](auto kernel) {
          kernel<<<elementwise_grid(vecs), kThreads, 0, stream>>>(
              dys, xs, static_cast<const P*>(w), static_cast<const P*>(b), mu, rstd, coef,
              static_cast<S*>(d_x), static_cast<I>(vecs), static_cast<I>(m / V), static_cast<I>(c));
        };
        if (training && relu)
          run(batch_norm_backward_dx_kernel<S, P, kVec, true, true, I>);
        else if (training)
          run(batch_norm_backward_dx_kernel<S, P, kVec, true, false, I>);
        else if (relu)
          run(batch_norm_backward_dx_kernel<S, P, kVec, false, true, I>);
        else
          run(batch_norm_backward_dx_kernel<S, P, kVec, false, false, I>);
      });
    });
  });
  EMBER_CUDA_CHECK(cudaGetLastError());
}

// ---------------------------------------------------------------- registration

namespace {
namespace entry {

// On by default; EMBER_BATCH_NORM_FUSED=0 turns them off (batch_norm then composes
// on CUDA too, as the tests' second run and bench_conv --bn-composed do). The meta
// device asks this same predicate, so predict_memory follows the setting.
bool batch_norm_fused_supported(const kernels::BatchNormQuery& q) {
  static const bool on = [] {
    const char* e = std::getenv("EMBER_BATCH_NORM_FUSED");
    return e == nullptr || std::string(e) != "0";
  }();
  return on && batch_norm_supported(q.dtype, q.n, q.c, q.m) &&
         (!q.params_f32 || q.dtype == DType::BFloat16);
}

void batch_norm_fused(const kernels::BatchNormArgs& a) {
  DeviceGuard guard(a.device.index);
  launch_batch_norm(a.dtype, a.x, a.w, a.b, a.running_mean, a.running_var, a.y, a.mean, a.invstd,
                    a.n, a.c, a.m, a.training, a.momentum, a.eps, a.workspace,
                    current_stream(a.device.index), a.params_f32, a.relu);
}

void batch_norm_backward_fused(const kernels::BatchNormBackwardArgs& a) {
  DeviceGuard guard(a.device.index);
  launch_batch_norm_backward(a.dtype, a.d_y, a.x, a.w, a.mean, a.invstd, a.d_x, a.d_w, a.d_b, a.n,
                             a.c, a.m, a.training, a.workspace, current_stream(a.device.index),
                             a.params_f32, a.relu, a.b);
}

// The sizes decide it (no device call): the meta device asks it without a GPU.
size_t batch_norm_workspace_bytes(const kernels::BatchNormQuery& q) {
  return cuda::batch_norm_workspace_bytes(q.dtype, q.n, q.c, q.m);
}

}  // namespace entry
}  // namespace

void register_batch_norm(kernels::KernelFamilies& t) {
  t.batch_norm_fused_supported = &entry::batch_norm_fused_supported;
  t.batch_norm_fused = &entry::batch_norm_fused;
  t.batch_norm_backward_fused = &entry::batch_norm_backward_fused;
  t.batch_norm_workspace_bytes = &entry::batch_norm_workspace_bytes;
}

}  // namespace ember::cuda
