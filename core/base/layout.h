// How one operand of an element-wise kernel is laid out over the iteration shape,
// for the CPU loops and the CUDA kernels alike: sizes are the iteration shape (the
// same for every operand), strides are the operand's own (0 where it broadcasts).
#pragma once

#include <cstdint>

#include "core/base/hd.h"

namespace ember {

constexpr int kMaxDims = 8;

struct StridedLayout {
  int ndim = 0;
  // Slots from ndim on are never read. Default-initialisation leaves them unset
  // (layout_of writes every slot, three times per eager binary op); value-
  // initialise (StridedLayout l{}) to have them zeroed.
  int64_t sizes[kMaxDims];
  int64_t strides[kMaxDims];
  int64_t offset = 0;      // in elements
  bool contiguous = true;  // strides are the contiguous ones for sizes

  EMBER_HD int64_t offset_of(int64_t linear) const {
    if (contiguous) return offset + linear;
    int64_t off = offset;
    for (int d = ndim - 1; d >= 0; --d) {
      int64_t c = linear % sizes[d];
      linear /= sizes[d];
      off += c * strides[d];
    }
    return off;
  }
};

// n contiguous elements.
inline StridedLayout flat_layout(int64_t n) {
  StridedLayout l{};
  l.ndim = 1;
  l.sizes[0] = n;
  l.strides[0] = 1;
  return l;
}

}  // namespace ember
