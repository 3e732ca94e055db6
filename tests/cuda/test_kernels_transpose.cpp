// The tiled transpose behind same-dtype strided copies (cuda/kernels/transpose_plan.h,
// cuda/kernels/elementwise.cu's transpose_kernel, set_transpose_copy). On the CPU: which
// layouts get a plan, and, for each that does, every element's source address from the
// plan against the layout's own (StridedLayout::offset_of). On CUDA (suite "cuda"): the
// copies with the transpose on give the generic copy's bytes for every dtype, ragged
// tiles, batches, offsets and the layouts conv2d's channels-last copies make.
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/ops.h"
#include "cuda/kernels/elementwise.h"
#include "cuda/kernels/transpose_plan.h"
#include "gradcheck.h"
#include "switch_guard.h"

using namespace ember;
using ember::cuda::transpose_plan;
using ember::cuda::TransposePlan;
using ember::testing::randn64;
using ember::testing::same_bits;
using ember::testing::strided_layout;

namespace {

// sizes and strides permuted: dimension d of the result is dimension perm[d] of the input.
StridedLayout permuted(const Shape& sizes, const std::vector<int>& perm, int64_t offset = 0) {
  const Shape dense = contiguous_strides(sizes);
  Shape ps, pst;
  for (int d : perm) {
    ps.push_back(sizes[d]);
    pst.push_back(dense[d]);
  }
  return strided_layout(ps, pst, offset);
}

// Every output element's source offset from the plan equals the layout's own.
void check_replay(const StridedLayout& src, const TransposePlan& p) {
  REQUIRE(p.batch * p.rows * p.cols == numel_of(Shape(src.sizes, src.sizes + src.ndim)));
  int64_t mismatches = 0;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t i = 0; i < p.rows; ++i)
      for (int64_t j = 0; j < p.cols; ++j) {
        const int64_t linear = (b * p.rows + i) * p.cols + j;  // the output's offset
        const int64_t from_plan = p.offset + b * p.batch_stride + i + j * p.col_stride;
        mismatches += from_plan != src.offset_of(linear);
      }
  CHECK(mismatches == 0);
}

}  // namespace

TEST_CASE("transpose plan: NCHW -> NHWC is a batched transpose, replayed element by element") {
  const StridedLayout dst = strided_layout({0}, {1});  // only its contiguity is read
  for (const Shape& nchw :
       std::vector<Shape>{{2, 64, 8, 8}, {3, 37, 5, 9}, {1, 16, 4, 4}, {4, 128, 3, 7}}) {
    INFO("n, c, h, w = ", nchw[0], ", ", nchw[1], ", ", nchw[2], ", ", nchw[3]);
    const StridedLayout src = permuted(nchw, {0, 2, 3, 1});  // (n, h, w, c)
    const auto p = transpose_plan(src, dst);
    REQUIRE(p.has_value());
    CHECK(p->rows == nchw[2] * nchw[3]);
    CHECK(p->cols == nchw[1]);
    CHECK(p->col_stride == nchw[2] * nchw[3]);
    CHECK(p->batch == nchw[0]);
    if (nchw[0] > 1) CHECK(p->batch_stride == nchw[1] * nchw[2] * nchw[3]);
    check_replay(src, *p);
  }
  // At an offset (a view into a larger buffer) and with a size-1 batch dropped.
  const StridedLayout at = permuted({1, 40, 6, 6}, {0, 2, 3, 1}, 17);
  const auto p = transpose_plan(at, dst);
  REQUIRE(p.has_value());
  CHECK(p->batch == 1);
  CHECK(p->offset == 17);
  check_replay(at, *p);
}

TEST_CASE("transpose plan: a matrix's transpose and conv2d's weight layouts") {
  const StridedLayout dst = strided_layout({0}, {1});
  const StridedLayout t = permuted({50, 70}, {1, 0});  // (70, 50), strides (1, 70)
  auto p = transpose_plan(t, dst);
  REQUIRE(p.has_value());
  CHECK(p->batch == 1);
  CHECK(p->rows == 70);
  CHECK(p->cols == 50);
  check_replay(t, *p);
  // (o, c, kh, kw) -> (o, kh, kw, c): batch o, rows kh * kw = 9 < 16: no plan.
  CHECK_FALSE(transpose_plan(permuted({64, 64, 3, 3}, {0, 2, 3, 1}), dst).has_value());
  // (o, c, kh, kw) -> (c, kh, kw, o): one transpose of (c kh kw) x o.
  const StridedLayout wt = permuted({64, 32, 3, 3}, {1, 2, 3, 0});
  p = transpose_plan(wt, dst);
  REQUIRE(p.has_value());
  CHECK(p->batch == 1);
  CHECK(p->rows == 32 * 9);
  CHECK(p->cols == 64);
  check_replay(wt, *p);
}

TEST_CASE("transpose plan: the layouts it leaves to the generic copy") {
  const StridedLayout dst = strided_layout({0}, {1});
  // Contiguous already (the copy is a memcpy elsewhere).
  CHECK_FALSE(transpose_plan(strided_layout({4, 5}, {5, 1}), dst).has_value());
  // The output's innermost dimension is the source's contiguous one (a row gather).
  CHECK_FALSE(transpose_plan(permuted({8, 20, 32}, {1, 0, 2}), dst).has_value());
  // Too narrow a side: 3 channels (an RGB image to NHWC), 2 rows.
  CHECK_FALSE(transpose_plan(permuted({8, 3, 32, 32}, {0, 2, 3, 1}), dst).has_value());
  CHECK_FALSE(transpose_plan(permuted({2, 100}, {1, 0}), dst).has_value());
  // Four dimensions left after merging (none of the permuted ones chain).
  CHECK_FALSE(transpose_plan(permuted({20, 20, 20, 20}, {3, 1, 0, 2}), dst).has_value());
  // No dimension of stride 1 before the last (a strided slice of every row).
  CHECK_FALSE(transpose_plan(strided_layout({32, 32}, {2, 64}), dst).has_value());
  // The output strided.
  CHECK_FALSE(
      transpose_plan(permuted({32, 32}, {1, 0}), strided_layout({32, 32}, {64, 1})).has_value());
  // An empty tensor.
  CHECK_FALSE(transpose_plan(strided_layout({0, 32}, {1, 0}), dst).has_value());
}

TEST_CASE("kernels/transpose: copies give the generic copy's bytes, every dtype" *
          doctest::test_suite("cuda")) {
  ember::testing::SwitchGuard guard(cuda::transpose_copy, cuda::set_transpose_copy);
  for (DType dtype : {kFloat32, kBFloat16, kFloat64, kInt64, kBool}) {
    for (const Shape& nchw : std::vector<Shape>{
             {2, 64, 8, 8}, {3, 37, 5, 9}, {5, 100, 7, 11}, {128, 64, 4, 4}, {1, 16, 33, 33}}) {
      INFO("dtype ", dtype, " shape ", nchw[0], "x", nchw[1], "x", nchw[2], "x", nchw[3]);
      Tensor x = randn64(nchw, 11 + nchw[1]).to(kCUDA);
      x = dtype == kBool ? gt(x, 0.0) : dtype == kInt64 ? (x * 1000.0).to(kInt64) : x.to(dtype);
      const Tensor view = x.transpose(1, 2).transpose(2, 3);  // (n, h, w, c)
      cuda::set_transpose_copy(false);
      const Tensor generic = view.contiguous();
      cuda::set_transpose_copy(true);
      const Tensor tiled = view.contiguous();
      CHECK(same_bits(tiled, generic));
      // The CPU permutes a contiguous copy of x itself.
      CHECK(same_bits(tiled, x.to(kCPU).transpose(1, 2).transpose(2, 3).contiguous()));
      // Back: NHWC -> NCHW is a transpose too.
      const Tensor back = tiled.transpose(2, 3).transpose(1, 2).contiguous();
      CHECK(same_bits(back, x));
    }
  }
}

TEST_CASE("kernels/transpose: matrices, offsets and the layouts conv2d copies" *
          doctest::test_suite("cuda")) {
  ember::testing::SwitchGuard guard(cuda::transpose_copy, cuda::set_transpose_copy);
  cuda::set_transpose_copy(true);
  // A matrix at an offset into its buffer (a slice of rows), ragged on both sides.
  const Tensor big = randn64({90, 70}, 3).to(kCUDA, kFloat32);
  const Tensor part = big.slice(0, 7, 90);  // (83, 70), offset 7 x 70
  CHECK(same_bits(part.transpose(0, 1).contiguous(),
                  big.to(kCPU).slice(0, 7, 90).transpose(0, 1).contiguous()));
  // The weight's (o, c, kh, kw) -> (c, kh, kw, o) (conv2d's input-gradient pass).
  const Tensor w = randn64({128, 64, 3, 3}, 5).to(kCUDA, kBFloat16);
  const Tensor wt = w.transpose(0, 1).transpose(1, 2).transpose(2, 3);
  CHECK(same_bits(wt.contiguous(),
                  w.to(kCPU).transpose(0, 1).transpose(1, 2).transpose(2, 3).contiguous()));
  // More batches than the grid's z holds (kTransposeMaxBatchBlocks): the blocks loop.
  static_assert(cuda::kTransposeMaxBatchBlocks < 1500);
  const Tensor many = randn64({1500, 16, 16}, 9).to(kCUDA, kBFloat16);
  CHECK(same_bits(many.transpose(1, 2).contiguous(), many.to(kCPU).transpose(1, 2).contiguous()));
}

TEST_CASE("kernels/transpose: EMBER_TRANSPOSE_COPY's setting can be set and read") {
  ember::testing::SwitchGuard guard(cuda::transpose_copy, cuda::set_transpose_copy);
  cuda::set_transpose_copy(true);
  CHECK(cuda::transpose_copy());
  cuda::set_transpose_copy(false);
  CHECK_FALSE(cuda::transpose_copy());
}
