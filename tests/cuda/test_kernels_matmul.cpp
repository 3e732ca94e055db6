// matmul on CUDA (cuBLAS) against the CPU float64 reference at the sizes the op
// table's samples (tests/core/op_table.cpp) do not reach: dims of 1, 127 and
// 4097 in every position with every transposition, batches with a stride-0
// operand and row strides of a column slice, empty sizes, and TF32 at 512^3
// (DESIGN.md: fp32 GEMM <= 1e-5, TF32 <= 1e-3, bf16 <= 1e-2); torch.matmul's
// ranks and broadcast batches, bmm, and transposed or strided batch operands
// read in place (the allocator's statistics show no copy). Suite "cuda".
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/memory.h"
#include "core/ops.h"
#include "cuda/blas.h"
#include "gradcheck.h"

using namespace ember;
using ember::testing::cuda_vs_cpu;
using ember::testing::grad_cuda_vs_cpu;
using ember::testing::rand64;
using ember::testing::randn64;
using ember::testing::rel_error;
using ember::testing::TensorFn;

namespace {
using V = std::vector<double>;
using Inputs = std::vector<Tensor>;
const DType kFloatTypes[] = {kFloat32, kFloat64, kBFloat16};
// DESIGN.md's budgets for element-wise and reduction results in each dtype.
[[maybe_unused]] double tol_for(DType t) {
  return t == kFloat64 ? 1e-12 : t == kFloat32 ? 1e-6 : 1e-2;
}
}  // namespace

TEST_CASE("kernels/matmul: matmul matches the CPU reference (fp32 1e-5, fp64, bf16 1e-2)" *
          doctest::test_suite("cuda")) {
  struct Dims {
    int64_t n, k, m;
  };
  const std::vector<Dims> dims = {{1, 1, 1},    {7, 127, 1},     {127, 7, 4097}, {4097, 1, 7},
                                  {33, 65, 17}, {256, 256, 256}, {1, 4097, 127}};
  const double tol[] = {1e-5, 1e-12, 1e-2};
  uint64_t seed = 400;
  for (const Dims& d : dims)
    for (int ti = 0; ti < 3; ++ti) {
      const DType t = kFloatTypes[ti];
      CAPTURE(d.n);
      CAPTURE(d.k);
      CAPTURE(d.m);
      CAPTURE(t);
      Tensor a = randn64({d.n, d.k}, ++seed), b = randn64({d.k, d.m}, ++seed);
      Tensor at = randn64({d.k, d.n}, ++seed), bt = randn64({d.m, d.k}, ++seed);
      auto mm = [](const Inputs& v) { return matmul(v[0], v[1]); };
      CHECK(cuda_vs_cpu(mm, {a, b}, t) <= tol[ti]);
      CHECK(cuda_vs_cpu([](const Inputs& v) { return matmul(v[0].t(), v[1]); }, {at, b}, t) <=
            tol[ti]);
      CHECK(cuda_vs_cpu([](const Inputs& v) { return matmul(v[0], v[1].t()); }, {a, bt}, t) <=
            tol[ti]);
      CHECK(cuda_vs_cpu([](const Inputs& v) { return matmul(v[0].t(), v[1].t()); }, {at, bt}, t) <=
            tol[ti]);
    }
}

TEST_CASE("kernels/matmul: batched, shared-operand and strided matmul match the CPU reference" *
          doctest::test_suite("cuda")) {
  uint64_t seed = 500;
  for (DType t : {kFloat32, kFloat64, kBFloat16}) {
    CAPTURE(t);
    const double tl = t == kFloat32 ? 1e-5 : t == kFloat64 ? 1e-12 : 1e-2;
    auto mm = [](const Inputs& v) { return matmul(v[0], v[1]); };
    CHECK(cuda_vs_cpu(mm, {randn64({3, 7, 127}, ++seed), randn64({3, 127, 9}, ++seed)}, t) <= tl);
    CHECK(cuda_vs_cpu(mm, {randn64({5, 33, 17}, ++seed), randn64({17, 65}, ++seed)}, t) <= tl);
    CHECK(cuda_vs_cpu(mm, {randn64({1, 4, 6}, ++seed), randn64({1, 6, 2}, ++seed)}, t) <= tl);
    // transposed batches, a batch-transposed shared operand, stride-0 batches
    CHECK(cuda_vs_cpu(
              [](const Inputs& v) { return matmul(v[0].transpose(1, 2), v[1].transpose(1, 2)); },
              {randn64({4, 31, 8}, ++seed), randn64({4, 5, 31}, ++seed)}, t) <= tl);
    CHECK(cuda_vs_cpu([](const Inputs& v) { return matmul(v[0].transpose(1, 2), v[1]); },
                      {randn64({4, 31, 8}, ++seed), randn64({31, 5}, ++seed)}, t) <= tl);
    CHECK(cuda_vs_cpu(
              [](const Inputs& v) {
                return matmul(v[0], v[1].unsqueeze(0).expand({3, 8, 6}));
              },
              {randn64({3, 5, 8}, ++seed), randn64({8, 6}, ++seed)}, t) <= tl);
    // row stride larger than the row (a column slice), and a copy for stride-2 columns
    CHECK(cuda_vs_cpu([](const Inputs& v) { return matmul(v[0].slice(1, 3, 40), v[1]); },
                      {randn64({20, 50}, ++seed), randn64({37, 11}, ++seed)}, t) <= tl);
    CHECK(cuda_vs_cpu([](const Inputs& v) { return matmul(v[0].slice(1, 0, 50, 2), v[1]); },
                      {randn64({20, 50}, ++seed), randn64({25, 11}, ++seed)}, t) <= tl);
  }
}

TEST_CASE("kernels/matmul: matmul with empty sizes and TF32" * doctest::test_suite("cuda")) {
  CHECK(matmul(zeros({0, 3}, kCUDA), zeros({3, 2}, kCUDA)).sizes() == Shape{0, 2});
  Tensor z = matmul(ones({2, 0}, kCUDA), ones({0, 3}, kCUDA));
  CHECK(z.is_cuda());
  CHECK(z.to_vector<double>() == V(6, 0.0));
  CHECK(matmul(zeros({0, 2, 3}, kCUDA), zeros({0, 3, 4}, kCUDA)).sizes() == Shape{0, 2, 4});

  Tensor a = randn64({512, 512}, 1), b = randn64({512, 512}, 2);
  auto mm = [](const Inputs& v) { return matmul(v[0], v[1]); };
  CHECK_FALSE(cuda::allow_tf32());
  cuda::set_allow_tf32(true);
  const double tf32 = cuda_vs_cpu(mm, {a, b}, kFloat32);
  cuda::set_allow_tf32(false);
  CHECK(tf32 <= 1e-3);
  CHECK(cuda_vs_cpu(mm, {a, b}, kFloat32) <= 1e-5);
}

TEST_CASE("kernels/matmul: torch.matmul's ranks, broadcast batches and bmm match the CPU" *
          doctest::test_suite("cuda")) {
  struct Case {
    Shape a, b;
  };
  // 1-D operands, 2-D x 3-D, 4-D, broadcast batches (one side, both sides, a batch
  // of rank 3), sizes cuBLAS tiles unevenly, and an empty batch.
  const std::vector<Case> cases = {
      {{127}, {127}},
      {{65}, {65, 17}},
      {{33, 65}, {65}},
      {{7}, {3, 7, 129}},
      {{3, 129, 7}, {7}},
      {{33, 65}, {4, 65, 17}},
      {{2, 3, 31, 8}, {2, 3, 8, 33}},
      {{2, 1, 4, 5}, {3, 5, 6}},
      {{1, 3, 17, 9}, {4, 1, 9, 5}},
      {{2, 2, 1, 5, 7}, {3, 7, 4}},
      {{0, 1, 4, 5}, {3, 5, 6}},
  };
  uint64_t seed = 600;
  auto mm = [](const Inputs& v) { return matmul(v[0], v[1]); };
  for (DType t : {kFloat32, kFloat64, kBFloat16}) {
    CAPTURE(t);
    const double tl = t == kFloat32 ? 1e-5 : t == kFloat64 ? 1e-12 : 1e-2;
    for (const Case& c : cases) {
      CAPTURE(c.a);
      CAPTURE(c.b);
      Tensor a = randn64(c.a, ++seed), b = randn64(c.b, ++seed);
      if (numel_of(c.a) == 0) {
        CHECK(matmul(a.to(kCUDA), b.to(kCUDA)).sizes() == matmul(a, b).sizes());
        continue;
      }
      CHECK(cuda_vs_cpu(mm, {a, b}, t) <= tl);
      CHECK(grad_cuda_vs_cpu(mm, {a, b}, t) <= (t == kFloat32 ? 1e-5 : tl));
    }
    // transposed batches, the batch dims swapped (no single batch stride), every
    // second batch, an expanded batch, and bmm
    CHECK(cuda_vs_cpu([](const Inputs& v) { return matmul(v[0].transpose(-1, -2), v[1]); },
                      {randn64({2, 3, 9, 31}, ++seed), randn64({2, 3, 9, 5}, ++seed)}, t) <= tl);
    CHECK(cuda_vs_cpu(
              [](const Inputs& v) {
                return matmul(v[0].transpose(0, 1), v[1].transpose(0, 1).transpose(-1, -2));
              },
              {randn64({2, 3, 9, 31}, ++seed), randn64({2, 3, 5, 31}, ++seed)}, t) <= tl);
    CHECK(cuda_vs_cpu([](const Inputs& v) { return matmul(v[0].slice(0, 0, 6, 2), v[1]); },
                      {randn64({6, 17, 9}, ++seed), randn64({3, 9, 5}, ++seed)}, t) <= tl);
    CHECK(cuda_vs_cpu(
              [](const Inputs& v) {
                return matmul(v[0].unsqueeze(1).expand({4, 3, 17, 9}), v[1]);
              },
              {randn64({4, 17, 9}, ++seed), randn64({3, 9, 5}, ++seed)}, t) <= tl);
    CHECK(cuda_vs_cpu([](const Inputs& v) { return bmm(v[0].transpose(1, 2), v[1]); },
                      {randn64({5, 64, 33}, ++seed), randn64({5, 64, 17}, ++seed)}, t) <= tl);
    CHECK(grad_cuda_vs_cpu([](const Inputs& v) { return bmm(v[0], v[1].transpose(1, 2)); },
                           {randn64({5, 33, 64}, ++seed), randn64({5, 17, 64}, ++seed)},
                           t) <= (t == kFloat32 ? 1e-5 : tl));
  }
}

TEST_CASE("kernels/matmul: transposed and strided batch operands are not copied on CUDA" *
          doctest::test_suite("cuda")) {
  // The caching allocator's statistics: only the output is allocated. Sizes are
  // multiples of its 512-byte rounding. The cuBLAS workspace is cudaMalloc'd once
  // outside the allocator; the first product below creates it.
  Tensor a = randn64({4, 64, 32}, 700).to(kFloat32).to(kCUDA);
  Tensor b = randn64({4, 64, 32}, 701).to(kFloat32).to(kCUDA);
  Tensor big = randn64({8, 32, 64}, 702).to(kFloat32).to(kCUDA);
  (void)matmul(a.transpose(1, 2), b);
  auto allocated_by = [](const std::function<Tensor()>& f) {
    reset_peak_memory_stats(kCUDA);
    const int64_t before = memory_stats(kCUDA).at("allocated_bytes.all.current");
    Tensor out = f();
    return memory_stats(kCUDA).at("allocated_bytes.all.peak") - before;
  };
  const int64_t out_bytes = 4 * 32 * 32 * 4;  // (4, 32, 32) float32
  Tensor ref = matmul(a.transpose(1, 2).to(kCPU).to(kFloat64), b.to(kCPU).to(kFloat64));
  Tensor got;
  CHECK(allocated_by([&] { return got = matmul(a.transpose(1, 2), b); }) == out_bytes);
  CHECK(rel_error(got.to(kCPU).to(kFloat64), ref) <= 1e-5);
  // every second batch of a transposed operand, through bmm
  Tensor bs = big.slice(0, 0, 8, 2).transpose(1, 2);  // (4, 64, 32), batch stride 4096
  Tensor ref_s = bmm(a.transpose(1, 2).to(kCPU).to(kFloat64), bs.to(kCPU).to(kFloat64));
  CHECK(allocated_by([&] { return got = bmm(a.transpose(1, 2), bs); }) == out_bytes);
  CHECK(rel_error(got.to(kCPU).to(kFloat64), ref_s) <= 1e-5);
  // broadcast batches of transposed operands: (1, 4, 32, 64) x (4, 1, 64, 32)
  Tensor ref_b = matmul(a.unsqueeze(0).transpose(-1, -2).to(kCPU).to(kFloat64),
                        b.unsqueeze(1).to(kCPU).to(kFloat64));
  CHECK(allocated_by([&] {
          return got = matmul(a.unsqueeze(0).transpose(-1, -2), b.unsqueeze(1));
        }) == 4 * out_bytes);
  CHECK(rel_error(got.to(kCPU).to(kFloat64), ref_b) <= 1e-5);
}
