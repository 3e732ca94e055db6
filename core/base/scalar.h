// Scalar: a number given to an op next to a tensor (t + 1, t * 0.5, clamp(t, 0, 6)),
// as libtorch's at::Scalar. It remembers whether it was written as an integer or
// a floating-point value, which is what PyTorch's type promotion asks of it: a
// scalar never widens a tensor of its own category (a float32 tensor times 0.5
// stays float32, an int64 tensor plus 1 stays int64), but a floating-point scalar
// makes an integer tensor float32 (int64 tensor * 0.5 -> float32).
#pragma once

#include <cstdint>
#include <type_traits>

namespace ember {

class Scalar {
 public:
  // Implicit from any arithmetic type, so ops take 2, 2.5f, 2.5 or an int64_t.
  template <typename T, std::enable_if_t<std::is_arithmetic_v<T>, int> = 0>
  Scalar(T v) : value_(static_cast<double>(v)), integral_(std::is_integral_v<T>) {}

  double to_double() const { return value_; }
  bool is_integral() const { return integral_; }
  Scalar operator-() const {
    Scalar r = *this;
    r.value_ = -value_;
    return r;
  }

 private:
  double value_;
  bool integral_;
};

}  // namespace ember
