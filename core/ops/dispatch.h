// Internal to core/ops: how an op reaches its kernel. Layouts of operands over an
// iteration shape, typed dispatch for the CPU loops, and the stream to launch on.
#pragma once

#include <cuda_runtime_api.h>

#include "core/tensor.h"
#include "core/base/elementwise_math.h"
#include "cuda/runtime.h"

namespace ember::detail {

// t's layout over `iter` (t's shape broadcast to iter: missing or size-1 dims get
// stride 0). Throws naming `op` if t has more than kMaxDims dims.
StridedLayout layout_of(const Tensor& t, const Shape& iter, const char* op);
inline StridedLayout layout_of(const Tensor& t, const char* op) {
  return layout_of(t, t.sizes(), op);
}

inline cudaStream_t stream_of(const Tensor& t) {
  return cuda::current_stream(t.device().index);
}

// Calls f(T{}) with T the host storage type of dtype.
template <typename F>
decltype(auto) dispatch_cpu(DType t, F&& f) {
  switch (t) {
    case DType::Float32: return f(float{});
    case DType::Float64: return f(double{});
    case DType::BFloat16: return f(BFloat16{});
    case DType::Int64: return f(int64_t{});
  }
  return f(float{});
}

template <typename S>
inline double load_as_double(const S* p) { return static_cast<double>(*p); }
template <>
inline double load_as_double<BFloat16>(const BFloat16* p) { return static_cast<float>(*p); }
template <typename S>
inline void store_from_double(S* p, double v) { *p = static_cast<S>(v); }
template <>
inline void store_from_double<BFloat16>(BFloat16* p, double v) {
  *p = BFloat16(static_cast<float>(v));
}

}  // namespace ember::detail
