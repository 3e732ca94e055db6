// The row copy behind same-dtype copies of whole contiguous rows
// (cuda/kernels/row_copy_plan.h, cuda/kernels/elementwise.cu's row_copy_kernel,
// set_row_copy). On the CPU: which layouts get a plan, with which vector width, and, for
// each that does, every byte's source and output address from the plan against the
// layouts' own (StridedLayout::offset_of). On CUDA (suite "cuda"): copies with the row
// copy on give the generic copy's bytes for every dtype: slices of the last dimension
// made contiguous, pieces copied into one (B, T, 3C) buffer (a GPT's q, k, v
// gradients), heads permuted, rows of odd lengths and offsets.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "core/ops.h"
#include "cuda/kernels/elementwise.h"
#include "cuda/kernels/row_copy_plan.h"
#include "gradcheck.h"
#include "switch_guard.h"

using namespace ember;
using ember::cuda::row_copy_plan;
using ember::cuda::RowCopyPlan;
using ember::testing::randn64;
using ember::testing::same_bits;
using ember::testing::strided_layout;

namespace {

StridedLayout dense(const Shape& sizes, int64_t offset = 0) {
  return strided_layout(sizes, contiguous_strides(sizes), offset);
}

// Every byte's source and output offsets from the plan equal the layouts' own, and the
// plan moves each of the n elements once.
void check_replay(const StridedLayout& src, const StridedLayout& dst, int64_t element,
                  const RowCopyPlan& p) {
  const int64_t n = numel_of(Shape(src.sizes, src.sizes + src.ndim));
  REQUIRE(p.rows * p.row_bytes == n * element);
  REQUIRE(p.row_bytes % p.vec == 0);
  int64_t mismatches = 0;
  for (int64_t r = 0; r < p.rows; ++r) {
    int64_t so = p.src_offset, yo = p.dst_offset, rest = r;
    for (int d = p.outer - 1; d >= 0; --d) {
      const int64_t digit = rest % p.sizes[d];
      rest /= p.sizes[d];
      so += digit * p.src_strides[d];
      yo += digit * p.dst_strides[d];
    }
    for (int64_t b = 0; b < p.row_bytes; ++b) {
      const int64_t linear = (r * p.row_bytes + b) / element, within = b % element;
      mismatches += so + b != src.offset_of(linear) * element + within;
      mismatches += yo + b != dst.offset_of(linear) * element + within;
    }
  }
  CHECK(mismatches == 0);
}

}  // namespace

TEST_CASE("row copy plan: a GPT's q, k, v pieces into one (B, T, 3C) gradient") {
  // d_q (B, T, C) contiguous into columns [C, 2C) of a (B, T, 3C) buffer: B and T merge
  // on both sides, one outer dimension of B T rows of C elements.
  const int64_t b = 4, t = 8, c = 96;
  const StridedLayout src = dense({b, t, c});
  const StridedLayout dst = strided_layout({b, t, c}, {t * 3 * c, 3 * c, 1}, c);
  const auto p = row_copy_plan(src, dst, 2, 0, 0);
  REQUIRE(p.has_value());
  CHECK(p->outer == 1);
  CHECK(p->rows == b * t);
  CHECK(p->row_bytes == c * 2);
  CHECK(p->vec == 16);
  CHECK(p->dst_offset == c * 2);
  check_replay(src, dst, 2, *p);
  // The other way: a slice of the last dimension made contiguous (split's piece).
  const auto back = row_copy_plan(dst, src, 2, 0, 0);
  REQUIRE(back.has_value());
  check_replay(dst, src, 2, *back);
}

TEST_CASE("row copy plan: heads permuted, vector widths, odd rows and offsets") {
  // (B, H, T, D) viewed from a (B, T, H, D) buffer, made contiguous: two outer
  // dimensions stay apart (H and T swap), D contiguous on both sides.
  const int64_t b = 2, h = 3, t = 5, d = 64;
  const StridedLayout heads = strided_layout({b, h, t, d}, {t * h * d, d, h * d, 1});
  auto p = row_copy_plan(heads, dense({b, h, t, d}), 2, 0, 0);
  REQUIRE(p.has_value());
  CHECK(p->outer == 3);  // b, h and t: neither pair chains on both sides
  CHECK(p->vec == 16);
  check_replay(heads, dense({b, h, t, d}), 2, *p);
  // Rows of 6 bfloat16 (12 bytes): 4 bytes a thread.
  const StridedLayout six = strided_layout({7, 6}, {10, 1});
  p = row_copy_plan(six, dense({7, 6}), 2, 0, 0);
  REQUIRE(p.has_value());
  CHECK(p->vec == 4);
  check_replay(six, dense({7, 6}), 2, *p);
  // 8-byte rows (two float32) at 16-byte strides, an 8-byte base: 8 bytes a thread.
  p = row_copy_plan(strided_layout({5, 2}, {4, 1}), dense({5, 2}), 4, 8, 8);
  REQUIRE(p.has_value());
  CHECK(p->vec == 8);
  check_replay(strided_layout({5, 2}, {4, 1}), dense({5, 2}), 4, *p);
  // An offset of one bfloat16 on one side: 2-byte alignment, no plan.
  CHECK_FALSE(
      row_copy_plan(strided_layout({4, 8}, {16, 1}, 1), dense({4, 8}), 2, 0, 0).has_value());
  // A base pointer off 16 bytes by 4: the width drops to 4.
  p = row_copy_plan(strided_layout({4, 8}, {16, 1}), dense({4, 8}), 4, 4, 0);
  REQUIRE(p.has_value());
  CHECK(p->vec == 4);
  // A broadcast source row (outer stride 0) is read once per output row.
  p = row_copy_plan(strided_layout({3, 8}, {0, 1}), dense({3, 8}), 4, 0, 0);
  REQUIRE(p.has_value());
  check_replay(strided_layout({3, 8}, {0, 1}), dense({3, 8}), 4, *p);
}

TEST_CASE("row copy plan: the layouts it leaves to the generic copy") {
  // Both contiguous: the flat path.
  CHECK_FALSE(row_copy_plan(dense({4, 8}), dense({4, 8}), 4, 0, 0).has_value());
  // The innermost dimension strided on either side (a transpose is not rows).
  CHECK_FALSE(row_copy_plan(strided_layout({8, 4}, {1, 8}), dense({8, 4}), 4, 0, 0).has_value());
  CHECK_FALSE(row_copy_plan(dense({8, 4}), strided_layout({8, 4}, {1, 8}), 4, 0, 0).has_value());
  // An output written twice (stride 0), a negative stride, an empty tensor.
  CHECK_FALSE(row_copy_plan(dense({3, 8}), strided_layout({3, 8}, {0, 1}), 4, 0, 0).has_value());
  CHECK_FALSE(
      row_copy_plan(strided_layout({3, 8}, {-16, 1}, 32), dense({3, 8}), 4, 0, 0).has_value());
  CHECK_FALSE(row_copy_plan(strided_layout({0, 8}, {16, 1}), dense({0, 8}), 4, 0, 0).has_value());
  // Different sizes (not one logical shape).
  CHECK_FALSE(row_copy_plan(strided_layout({4, 8}, {16, 1}), dense({8, 4}), 4, 0, 0).has_value());
  // bool rows of 3 bytes: no 4-byte width.
  CHECK_FALSE(row_copy_plan(strided_layout({5, 3}, {4, 1}), dense({5, 3}), 1, 0, 0).has_value());
}

TEST_CASE("kernels/row_copy: copies give the generic copy's bytes, every dtype" *
          doctest::test_suite("cuda")) {
  ember::testing::SwitchGuard guard(cuda::row_copy, cuda::set_row_copy);
  for (DType dtype : {kFloat32, kBFloat16, kFloat64, kInt64, kBool}) {
    for (const Shape& shape : std::vector<Shape>{{2, 5, 96}, {3, 7, 24}, {4, 33, 64}, {1, 1, 16}}) {
      INFO("dtype ", dtype, " shape ", shape[0], "x", shape[1], "x", shape[2]);
      Tensor x = randn64({shape[0], shape[1], 3 * shape[2]}, 17 + shape[1]).to(kCUDA);
      x = dtype == kBool ? gt(x, 0.0) : dtype == kInt64 ? (x * 1000.0).to(kInt64) : x.to(dtype);
      const int64_t c = shape[2];
      // split's middle piece made contiguous.
      const Tensor piece = x.slice(2, c, 2 * c);
      cuda::set_row_copy(false);
      const Tensor generic = piece.contiguous();
      cuda::set_row_copy(true);
      const Tensor rows = piece.contiguous();
      CHECK(same_bits(rows, generic));
      CHECK(same_bits(rows, x.to(kCPU).slice(2, c, 2 * c).contiguous()));
      // The pieces copied back into one buffer, each into its own columns.
      Tensor whole = zeros(x.sizes(), x.options());
      for (int64_t i = 0; i < 3; ++i) {
        Tensor part = whole.slice(2, i * c, (i + 1) * c);
        part.copy_(x.slice(2, i * c, (i + 1) * c).contiguous());
      }
      CHECK(same_bits(whole, x));
    }
  }
}

TEST_CASE("kernels/row_copy: heads permuted, odd rows, offsets and many rows" *
          doctest::test_suite("cuda")) {
  ember::testing::SwitchGuard guard(cuda::row_copy, cuda::set_row_copy);
  cuda::set_row_copy(true);
  // (B, T, H, D) -> (B, H, T, D), bfloat16, D 64: three outer dimensions.
  const Tensor bthd = randn64({2, 9, 3, 64}, 21).to(kCUDA, kBFloat16);
  CHECK(same_bits(bthd.transpose(1, 2).contiguous(), bthd.to(kCPU).transpose(1, 2).contiguous()));
  // Rows of 6 bfloat16 at an offset of 4 elements (8 bytes): 4 or 8 bytes a thread.
  const Tensor wide = randn64({40, 10}, 22).to(kCUDA, kBFloat16);
  const Tensor six = wide.slice(1, 4, 10);
  CHECK(same_bits(six.contiguous(), wide.to(kCPU).slice(1, 4, 10).contiguous()));
  // An odd offset (one bfloat16): no plan, the generic copy, the same bits.
  const Tensor odd = wide.slice(1, 1, 9);
  CHECK(same_bits(odd.contiguous(), wide.to(kCPU).slice(1, 1, 9).contiguous()));
  // More chunks than one grid covers (3.6 M of 16 bytes against at most 32 blocks of
  // 256 threads per multiprocessor: the grid-stride loop), float32.
  const Tensor tall = randn64({300000, 64}, 23).to(kCUDA, kFloat32);
  CHECK(same_bits(tall.slice(1, 16, 64).contiguous(), tall.to(kCPU).slice(1, 16, 64).contiguous()));
}

TEST_CASE("kernels/row_copy: EMBER_ROW_COPY's setting can be set and read") {
  ember::testing::SwitchGuard guard(cuda::row_copy, cuda::set_row_copy);
  cuda::set_row_copy(true);
  CHECK(cuda::row_copy());
  cuda::set_row_copy(false);
  CHECK_FALSE(cuda::row_copy());
}
