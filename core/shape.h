// Shapes and strides: sizes as int64_t vectors, strides in elements. Helpers for
// element counts, contiguous strides, broadcasting and dim wrapping; each throws
// ember::Error naming the op when the input is wrong.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <string>
#include <vector>

namespace ember {

using Shape = std::vector<int64_t>;

int64_t numel_of(const Shape& sizes);
Shape contiguous_strides(const Shape& sizes);
// Wraps a possibly negative dim into [0, ndim); throws naming `op` when out of range.
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op);
// The broadcast of two shapes (numpy rules); throws naming `op` and both shapes.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);
// Checks that no size is negative; throws naming `op`.
void check_sizes(const Shape& sizes, const char* op);
std::string shape_str(const Shape& s);

struct ShapeStr {
  const Shape& s;
};
std::ostream& operator<<(std::ostream& os, ShapeStr s);

}  // namespace ember
