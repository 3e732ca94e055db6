// Launchers for the scan and sort CUDA kernels (cuda/kernels/sort.cu): cumsum over
// the middle axis of a contiguous (outer, n, inner) tensor, and the stable order of
// each row of a contiguous (rows, n) tensor (core/base/sort_key.h's order: NaN
// largest, -0.0 equal to 0.0). Deterministic: no atomics, fixed orders.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "core/base/dtype.h"

namespace ember::cuda {

// y[o, k, i] = sum_{j <= k} x[o, j, i] (j >= k when reverse), accumulated in double,
// one thread per (o, i) line; float32, float64, bfloat16.
void launch_cumsum(DType dtype, const void* x, void* y, int64_t outer, int64_t n, int64_t inner,
                   bool reverse, cudaStream_t stream);

// Scratch bytes launch_sort needs for rows * n elements.
size_t sort_workspace_bytes(int64_t rows, int64_t n);

// The scratch bytes cub::DeviceRadixSort::SortPairs needs for n uint64 keys with
// int64 values over bits [0, end_bit), the sorts of launch_sort and of index.cu's
// scatters: by ember's formula (radix_sort_bytes.cuh: from the sizes alone, what the
// workspace queries and so the meta device use) and by CUB's own query (asks the
// device). tests/cuda/test_kernels_sort.cpp holds them equal.
size_t radix_scratch_formula_bytes(int64_t n, int end_bit);
size_t radix_scratch_cub_bytes(int64_t n, int end_bit);

// indices (rows, n) = the positions of each row in (descending) order, stable:
// two stable radix sorts (cub::DeviceRadixSort), by value, then by row.
void launch_sort(DType dtype, const void* x, int64_t* indices, int64_t rows, int64_t n,
                 bool descending, void* workspace, cudaStream_t stream);

}  // namespace ember::cuda
