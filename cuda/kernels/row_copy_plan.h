// When a same-dtype copy moves whole contiguous rows, and how: the host-side half of
// the row copy that launch_cast takes where source and output are both contiguous
// along their innermost dimension but not as a whole (a slice of the last dimension
// written or read: split's and cat's pieces, a GPT's q, k and v gradients assembled
// into one (B, T, 3C) gradient), cuda/kernels/elementwise.cu, set_row_copy. Plain C++,
// so that the CPU tests replay every byte's two addresses
// (tests/cuda/test_kernels_row_copy.cpp).
//
// The generic strided copy moves one element a thread and finds both of its addresses
// with a 64-bit division and remainder per dimension; for 2-byte elements that is some
// hundred instructions for every 2 bytes (kernel_census gpt2: 36 such copies, 1.81 GB,
// a step). The row copy moves 4, 8 or 16 bytes a thread and finds a row's two
// addresses once per such chunk, over dimensions merged where both layouts allow.
#pragma once

#include <cstdint>
#include <optional>

#include "core/base/layout.h"

namespace ember::cuda {

// Row r of `rows` (r's digits over sizes[0 .. outer), outermost first) starts at byte
// src_offset + sum_d digit_d src_strides[d] of the source and dst_offset + ... of the
// output; each row is row_bytes contiguous bytes on both sides, moved `vec` at a time.
struct RowCopyPlan {
  int outer = 0;  // dimensions of the row index, 0 .. kMaxDims - 1
  int64_t sizes[kMaxDims] = {};
  int64_t src_strides[kMaxDims] = {};      // bytes
  int64_t dst_strides[kMaxDims] = {};      // bytes
  int64_t src_offset = 0, dst_offset = 0;  // bytes from the base pointers
  int64_t rows = 1;
  int64_t row_bytes = 0;
  int vec = 0;  // 4, 8 or 16: divides row_bytes, both rows' starts and every stride
};

// The plan for copying src into dst (the same logical shape; element bytes each, the
// base pointers' addresses src_base and dst_base), or nothing where the row copy does
// not apply: both layouts contiguous (the generic kernel's flat path takes that),
// different sizes, a negative stride, an innermost dimension (after size-1 dimensions
// are dropped and adjacent ones merged where both layouts' strides chain) not of stride
// 1 on both sides, an output stride of 0, or no common alignment of at least 4 bytes.
inline std::optional<RowCopyPlan> row_copy_plan(const StridedLayout& src, const StridedLayout& dst,
                                                int64_t element, uintptr_t src_base,
                                                uintptr_t dst_base) {
  if ((src.contiguous && dst.contiguous) || src.ndim != dst.ndim || element <= 0)
    return std::nullopt;
  int64_t sizes[kMaxDims], ss[kMaxDims], ds[kMaxDims];
  int n = 0;
  for (int d = 0; d < src.ndim; ++d) {
    if (src.sizes[d] != dst.sizes[d] || src.sizes[d] == 0) return std::nullopt;
    if (src.strides[d] < 0 || dst.strides[d] < 0) return std::nullopt;
    if (src.sizes[d] == 1) continue;
    if (n > 0 && ss[n - 1] == src.strides[d] * src.sizes[d] &&
        ds[n - 1] == dst.strides[d] * dst.sizes[d]) {
      sizes[n - 1] *= src.sizes[d];  // both step over this dimension whole
      ss[n - 1] = src.strides[d];
      ds[n - 1] = dst.strides[d];
      continue;
    }
    sizes[n] = src.sizes[d];
    ss[n] = src.strides[d];
    ds[n] = dst.strides[d];
    ++n;
  }
  if (n == 0 || ss[n - 1] != 1 || ds[n - 1] != 1) return std::nullopt;
  RowCopyPlan p;
  p.outer = n - 1;
  p.row_bytes = sizes[n - 1] * element;
  p.src_offset = src.offset * element;
  p.dst_offset = dst.offset * element;
  uint64_t common =
      static_cast<uint64_t>(p.row_bytes) | (src_base + p.src_offset) | (dst_base + p.dst_offset);
  for (int d = 0; d < p.outer; ++d) {
    if (ds[d] == 0) return std::nullopt;  // rows written twice
    p.sizes[d] = sizes[d];
    p.src_strides[d] = ss[d] * element;
    p.dst_strides[d] = ds[d] * element;
    p.rows *= sizes[d];
    common |= static_cast<uint64_t>(p.src_strides[d]) | static_cast<uint64_t>(p.dst_strides[d]);
  }
  for (int v = 16; v >= 4; v /= 2)
    if (common % static_cast<uint64_t>(v) == 0) {
      p.vec = v;
      return p;
    }
  return std::nullopt;
}

}  // namespace ember::cuda
