// Element types. float32 is the working type, float64 the reference type for
// gradchecks, bfloat16 the tensor-core type (stored as raw bits, computed in
// float), int64 for indices and counts, bool (one byte) for masks and the
// results of comparisons. Conversions here are host-side and exact (round to
// nearest even for bfloat16). promote_types is PyTorch's type promotion.
#pragma once

#include <cstdint>
#include <cstring>
#include <ostream>
#include <string_view>

namespace ember {

// New dtypes go at the end: checkpoints store the code.
enum class DType : uint8_t { Float32, Float64, BFloat16, Int64, Bool };

constexpr size_t element_size(DType t) {
  switch (t) {
    case DType::Float32:
      return 4;
    case DType::Float64:
      return 8;
    case DType::BFloat16:
      return 2;
    case DType::Int64:
      return 8;
    case DType::Bool:
      return 1;
  }
  return 0;
}

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::Float32:
      return "float32";
    case DType::Float64:
      return "float64";
    case DType::BFloat16:
      return "bfloat16";
    case DType::Int64:
      return "int64";
    case DType::Bool:
      return "bool";
  }
  return "?";
}

constexpr bool is_floating(DType t) {
  return t == DType::Float32 || t == DType::Float64 || t == DType::BFloat16;
}

// PyTorch's categories, lowest first: bool < integer < floating point.
constexpr int dtype_category(DType t) {
  return t == DType::Bool ? 0 : t == DType::Int64 ? 1 : 2;
}

// The dtype both operands of a binary op are computed in, as torch.promote_types:
// the higher category wins (int64 + float32 -> float32, bool + int64 -> int64);
// within floating point the wider type (bfloat16 + float32 -> float32, anything
// + float64 -> float64).
constexpr DType promote_types(DType a, DType b) {
  if (a == b) return a;
  const int ca = dtype_category(a), cb = dtype_category(b);
  if (ca != cb) return ca > cb ? a : b;
  // Both floating point and different: float64 beats all, float32 beats bfloat16.
  if (a == DType::Float64 || b == DType::Float64) return DType::Float64;
  return DType::Float32;
}

inline std::ostream& operator<<(std::ostream& os, DType t) {
  return os << dtype_name(t);
}

// bfloat16 as 16 raw bits; arithmetic goes through float.
struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  explicit BFloat16(float f) : bits(from_float(f)) {}
  operator float() const { return to_float(bits); }

  static uint16_t from_float(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // NaN
    u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
    return static_cast<uint16_t>(u >> 16);
  }
  static float to_float(uint16_t b) {
    uint32_t u = static_cast<uint32_t>(b) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
};

template <typename T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::Float32;
}
template <>
constexpr DType dtype_of<double>() {
  return DType::Float64;
}
template <>
constexpr DType dtype_of<BFloat16>() {
  return DType::BFloat16;
}
template <>
constexpr DType dtype_of<int64_t>() {
  return DType::Int64;
}
template <>
constexpr DType dtype_of<bool>() {
  return DType::Bool;
}

}  // namespace ember
