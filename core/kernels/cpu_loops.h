// Internal to the CPU kernels (core/kernels/cpu_*.cpp) and host-side conversions:
// typed dispatch over a dtype, and element loads and stores through double, the
// CPU reference's compute type.
#pragma once

#include <cstdint>

#include "core/base/dtype.h"

namespace ember::detail {

// Calls f(T{}) with T the host storage type of dtype.
template <typename F>
decltype(auto) dispatch_cpu(DType t, F&& f) {
  switch (t) {
    case DType::Float32:
      return f(float{});
    case DType::Float64:
      return f(double{});
    case DType::BFloat16:
      return f(BFloat16{});
    case DType::Int64:
      return f(int64_t{});
    case DType::Bool:
      return f(bool{});
  }
  return f(float{});
}

template <typename S>
inline double load_as_double(const S* p) {
  return static_cast<double>(*p);
}
template <>
inline double load_as_double<BFloat16>(const BFloat16* p) {
  return static_cast<float>(*p);
}
template <typename S>
inline void store_from_double(S* p, double v) {
  *p = static_cast<S>(v);
}
template <>
inline void store_from_double<BFloat16>(BFloat16* p, double v) {
  *p = BFloat16(static_cast<float>(v));
}
template <>
inline void store_from_double<bool>(bool* p, double v) {
  *p = v != 0.0;  // NaN is true, as PyTorch's conversion
}
// Integer conversions of values past int64's range are undefined behaviour in
// C++; saturate them (NaN gives 0) so that no input can trigger it.
template <>
inline void store_from_double<int64_t>(int64_t* p, double v) {
  constexpr double kTwo63 = 9223372036854775808.0;
  *p = v != v ? 0 : v >= kTwo63 ? INT64_MAX : v < -kTwo63 ? INT64_MIN : static_cast<int64_t>(v);
}

}  // namespace ember::detail
