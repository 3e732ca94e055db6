// Launchers for the convolution's column kernels (cuda/kernels/conv.cu): im2col, the
// gather of a contiguous (n, c, h, w) input into its columns (n, c kh kw, oh ow), and
// col2im, their adjoint (each pixel the sum of the columns that read it, gathered in
// (ki, kj) order: deterministic, no atomics). conv2d runs one of each with a GEMM
// between (core/ops/conv.cpp); the layout is kernel_families.h's Im2colArgs.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "core/base/dtype.h"

namespace ember::cuda {

struct ColumnGeometry {
  int64_t n, c, h, w;
  int64_t kh, kw, sh, sw, ph, pw, dh, dw;
  int64_t oh, ow;
};

// cols = im2col(x): pad_value where a window reads outside the plane. float32,
// float64, bfloat16.
void launch_im2col(DType dtype, const void* x, void* cols, const ColumnGeometry& g,
                   double pad_value, cudaStream_t stream);

// x = col2im(cols) (written, not added): float32 and bfloat16 sum in float32 (rounded
// once), float64 in float64.
void launch_col2im(DType dtype, const void* cols, void* x, const ColumnGeometry& g,
                   cudaStream_t stream);

}  // namespace ember::cuda
