// Internal to core/ops: operands' layouts over an iteration shape, for the kernel
// table's element-wise families.
#pragma once

#include "core/base/layout.h"
#include "core/tensor.h"

namespace ember::detail {

// t's layout over `iter` (t's shape broadcast to iter: missing or size-1 dims get
// stride 0). Throws naming `op` if t has more than kMaxDims dims.
StridedLayout layout_of(const Tensor& t, const Shape& iter, const char* op);
inline StridedLayout layout_of(const Tensor& t, const char* op) {
  return layout_of(t, t.sizes(), op);
}

}  // namespace ember::detail
