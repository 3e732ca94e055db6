#include "core/base/shape.h"

#include <limits>
#include <sstream>

#include "core/base/error.h"

namespace ember {

int64_t numel_of(const Shape& sizes) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

Shape contiguous_strides(const Shape& sizes) {
  Shape strides(sizes.size());
  int64_t st = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    strides[i] = st;
    // Only a shape with no elements can overflow here (check_sizes bounds the
    // rest), and its strides address nothing: saturate rather than overflow.
    if (__builtin_mul_overflow(st, sizes[i] > 1 ? sizes[i] : 1, &st))
      st = std::numeric_limits<int64_t>::max();
  }
  return strides;
}

int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op) {
  int64_t lo = ndim > 0 ? -ndim : -1;
  int64_t hi = ndim > 0 ? ndim - 1 : 0;
  EMBER_CHECK(dim >= lo && dim <= hi, op, ": dim ", dim, " is out of range for a tensor with ",
              ndim, " dims (expected ", lo, "..", hi, ")");
  return dim < 0 ? dim + (ndim > 0 ? ndim : 1) : dim;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t sa = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t sb = i < n - b.size() ? 1 : b[i - (n - b.size())];
    EMBER_CHECK(sa == sb || sa == 1 || sb == 1, op, ": shapes ", shape_str(a), " and ",
                shape_str(b), " cannot be broadcast together (dim ", i, ": ", sa, " vs ", sb, ")");
    out[i] = sa == 1 ? sb : sa;
  }
  return out;
}

void check_sizes(const Shape& sizes, const char* op) {
  for (int64_t s : sizes)
    EMBER_CHECK(s >= 0, op, ": negative size ", s, " in shape ", shape_str(sizes));
  // The element count (and numel_of, which trusts it) must not overflow int64;
  // a shape whose bytes do not fit is caught by the allocator as out of memory.
  int64_t n = 1;
  for (int64_t s : sizes)
    EMBER_CHECK(!__builtin_mul_overflow(n, s, &n), op, ": shape ", shape_str(sizes),
                " has more elements than int64 can count");
}

std::string shape_str(const Shape& s) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << ']';
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Shape& s) {
  return os << shape_str(s);
}

std::ostream& operator<<(std::ostream& os, ShapeStr s) {
  return os << shape_str(s.s);
}

}  // namespace ember
