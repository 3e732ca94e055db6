// Scan and sort kernels (see sort.h).
//
// cumsum: one thread per (outer, inner) line walks its n elements in order, summing
// in double: simple and deterministic; a long single line runs on one thread (a
// cub::DeviceScan per line would be the faster path for that shape).
// sort: each element gets sort_key(value) (core/base/sort_key.h) and its flat
// position; one stable radix sort by key, then one stable radix sort of the
// positions by their row, leaves every row's positions in key order (the stable
// least-significant-first order of the pair (row, key)); a last pass takes the
// positions modulo n.
#include <cuda_bf16.h>

#include <cub/device/device_radix_sort.cuh>

#include <cstdint>
#include <type_traits>

#include "core/base/sort_key.h"
#include "cuda/check.h"
#include "cuda/kernels/kernel_helpers.cuh"
#include "cuda/kernels/radix_sort_bytes.cuh"
#include "cuda/kernels/registration.h"
#include "cuda/kernels/sort.h"
#include "cuda/runtime.h"

namespace ember::cuda {

namespace {

constexpr int kThreads = 256;

unsigned blocks_for(int64_t n) {
  return static_cast<unsigned>(ceil_div(n, kThreads));
}

template <typename S>
__global__ void cumsum_kernel(const S* __restrict__ x, S* __restrict__ y, int64_t outer, int64_t n,
                              int64_t inner, bool reverse) {
  const int64_t line = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (line >= outer * inner) return;
  const int64_t o = line / inner, i = line % inner;
  double acc = 0.0;
  for (int64_t j = 0; j < n; ++j) {
    const int64_t k = reverse ? n - 1 - j : j;
    const int64_t at = (o * n + k) * inner + i;
    acc += static_cast<double>(widen(x[at]));
    y[at] = narrow<S>(acc);
  }
}

template <typename S>
__global__ void sort_keys_kernel(const S* __restrict__ x, uint64_t* keys, int64_t* positions,
                                 int64_t total, bool descending) {
  const int64_t p = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (p >= total) return;
  keys[p] = sort_key(static_cast<double>(widen(x[p])), descending);
  positions[p] = p;
}

__global__ void row_keys_kernel(const int64_t* positions, uint64_t* keys, int64_t total,
                                int64_t n) {
  const int64_t p = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (p >= total) return;
  keys[p] = static_cast<uint64_t>(positions[p] / n);
}

__global__ void modulo_kernel(int64_t* indices, int64_t total, int64_t n) {
  const int64_t p = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (p >= total) return;
  indices[p] %= n;
}

int bits_for(uint64_t v) {  // bits that hold 0..v, at least 1
  int b = 1;
  while (b < 64 && (v >> b) != 0) ++b;
  return b;
}

constexpr size_t kAlign = 256;
size_t align_up(size_t v) {
  return (v + kAlign - 1) / kAlign * kAlign;
}

// CUB's scratch for a 64-bit sort of `total` pairs, from sizes alone
// (radix_sort_bytes.cuh), so that the meta device predicts it without a GPU.
size_t radix_temp_bytes(int64_t total) {
  return radix_sort_pairs_bytes(total, 64);
}

}  // namespace

void launch_cumsum(DType dtype, const void* x, void* y, int64_t outer, int64_t n, int64_t inner,
                   bool reverse, cudaStream_t stream) {
  const int64_t lines = outer * inner;
  if (lines == 0 || n == 0) return;
  dispatch_float(dtype, "cumsum", [&](auto* tag) {
    using S = std::remove_pointer_t<decltype(tag)>;
    cumsum_kernel<S><<<blocks_for(lines), kThreads, 0, stream>>>(
        static_cast<const S*>(x), static_cast<S*>(y), outer, n, inner, reverse);
    EMBER_CUDA_CHECK(cudaGetLastError());
  });
}

// keys in, keys out (u64), positions in, positions out (i64), then cub's scratch
// (the scratch of a 64-bit sort covers the narrower row sort).
size_t sort_workspace_bytes(int64_t rows, int64_t n) {
  const int64_t total = rows * n;
  if (total == 0) return 0;
  return 4 * align_up(static_cast<size_t>(total) * 8) + align_up(radix_temp_bytes(total));
}

size_t radix_scratch_formula_bytes(int64_t n, int end_bit) {
  return radix_sort_pairs_bytes(n, end_bit);
}

size_t radix_scratch_cub_bytes(int64_t n, int end_bit) {
  return cub_radix_sort_pairs_bytes(n, end_bit);
}

void launch_sort(DType dtype, const void* x, int64_t* indices, int64_t rows, int64_t n,
                 bool descending, void* workspace, cudaStream_t stream) {
  const int64_t total = rows * n;
  if (total == 0) return;
  char* p = static_cast<char*>(workspace);
  const size_t arr = align_up(static_cast<size_t>(total) * 8);
  uint64_t* keys_in = reinterpret_cast<uint64_t*>(p);
  uint64_t* keys_out = reinterpret_cast<uint64_t*>(p + arr);
  int64_t* pos_in = reinterpret_cast<int64_t*>(p + 2 * arr);
  int64_t* pos_out = reinterpret_cast<int64_t*>(p + 3 * arr);
  void* temp = p + 4 * arr;
  size_t temp_bytes = align_up(radix_temp_bytes(total));
  const size_t cub_wants = cub_radix_sort_pairs_bytes(total, 64);
  EMBER_CHECK(cub_wants <= temp_bytes, "sort: cub::DeviceRadixSort wants ", cub_wants,
              " bytes of scratch for ", total, " elements, radix_sort_bytes.cuh gave ", temp_bytes,
              " (the formula is out of date with this CUB)");
  dispatch_float(dtype, "sort", [&](auto* tag) {
    using S = std::remove_pointer_t<decltype(tag)>;
    sort_keys_kernel<S><<<blocks_for(total), kThreads, 0, stream>>>(
        static_cast<const S*>(x), keys_in, pos_in, total, descending);
    EMBER_CUDA_CHECK(cudaGetLastError());
  });
  // By value: every row's positions end up in value order relative to each other.
  EMBER_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys_in, keys_out, pos_in,
                                                   pos_out, total, 0, 64, stream));
  // By row, stably: the rows come together, each in the order of the first sort.
  row_keys_kernel<<<blocks_for(total), kThreads, 0, stream>>>(pos_out, keys_in, total, n);
  EMBER_CUDA_CHECK(cudaGetLastError());
  const int end_bit = bits_for(static_cast<uint64_t>(rows - 1));
  EMBER_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys_in, keys_out, pos_out,
                                                   indices, total, 0, end_bit, stream));
  modulo_kernel<<<blocks_for(total), kThreads, 0, stream>>>(indices, total, n);
  EMBER_CUDA_CHECK(cudaGetLastError());
}

// ------------------------------------------------------------------ registration

namespace {
namespace entry {

void cumsum(const kernels::CumsumArgs& a) {
  DeviceGuard guard(a.device.index);
  launch_cumsum(a.dtype, a.x, a.y, a.outer, a.n, a.inner, a.reverse,
                current_stream(a.device.index));
}

void sort(const kernels::SortArgs& a) {
  DeviceGuard guard(a.device.index);
  launch_sort(a.dtype, a.x, a.indices, a.rows, a.n, a.descending, a.workspace,
              current_stream(a.device.index));
}

// Sizes alone (radix_sort_bytes.cuh): no device call, so the meta device asks it too.
size_t sort_workspace_bytes(const kernels::SortQuery& q) {
  return cuda::sort_workspace_bytes(q.rows, q.n);
}

}  // namespace entry
}  // namespace

void register_sort(kernels::KernelFamilies& t) {
  t.cumsum = &entry::cumsum;
  t.sort = &entry::sort;
  t.sort_workspace_bytes = &entry::sort_workspace_bytes;
}

}  // namespace ember::cuda
