// tril and triu (a where on an index mask, so every device and autograd come from
// where), and split, chunk and unbind, which return slices (views) of their input.
#include <algorithm>

#include "core/alloc_site.h"
#include "core/autograd.h"
#include "core/ops.h"

namespace ember {

namespace {

// x with the elements of its last two dims kept where (col - row) <= diagonal
// (lower) or >= diagonal (upper), zeros elsewhere.
Tensor triangle(const Tensor& x, int64_t diagonal, bool lower, const char* op) {
  OpSite site(op);
  check_defined(op, x);
  EMBER_CHECK(x.dim() >= 2, op, ": expects a tensor of at least 2 dims, got shape ",
              shape_str(x.sizes()));
  const int64_t rows = x.size(-2), cols = x.size(-1);
  const TensorOptions io = TensorOptions(kInt64).device(x.device());
  // (rows, 1) - (cols) broadcast: offset[r][c] = c - r
  const Tensor offset = sub(arange(static_cast<double>(cols), io),
                            reshape(arange(static_cast<double>(rows), io), {rows, 1}));
  const Scalar d(diagonal);
  const Tensor keep = lower ? le(offset, d) : ge(offset, d);
  return where(keep, x, zeros({}, x.options()));
}

void check_split_input(const char* op, const Tensor& x) {
  check_defined(op, x);
  EMBER_CHECK(x.dim() >= 1, op, ": expects a tensor of at least 1 dim, got a 0-dim tensor");
}

}  // namespace

Tensor tril(const Tensor& x, int64_t diagonal) {
  return triangle(x, diagonal, true, "tril");
}

Tensor triu(const Tensor& x, int64_t diagonal) {
  return triangle(x, diagonal, false, "triu");
}

std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim) {
  check_split_input("split", x);
  dim = wrap_dim(dim, x.dim(), "split");
  EMBER_CHECK(split_size >= 0, "split: split_size must be non-negative, got ", split_size);
  const int64_t n = x.size(dim);
  EMBER_CHECK(split_size > 0 || n == 0, "split: split_size 0 cannot split dim ", dim, " of size ",
              n, " (input of shape ", shape_str(x.sizes()), ")");
  // As torch: a dim of size 0 gives one empty piece.
  if (n == 0) return {slice(x, dim, 0, 0)};
  std::vector<Tensor> pieces;
  for (int64_t at = 0; at < n; at += split_size)
    pieces.push_back(slice(x, dim, at, std::min(n, at + split_size)));
  return pieces;
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& split_sizes, int64_t dim) {
  check_split_input("split", x);
  dim = wrap_dim(dim, x.dim(), "split");
  int64_t total = 0;
  for (int64_t s : split_sizes) {
    EMBER_CHECK(s >= 0, "split: split sizes must be non-negative, got ", shape_str(split_sizes));
    total += s;
  }
  EMBER_CHECK(total == x.size(dim), "split: split sizes ", shape_str(split_sizes), " sum to ",
              total, ", but dim ", dim, " of the input of shape ", shape_str(x.sizes()),
              " has size ", x.size(dim));
  std::vector<Tensor> pieces;
  int64_t at = 0;
  for (int64_t s : split_sizes) {
    pieces.push_back(slice(x, dim, at, at + s));
    at += s;
  }
  return pieces;
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  check_split_input("chunk", x);
  EMBER_CHECK(chunks > 0, "chunk: chunks must be positive, got ", chunks);
  dim = wrap_dim(dim, x.dim(), "chunk");
  const int64_t n = x.size(dim);
  // torch.chunk: pieces of ceil(n / chunks), so there may be fewer than `chunks`.
  const int64_t size = (n + chunks - 1) / chunks;
  return split(x, size, dim);
}

std::vector<Tensor> unbind(const Tensor& x, int64_t dim) {
  check_split_input("unbind", x);
  dim = wrap_dim(dim, x.dim(), "unbind");
  std::vector<Tensor> pieces;
  for (int64_t i = 0; i < x.size(dim); ++i) pieces.push_back(select(x, dim, i));
  return pieces;
}

}  // namespace ember
