// The scalar math of every element-wise op, shared by the CPU reference loops
// (computed in double) and the CUDA kernels (computed in float, or double for
// float64), so both devices run the same formula. Also the counter-based random
// number generator both devices use: same (seed, index) gives the same number.
#pragma once

#include <cmath>
#include <cstdint>

#ifdef __CUDACC__
#define EMBER_HD __host__ __device__ __forceinline__
#else
#define EMBER_HD inline
#endif

namespace ember {

constexpr int kMaxDims = 8;

// How one operand is laid out over the iteration shape: sizes are the iteration
// shape (the same for every operand), strides are the operand's own (0 where it
// is broadcast). Offsets in elements.
struct StridedLayout {
  int ndim = 0;
  // Slots from ndim on are never read. Default-initialisation leaves them unset
  // (layout_of writes every slot, three times per eager binary op); value-
  // initialise (StridedLayout l{}) to have them zeroed.
  int64_t sizes[kMaxDims];
  int64_t strides[kMaxDims];
  int64_t offset = 0;
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

enum class UnaryOp : int {
  Identity,
  Neg,
  Exp,
  Log,
  Sqrt,
  Abs,
  Sign,
  Relu,
  Sigmoid,
  Tanh,
  Gelu,
  Pow,        // x^a
  AddScalar,  // x + a
  MulScalar,  // x * a
  RSubScalar, // a - x
  RDivScalar, // a / x
  GeScalar,   // x >= a ? 1 : 0
  GtScalar,   // x > a ? 1 : 0
};

enum class BinaryOp : int {
  Add,          // x + a*y
  Sub,          // x - y
  Mul,          // x * y
  Div,          // x / y
  ReluGrad,     // g=x, input=y: g * (y > 0)
  SigmoidGrad,  // g=x, output=y: g * y * (1 - y)
  TanhGrad,     // g=x, output=y: g * (1 - y^2)
  GeluGrad,     // g=x, input=y: g * gelu'(y)
  PowGrad,      // g=x, input=y: g * a * y^(a-1)
};

template <typename T>
EMBER_HD T gelu_inner(T x) {
  const T k0 = T(0.7978845608028654);  // sqrt(2/pi)
  const T k1 = T(0.044715);
  return k0 * (x + k1 * x * x * x);
}

template <typename T>
EMBER_HD T apply_unary(UnaryOp op, T x, T a) {
  using std::exp;
  using std::log;
  using std::pow;
  using std::sqrt;
  using std::tanh;
  switch (op) {
    case UnaryOp::Identity: return x;
    case UnaryOp::Neg: return -x;
    case UnaryOp::Exp: return exp(x);
    case UnaryOp::Log: return log(x);
    case UnaryOp::Sqrt: return sqrt(x);
    case UnaryOp::Abs: return x < T(0) ? -x : x;
    case UnaryOp::Sign: return x > T(0) ? T(1) : (x < T(0) ? T(-1) : T(0));
    case UnaryOp::Relu: return x > T(0) ? x : T(0);
    case UnaryOp::Sigmoid: return T(1) / (T(1) + exp(-x));
    case UnaryOp::Tanh: return tanh(x);
    case UnaryOp::Gelu: return T(0.5) * x * (T(1) + tanh(gelu_inner(x)));
    case UnaryOp::Pow: return pow(x, a);
    case UnaryOp::AddScalar: return x + a;
    case UnaryOp::MulScalar: return x * a;
    case UnaryOp::RSubScalar: return a - x;
    case UnaryOp::RDivScalar: return a / x;
    case UnaryOp::GeScalar: return x >= a ? T(1) : T(0);
    case UnaryOp::GtScalar: return x > a ? T(1) : T(0);
  }
  return x;
}

template <typename T>
EMBER_HD T apply_binary(BinaryOp op, T x, T y, T a) {
  using std::pow;
  using std::tanh;
  switch (op) {
    case BinaryOp::Add: return x + a * y;
    case BinaryOp::Sub: return x - y;
    case BinaryOp::Mul: return x * y;
    case BinaryOp::Div: return x / y;
    case BinaryOp::ReluGrad: return y > T(0) ? x : T(0);
    case BinaryOp::SigmoidGrad: return x * y * (T(1) - y);
    case BinaryOp::TanhGrad: return x * (T(1) - y * y);
    case BinaryOp::GeluGrad: {
      T t = tanh(gelu_inner(y));
      T d_inner = T(0.7978845608028654) * (T(1) + T(3) * T(0.044715) * y * y);
      return x * (T(0.5) * (T(1) + t) + T(0.5) * y * (T(1) - t * t) * d_inner);
    }
    case BinaryOp::PowGrad: return x * a * pow(y, a - T(1));
  }
  return x;
}

// splitmix64 finaliser of (seed, counter): a good 64-bit mix, cheap on both devices.
EMBER_HD uint64_t random_bits(uint64_t seed, uint64_t counter) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + counter * 0xD1B54A32D192ED03ull + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Uniform in [0, 1) with 53 random bits.
EMBER_HD double random_uniform(uint64_t seed, uint64_t counter) {
  return static_cast<double>(random_bits(seed, counter) >> 11) * (1.0 / 9007199254740992.0);
}

// Standard normal by Box-Muller on two independent uniforms derived from one counter.
EMBER_HD double random_normal(uint64_t seed, uint64_t counter) {
  double u1 = random_uniform(seed, 2 * counter);
  double u2 = random_uniform(seed, 2 * counter + 1);
  if (u1 < 1e-300) u1 = 1e-300;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

}  // namespace ember
