// Launchers for the fused cross-entropy (cuda/kernels/cross_entropy.cu): logits
// (rows, classes) contiguous, int64 class targets; per row one read of the logits
// and, when asked, one write of their gradient, the loss reduced deterministically.
// float32 and bfloat16 (computed in float).
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "core/base/dtype.h"
#include "core/base/reduction.h"

namespace ember::cuda {

// Whether the fused kernel takes `classes` classes of dtype: a row is held in the
// registers of a cluster of up to 8 blocks (classes <= 131072; with a forced
// shape, up to 8 blocks of that shape), or streamed (Stream: any length; the same
// bound, so the choice never changes what is supported).
bool cross_entropy_supported(DType dtype, int64_t classes);

// Scratch bytes launch_cross_entropy needs (per-row losses and the count).
size_t cross_entropy_workspace_bytes(int64_t rows);

// loss: Mean/Sum one element, None (rows), of dtype. Per row, with lse the row's
// log-sum-exp and ls = label_smoothing:
//   loss = (1 - ls) (lse - x[t]) + ls (lse - mean(x)),
//   d_logits = scale (softmax(x) - (1 - ls) onehot(t) - ls / classes)
// (d_logits may be null: no gradient written), scale = 1 / (rows not ignored)
// for Mean, 1 otherwise; a row whose target is ignore_index gives 0 and a zero
// gradient row; a target outside [0, classes) is recorded as `op`'s error
// (cuda/device_error.h) and the row counts as ignored. Mean of no row is NaN.
// `shape` forces the row kernel's block shape for long rows (Auto: chosen by the
// row length), for benchmarks/cross_entropy.cpp's comparison of them.
enum class CrossEntropyShape {
  Auto,
  T512x16,   // 512 threads x 16 logits: 8192 a block, two blocks per SM
  T1024x16,  // 1024 x 16: 16384 a block, one block per SM
  T512x32,   // 512 x 32: 16384 a block, two blocks per SM (some register spills);
             // Auto's shape for rows of more than 8192 classes with Stream off
  Stream,    // a 512-thread block per row of any length, read twice (the second time
             // mostly from L2): Auto's for rows of more than 8192 classes
};
// Whether Auto streams rows of more than 8192 classes (CrossEntropyShape::Stream) rather
// than holding them in a cluster's registers (T512x32): EMBER_CROSS_ENTROPY_STREAM (0 or
// 1) on first use, on when unset; set_cross_entropy_stream overrides it.
bool cross_entropy_stream();
void set_cross_entropy_stream(bool on);
void launch_cross_entropy(DType dtype, const char* op, const void* logits, const int64_t* target,
                          void* d_logits, void* loss, int64_t rows, int64_t classes,
                          int64_t ignore_index, double label_smoothing, Reduction reduction,
                          void* workspace, cudaStream_t stream,
                          CrossEntropyShape shape = CrossEntropyShape::Auto);

}  // namespace ember::cuda
