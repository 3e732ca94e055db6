// Tensor maps for the Tensor Memory Accelerator (TMA, sm_90): the descriptors a
// kernel's cp.async.bulk.tensor reads to copy a box of a 2-D global array into
// shared memory. Encoded on the host through the driver's cuTensorMapEncodeTiled,
// reached with cudaGetDriverEntryPointByVersion, so ember links only the runtime
// and still loads on a machine without a driver (CI).
#pragma once

#include <cstdint>

#include <cuda.h>  // CUtensorMap (a type only: no driver symbol is linked)

#include "core/base/dtype.h"

namespace ember::cuda {

// Why a 2-D array cannot be described by a tensor map (empty: it can). TMA's
// rules: a 16-byte aligned base, a row stride that is a multiple of 16 bytes and
// below 2^40 bytes, sizes in [1, 2^32].
const char* tensor_map_unsupported(DType dtype, const void* base, int64_t inner, int64_t outer,
                                   int64_t ld);

// A row-major array of `outer` rows of `inner` contiguous elements, `ld` elements
// apart, read in boxes of box_inner x box_outer elements with the 128-byte
// swizzle (box_inner * element size must be 128 or less). Elements outside the
// array read as zeros. Throws ember::Error when the driver refuses it.
CUtensorMap make_tensor_map_2d(DType dtype, const void* base, int64_t inner, int64_t outer,
                               int64_t ld, int box_inner, int box_outer);

// A 4-D array (dims[0] innermost and contiguous; strides in elements for dims 1-3)
// read in boxes of box[i] elements traversed with element strides elem_strides[i]
// (TMA copies ceil(box[i] / elem_strides[i]) of them), the 128-byte swizzle, zeros
// outside: the convolutions' NHWC images (cuda/kernels/sm90/conv_gemm_plan.h).
// Throws ember::Error naming what TMA refuses.
CUtensorMap make_tensor_map_4d(DType dtype, const void* base, const int64_t (&dims)[4],
                               const int64_t (&strides)[3], const unsigned (&box)[4],
                               const unsigned (&elem_strides)[4]);

}  // namespace ember::cuda
