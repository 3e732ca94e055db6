// Launchers for the indexing CUDA kernels (cuda/kernels/index.cu): selecting rows
// and elements by int64 indices, and their backward, which adds values back to
// the positions they came from in a fixed order (deterministic: the same input
// gives the same bits, whatever the duplicates). Also randperm, which sorts the
// same way.
//
// An index out of range is recorded in the device's error record with `op` (see
// cuda/device_error.h) and reads as zero; the backward kernels skip it. Every
// array is contiguous.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "core/base/dtype.h"
#include "core/base/layout.h"

namespace ember::cuda {

// out (outer, k, inner) = x (outer, n, inner) at rows index[j]. Any dtype.
void launch_index_select(DType dtype, const char* op, const void* x, const int64_t* index,
                         void* out, int64_t outer, int64_t n, int64_t k, int64_t inner,
                         cudaStream_t stream);

// Scratch bytes launch_index_add / launch_scatter_add need for k entries scattered
// into `rows` destinations.
size_t scatter_workspace_bytes(int64_t k, int64_t rows);

// dst (outer, n, inner) += src (outer, k, inner) at rows index[j]: the entries are
// sorted by destination (stable), then one warp per destination row adds its
// rows in order of j. float32, float64, bfloat16 (accumulated in float; double
// for float64).
void launch_index_add(DType dtype, const void* src, const int64_t* index, void* dst, int64_t outer,
                      int64_t n, int64_t k, int64_t inner, void* workspace, cudaStream_t stream);

// gather: out[p] = x[p with coordinate dim replaced by index[p]] over index's shape
// `sizes` (ndim dims); x has x_sizes. Any dtype. `targets`: the indices are class
// targets (a bad one is recorded as a bad target).
void launch_gather(DType dtype, const char* op, const void* x, const int64_t* index, void* out,
                   int ndim, int dim, const int64_t* sizes, const int64_t* x_sizes, int64_t n,
                   bool targets, cudaStream_t stream);

// Its backward: dst (x_sizes) += src (sizes) at the positions gather read, each
// destination summing its entries in order of p. Floating dtypes.
void launch_scatter_add(DType dtype, const void* src, const int64_t* index, void* dst, int ndim,
                        int dim, const int64_t* sizes, const int64_t* x_sizes, int64_t n,
                        void* workspace, cudaStream_t stream);

// out (n) = 0..n-1 ordered by random_bits(seed, offset + i), ties by i (a stable
// radix sort), as the CPU computes it.
size_t randperm_workspace_bytes(int64_t n);
void launch_randperm(int64_t* out, int64_t n, uint64_t seed, uint64_t offset, void* workspace,
                     cudaStream_t stream);

}  // namespace ember::cuda
