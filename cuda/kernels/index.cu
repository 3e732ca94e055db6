// Indexing kernels (see index.h).
//
// Forward: one thread per output element reads its index, checks it and copies
// one element (a row of `inner` contiguous elements for index_select, so warps
// read whole lines). Backward without atomics: the entries are keyed by their
// destination (an out-of-range index gets the key `rows`, which matches no
// destination), sorted by key with cub::DeviceRadixSort (stable, so equal keys
// keep their order), and each run of equal keys is summed in that order by the
// one warp (or thread) that owns the destination, or by one block where runs are
// long. Deterministic whatever the duplicates.
#include <cuda_bf16.h>

#include <cub/device/device_radix_sort.cuh>

#include <cstdint>

#include "core/base/random.h"
#include "cuda/check.h"
#include "cuda/device_error.h"
#include "cuda/kernels/device_error.cuh"
#include "cuda/kernels/index.h"
#include "cuda/kernels/kernel_helpers.cuh"
#include "cuda/kernels/radix_sort_bytes.cuh"
#include "cuda/kernels/registration.h"
#include "cuda/runtime.h"

namespace ember::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kWarp = 32;
constexpr int64_t kMaxBlocks = 65535;

inline unsigned blocks_for(int64_t n, int64_t per_block = kThreads) {
  const int64_t b = ceil_div(n, per_block);
  return static_cast<unsigned>(b < 1 ? 1 : b > kMaxBlocks ? kMaxBlocks : b);
}

// ------------------------------------------------------------------ forward

// out (outer, k, inner) = x (outer, n, inner)[:, index[j], :]
template <typename S>
__global__ void index_select_kernel(const S* __restrict__ x, const int64_t* __restrict__ index,
                                    S* __restrict__ out, int64_t outer, int64_t n, int64_t k,
                                    int64_t inner, DeviceErrorRecord* err, const char* op) {
  const int64_t total = outer * k * inner;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < total;
       e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = e % inner, row = e / inner;
    const int64_t j = row % k, o = row / k;
    const int64_t idx = index[j];
    if (idx >= 0 && idx < n) {
      out[e] = x[(o * n + idx) * inner + i];
    } else {
      out[e] = S{};
      if (i == 0 && o == 0) record_device_error(err, op, kBadIndex, idx, n);
    }
  }
}

struct NdShape {
  int ndim;
  int dim;
  int64_t sizes[kMaxDims];      // index's (and out's)
  int64_t x_strides[kMaxDims];  // x's, contiguous
  int64_t x_dim_size;
};

NdShape nd_shape(int ndim, int dim, const int64_t* sizes, const int64_t* x_sizes) {
  NdShape s{};
  s.ndim = ndim;
  s.dim = dim;
  int64_t stride = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    s.sizes[d] = sizes[d];
    s.x_strides[d] = stride;
    stride *= x_sizes[d];
  }
  s.x_dim_size = x_sizes[dim];
  return s;
}

// Offset in x of element p of index with its coordinate `dim` replaced by idx.
__device__ __forceinline__ int64_t x_offset(const NdShape& s, int64_t p, int64_t idx) {
  int64_t off = 0;
  for (int d = s.ndim - 1; d >= 0; --d) {
    const int64_t c = p % s.sizes[d];
    p /= s.sizes[d];
    off += (d == s.dim ? idx : c) * s.x_strides[d];
  }
  return off;
}

template <typename S>
__global__ void gather_kernel(const S* __restrict__ x, const int64_t* __restrict__ index,
                              S* __restrict__ out, NdShape s, int64_t n, DeviceErrorRecord* err,
                              const char* op, int kind) {
  for (int64_t p = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; p < n;
       p += int64_t{gridDim.x} * blockDim.x) {
    const int64_t idx = index[p];
    if (idx >= 0 && idx < s.x_dim_size) {
      out[p] = x[x_offset(s, p, idx)];
    } else {
      out[p] = S{};
      record_device_error(err, op, kind, idx, s.x_dim_size);
    }
  }
}

// ------------------------------------------------------------------ backward

// keys[j] = destination row of entry j (`rows` when its index is out of range),
// vals[j] = j.
__global__ void index_keys_kernel(const int64_t* __restrict__ index, uint64_t* __restrict__ keys,
                                  int64_t* __restrict__ vals, int64_t k, int64_t n) {
  for (int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; j < k;
       j += int64_t{gridDim.x} * blockDim.x) {
    const int64_t idx = index[j];
    keys[j] = static_cast<uint64_t>(idx >= 0 && idx < n ? idx : n);
    vals[j] = j;
  }
}

__global__ void gather_keys_kernel(const int64_t* __restrict__ index, uint64_t* __restrict__ keys,
                                   int64_t* __restrict__ vals, NdShape s, int64_t n, int64_t rows) {
  for (int64_t p = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; p < n;
       p += int64_t{gridDim.x} * blockDim.x) {
    const int64_t idx = index[p];
    keys[p] = static_cast<uint64_t>(idx >= 0 && idx < s.x_dim_size ? x_offset(s, p, idx) : rows);
    vals[p] = p;
  }
}

// Sorted entries (keys, vals) of k; a warp per entry position: the warp at the
// first position of a run of equal keys owns that destination row and adds the
// run's source rows, column by column, in order. dst (outer, rows, inner),
// src (outer, k, inner).
template <typename S>
__global__ void segment_add_rows_kernel(const S* __restrict__ src,
                                        const uint64_t* __restrict__ keys,
                                        const int64_t* __restrict__ vals, S* __restrict__ dst,
                                        int64_t outer, int64_t rows, int64_t k, int64_t inner) {
  using A = typename CompOf<S>::type;
  const int lane = threadIdx.x % kWarp;
  const int64_t warps = int64_t{gridDim.x} * (blockDim.x / kWarp);
  for (int64_t p = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / kWarp; p < k; p += warps) {
    const uint64_t key = keys[p];
    if (key >= static_cast<uint64_t>(rows) || (p > 0 && keys[p - 1] == key)) continue;
    int64_t end = p + 1;
    while (end < k && keys[end] == key) ++end;
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = lane; i < inner; i += kWarp) {
        S* d = dst + (o * rows + static_cast<int64_t>(key)) * inner + i;
        A acc = widen(*d);
        for (int64_t q = p; q < end; ++q) acc += widen(src[(o * k + vals[q]) * inner + i]);
        *d = narrow<S>(acc);
      }
  }
}

// The same sums where runs are long (many entries per destination, as an embedding
// of a small vocabulary): a block per run (grid-stride over the sorted positions), its
// warps taking every kGroups-th entry of the run over 128 columns at a time, then the
// groups' partial sums added in group order through shared memory. Deterministic: the
// order of every sum is fixed by the sorted positions alone.
template <typename S>
__global__ void segment_add_long_kernel(const S* __restrict__ src,
                                        const uint64_t* __restrict__ keys,
                                        const int64_t* __restrict__ vals, S* __restrict__ dst,
                                        int64_t outer, int64_t rows, int64_t k, int64_t inner) {
  using A = typename CompOf<S>::type;
  constexpr int kGroups = kThreads / kWarp;
  constexpr int kPer = 4;  // columns a lane sums per pass
  constexpr int kCols = kPer * kWarp;
  __shared__ A part[kGroups][kCols];
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int group = static_cast<int>(threadIdx.x) / kWarp;
  for (int64_t p = blockIdx.x; p < k; p += gridDim.x) {
    const uint64_t key = keys[p];  // the same for the whole block, as the test below
    if (key >= static_cast<uint64_t>(rows) || (p > 0 && keys[p - 1] == key)) continue;
    int64_t lo = p + 1, hi = k;  // the run's end: the first position past p with another key
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (keys[mid] == key)
        lo = mid + 1;
      else
        hi = mid;
    }
    const int64_t end = lo;
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t c0 = 0; c0 < inner; c0 += kCols) {
        A acc[kPer];
#pragma unroll
        for (int v = 0; v < kPer; ++v) acc[v] = A{};
        for (int64_t q = p + group; q < end; q += kGroups) {
          const S* row = src + (o * k + vals[q]) * inner + c0;
#pragma unroll
          for (int v = 0; v < kPer; ++v)
            if (c0 + lane + v * kWarp < inner) acc[v] += widen(row[lane + v * kWarp]);
        }
#pragma unroll
        for (int v = 0; v < kPer; ++v) part[group][lane + v * kWarp] = acc[v];
        __syncthreads();
        const int64_t c = c0 + threadIdx.x;
        if (threadIdx.x < kCols && c < inner) {
          S* d = dst + (o * rows + static_cast<int64_t>(key)) * inner + c;
          A t = widen(*d);
#pragma unroll
          for (int g = 0; g < kGroups; ++g) t += part[g][threadIdx.x];
          *d = narrow<S>(t);
        }
        __syncthreads();  // part is refilled by the next pass
      }
  }
}

// inner == 1 (scatter_add): a thread per entry position.
template <typename S>
__global__ void segment_add_kernel(const S* __restrict__ src, const uint64_t* __restrict__ keys,
                                   const int64_t* __restrict__ vals, S* __restrict__ dst,
                                   int64_t rows, int64_t k) {
  using A = typename CompOf<S>::type;
  for (int64_t p = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; p < k;
       p += int64_t{gridDim.x} * blockDim.x) {
    const uint64_t key = keys[p];
    if (key >= static_cast<uint64_t>(rows) || (p > 0 && keys[p - 1] == key)) continue;
    A acc = widen(dst[key]);
    for (int64_t q = p; q < k && keys[q] == key; ++q) acc += widen(src[vals[q]]);
    dst[key] = narrow<S>(acc);
  }
}

// ------------------------------------------------------------------ the sort

int bits_for(uint64_t v) {  // bits that hold 0..v
  int b = 1;
  while (b < 64 && (v >> b) != 0) ++b;
  return b;
}

constexpr size_t kAlign = 256;
inline size_t align_up(size_t v) {
  return (v + kAlign - 1) / kAlign * kAlign;
}

struct SortSpace {
  uint64_t* keys_in;
  uint64_t* keys_out;
  int64_t* vals_in;
  int64_t* vals_out;
  void* temp;
  size_t temp_bytes;
};

// CUB's scratch from sizes alone (radix_sort_bytes.cuh), so that the meta device
// predicts the scatter workspaces without a GPU.
size_t sort_temp_bytes(int64_t k, int end_bit) {
  return radix_sort_pairs_bytes(k, end_bit);
}

size_t sort_space_bytes(int64_t k, int end_bit) {
  const size_t arr = align_up(static_cast<size_t>(k) * 8);
  return 4 * arr + align_up(sort_temp_bytes(k, end_bit));
}

SortSpace sort_space(void* workspace, int64_t k, int end_bit) {
  char* p = static_cast<char*>(workspace);
  const size_t arr = align_up(static_cast<size_t>(k) * 8);
  SortSpace s;
  s.keys_in = reinterpret_cast<uint64_t*>(p);
  s.keys_out = reinterpret_cast<uint64_t*>(p + arr);
  s.vals_in = reinterpret_cast<int64_t*>(p + 2 * arr);
  s.vals_out = reinterpret_cast<int64_t*>(p + 3 * arr);
  s.temp = p + 4 * arr;
  s.temp_bytes = align_up(sort_temp_bytes(k, end_bit));
  return s;
}

void sort_pairs(SortSpace& s, int64_t k, int end_bit, cudaStream_t stream) {
  const size_t cub_wants = cub_radix_sort_pairs_bytes(k, end_bit);
  EMBER_CHECK(cub_wants <= s.temp_bytes, "index.cu: cub::DeviceRadixSort wants ", cub_wants,
              " bytes of scratch for ", k, " keys, radix_sort_bytes.cuh gave ", s.temp_bytes,
              " (the formula is out of date with this CUB)");
  EMBER_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(s.temp, s.temp_bytes, s.keys_in, s.keys_out,
                                                   s.vals_in, s.vals_out, k, 0, end_bit, stream));
}

// Any storage type, by size (the forward kernels only copy elements).
template <typename F>
void dispatch_bytes(DType t, F&& f) {
  switch (element_size(t)) {
    case 1:
      f(static_cast<uint8_t*>(nullptr));
      return;
    case 2:
      f(static_cast<uint16_t*>(nullptr));
      return;
    case 4:
      f(static_cast<uint32_t*>(nullptr));
      return;
    default:
      f(static_cast<uint64_t*>(nullptr));
      return;
  }
}

}  // namespace

void launch_index_select(DType dtype, const char* op, const void* x, const int64_t* index,
                         void* out, int64_t outer, int64_t n, int64_t k, int64_t inner,
                         cudaStream_t stream) {
  const int64_t total = outer * k * inner;
  if (total == 0) return;
  DeviceErrorRecord* err = device_error_record(current_device());
  dispatch_bytes(dtype, [&](auto* tag) {
    using S = std::remove_pointer_t<decltype(tag)>;
    index_select_kernel<S><<<blocks_for(total), kThreads, 0, stream>>>(
        static_cast<const S*>(x), index, static_cast<S*>(out), outer, n, k, inner, err, op);
  });
  EMBER_CUDA_CHECK(cudaGetLastError());
}

size_t scatter_workspace_bytes(int64_t k, int64_t rows) {
  if (k == 0) return 0;
  return sort_space_bytes(k, bits_for(static_cast<uint64_t>(rows)));
}

void launch_index_add(DType dtype, const void* src, const int64_t* index, void* dst, int64_t outer,
                      int64_t n, int64_t k, int64_t inner, void* workspace, cudaStream_t stream) {
  if (k == 0 || outer == 0 || inner == 0) return;
  const int end_bit = bits_for(static_cast<uint64_t>(n));
  SortSpace s = sort_space(workspace, k, end_bit);
  index_keys_kernel<<<blocks_for(k), kThreads, 0, stream>>>(index, s.keys_in, s.vals_in, k, n);
  EMBER_CUDA_CHECK(cudaGetLastError());
  sort_pairs(s, k, end_bit, stream);
  // Runs of 8 or more entries a destination on average (an embedding of a small
  // vocabulary): a block per run, as one warp would sum them one after another.
  const bool long_runs = k >= 8 * n && inner >= kWarp;
  dispatch_float(dtype, "index_select backward", [&](auto* tag) {
    using S = std::remove_pointer_t<decltype(tag)>;
    if (long_runs)
      segment_add_long_kernel<S><<<blocks_for(k, 1), kThreads, 0, stream>>>(
          static_cast<const S*>(src), s.keys_out, s.vals_out, static_cast<S*>(dst), outer, n, k,
          inner);
    else
      segment_add_rows_kernel<S><<<blocks_for(k * kWarp), kThreads, 0, stream>>>(
          static_cast<const S*>(src), s.keys_out, s.vals_out, static_cast<S*>(dst), outer, n, k,
          inner);
  });
  EMBER_CUDA_CHECK(cudaGetLastError());
}

void launch_gather(DType dtype, const char* op, const void* x, const int64_t* index, void* out,
                   int ndim, int dim, const int64_t* sizes, const int64_t* x_sizes, int64_t n,
                   bool targets, cudaStream_t stream) {
  if (n == 0) return;
  const NdShape s = nd_shape(ndim, dim, sizes, x_sizes);
  DeviceErrorRecord* err = device_error_record(current_device());
  dispatch_bytes(dtype, [&](auto* tag) {
    using S = std::remove_pointer_t<decltype(tag)>;
    gather_kernel<S><<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const S*>(x), index,
                                                             static_cast<S*>(out), s, n, err, op,
                                                             targets ? kBadTarget : kBadIndex);
  });
  EMBER_CUDA_CHECK(cudaGetLastError());
}

void launch_scatter_add(DType dtype, const void* src, const int64_t* index, void* dst, int ndim,
                        int dim, const int64_t* sizes, const int64_t* x_sizes, int64_t n,
                        void* workspace, cudaStream_t stream) {
  if (n == 0) return;
  int64_t rows = 1;
  for (int d = 0; d < ndim; ++d) rows *= x_sizes[d];
  const NdShape shape = nd_shape(ndim, dim, sizes, x_sizes);
  const int end_bit = bits_for(static_cast<uint64_t>(rows));
  SortSpace s = sort_space(workspace, n, end_bit);
  gather_keys_kernel<<<blocks_for(n), kThreads, 0, stream>>>(index, s.keys_in, s.vals_in, shape, n,
                                                             rows);
  EMBER_CUDA_CHECK(cudaGetLastError());
  sort_pairs(s, n, end_bit, stream);
  dispatch_float(dtype, "gather backward", [&](auto* tag) {
    using S = std::remove_pointer_t<decltype(tag)>;
    segment_add_kernel<S><<<blocks_for(n), kThreads, 0, stream>>>(
        static_cast<const S*>(src), s.keys_out, s.vals_out, static_cast<S*>(dst), rows, n);
  });
  EMBER_CUDA_CHECK(cudaGetLastError());
}

// ------------------------------------------------------------------ randperm

namespace {

__global__ void random_keys_kernel(uint64_t* __restrict__ keys, int64_t* __restrict__ vals,
                                   int64_t n, uint64_t seed, uint64_t offset) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    keys[i] = random_bits(seed, offset + static_cast<uint64_t>(i));
    vals[i] = i;
  }
}

}  // namespace

size_t randperm_workspace_bytes(int64_t n) {
  return n == 0 ? 0 : sort_space_bytes(n, 64);
}

void launch_randperm(int64_t* out, int64_t n, uint64_t seed, uint64_t offset, void* workspace,
                     cudaStream_t stream) {
  if (n == 0) return;
  SortSpace s = sort_space(workspace, n, 64);
  random_keys_kernel<<<blocks_for(n), kThreads, 0, stream>>>(s.keys_in, s.vals_in, n, seed, offset);
  EMBER_CUDA_CHECK(cudaGetLastError());
  s.vals_out = out;  // the permutation is the values, sorted by their keys
  sort_pairs(s, n, 64, stream);
}

// ------------------------------------------------------------------ registration

namespace {
namespace entry {

void index_select(const kernels::IndexSelectArgs& a) {
  DeviceGuard guard(a.device.index);
  launch_index_select(a.dtype, a.op, a.x, a.index, a.out, a.outer, a.n, a.k, a.inner,
                      current_stream(a.device.index));
}

void index_add(const kernels::IndexAddArgs& a) {
  DeviceGuard guard(a.device.index);
  launch_index_add(a.dtype, a.src, a.index, a.dst, a.outer, a.n, a.k, a.inner, a.workspace,
                   current_stream(a.device.index));
}

// Sizes alone (radix_sort_bytes.cuh): no device call, so the meta device asks it too.
size_t scatter_workspace_bytes(const kernels::ScatterQuery& q) {
  return cuda::scatter_workspace_bytes(q.n, q.rows);
}

void gather(const kernels::GatherArgs& a) {
  DeviceGuard guard(a.device.index);
  launch_gather(a.dtype, a.op, a.x, a.index, a.out, a.ndim, a.dim, a.sizes, a.x_sizes, a.n,
                a.targets, current_stream(a.device.index));
}

void scatter_add(const kernels::ScatterAddArgs& a) {
  DeviceGuard guard(a.device.index);
  launch_scatter_add(a.dtype, a.src, a.index, a.dst, a.ndim, a.dim, a.sizes, a.x_sizes, a.n,
                     a.workspace, current_stream(a.device.index));
}

void randperm(const kernels::RandpermArgs& a) {
  DeviceGuard guard(a.device.index);
  launch_randperm(a.out, a.n, a.seed, a.offset, a.workspace, current_stream(a.device.index));
}

size_t randperm_workspace_bytes(const kernels::ScatterQuery& q) {
  return cuda::randperm_workspace_bytes(q.n);
}

}  // namespace entry
}  // namespace

void register_index(kernels::KernelFamilies& t) {
  t.index_select = &entry::index_select;
  t.index_add = &entry::index_add;
  t.index_add_workspace_bytes = &entry::scatter_workspace_bytes;
  t.gather = &entry::gather;
  t.scatter_add = &entry::scatter_add;
  t.scatter_add_workspace_bytes = &entry::scatter_workspace_bytes;
  t.randperm = &entry::randperm;
  t.randperm_workspace_bytes = &entry::randperm_workspace_bytes;
}

}  // namespace ember::cuda
