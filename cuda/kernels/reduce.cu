// Reduction CUDA kernels over a contiguous x viewed as (outer, n, inner).
//
// Two kernels cover the layouts that matter:
//  - rows (inner == 1): a warp, or a segment of one as wide as the row, per row
//    when rows are short, one block per row (or per chunk of a row) when long;
//  - columns (inner > 1): a (bx, by) block whose x runs along inner, so a warp
//    reads consecutive addresses, and whose y splits the reduced range.
// When the output is too small to fill the GPU (a loss over a big vector, a bias
// gradient) the reduced range is split into chunks: pass one writes partials
// (outer, chunks, inner) to a workspace, pass two reduces them. The split and
// every summation order depend only on the sizes, so results are bit-identical
// from run to run; there are no atomics.
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "cuda/check.h"
#include "cuda/kernels/kernel_helpers.cuh"
#include "cuda/kernels/reduce.h"
#include "cuda/kernels/registration.h"
#include "cuda/runtime.h"

namespace ember::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kWarp = 32;
constexpr int64_t kTargetBlocks = 1024;  // ~8 resident blocks per SM on an H100/H200
constexpr int64_t kMaxGrid = int64_t{1} << 20;
constexpr int64_t kMinRowChunk = 4096;  // elements per block in a split row pass
constexpr int64_t kMinColRowsPerThread = 16;

__device__ __forceinline__ int64_t min64(int64_t a, int64_t b) {
  return a < b ? a : b;
}

__device__ __forceinline__ float to_compute(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
__device__ __forceinline__ float to_compute(float v) {
  return v;
}
__device__ __forceinline__ double to_compute(double v) {
  return v;
}

template <typename S, typename C>
__device__ __forceinline__ void store(S* p, C v) {
  *p = static_cast<S>(v);
}
template <>
__device__ __forceinline__ void store<__nv_bfloat16, float>(__nv_bfloat16* p, float v) {
  *p = __float2bfloat16_rn(v);
}

// Accumulator of sums: double for float32 (cheap, the kernels are memory-bound)
// and float64, float for bfloat16. Value type of max: what the storage widens to.
template <typename S>
struct SumAccOf {
  using type = double;
};
template <>
struct SumAccOf<__nv_bfloat16> {
  using type = float;
};
template <typename S>
struct ValueOf {
  using type = float;
};
template <>
struct ValueOf<double> {
  using type = double;
};

template <typename C>
struct SumOp {
  using Acc = C;
  __device__ static Acc identity() { return C(0); }
  __device__ static Acc make(C v, int64_t) { return v; }
  __device__ static Acc combine(Acc a, Acc b) { return a + b; }
  __device__ static Acc shfl_down(Acc a, int d, int width) {
    return __shfl_down_sync(0xffffffffu, a, d, width);
  }
};

template <typename C>
struct ValueIndex {
  C v;
  int64_t i;
};

// Max (min when kMin) with its index. The combine is order-independent: NaN beats
// numbers, a larger (smaller) value beats a smaller (larger) one, and equal values
// keep the smaller index.
template <typename C, bool kMin = false>
struct MaxOp {
  using Acc = ValueIndex<C>;
  __device__ static Acc identity() { return Acc{C(kMin ? INFINITY : -INFINITY), INT64_MAX}; }
  __device__ static Acc make(C v, int64_t k) { return Acc{v, k}; }
  __device__ static Acc combine(Acc a, Acc b) {
    const bool a_nan = a.v != a.v, b_nan = b.v != b.v;
    if (a_nan != b_nan) return a_nan ? a : b;
    if (!a_nan && a.v != b.v) return (kMin ? a.v < b.v : a.v > b.v) ? a : b;
    return a.i <= b.i ? a : b;
  }
  __device__ static Acc shfl_down(Acc a, int d, int width) {
    Acc r;
    r.v = __shfl_down_sync(0xffffffffu, a.v, d, width);
    r.i =
        static_cast<int64_t>(__shfl_down_sync(0xffffffffu, static_cast<long long>(a.i), d, width));
    return r;
  }
};

// The first lane of each aligned segment of `width` lanes (a power of two <= 32)
// ends with the combination of its segment, in a fixed tree order. Every lane of
// the warp must call it.
template <typename Op>
__device__ __forceinline__ typename Op::Acc segment_reduce(typename Op::Acc a, int width) {
  for (int d = width / 2; d > 0; d >>= 1) a = Op::combine(a, Op::shfl_down(a, d, width));
  return a;
}

template <typename Op>
__device__ __forceinline__ typename Op::Acc warp_reduce(typename Op::Acc a) {
#pragma unroll
  for (int d = kWarp / 2; d > 0; d >>= 1) a = Op::combine(a, Op::shfl_down(a, d, kWarp));
  return a;
}

// Reads element (o, k, i) of the input: x (outer, n, inner).
template <typename Op, typename S>
struct InputLoader {
  const S* x;
  int64_t n, inner;
  __device__ typename Op::Acc operator()(int64_t o, int64_t k, int64_t i) const {
    return Op::make(to_compute(x[(o * n + k) * inner + i]), k);
  }
};

// Reads partial (o, c, i) of pass one: p (outer, chunks, inner).
template <typename Acc>
struct PartialLoader {
  const Acc* p;
  int64_t chunks, inner;
  __device__ Acc operator()(int64_t o, int64_t c, int64_t i) const {
    return p[(o * chunks + c) * inner + i];
  }
};

template <typename Acc>
struct PartialWriter {
  Acc* p;
  int64_t chunks, inner;
  __device__ void operator()(int64_t o, int64_t c, int64_t i, const Acc& a) const {
    p[(o * chunks + c) * inner + i] = a;
  }
};

// y (outer, inner) = scale * sum.
template <typename S, typename C>
struct SumWriter {
  S* y;
  int64_t inner;
  C scale;
  __device__ void operator()(int64_t o, int64_t, int64_t i, C a) const {
    store(y + o * inner + i, a * scale);
  }
};

// values, indices (outer, inner); either may be null.
template <typename S, typename C>
struct MaxWriter {
  S* values;
  int64_t* indices;
  int64_t inner;
  __device__ void operator()(int64_t o, int64_t, int64_t i, const ValueIndex<C>& a) const {
    if (values != nullptr) store(values + o * inner + i, a.v);
    if (indices != nullptr) indices[o * inner + i] = a.i;
  }
};

// inner == 1. A task is (row o, chunk c): k in [c * chunk_len, min(n, (c+1) * chunk_len)).
// kSegmentPerTask: each aligned segment of `seg` lanes (a power of two <= 32, about
// the row length, so short rows still read whole cache lines) takes a task; else
// the whole block does.
template <typename Op, bool kSegmentPerTask, typename Load, typename Write>
__global__ void __launch_bounds__(kThreads)
    row_reduce_kernel(Load load, Write write, int64_t outer, int64_t n, int64_t chunks,
                      int64_t chunk_len, int seg) {
  using Acc = typename Op::Acc;
  constexpr int kWarps = kThreads / kWarp;
  __shared__ Acc warp_results[kWarps];
  const int lane = threadIdx.x % kWarp;
  const int warp = threadIdx.x / kWarp;
  const int tasks_per_block = kSegmentPerTask ? kThreads / seg : 1;
  const int stride = kSegmentPerTask ? seg : kThreads;
  const int t = kSegmentPerTask ? lane % seg : threadIdx.x;
  const int slot = kSegmentPerTask ? threadIdx.x / seg : 0;
  const int64_t tasks = outer * chunks;
  // The loop bound is uniform across the block, so the barriers below are safe.
  for (int64_t base = blockIdx.x * int64_t{tasks_per_block}; base < tasks;
       base += int64_t{gridDim.x} * tasks_per_block) {
    const int64_t task = base + slot;
    // 64-bit division is slow; most reductions are one chunk per row.
    const int64_t o = chunks == 1 ? task : task / chunks, c = chunks == 1 ? 0 : task % chunks;
    Acc acc = Op::identity();
    if (task < tasks) {
      const int64_t end = min64(n, (c + 1) * chunk_len);
#pragma unroll 4
      for (int64_t k = c * chunk_len + t; k < end; k += stride)
        acc = Op::combine(acc, load(o, k, 0));
    }
    if constexpr (kSegmentPerTask) {
      acc = segment_reduce<Op>(acc, seg);  // outside the branch: every lane shuffles
      if (t == 0 && task < tasks) write(o, c, 0, acc);
    } else {
      acc = warp_reduce<Op>(acc);
      if (lane == 0) warp_results[warp] = acc;
      __syncthreads();
      if (warp == 0) {
        acc = warp_reduce<Op>(lane < kWarps ? warp_results[lane] : Op::identity());
        if (lane == 0) write(o, c, 0, acc);
      }
      __syncthreads();  // warp_results is reused by the next task
    }
  }
}

// inner > 1. Block (bx, by), bx * by == kThreads, both powers of two. A task is
// (o, chunk c, tile of bx columns); thread (tx, ty) sums rows k = begin + ty,
// begin + ty + by, ... of column tile * bx + tx, then the by partials of each
// column meet in a fixed tree in shared memory.
template <typename Op, typename Load, typename Write>
__global__ void __launch_bounds__(kThreads)
    col_reduce_kernel(Load load, Write write, int64_t outer, int64_t n, int64_t inner,
                      int64_t chunks, int64_t chunk_len) {
  using Acc = typename Op::Acc;
  __shared__ Acc partial[kThreads];
  const int bx = blockDim.x, by = blockDim.y, tx = threadIdx.x, ty = threadIdx.y;
  const int64_t tiles = (inner + bx - 1) / bx;
  const int64_t tasks = outer * chunks * tiles;
  for (int64_t task = blockIdx.x; task < tasks; task += gridDim.x) {
    const int64_t tile = task % tiles, rest = task / tiles;
    const int64_t c = rest % chunks, o = rest / chunks;
    const int64_t i = tile * bx + tx;
    Acc acc = Op::identity();
    if (i < inner) {
      const int64_t end = min64(n, (c + 1) * chunk_len);
#pragma unroll 4
      for (int64_t k = c * chunk_len + ty; k < end; k += by) acc = Op::combine(acc, load(o, k, i));
    }
    partial[ty * bx + tx] = acc;
    __syncthreads();
    for (int s = by / 2; s > 0; s >>= 1) {
      if (ty < s)
        partial[ty * bx + tx] = Op::combine(partial[ty * bx + tx], partial[(ty + s) * bx + tx]);
      __syncthreads();
    }
    if (ty == 0 && i < inner) write(o, c, i, partial[tx]);
    __syncthreads();  // partial is reused by the next task
  }
}

// How a reduction of (outer, n, inner) runs; a function of the sizes only.
struct Plan {
  int64_t chunks = 1;
  int64_t chunk_len = 0;
  bool segment_per_task = true;     // rows: `seg` lanes per task, else a block
  int seg = kWarp;                  // rows only
  int bx = 32, by = kThreads / 32;  // columns only
};

Plan plan_for(int64_t outer, int64_t n, int64_t inner, bool allow_split) {
  Plan p;
  p.chunk_len = n;
  int64_t min_chunk = 0, base_tasks = 0;
  if (inner == 1) {
    min_chunk = kMinRowChunk;
    base_tasks = outer;
  } else {
    int bx = 1;
    while (bx < kWarp && bx < inner) bx *= 2;
    p.bx = bx;
    p.by = kThreads / bx;
    min_chunk = kMinColRowsPerThread * p.by;
    base_tasks = outer * ceil_div(inner, bx);
  }
  if (allow_split && base_tasks < kTargetBlocks && n > min_chunk) {
    const int64_t want = ceil_div(kTargetBlocks, base_tasks);
    const int64_t most = ceil_div(n, min_chunk);
    p.chunk_len = ceil_div(n, want < most ? want : most);
    p.chunks = ceil_div(n, p.chunk_len);  // no empty chunk
  }
  p.segment_per_task = p.chunk_len <= 1024;
  while (p.seg > 1 && p.seg / 2 >= p.chunk_len) p.seg /= 2;
  return p;
}

template <typename Op, typename Load, typename Write>
void run_pass(const Plan& p, Load load, Write write, int64_t outer, int64_t n, int64_t inner,
              cudaStream_t stream) {
  if (inner == 1) {
    const int64_t tasks = outer * p.chunks;
    if (p.segment_per_task) {
      const int64_t blocks = ceil_div(tasks, kThreads / p.seg);
      row_reduce_kernel<Op, true>
          <<<static_cast<unsigned>(blocks < kMaxGrid ? blocks : kMaxGrid), kThreads, 0, stream>>>(
              load, write, outer, n, p.chunks, p.chunk_len, p.seg);
    } else {
      row_reduce_kernel<Op, false>
          <<<static_cast<unsigned>(tasks < kMaxGrid ? tasks : kMaxGrid), kThreads, 0, stream>>>(
              load, write, outer, n, p.chunks, p.chunk_len, kWarp);
    }
  } else {
    const int64_t tasks = outer * p.chunks * ceil_div(inner, p.bx);
    col_reduce_kernel<Op>
        <<<static_cast<unsigned>(tasks < kMaxGrid ? tasks : kMaxGrid), dim3(p.bx, p.by), 0,
           stream>>>(load, write, outer, n, inner, p.chunks, p.chunk_len);
  }
  EMBER_CUDA_CHECK(cudaGetLastError());
}

// One or two passes; `write` receives the final (o, i) results.
template <typename Op, typename S, typename Write>
void reduce(const S* x, Write write, int64_t outer, int64_t n, int64_t inner, void* workspace,
            cudaStream_t stream) {
  using Acc = typename Op::Acc;
  if (outer == 0 || inner == 0) return;
  const Plan p = plan_for(outer, n, inner, true);
  const InputLoader<Op, S> load{x, n, inner};
  if (p.chunks == 1) {
    run_pass<Op>(p, load, write, outer, n, inner, stream);
    return;
  }
  EMBER_CHECK(workspace != nullptr, "reduce: a two-pass reduction of (", outer, ", ", n, ", ",
              inner, ") needs a workspace (see reduce_workspace_bytes)");
  Acc* partials = static_cast<Acc*>(workspace);
  run_pass<Op>(p, load, PartialWriter<Acc>{partials, p.chunks, inner}, outer, n, inner, stream);
  const Plan p2 = plan_for(outer, p.chunks, inner, false);
  run_pass<Op>(p2, PartialLoader<Acc>{partials, p.chunks, inner}, write, outer, p.chunks, inner,
               stream);
}

template <typename S>
__global__ void max_backward_kernel(const S* d_out, const int64_t* indices, S* d_inp, int64_t outer,
                                    int64_t n, int64_t inner) {
  using C = decltype(to_compute(S{}));
  const int64_t total = outer * n * inner;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < total;
       e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = e % inner, rest = e / inner;
    const int64_t k = rest % n, o = rest / n;
    const int64_t oi = o * inner + i;
    store(d_inp + e, indices[oi] == k ? to_compute(d_out[oi]) : C(0));
  }
}

}  // namespace

size_t reduce_workspace_bytes(ReduceKind kind, DType dtype, int64_t outer, int64_t n,
                              int64_t inner) {
  if (outer == 0 || inner == 0 || n == 0) return 0;
  const Plan p = plan_for(outer, n, inner, true);
  if (p.chunks == 1) return 0;
  size_t acc = 0;
  dispatch_float(dtype, "reduce", [&](auto* tag) {
    using S = std::remove_pointer_t<decltype(tag)>;
    acc = kind == ReduceKind::Sum ? sizeof(typename SumAccOf<S>::type)
                                  : sizeof(ValueIndex<typename ValueOf<S>::type>);
  });
  return static_cast<size_t>(outer * p.chunks * inner) * acc;
}

void launch_sum(DType dtype, const void* x, void* y, int64_t outer, int64_t n, int64_t inner,
                double scale, void* workspace, cudaStream_t stream) {
  dispatch_float(dtype, "sum", [&](auto* tag) {
    using S = std::remove_pointer_t<decltype(tag)>;
    using C = typename SumAccOf<S>::type;
    reduce<SumOp<C>>(static_cast<const S*>(x),
                     SumWriter<S, C>{static_cast<S*>(y), inner, static_cast<C>(scale)}, outer, n,
                     inner, workspace, stream);
  });
}

void launch_max(DType dtype, const void* x, void* values, int64_t* indices, int64_t outer,
                int64_t n, int64_t inner, void* workspace, cudaStream_t stream, bool min) {
  dispatch_float(dtype, min ? "min" : "max", [&](auto* tag) {
    using S = std::remove_pointer_t<decltype(tag)>;
    using C = typename ValueOf<S>::type;
    const MaxWriter<S, C> write{static_cast<S*>(values), indices, inner};
    if (min)
      reduce<MaxOp<C, true>>(static_cast<const S*>(x), write, outer, n, inner, workspace, stream);
    else
      reduce<MaxOp<C>>(static_cast<const S*>(x), write, outer, n, inner, workspace, stream);
  });
}

void launch_max_backward(DType dtype, const void* d_out, const int64_t* indices, void* d_inp,
                         int64_t outer, int64_t n, int64_t inner, cudaStream_t stream) {
  const int64_t total = outer * n * inner;
  if (total == 0) return;
  const int64_t blocks = ceil_div(total, kThreads);
  dispatch_float(dtype, "max backward", [&](auto* tag) {
    using S = std::remove_pointer_t<decltype(tag)>;
    max_backward_kernel<S>
        <<<static_cast<unsigned>(blocks < kMaxGrid ? blocks : kMaxGrid), kThreads, 0, stream>>>(
            static_cast<const S*>(d_out), indices, static_cast<S*>(d_inp), outer, n, inner);
  });
  EMBER_CUDA_CHECK(cudaGetLastError());
}

// ------------------------------------------------------------------ registration

namespace {
namespace entry {

void sum(const kernels::SumArgs& a) {
  DeviceGuard guard(a.device.index);
  launch_sum(a.dtype, a.x, a.y, a.outer, a.n, a.inner,
             a.mean ? 1.0 / static_cast<double>(a.n) : 1.0, a.workspace,
             current_stream(a.device.index));
}
size_t sum_workspace_bytes(const kernels::ReduceShape& s) {
  return reduce_workspace_bytes(ReduceKind::Sum, s.dtype, s.outer, s.n, s.inner);
}

void max(const kernels::MaxArgs& a) {
  DeviceGuard guard(a.device.index);
  launch_max(a.dtype, a.x, a.values, a.indices, a.outer, a.n, a.inner, a.workspace,
             current_stream(a.device.index), a.min);
}
size_t max_workspace_bytes(const kernels::ReduceShape& s) {
  return reduce_workspace_bytes(ReduceKind::Max, s.dtype, s.outer, s.n, s.inner);
}

void max_backward(const kernels::MaxBackwardArgs& a) {
  DeviceGuard guard(a.device.index);
  launch_max_backward(a.dtype, a.d_out, a.indices, a.d_inp, a.outer, a.n, a.inner,
                      current_stream(a.device.index));
}

}  // namespace entry
}  // namespace

void register_reduce(kernels::KernelFamilies& t) {
  t.sum = &entry::sum;
  t.sum_workspace_bytes = &entry::sum_workspace_bytes;
  t.max = &entry::max;
  t.max_workspace_bytes = &entry::max_workspace_bytes;
  t.max_backward = &entry::max_backward;
}

}  // namespace ember::cuda
