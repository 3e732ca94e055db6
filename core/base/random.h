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

// A 32-bit mixing function with full avalanche (the "triple32" multiply-xorshift
// constants from Chris Wellons' hash-prospector search): a bijection of 32-bit words.
EMBER_HD uint32_t mix32(uint32_t x) {
  x ^= x >> 17;
  x *= 0xED5AD4BBu;
  x ^= x >> 11;
  x *= 0xAC4C1B51u;
  x ^= x >> 15;
  x *= 0x31848BABu;
  x ^= x >> 14;
  return x;
}

// Dropout's 32 random bits at (seed, counter): mix32 of the counter's low word XOR a key
// made of the seed (random_bits, loop-invariant wherever a kernel draws many counters of
// one seed) and the counter's high word. 32-bit multiplies only (three per counter), so
// a kernel that draws a bit per element (attention dropout draws one per weight, three
// times) spends a third of splitmix64's integer work on it. For a given seed and high
// word, distinct low words give distinct bits (mix32 is a bijection).
// (dropout_key: the seed's part, which a kernel can take from its caller.)
EMBER_HD uint32_t dropout_key(uint64_t seed) {
  return static_cast<uint32_t>(random_bits(seed, 0x243F6A8885A308D3ull) >> 32);
}
EMBER_HD uint32_t dropout_bits_keyed(uint32_t key, uint64_t counter) {
  const uint32_t hi = static_cast<uint32_t>(counter >> 32);
  return mix32(static_cast<uint32_t>(counter) ^ (key + hi * 0x9E3779B9u));
}
EMBER_HD uint32_t dropout_bits(uint64_t seed, uint64_t counter) {
  return dropout_bits_keyed(dropout_key(seed), counter);
}

// Dropout's keep test on counter `counter`: its dropout_bits at or above `threshold`, so
// an element is kept with probability 1 - threshold / 2^32. Integer arithmetic only:
// both devices (and a fused kernel anywhere) draw the same mask.
EMBER_HD bool dropout_keeps(uint64_t seed, uint64_t counter, uint32_t threshold) {
  return dropout_bits(seed, counter) >= threshold;
}

// The threshold for drop probability p in [0, 1): ceil(p 2^32), so p = 0 keeps all.
inline uint32_t dropout_threshold(double p) {
  const double t = std::ceil(p * 4294967296.0);
  return t >= 4294967295.0 ? 0xFFFFFFFFu : t <= 0.0 ? 0u : static_cast<uint32_t>(t);
}

// Standard normal by Box-Muller on two independent uniforms derived from one counter.
EMBER_HD double random_normal(uint64_t seed, uint64_t counter) {
  double u1 = random_uniform(seed, 2 * counter);
  double u2 = random_uniform(seed, 2 * counter + 1);
  if (u1 < 1e-300) u1 = 1e-300;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

}  // namespace ember
