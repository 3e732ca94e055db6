// The counter-based random number generator both devices use: the value at
// (seed, counter) depends on nothing else, so the same seed gives the same numbers
// on CPU and CUDA, in any order and from any number of threads.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/base/hd.h"

namespace ember {

// splitmix64 finaliser of (seed, counter): a good 64-bit mix, cheap on both devices.
EMBER_HD uint64_t random_bits(uint64_t seed, uint64_t counter) {
  uint64_t z =
      seed * 0x9E3779B97F4A7C15ull + counter * 0xD1B54A32D192ED03ull + 0x632BE59BD9B4E019ull;
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
