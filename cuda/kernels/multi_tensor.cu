// Multi-tensor kernels: the norm of many tensors together, their scaling, and
// float32-to-bfloat16 casts of many tensors (autocast's weights) in one launch.
//
// The tensor table (pointers, sizes, dtypes and where each tensor's chunks start)
// is a kernel parameter (__grid_constant__). Each block takes one chunk of one
// tensor, found by a binary search over the chunk starts. The norm kernel leaves
// one partial per chunk in the workspace (a CUB block reduction of the chunk's
// terms); a single block then combines the partials, each thread a fixed strided
// subset in index order and CUB's block reduction over the threads, so the same
// tensors give the same bits on every run. The per-element math is
// core/base/multi_tensor.h, the CPU loop's.
#include <cuda_bf16.h>

#include <cub/block/block_reduce.cuh>

#include "core/base/error.h"
#include "cuda/check.h"
#include "cuda/kernels/kernel_helpers.cuh"
#include "cuda/kernels/multi_tensor.h"
#include "cuda/kernels/registration.h"
#include "cuda/runtime.h"

namespace ember::cuda {

namespace {

constexpr int kThreads = 512;
constexpr int64_t kChunk = 64 * 1024;  // elements per block
constexpr int kSpans = static_cast<int>(kMultiTensorSpansPerLaunch);

struct SpanBatch {
  void* data[kSpans];
  int64_t numel[kSpans];
  int64_t first_chunk[kSpans + 1];  // the chunk where tensor i starts; [count]: the total
  uint8_t dtype[kSpans];
  int count;
  int64_t partial_offset;  // where this launch's partials start in the workspace
};
static_assert(sizeof(SpanBatch) + 64 <= 4000, "the batch must fit the kernel parameter space");

__device__ int span_of(const SpanBatch& b, int64_t chunk) {
  int lo = 0, hi = b.count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (b.first_chunk[mid] <= chunk)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

// A chunk [begin, end) of tensor data (storage type T) element by element, f(i, x) for
// each element x (as double) at index i, as 16-byte vectors where the chunk starts
// 16-byte aligned (chunks start at multiples of kChunk elements, so the tensor's
// address decides), kUnroll of them in flight per thread, then the rest one at a time.
// Thread t takes the vectors t, t + kThreads, ...: a fixed order, so a reduction over
// them gives the same bits every run.
constexpr int kUnroll = 4;

template <typename T, typename F>
__device__ __forceinline__ void for_chunk(const T* x, int64_t begin, int64_t end, F&& f) {
  constexpr int V = 16 / static_cast<int>(sizeof(T));
  if (aligned16(x + begin)) {
    const int64_t packs = (end - begin) / V;
    const uint4* xv = reinterpret_cast<const uint4*>(x + begin);
    for (int64_t q0 = threadIdx.x; q0 < packs; q0 += int64_t{kThreads} * kUnroll) {
      uint4 r[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t q = q0 + int64_t{u} * kThreads;
        if (q < packs) r[u] = xv[q];
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t q = q0 + int64_t{u} * kThreads;
        if (q >= packs) break;
        const T* e = reinterpret_cast<const T*>(&r[u]);
#pragma unroll
        for (int j = 0; j < V; ++j) f(begin + q * V + j, static_cast<double>(widen(e[j])));
      }
    }
    begin += packs * V;
  }
  for (int64_t i = begin + threadIdx.x; i < end; i += kThreads)
    f(i, static_cast<double>(widen(x[i])));
}

// f.template operator()<T>() with the storage type of `dtype`.
template <typename F>
__device__ __forceinline__ void with_storage(uint8_t dtype, F&& f) {
  switch (static_cast<DType>(dtype)) {
    case DType::Float64:
      return f.template operator()<double>();
    case DType::BFloat16:
      return f.template operator()<__nv_bfloat16>();
    default:
      return f.template operator()<float>();
  }
}

struct Combine {
  NormKind kind;
  __device__ double operator()(double a, double b) const { return norm_combine(kind, a, b); }
};

using BlockReduce = cub::BlockReduce<double, kThreads>;

__global__ void __launch_bounds__(kThreads)
    norm_partials_kernel(const __grid_constant__ SpanBatch batch, NormKind kind, double p,
                         double* partials) {
  __shared__ typename BlockReduce::TempStorage temp;
  const int64_t chunk = blockIdx.x;
  const int k = span_of(batch, chunk);
  const int64_t begin = (chunk - batch.first_chunk[k]) * kChunk;
  const int64_t n = batch.numel[k];
  const int64_t end = begin + kChunk < n ? begin + kChunk : n;
  double acc = norm_identity();
  with_storage(batch.dtype[k], [&]<typename T>() {
    for_chunk(static_cast<const T*>(batch.data[k]), begin, end,
              [&](int64_t, double x) { acc = norm_combine(kind, acc, norm_term(kind, p, x)); });
  });
  const double block = BlockReduce(temp).Reduce(acc, Combine{kind});
  if (threadIdx.x == 0) partials[batch.partial_offset + chunk] = block;
}

__global__ void __launch_bounds__(kThreads)
    norm_finish_kernel(const double* partials, int64_t count, NormKind kind, double p,
                       double* total, double max_norm, double* clip_coef) {
  __shared__ typename BlockReduce::TempStorage temp;
  double acc = norm_identity();
  for (int64_t i = threadIdx.x; i < count; i += kThreads)
    acc = norm_combine(kind, acc, partials[i]);
  const double sum = BlockReduce(temp).Reduce(acc, Combine{kind});
  if (threadIdx.x == 0) {
    const double norm = norm_finish(kind, p, sum);
    *total = norm;
    if (clip_coef != nullptr) *clip_coef = clip_coefficient(max_norm, norm);
  }
}

__global__ void __launch_bounds__(kThreads)
    scale_kernel(const __grid_constant__ SpanBatch batch, const double* scale) {
  const int64_t chunk = blockIdx.x;
  const int k = span_of(batch, chunk);
  const int64_t begin = (chunk - batch.first_chunk[k]) * kChunk;
  const int64_t n = batch.numel[k];
  const int64_t end = begin + kChunk < n ? begin + kChunk : n;
  const double s = *scale;
  with_storage(batch.dtype[k], [&]<typename T>() {
    T* x = static_cast<T*>(batch.data[k]);
    int64_t i0 = begin;
    constexpr int V = 16 / static_cast<int>(sizeof(T));
    if (aligned16(x + begin)) {  // as for_chunk: whole vectors
      const int64_t packs = (end - begin) / V;
      uint4* xv = reinterpret_cast<uint4*>(x + begin);
      for (int64_t q = threadIdx.x; q < packs; q += kThreads) {
        uint4 r = xv[q];
        T* e = reinterpret_cast<T*>(&r);
#pragma unroll
        for (int j = 0; j < V; ++j) e[j] = narrow<T>(static_cast<double>(widen(e[j])) * s);
        xv[q] = r;
      }
      i0 += packs * V;
    }
    for (int64_t i = i0 + threadIdx.x; i < end; i += kThreads)
      x[i] = narrow<T>(static_cast<double>(widen(x[i])) * s);
  });
}

// The casts' batch: the sources' table (their dtype float32) and each destination.
struct CastBatch {
  SpanBatch src;
  void* dst[kSpans];
};
static_assert(sizeof(CastBatch) + 64 <= 4000, "the batch must fit the kernel parameter space");

// dst = src rounded to bfloat16 (__float2bfloat16_rn, as cast's kernels round it), a
// chunk per block: eight elements per thread as two 16-byte loads and one 16-byte store
// where both start aligned (chunks start at multiples of kChunk), then the rest one by one.
__global__ void __launch_bounds__(kThreads) cast_kernel(const __grid_constant__ CastBatch batch) {
  const int64_t chunk = blockIdx.x;
  const int k = span_of(batch.src, chunk);
  int64_t begin = (chunk - batch.src.first_chunk[k]) * kChunk;
  const int64_t n = batch.src.numel[k];
  const int64_t end = begin + kChunk < n ? begin + kChunk : n;
  const float* x = static_cast<const float*>(batch.src.data[k]);
  auto* y = static_cast<__nv_bfloat16*>(batch.dst[k]);
  if (aligned16(x + begin) && aligned16(y + begin)) {
    const int64_t packs = (end - begin) / 8;
    for (int64_t q = threadIdx.x; q < packs; q += kThreads) {
      const int64_t i = begin + 8 * q;
      float v[8];
      *reinterpret_cast<float4*>(v) = *reinterpret_cast<const float4*>(x + i);
      *reinterpret_cast<float4*>(v + 4) = *reinterpret_cast<const float4*>(x + i + 4);
      __nv_bfloat16 o[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) o[j] = __float2bfloat16_rn(v[j]);
      *reinterpret_cast<uint4*>(y + i) = *reinterpret_cast<const uint4*>(o);
    }
    begin += 8 * packs;
  }
  for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) y[i] = __float2bfloat16_rn(x[i]);
}

// The batch of tensors [offset, offset + kSpans) with its chunk map; returns its
// chunk count. Tensors without elements own no chunk.
int64_t make_batch(const TensorSpan* tensors, int64_t count, int64_t offset, SpanBatch& b) {
  b.count = static_cast<int>(count - offset < kSpans ? count - offset : kSpans);
  int64_t chunks = 0;
  for (int i = 0; i < b.count; ++i) {
    const TensorSpan& t = tensors[offset + i];
    EMBER_CHECK(t.numel >= 0, "multi-tensor kernel: tensor ", offset + i, " has ", t.numel,
                " elements");
    EMBER_CHECK(
        t.dtype == DType::Float32 || t.dtype == DType::Float64 || t.dtype == DType::BFloat16,
        "multi-tensor kernel: tensor ", offset + i, " is ", t.dtype,
        "; float32, float64 or bfloat16 expected");
    b.data[i] = t.data;
    b.numel[i] = t.numel;
    b.dtype[i] = static_cast<uint8_t>(t.dtype);
    b.first_chunk[i] = chunks;
    chunks += ceil_div(t.numel, kChunk);
  }
  b.first_chunk[b.count] = chunks;
  EMBER_CHECK(chunks < (int64_t{1} << 31), "multi-tensor kernel: ", chunks,
              " chunks exceed the grid limit");
  return chunks;
}

int64_t total_chunks(const TensorSpan* tensors, int64_t count) {
  int64_t chunks = 0;
  for (int64_t i = 0; i < count; ++i) chunks += ceil_div(tensors[i].numel, kChunk);
  return chunks;
}

}  // namespace

size_t multi_tensor_norm_workspace_bytes(const TensorSpan* tensors, int64_t count) {
  return static_cast<size_t>(total_chunks(tensors, count)) * sizeof(double);
}

void launch_multi_tensor_norm(const TensorSpan* tensors, int64_t count, double norm_type,
                              double* total, double max_norm, double* clip_coef, void* workspace,
                              cudaStream_t stream) {
  const NormKind kind = norm_kind(norm_type);
  auto* partials = static_cast<double*>(workspace);
  int64_t written = 0;
  for (int64_t offset = 0; offset < count; offset += kSpans) {
    SpanBatch batch{};
    const int64_t chunks = make_batch(tensors, count, offset, batch);
    batch.partial_offset = written;
    if (chunks == 0) continue;
    norm_partials_kernel<<<static_cast<unsigned>(chunks), kThreads, 0, stream>>>(
        batch, kind, norm_type, partials);
    EMBER_CUDA_CHECK(cudaGetLastError());
    written += chunks;
  }
  // With no element at all the finishing block sums nothing: the norm is 0.
  norm_finish_kernel<<<1, kThreads, 0, stream>>>(partials, written, kind, norm_type, total,
                                                 max_norm, clip_coef);
  EMBER_CUDA_CHECK(cudaGetLastError());
}

void launch_multi_tensor_scale(const TensorSpan* tensors, int64_t count, const double* scale,
                               cudaStream_t stream) {
  for (int64_t offset = 0; offset < count; offset += kSpans) {
    SpanBatch batch{};
    const int64_t chunks = make_batch(tensors, count, offset, batch);
    if (chunks == 0) continue;
    scale_kernel<<<static_cast<unsigned>(chunks), kThreads, 0, stream>>>(batch, scale);
    EMBER_CUDA_CHECK(cudaGetLastError());
  }
}

void launch_multi_tensor_cast(const TensorSpan* tensors, void* const* dst, int64_t count,
                              cudaStream_t stream) {
  for (int64_t offset = 0; offset < count; offset += kSpans) {
    CastBatch batch{};
    const int64_t chunks = make_batch(tensors, count, offset, batch.src);
    for (int i = 0; i < batch.src.count; ++i) {
      EMBER_CHECK(tensors[offset + i].dtype == DType::Float32, "multi_tensor_cast: tensor ",
                  offset + i, " is ", tensors[offset + i].dtype, "; float32 expected");
      batch.dst[i] = dst[offset + i];
    }
    if (chunks == 0) continue;
    cast_kernel<<<static_cast<unsigned>(chunks), kThreads, 0, stream>>>(batch);
    EMBER_CUDA_CHECK(cudaGetLastError());
  }
}

// ------------------------------------------------------------------ registration

namespace {
namespace entry {

void multi_tensor_norm(const kernels::MultiTensorNormArgs& a) {
  DeviceGuard guard(a.device.index);
  launch_multi_tensor_norm(a.tensors, a.count, a.norm_type, a.total, a.max_norm, a.clip_coef,
                           a.workspace, current_stream(a.device.index));
}

size_t multi_tensor_norm_workspace_bytes(const kernels::MultiTensorQuery& q) {
  return cuda::multi_tensor_norm_workspace_bytes(q.tensors, q.count);
}

void multi_tensor_scale(const kernels::MultiTensorScaleArgs& a) {
  DeviceGuard guard(a.device.index);
  launch_multi_tensor_scale(a.tensors, a.count, a.scale, current_stream(a.device.index));
}

void multi_tensor_cast(const kernels::MultiTensorCastArgs& a) {
  DeviceGuard guard(a.device.index);
  launch_multi_tensor_cast(a.tensors, a.dst, a.count, current_stream(a.device.index));
}

}  // namespace entry
}  // namespace

void register_multi_tensor(kernels::KernelFamilies& t) {
  t.multi_tensor_norm = &entry::multi_tensor_norm;
  t.multi_tensor_norm_workspace_bytes = &entry::multi_tensor_norm_workspace_bytes;
  t.multi_tensor_scale = &entry::multi_tensor_scale;
  t.multi_tensor_cast = &entry::multi_tensor_cast;
}

}  // namespace ember::cuda
