// Shapes and strides: sizes as int64_t vectors, strides in elements. Helpers for
// element counts, contiguous strides, broadcasting and dim wrapping; each throws
// ember::Error naming the op when the input is wrong.
#pragma once

#include <algorithm>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

namespace ember {

// A vector of int64_t (std::vector's interface, as much of it as ember uses) that
// keeps up to kInline values in place. An eager op makes several shapes (its
// output's sizes and strides, the ones its backward and graph node keep); with
// up to six dims none of them touches the heap (issue 8). Converts to and from
// std::vector<int64_t>.
class Shape {
 public:
  using value_type = int64_t;
  using size_type = size_t;
  using difference_type = std::ptrdiff_t;
  using reference = int64_t&;
  using const_reference = const int64_t&;
  using pointer = int64_t*;
  using const_pointer = const int64_t*;
  using iterator = int64_t*;
  using const_iterator = const int64_t*;
  using reverse_iterator = std::reverse_iterator<iterator>;
  using const_reverse_iterator = std::reverse_iterator<const_iterator>;
  static constexpr size_t kInline = 6;

  Shape() noexcept {}
  explicit Shape(size_t n, int64_t value = 0) { assign(n, value); }
  Shape(std::initializer_list<int64_t> values) { assign(values.begin(), values.end()); }
  template <std::input_iterator It>
  Shape(It first, It last) {
    assign(first, last);
  }
  Shape(const std::vector<int64_t>& values) { assign(values.begin(), values.end()); }
  Shape(const Shape& other) { assign(other.begin(), other.end()); }
  Shape(Shape&& other) noexcept { take(other); }
  ~Shape() { release(); }
  Shape& operator=(const Shape& other) {
    if (this != &other) assign(other.begin(), other.end());
    return *this;
  }
  Shape& operator=(Shape&& other) noexcept {
    if (this != &other) {
      release();
      take(other);
    }
    return *this;
  }
  Shape& operator=(std::initializer_list<int64_t> values) {
    assign(values.begin(), values.end());
    return *this;
  }
  operator std::vector<int64_t>() const { return std::vector<int64_t>(begin(), end()); }

  size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  size_t capacity() const noexcept { return capacity_; }
  int64_t* data() noexcept { return data_; }
  const int64_t* data() const noexcept { return data_; }
  iterator begin() noexcept { return data_; }
  iterator end() noexcept { return data_ + size_; }
  const_iterator begin() const noexcept { return data_; }
  const_iterator end() const noexcept { return data_ + size_; }
  const_iterator cbegin() const noexcept { return data_; }
  const_iterator cend() const noexcept { return data_ + size_; }
  reverse_iterator rbegin() noexcept { return reverse_iterator(end()); }
  reverse_iterator rend() noexcept { return reverse_iterator(begin()); }
  const_reverse_iterator rbegin() const noexcept { return const_reverse_iterator(end()); }
  const_reverse_iterator rend() const noexcept { return const_reverse_iterator(begin()); }
  int64_t& operator[](size_t i) noexcept { return data_[i]; }
  const int64_t& operator[](size_t i) const noexcept { return data_[i]; }
  int64_t& at(size_t i) { return data_[checked(i)]; }
  const int64_t& at(size_t i) const { return data_[checked(i)]; }
  int64_t& front() noexcept { return data_[0]; }
  const int64_t& front() const noexcept { return data_[0]; }
  int64_t& back() noexcept { return data_[size_ - 1]; }
  const int64_t& back() const noexcept { return data_[size_ - 1]; }

  void reserve(size_t n) {
    if (n > capacity_) grow(n);
  }
  void resize(size_t n, int64_t value = 0) {
    reserve(n);
    if (n > size_) std::fill(data_ + size_, data_ + n, value);
    size_ = static_cast<uint32_t>(n);
  }
  void clear() noexcept { size_ = 0; }
  void push_back(int64_t value) {
    if (size_ == capacity_) grow(size_ + 1);
    data_[size_++] = value;
  }
  int64_t& emplace_back(int64_t value) {
    push_back(value);
    return back();
  }
  void pop_back() noexcept { --size_; }
  void assign(size_t n, int64_t value) {
    clear();
    resize(n, value);
  }
  template <std::input_iterator It>
  void assign(It first, It last) {
    if constexpr (std::forward_iterator<It>) {
      const auto n = static_cast<size_t>(std::distance(first, last));
      reserve(n);  // a range inside *this never needs more room: it stays valid
      std::copy(first, last, data_);
      size_ = static_cast<uint32_t>(n);
    } else {
      clear();
      for (; first != last; ++first) push_back(*first);
    }
  }
  void assign(std::initializer_list<int64_t> values) { assign(values.begin(), values.end()); }
  iterator insert(const_iterator pos, int64_t value) { return insert(pos, 1, value); }
  iterator insert(const_iterator pos, size_t count, int64_t value) {
    const auto i = static_cast<size_t>(pos - data_);
    reserve(size_ + count);
    std::copy_backward(data_ + i, data_ + size_, data_ + size_ + count);
    std::fill(data_ + i, data_ + i + count, value);
    size_ += static_cast<uint32_t>(count);
    return data_ + i;
  }
  template <std::input_iterator It>
  iterator insert(const_iterator pos, It first, It last) {
    const auto i = static_cast<size_t>(pos - data_);
    const Shape values(first, last);  // a copy first: the range may be inside *this
    reserve(size_ + values.size());
    std::copy_backward(data_ + i, data_ + size_, data_ + size_ + values.size());
    std::copy(values.begin(), values.end(), data_ + i);
    size_ += static_cast<uint32_t>(values.size());
    return data_ + i;
  }
  iterator insert(const_iterator pos, std::initializer_list<int64_t> values) {
    return insert(pos, values.begin(), values.end());
  }
  iterator erase(const_iterator pos) { return erase(pos, pos + 1); }
  iterator erase(const_iterator first, const_iterator last) {
    const auto i = static_cast<size_t>(first - data_);
    const auto n = static_cast<size_t>(last - first);
    std::copy(data_ + i + n, data_ + size_, data_ + i);
    size_ -= static_cast<uint32_t>(n);
    return data_ + i;
  }
  void swap(Shape& other) noexcept {
    Shape tmp(std::move(other));
    other = std::move(*this);
    *this = std::move(tmp);
  }
  friend void swap(Shape& a, Shape& b) noexcept { a.swap(b); }

  friend bool operator==(const Shape& a, const Shape& b) noexcept {
    return a.size_ == b.size_ && std::equal(a.begin(), a.end(), b.begin());
  }
  friend std::strong_ordering operator<=>(const Shape& a, const Shape& b) noexcept {
    return std::lexicographical_compare_three_way(a.begin(), a.end(), b.begin(), b.end());
  }

 private:
  size_t checked(size_t i) const {
    if (i >= size_) throw std::out_of_range("Shape::at: index out of range");
    return i;
  }
  void grow(size_t min_capacity) {
    if (min_capacity > UINT32_MAX) throw std::length_error("Shape: too many dims");
    const size_t cap = std::min<size_t>(UINT32_MAX, std::max<size_t>(min_capacity, 2 * capacity_));
    auto* heap = new int64_t[cap];
    std::copy(data_, data_ + size_, heap);
    release();
    data_ = heap;
    capacity_ = static_cast<uint32_t>(cap);
  }
  void release() noexcept {
    if (data_ != inline_) delete[] data_;
  }
  // Takes other's values (its heap block, when it has one); leaves it empty.
  void take(Shape& other) noexcept {
    if (other.data_ == other.inline_) {
      std::copy(other.inline_, other.inline_ + other.size_, inline_);
      data_ = inline_;
      capacity_ = kInline;
    } else {
      data_ = other.data_;
      capacity_ = other.capacity_;
      other.data_ = other.inline_;
      other.capacity_ = kInline;
    }
    size_ = other.size_;
    other.size_ = 0;
  }

  int64_t* data_ = inline_;
  uint32_t size_ = 0;
  uint32_t capacity_ = kInline;
  int64_t inline_[kInline] = {};
};

int64_t numel_of(const Shape& sizes);
Shape contiguous_strides(const Shape& sizes);
// Wraps a possibly negative dim into [0, ndim); throws naming `op` when out of range.
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op);
// The broadcast of two shapes (numpy rules); throws naming `op` and both shapes.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);
// Checks that no size is negative; throws naming `op`.
void check_sizes(const Shape& sizes, const char* op);
std::string shape_str(const Shape& s);

// Prints "[2, 3]", as shape_str.
std::ostream& operator<<(std::ostream& os, const Shape& s);

struct ShapeStr {
  const Shape& s;
};
std::ostream& operator<<(std::ostream& os, ShapeStr s);

}  // namespace ember
