// Shape: std::vector's behaviour with the first kInline values kept in place.
#include <doctest/doctest.h>

#include <utility>
#include <vector>

#include "core/base/shape.h"

using ember::Shape;

namespace {
std::vector<int64_t> iota(size_t n) {
  std::vector<int64_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<int64_t>(i) + 1;
  return v;
}
}  // namespace

TEST_CASE("shape/storage: values stay right across the inline limit") {
  for (size_t n = 0; n <= 2 * Shape::kInline + 1; ++n) {
    const std::vector<int64_t> want = iota(n);
    Shape s;
    for (int64_t v : want) s.push_back(v);
    CHECK(std::vector<int64_t>(s) == want);
    Shape copy = s;
    CHECK(copy == s);
    Shape moved = std::move(copy);
    CHECK(moved == s);
    Shape assigned{9};
    assigned = moved;
    CHECK(assigned == s);
    assigned = Shape(n + 3, 7);
    CHECK(assigned.size() == n + 3);
    CHECK(assigned.back() == 7);
    Shape move_assigned{1, 2};
    move_assigned = std::move(moved);
    CHECK(move_assigned == s);
  }
}

TEST_CASE("shape/edits: insert, erase and resize as std::vector does") {
  for (size_t n = 0; n <= Shape::kInline + 2; ++n) {
    std::vector<int64_t> v = iota(n);
    Shape s(v.begin(), v.end());
    for (size_t at = 0; at <= n; ++at) {
      std::vector<int64_t> wv = v;
      Shape ws = s;
      wv.insert(wv.begin() + static_cast<std::ptrdiff_t>(at), 42);
      ws.insert(ws.begin() + static_cast<std::ptrdiff_t>(at), 42);
      CHECK(std::vector<int64_t>(ws) == wv);
      wv.insert(wv.begin() + static_cast<std::ptrdiff_t>(at), v.begin(), v.end());
      ws.insert(ws.begin() + static_cast<std::ptrdiff_t>(at), s.begin(), s.end());
      CHECK(std::vector<int64_t>(ws) == wv);
      // A range of its own values (which std::vector does not allow).
      const std::vector<int64_t> own(wv.begin(), wv.begin() + static_cast<std::ptrdiff_t>(n));
      wv.insert(wv.begin() + static_cast<std::ptrdiff_t>(at), own.begin(), own.end());
      ws.insert(ws.begin() + static_cast<std::ptrdiff_t>(at), ws.begin(), ws.begin() + n);
      CHECK(std::vector<int64_t>(ws) == wv);
      wv.erase(wv.begin() + static_cast<std::ptrdiff_t>(at));
      ws.erase(ws.begin() + static_cast<std::ptrdiff_t>(at));
      CHECK(std::vector<int64_t>(ws) == wv);
    }
    s.resize(n + Shape::kInline, -1);
    v.resize(n + Shape::kInline, -1);
    CHECK(std::vector<int64_t>(s) == v);
    s.resize(1);
    v.resize(1);
    CHECK(std::vector<int64_t>(s) == v);
  }
}

TEST_CASE("shape/compare: equality and order with shapes and vectors") {
  CHECK(Shape{2, 3} == std::vector<int64_t>{2, 3});
  CHECK(std::vector<int64_t>{2, 3} == Shape{2, 3});
  CHECK(Shape{2, 3} != Shape{2, 3, 1});
  CHECK(Shape{2, 3} < Shape{2, 4});
  CHECK(Shape{} < Shape{0});
  CHECK_THROWS_AS((void)Shape{1}.at(1), std::out_of_range);
}
