// Fused cross-entropy (see cross_entropy.h): one read of the logits and one write
// of their gradient (its floor and measurements: benchmarks/NOTES.md).
//
// A row lives in registers: a block of kThreads threads holds kItems logits per
// thread (16-byte vector loads where the row allows; up to 8192 logits in a
// 512-thread block, 16384 past that, two blocks to an SM), and a longer row is split
// over a thread block cluster (up to 8 blocks, Hopper's distributed shared
// memory), so each logit is read from memory exactly once.
// Each block reduces its part of the row with cub::BlockReduce to (maximum, sum of
// exp(x - maximum), sum of x); the blocks of a cluster exchange those three
// numbers through distributed shared memory and combine them in rank order, so
// every block knows the row's log-sum-exp; then each writes the gradient of its
// part from the registers it already holds. The per-row losses go to a workspace
// and one block adds them in row order: the same input gives the same bits.
// For Mean, a first small kernel counts the targets not ignored, so the row
// kernel can scale the gradient by 1 / count in the same pass.
#include <cooperative_groups.h>
#include <cuda_bf16.h>

#include <cub/block/block_reduce.cuh>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/base/env_switch.h"
#include "cuda/check.h"
#include "cuda/device_error.h"
#include "cuda/kernels/cross_entropy.h"
#include "cuda/kernels/device_error.cuh"
#include "cuda/kernels/kernel_helpers.cuh"
#include "cuda/kernels/registration.h"
#include "cuda/kernels/vec16.cuh"
#include "cuda/runtime.h"

namespace ember::cuda {

namespace {

namespace cg = cooperative_groups;

constexpr int kMaxCluster = 8;  // the portable cluster size
constexpr int kFinishThreads = 1024;

// A block's part of a row: its maximum, sum of exp(x - maximum) and sum of x.
struct RowStats {
  float m, s, sx;
};

struct MaxOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct Sum2 {
  __device__ __forceinline__ float2 operator()(const float2& a, const float2& b) const {
    return make_float2(a.x + b.x, a.y + b.y);
  }
};

// The workspace: the count of targets not ignored (Mean), 1 / count, the rows' losses.
struct Workspace {
  double* count;
  float* scale;
  float* losses;
};
Workspace workspace_of(void* p) {
  char* c = static_cast<char*>(p);
  return {reinterpret_cast<double*>(c), reinterpret_cast<float*>(c + 8),
          reinterpret_cast<float*>(c + 16)};
}

// count = targets that are neither ignore_index nor out of range; scale = 1 / count
// (0 when there is none: every gradient row is then zero).
__global__ void __launch_bounds__(kFinishThreads)
    count_kernel(const int64_t* __restrict__ target, int64_t rows, int64_t classes,
                 int64_t ignore_index, double* count, float* scale) {
  using BlockReduce = cub::BlockReduce<long long, kFinishThreads>;
  __shared__ typename BlockReduce::TempStorage temp;
  long long n = 0;
  for (int64_t r = threadIdx.x; r < rows; r += kFinishThreads) {
    const int64_t t = target[r];
    n += t != ignore_index && t >= 0 && t < classes;
  }
  n = BlockReduce(temp).Sum(n);
  if (threadIdx.x == 0) {
    *count = static_cast<double>(n);
    *scale = n > 0 ? static_cast<float>(1.0 / static_cast<double>(n)) : 0.f;
  }
}

// One block, or one cluster of `cluster` blocks, per row; blockIdx.x = row * cluster
// + rank. losses[row] is written by rank 0.
template <typename S, int kThreads, int kItems, bool kVec>
// 512-thread blocks: two per multiprocessor (64 registers a thread); 1024: one.
__global__ void __launch_bounds__(kThreads, kThreads >= 512 ? 1024 / kThreads : 1)
    cross_entropy_kernel(const S* __restrict__ logits, const int64_t* __restrict__ target,
                         S* __restrict__ d_logits, float* __restrict__ losses, int64_t classes,
                         int64_t ignore_index, float ls, const float* __restrict__ scale_ptr,
                         int cluster, DeviceErrorRecord* err, const char* op) {
  constexpr int V = kVec ? Vec16<S>::N : 1;
  constexpr int NV = kItems / V;
  static_assert(kItems % V == 0, "items per thread must be whole vectors");
  using BlockMax = cub::BlockReduce<float, kThreads>;
  using BlockSum = cub::BlockReduce<float2, kThreads>;
  __shared__ union {
    typename BlockMax::TempStorage max;
    typename BlockSum::TempStorage sum;
  } temp;
  __shared__ RowStats part;   // this block's, read by the cluster's other blocks
  __shared__ RowStats whole;  // the row's
  __shared__ float sh_max;

  const int64_t row = blockIdx.x / cluster;
  const int rank = static_cast<int>(blockIdx.x % cluster);
  const int64_t begin = static_cast<int64_t>(rank) * kThreads * kItems;  // first column here
  const int64_t limit = classes - begin;  // columns of the row from `begin` on
  const S* xr = logits + row * classes + begin;

  // Load: x[j * V + v] is column begin + (j * kThreads + t) * V + v; -inf past the row.
  float x[kItems];
#pragma unroll
  for (int j = 0; j < NV; ++j) {
    const int64_t c = (static_cast<int64_t>(j) * kThreads + threadIdx.x) * V;
    if (c < limit) {  // whole vectors: classes % V == 0 when kVec
      if constexpr (kVec)
        Vec16<S>::unpack(__ldcs(reinterpret_cast<const uint4*>(xr + c)), x + j * V);
      else
        x[j] = widen(xr[c]);
    } else {
#pragma unroll
      for (int v = 0; v < V; ++v) x[j * V + v] = -INFINITY;
    }
  }

  // This block's maximum, then its sums (columns past the row add nothing).
  float m = -INFINITY;
#pragma unroll
  for (int i = 0; i < kItems; ++i) m = fmaxf(m, x[i]);
  m = BlockMax(temp.max).Reduce(m, MaxOp());
  if (threadIdx.x == 0) sh_max = m;
  __syncthreads();
  m = sh_max;
  float2 sums = make_float2(0.f, 0.f);
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    const int64_t c = (static_cast<int64_t>(i / V) * kThreads + threadIdx.x) * V + i % V;
    if (c < limit) {
      if (x[i] != -INFINITY) sums.x += expf(x[i] - m);  // a masked logit adds nothing
      sums.y += x[i];
    }
  }
  sums = BlockSum(temp.sum).Reduce(sums, Sum2());
  if (threadIdx.x == 0) part = RowStats{m, sums.x, sums.y};

  // The row's statistics: this block's, or the cluster's combined in rank order.
  if (cluster == 1) {
    __syncthreads();
    if (threadIdx.x == 0) whole = part;
    __syncthreads();
  } else {
    cg::cluster_group cl = cg::this_cluster();
    cl.sync();  // every block's `part` is written
    if (threadIdx.x == 0) {
      RowStats all{-INFINITY, 0.f, 0.f};
      for (int r = 0; r < cluster; ++r) all.m = fmaxf(all.m, cl.map_shared_rank(&part, r)->m);
      for (int r = 0; r < cluster; ++r) {
        const RowStats* p = cl.map_shared_rank(&part, r);
        all.s += p->s * expf(p->m - all.m);
        all.sx += p->sx;
      }
      whole = all;
    }
    cl.sync();  // no block leaves (taking its `part` with it) before all have read
  }
  const float lse = whole.m + logf(whole.s);

  const int64_t t = target[row];
  const bool ignored = t == ignore_index;
  const bool bad = !ignored && (t < 0 || t >= classes);
  const bool skip = ignored || bad;
  if (rank == 0 && threadIdx.x == 0) {
    if (bad) record_device_error(err, op, kBadTarget, t, classes);
    const float x_t = skip ? 0.f : widen(logits[row * classes + t]);
    // The smoothing term only with smoothing: a masked (-inf) logit makes the row's
    // sum -inf, and 0 * inf would turn a finite loss into NaN.
    const float smoothing = ls > 0.f ? ls * (lse - whole.sx / static_cast<float>(classes)) : 0.f;
    losses[row] = skip ? 0.f : (1.f - ls) * (lse - x_t) + smoothing;
  }
  if (d_logits == nullptr) return;

  // The gradient of this block's part, from the registers.
  const float scale = skip ? 0.f : (scale_ptr != nullptr ? *scale_ptr : 1.f);
  const float smooth = ls / static_cast<float>(classes);
  const int64_t t_here = t - begin;  // the target's column within this part
  S* dr = d_logits + row * classes + begin;
#pragma unroll
  for (int j = 0; j < NV; ++j) {
    const int64_t c = (static_cast<int64_t>(j) * kThreads + threadIdx.x) * V;
    if (c < limit) {
      float g[V];
#pragma unroll
      for (int v = 0; v < V; ++v) {
        const float hit = c + v == t_here ? 1.f - ls : 0.f;
        g[v] = scale * (expf(x[j * V + v] - lse) - smooth - hit);
      }
      if constexpr (kVec)
        __stcs(reinterpret_cast<uint4*>(dr + c), Vec16<S>::pack(g));
      else
        dr[c] = narrow<S>(g[0]);
    }
  }
}

// ---- long rows streamed (CrossEntropyShape::Stream; Auto past 8192 classes) ----
// The kernel above holds a row in registers and makes each SM run two big blocks
// through load, reductions, cluster barriers and store in turn: on an H100 it moved
// GPT-2's 50,304-class bfloat16 rows at 1.5 TB/s (ncu, 44% of DRAM peak). Here a block of
// kStreamThreads owns a row and reads it twice: pass one keeps each thread's running
// (maximum, sum of exp, sum of x) over its vectors; pass two, after one block reduction,
// reads the row again, last vector first (the part most recently read, most likely
// still in L2), and writes the gradient with streaming stores. Blocks of 512 threads
// (60-64 registers in ptxas -v, sm_90: two to an SM) keep the rows in flight (264 on 132
// SMs: 26 MB of GPT-2's) within L2, so the second read mostly comes from there, and
// while one block reduces the other streams. kUnroll vectors are loaded before any is
// used, for loads in flight.
constexpr int kStreamThreads = 512;
std::atomic<int> g_stream{-1};  // -1: EMBER_CROSS_ENTROPY_STREAM not read yet
constexpr int kUnroll = 4;

// (m, s, sx) of two parts: the sums of exp rescaled to the larger maximum.
struct CombineStats {
  __device__ __forceinline__ RowStats operator()(const RowStats& a, const RowStats& b) const {
    const float m = fmaxf(a.m, b.m);
    if (m == -INFINITY) return {m, 0.f, a.sx + b.sx};
    return {m, a.s * expf(a.m - m) + b.s * expf(b.m - m), a.sx + b.sx};
  }
};

template <typename S, bool kVec>
struct StreamIO {
  static constexpr int V = kVec ? Vec16<S>::N : 1;
  using Raw = std::conditional_t<kVec, uint4, S>;
  __device__ static Raw load(const S* row, int64_t j) {
    if constexpr (kVec)
      return reinterpret_cast<const uint4*>(row)[j];
    else
      return row[j];
  }
  __device__ static Raw load_last(const S* row, int64_t j) {  // evict-first: its last read
    if constexpr (kVec)
      return __ldcs(reinterpret_cast<const uint4*>(row) + j);
    else
      return row[j];
  }
  __device__ static void unpack(const Raw& r, float (&x)[V]) {
    if constexpr (kVec)
      Vec16<S>::unpack(r, x);
    else
      x[0] = widen(r);
  }
  __device__ static void store(S* row, int64_t j, const float (&g)[V]) {
    if constexpr (kVec)
      __stcs(reinterpret_cast<uint4*>(row) + j, Vec16<S>::pack(g));
    else
      row[j] = narrow<S>(g[0]);
  }
};

template <typename S, bool kVec>
__global__ void __launch_bounds__(kStreamThreads, 2)
    cross_entropy_stream_kernel(const S* __restrict__ logits, const int64_t* __restrict__ target,
                                S* __restrict__ d_logits, float* __restrict__ losses,
                                int64_t classes, int64_t ignore_index, float ls,
                                const float* __restrict__ scale_ptr, DeviceErrorRecord* err,
                                const char* op) {
  using IO = StreamIO<S, kVec>;
  constexpr int V = IO::V;
  using BlockReduce = cub::BlockReduce<RowStats, kStreamThreads>;
  __shared__ typename BlockReduce::TempStorage temp;
  __shared__ RowStats whole;
  const int64_t row = blockIdx.x;
  const S* xr = logits + row * classes;
  const int64_t nvec = classes / V;  // classes % V == 0 when kVec

  // Pass one: this thread's vectors j = t, t + kStreamThreads, ..., kUnroll at a time.
  RowStats st{-INFINITY, 0.f, 0.f};
  auto take = [&](const typename IO::Raw& raw) {
    float x[V];
    IO::unpack(raw, x);
    float vm = x[0];
#pragma unroll
    for (int v = 1; v < V; ++v) vm = fmaxf(vm, x[v]);
    if (vm > st.m) {  // rescale the sum to the new maximum (exp(-inf) = 0 at the start)
      st.s *= expf(st.m - vm);
      st.m = vm;
    }
#pragma unroll
    for (int v = 0; v < V; ++v) {
      if (x[v] != -INFINITY) st.s += expf(x[v] - st.m);  // a masked logit adds nothing
      st.sx += x[v];
    }
  };
  constexpr int64_t kStep = int64_t{kStreamThreads} * kUnroll;
  int64_t j0 = threadIdx.x;
  for (; j0 + (kUnroll - 1) * kStreamThreads < nvec; j0 += kStep) {
    typename IO::Raw raw[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) raw[u] = IO::load(xr, j0 + u * kStreamThreads);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) take(raw[u]);
  }
  for (int64_t j = j0; j < nvec; j += kStreamThreads) take(IO::load(xr, j));

  const RowStats all = BlockReduce(temp).Reduce(st, CombineStats());
  if (threadIdx.x == 0) whole = all;
  __syncthreads();
  const float lse = whole.m + logf(whole.s);

  const int64_t t = target[row];
  const bool ignored = t == ignore_index;
  const bool bad = !ignored && (t < 0 || t >= classes);
  const bool skip = ignored || bad;
  if (threadIdx.x == 0) {
    if (bad) record_device_error(err, op, kBadTarget, t, classes);
    const float x_t = skip ? 0.f : widen(xr[t]);
    // As the register kernel: the smoothing term only with smoothing (a masked logit
    // makes the row's sum -inf, and 0 * inf is NaN).
    const float smoothing = ls > 0.f ? ls * (lse - whole.sx / static_cast<float>(classes)) : 0.f;
    losses[row] = skip ? 0.f : (1.f - ls) * (lse - x_t) + smoothing;
  }
  if (d_logits == nullptr) return;

  // Pass two, from the row's end: the gradient of each vector.
  const float scale = skip ? 0.f : (scale_ptr != nullptr ? *scale_ptr : 1.f);
  const float smooth = ls / static_cast<float>(classes);
  S* dr = d_logits + row * classes;
  auto give = [&](int64_t j, const typename IO::Raw& raw) {
    float x[V];
    IO::unpack(raw, x);
#pragma unroll
    for (int v = 0; v < V; ++v) {
      const float hit = j * V + v == t ? 1.f - ls : 0.f;
      x[v] = scale * (expf(x[v] - lse) - smooth - hit);
    }
    IO::store(dr, j, x);
  };
  // Vector nvec - 1 - i for i = t, t + kStreamThreads, ... (each element's gradient is
  // its own: the order changes no bit).
  int64_t i0 = threadIdx.x;
  for (; i0 + (kUnroll - 1) * kStreamThreads < nvec; i0 += kStep) {
    typename IO::Raw raw[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      raw[u] = IO::load_last(xr, nvec - 1 - (i0 + u * kStreamThreads));
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) give(nvec - 1 - (i0 + u * kStreamThreads), raw[u]);
  }
  for (int64_t i = i0; i < nvec; i += kStreamThreads)
    give(nvec - 1 - i, IO::load_last(xr, nvec - 1 - i));
}

// loss = the rows' losses (None), or their sum in row order (divided by the count
// for Mean: 0 / 0 is NaN, as PyTorch's mean of nothing).
template <typename S>
__global__ void __launch_bounds__(kFinishThreads)
    finish_kernel(const float* __restrict__ losses, int64_t rows, const double* count,
                  Reduction reduction, S* __restrict__ loss) {
  if (reduction == Reduction::None) {
    for (int64_t r = blockIdx.x * int64_t{kFinishThreads} + threadIdx.x; r < rows;
         r += int64_t{gridDim.x} * kFinishThreads)
      loss[r] = narrow<S>(losses[r]);
    return;
  }
  using BlockReduce = cub::BlockReduce<double, kFinishThreads>;
  __shared__ typename BlockReduce::TempStorage temp;
  double acc = 0.0;
  for (int64_t r = threadIdx.x; r < rows; r += kFinishThreads) acc += losses[r];
  acc = BlockReduce(temp).Sum(acc);
  if (threadIdx.x == 0)
    loss[0] = narrow<S>(static_cast<float>(reduction == Reduction::Mean ? acc / *count : acc));
}

// Block shapes: a block holds kThreads * kItems logits of a row.
template <int T, int I>
struct Cfg {
  static constexpr int kThreads = T;
  static constexpr int kItems = I;
  static constexpr int64_t kChunk = int64_t{T} * I;
};
using Small = Cfg<128, 8>;    // rows up to 1024 classes, one block
using Mid = Cfg<256, 16>;     // up to 4096, one block
using Medium = Cfg<512, 16>;  // 8192 per block, up to 8 blocks: 65536 classes
using Large = Cfg<1024, 16>;  // 16384 per block, up to 8 blocks: 131072 classes
using Wide = Cfg<512, 32>;    // 16384 per block in 512 threads: rows past 8192

template <typename F>
void dispatch_cfg(int64_t classes, CrossEntropyShape shape, F&& f) {
  switch (shape) {
    case CrossEntropyShape::T512x16:
      return f(Medium{});
    case CrossEntropyShape::T1024x16:
      return f(Large{});
    case CrossEntropyShape::T512x32:
      return f(Wide{});
    case CrossEntropyShape::Auto:
    case CrossEntropyShape::Stream:  // not a block shape: run_typed takes it first
      break;
  }
  // Rows past one 512 x 16 block: 512 threads x 32 logits, two blocks per SM, in
  // half the cluster blocks of 512 x 16 (measured fastest of the three at 32768
  // classes on an H200 in both dtypes, despite its register spills: the times are
  // in benchmarks/NOTES.md).
  if (classes > Medium::kChunk)
    f(Wide{});
  else if (classes > Mid::kChunk)
    f(Medium{});
  else if (classes > Small::kChunk)
    f(Mid{});
  else
    f(Small{});
}

template <typename S>
void run_typed(const char* op, const S* logits, const int64_t* target, S* d_logits, S* loss,
               int64_t rows, int64_t classes, int64_t ignore_index, float ls, Reduction reduction,
               const Workspace& ws, cudaStream_t stream, CrossEntropyShape shape) {
  if (reduction == Reduction::Mean) {
    count_kernel<<<1, kFinishThreads, 0, stream>>>(target, rows, classes, ignore_index, ws.count,
                                                   ws.scale);
    EMBER_CUDA_CHECK(cudaGetLastError());
  }
  constexpr int64_t kV = 16 / sizeof(S);
  const bool vec =
      classes % kV == 0 && aligned16(logits) && (d_logits == nullptr || aligned16(d_logits));
  DeviceErrorRecord* err = device_error_record(current_device());
  const float* scale = reduction == Reduction::Mean ? ws.scale : nullptr;
  const bool streamed =
      shape == CrossEntropyShape::Stream ||
      (shape == CrossEntropyShape::Auto && classes > Medium::kChunk && cross_entropy_stream());
  if (streamed) {
    const auto kernel =
        vec ? cross_entropy_stream_kernel<S, true> : cross_entropy_stream_kernel<S, false>;
    kernel<<<static_cast<unsigned>(rows), kStreamThreads, 0, stream>>>(
        logits, target, d_logits, ws.losses, classes, ignore_index, ls, scale, err, op);
  } else {
    dispatch_cfg(classes, shape, [&](auto cfg) {
      using C = decltype(cfg);
      const int cluster = static_cast<int>(ceil_div(classes, C::kChunk));
      EMBER_CHECK(cluster <= kMaxCluster, op, ": ", classes, " classes do not fit a cluster of ",
                  kMaxCluster, " blocks of ", C::kChunk);
      auto launch = [&](auto kernel) {
        if (cluster == 1) {
          kernel<<<static_cast<unsigned>(rows), C::kThreads, 0, stream>>>(
              logits, target, d_logits, ws.losses, classes, ignore_index, ls, scale, 1, err, op);
          return;
        }
        cudaLaunchConfig_t config = {};
        config.gridDim = dim3(static_cast<unsigned>(rows * cluster));
        config.blockDim = dim3(C::kThreads);
        config.dynamicSmemBytes = 0;
        config.stream = stream;
        cudaLaunchAttribute attr[1];
        attr[0].id = cudaLaunchAttributeClusterDimension;
        attr[0].val.clusterDim.x = static_cast<unsigned>(cluster);
        attr[0].val.clusterDim.y = 1;
        attr[0].val.clusterDim.z = 1;
        config.attrs = attr;
        config.numAttrs = 1;
        EMBER_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, logits, target, d_logits, ws.losses,
                                            classes, ignore_index, ls, scale, cluster, err, op));
      };
      if (vec)
        launch(cross_entropy_kernel<S, C::kThreads, C::kItems, true>);
      else
        launch(cross_entropy_kernel<S, C::kThreads, C::kItems, false>);
    });
  }
  EMBER_CUDA_CHECK(cudaGetLastError());
  const unsigned finish_blocks =
      reduction == Reduction::None
          ? static_cast<unsigned>(std::min<int64_t>(ceil_div(rows, kFinishThreads), 4096))
          : 1;
  finish_kernel<S>
      <<<finish_blocks, kFinishThreads, 0, stream>>>(ws.losses, rows, ws.count, reduction, loss);
  EMBER_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

bool cross_entropy_stream() {
  return env_switch(g_stream, "EMBER_CROSS_ENTROPY_STREAM", true);
}

void set_cross_entropy_stream(bool on) {
  g_stream.store(on ? 1 : 0, std::memory_order_relaxed);
}

bool cross_entropy_supported(DType dtype, int64_t classes) {
  return (dtype == DType::Float32 || dtype == DType::BFloat16) && classes >= 1 &&
         classes <= kMaxCluster * Wide::kChunk;
}

size_t cross_entropy_workspace_bytes(int64_t rows) {
  return 16 + static_cast<size_t>(rows) * sizeof(float);
}

void launch_cross_entropy(DType dtype, const char* op, const void* logits, const int64_t* target,
                          void* d_logits, void* loss, int64_t rows, int64_t classes,
                          int64_t ignore_index, double label_smoothing, Reduction reduction,
                          void* workspace, cudaStream_t stream, CrossEntropyShape shape) {
  EMBER_CHECK(cross_entropy_supported(dtype, classes), op, ": the fused kernel does not take ",
              classes, " classes of ", dtype);
  const Workspace ws = workspace_of(workspace);
  const float ls = static_cast<float>(label_smoothing);
  if (rows == 0) {  // nothing to read; the loss of nothing (0, or NaN for Mean)
    if (reduction != Reduction::None) {
      EMBER_CUDA_CHECK(cudaMemsetAsync(ws.count, 0, sizeof(double), stream));
      if (dtype == DType::Float32)
        finish_kernel<float><<<1, kFinishThreads, 0, stream>>>(ws.losses, 0, ws.count, reduction,
                                                               static_cast<float*>(loss));
      else
        finish_kernel<__nv_bfloat16><<<1, kFinishThreads, 0, stream>>>(
            ws.losses, 0, ws.count, reduction, static_cast<__nv_bfloat16*>(loss));
      EMBER_CUDA_CHECK(cudaGetLastError());
    }
    return;
  }
  if (dtype == DType::Float32)
    run_typed(op, static_cast<const float*>(logits), target, static_cast<float*>(d_logits),
              static_cast<float*>(loss), rows, classes, ignore_index, ls, reduction, ws, stream,
              shape);
  else
    run_typed(op, static_cast<const __nv_bfloat16*>(logits), target,
              static_cast<__nv_bfloat16*>(d_logits), static_cast<__nv_bfloat16*>(loss), rows,
              classes, ignore_index, ls, reduction, ws, stream, shape);
}

// ------------------------------------------------------------------ registration

namespace {
namespace entry {

bool cross_entropy_fused_supported(const kernels::CrossEntropyQuery& q) {
  return cross_entropy_supported(q.dtype, q.classes);
}

void cross_entropy_fused(const kernels::CrossEntropyArgs& a) {
  DeviceGuard guard(a.device.index);
  launch_cross_entropy(a.dtype, a.op, a.logits, a.target, a.d_logits, a.loss, a.rows, a.classes,
                       a.ignore_index, a.label_smoothing, a.reduction, a.workspace,
                       current_stream(a.device.index));
}

size_t cross_entropy_workspace_bytes(const kernels::CrossEntropyQuery& q) {
  return cuda::cross_entropy_workspace_bytes(q.rows);
}

}  // namespace entry
}  // namespace

void register_cross_entropy(kernels::KernelFamilies& t) {
  t.cross_entropy_fused_supported = &entry::cross_entropy_fused_supported;
  t.cross_entropy_fused = &entry::cross_entropy_fused;
  t.cross_entropy_workspace_bytes = &entry::cross_entropy_workspace_bytes;
}

}  // namespace ember::cuda
