// The order sort uses on both devices: a value mapped to an unsigned 64-bit key
// whose integer order is the value's order, with torch's conventions (every NaN
// above +inf and equal to the others, -0.0 equal to 0.0). Descending order is the
// complement of the key, so a stable sort keeps equal values in their order.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/base/hd.h"

namespace ember {

EMBER_HD uint64_t sort_key(double v, bool descending) {
  uint64_t key = 0xFFF8000000000000ull;  // every NaN: the key of the positive quiet NaN
  if (v == v) {
    if (v == 0.0) v = 0.0;  // -0.0 as 0.0
    uint64_t bits;
    memcpy(&bits, &v, sizeof bits);
    // Negative values: all bits flipped (larger magnitude, smaller key); others:
    // the sign bit set, above every negative.
    key = (bits >> 63) != 0 ? ~bits : bits | (uint64_t{1} << 63);
  }
  return descending ? ~key : key;
}

}  // namespace ember
