// Every op on CUDA against the CPU reference, on fresh random inputs, by relative
// error (DESIGN.md: fp32 element-wise <= 1e-6, fp32 GEMM <= 1e-5, TF32 <= 1e-3,
// bf16 <= 1e-2; NaN never passes): ragged sizes, transposed layouts, empty
// tensors, backward, seeded random numbers, and the device errors.
// All cases are in the "cuda" suite: skipped, not passed, without a GPU.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>

#include "core/autograd.h"
#include "core/ops.h"
#include "cuda/blas.h"
#include "cuda/runtime.h"
#include "gradcheck.h"

using namespace ember;
using ember::testing::cuda_vs_cpu;
using ember::testing::rand64;
using ember::testing::randn64;
using ember::testing::rel_error;
using ember::testing::TensorFn;

namespace {
using V = std::vector<double>;
using Inputs = std::vector<Tensor>;

const std::vector<int64_t> kRagged = {1, 7, 127, 4097};

// Tolerance for element-wise and reduction results in each dtype.
double tol_for(DType t) {
  switch (t) {
    case DType::Float32:
      return 1e-6;
    case DType::Float64:
      return 1e-12;
    default:
      return 1e-2;
  }
}
const DType kFloatTypes[] = {kFloat32, kFloat64, kBFloat16};

// Gradients of sum(f(x) * w) on CUDA (in dtype) against CPU float64 on the same
// rounded values; returns the largest rel_error over the inputs.
double grad_cuda_vs_cpu(const TensorFn& f, const Inputs& inputs, DType dtype, uint64_t seed = 99) {
  Inputs cpu, gpu;
  for (const Tensor& x : inputs) {
    Tensor r = x.detach().to(dtype);
    cpu.push_back(r.to(kFloat64).detach().set_requires_grad(true));
    gpu.push_back(r.to(kCUDA).detach().set_requires_grad(true));
  }
  Tensor out_cpu = f(cpu);
  Tensor out_gpu = f(gpu);
  Tensor w = randn64(out_cpu.sizes(), seed).to(dtype);
  Inputs g_cpu = grad({out_cpu}, cpu, {w.to(kFloat64)});
  Inputs g_gpu = grad({out_gpu}, gpu, {w.to(kCUDA)});
  double worst = rel_error(out_gpu.to(kFloat64), out_cpu);
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!g_gpu[i].is_cuda() || g_gpu[i].dtype() != dtype)
      return std::numeric_limits<double>::infinity();
    worst = std::max(worst, rel_error(g_gpu[i].to(kFloat64), g_cpu[i]));
  }
  return worst;
}

struct NamedFn {
  const char* name;
  TensorFn f;
  bool positive;  // needs inputs in [0.5, 2)
};
}  // namespace

TEST_CASE("ops/cuda: unary and scalar ops match the CPU reference at ragged sizes" *
          doctest::test_suite("cuda")) {
  const std::vector<NamedFn> ops = {
      {"neg", [](const Inputs& v) { return neg(v[0]); }, false},
      {"exp", [](const Inputs& v) { return exp(v[0]); }, false},
      {"log", [](const Inputs& v) { return log(v[0]); }, true},
      {"sqrt", [](const Inputs& v) { return sqrt(v[0]); }, true},
      {"abs", [](const Inputs& v) { return abs(v[0]); }, false},
      {"relu", [](const Inputs& v) { return relu(v[0]); }, false},
      {"sigmoid", [](const Inputs& v) { return sigmoid(v[0]); }, false},
      {"tanh", [](const Inputs& v) { return tanh(v[0]); }, false},
      {"gelu", [](const Inputs& v) { return gelu(v[0]); }, false},
      {"pow3", [](const Inputs& v) { return pow(v[0], 3.0); }, false},
      {"pow-0.5", [](const Inputs& v) { return pow(v[0], -0.5); }, true},
      {"add", [](const Inputs& v) { return v[0] + 0.75; }, false},
      {"mul", [](const Inputs& v) { return v[0] * -1.25; }, false},
      {"rsub", [](const Inputs& v) { return 2.0 - v[0]; }, false},
      {"rdiv", [](const Inputs& v) { return 2.0 / v[0]; }, true},
      {"ge", [](const Inputs& v) { return ge(v[0], 0.1); }, false},
      {"gt", [](const Inputs& v) { return gt(v[0], -0.1); }, false},
  };
  uint64_t seed = 1;
  for (const NamedFn& op : ops)
    for (int64_t n : kRagged)
      for (DType t : kFloatTypes) {
        CAPTURE(op.name);
        CAPTURE(n);
        CAPTURE(t);
        Tensor x = op.positive ? rand64({n}, ++seed, 0.5, 2.0) : randn64({n}, ++seed) * 2.0;
        CHECK(cuda_vs_cpu(op.f, {x}, t) <= tol_for(t));
      }
}

TEST_CASE("ops/cuda: binary ops with broadcasting and transposed views match the CPU reference" *
          doctest::test_suite("cuda")) {
  const std::vector<NamedFn> ops = {
      {"add", [](const Inputs& v) { return v[0] + v[1]; }, false},
      {"add-alpha", [](const Inputs& v) { return add(v[0], v[1], -0.5); }, false},
      {"sub", [](const Inputs& v) { return v[0] - v[1]; }, false},
      {"mul", [](const Inputs& v) { return v[0] * v[1]; }, false},
      {"div", [](const Inputs& v) { return v[0] / v[1]; }, true},
  };
  uint64_t seed = 100;
  for (const NamedFn& op : ops)
    for (int64_t n : kRagged)
      for (DType t : kFloatTypes) {
        CAPTURE(op.name);
        CAPTURE(n);
        CAPTURE(t);
        auto in = [&](const Shape& s) {
          return op.positive ? rand64(s, ++seed, 0.5, 2.0) : randn64(s, ++seed);
        };
        CHECK(cuda_vs_cpu(op.f, {in({n}), in({n})}, t) <= tol_for(t));
        CHECK(cuda_vs_cpu(op.f, {in({n, 1}), in({1, 5})}, t) <= tol_for(t));
        CHECK(cuda_vs_cpu(op.f, {in({3, n}), in({n})}, t) <= tol_for(t));
        TensorFn transposed = [&op](const Inputs& v) { return op.f({v[0].t(), v[1]}); };
        CHECK(cuda_vs_cpu(transposed, {in({n, 3}), in({3, n})}, t) <= tol_for(t));
      }
}

TEST_CASE("ops/cuda: element-wise backward matches the CPU reference" *
          doctest::test_suite("cuda")) {
  const std::vector<NamedFn> ops = {
      {"mul-broadcast", [](const Inputs& v) { return v[0] * v[1].t(); }, false},
      {"div", [](const Inputs& v) { return v[0] / (v[1].t() * v[1].t() + 1.0); }, false},
      {"activations",
       [](const Inputs& v) { return relu(v[0]) + sigmoid(v[1].t()) * tanh(v[0]) - gelu(v[0]); },
       false},
      {"pow-exp-log",
       [](const Inputs& v) { return pow(exp(v[0] * 0.5), 1.5) + log(abs(v[1].t()) + 1.0); }, false},
  };
  for (const NamedFn& op : ops)
    for (int64_t n : {int64_t{1}, int64_t{127}, int64_t{4097}})
      for (DType t : {kFloat32, kFloat64}) {
        CAPTURE(op.name);
        CAPTURE(n);
        CAPTURE(t);
        CHECK(grad_cuda_vs_cpu(op.f, {randn64({n, 3}, 7), randn64({3, n}, 8)}, t) <= tol_for(t));
      }
}

TEST_CASE("ops/cuda: empty tensors, cast and copies across devices" * doctest::test_suite("cuda")) {
  Tensor e = zeros({0, 3}, kCUDA);
  CHECK((e + ones({3}, kCUDA)).sizes() == Shape{0, 3});
  CHECK(exp(e).numel() == 0);
  CHECK(e.to(kCPU).numel() == 0);

  Tensor x = randn64({5, 7}, 3);
  Tensor g = x.to(kCUDA);
  CHECK(g.is_cuda());
  CHECK(g.to(kCPU).to_vector<double>() == x.to_vector<double>());
  CHECK(g.to(kFloat32).to(kBFloat16).to(kFloat64).to_vector<double>() ==
        x.to(kFloat32).to(kBFloat16).to(kFloat64).to_vector<double>());
  CHECK(cast(g, kInt64).to_vector<int64_t>() == cast(x, kInt64).to_vector<int64_t>());

  Tensor dst = zeros({7, 5}, TensorOptions(kFloat32).device(kCUDA));
  dst.t().copy_(x);  // CPU float64 -> strided CUDA float32
  CHECK(dst.t().to_vector<double>() == x.to(kFloat32).to_vector<double>());
  Tensor filled = full({3, 4}, 2.5, TensorOptions(kBFloat16).device(kCUDA));
  CHECK(filled.to_vector<double>() == V(12, 2.5));
  CHECK(sum(g).item() == doctest::Approx(sum(x).item()).epsilon(1e-12));
  CHECK(full({1}, 3.0, kCUDA).str() == "tensor([3.0000], device=cuda:0)");

  CHECK(rel_error(cat({g, g.slice(0, 1, 3)}, 0), cat({x, x.slice(0, 1, 3)}, 0)) == 0.0);
  CHECK(rel_error(g.t().contiguous(), x.t().contiguous()) == 0.0);
  CHECK(rel_error(g.select(1, 3), x.select(1, 3)) == 0.0);
}

TEST_CASE("ops/cuda: shape-op backward on CUDA matches the CPU reference" *
          doctest::test_suite("cuda")) {
  TensorFn f = [](const Inputs& v) {
    Tensor a = cat({v[0].slice(1, 0, 4, 2), v[0].t().reshape({-1, 2})}, 0);  // (4 + 10, 2)
    return a.unsqueeze(0).expand({3, 14, 2}) * v[1].select(0, 1).unsqueeze(0);
  };
  CHECK(grad_cuda_vs_cpu(f, {randn64({4, 5}, 4), randn64({2, 14, 2}, 5)}, kFloat32) <= 1e-6);
  CHECK(grad_cuda_vs_cpu(f, {randn64({4, 5}, 4), randn64({2, 14, 2}, 5)}, kFloat64) <= 1e-12);
}

TEST_CASE("ops/cuda: sum and mean match the CPU reference for every kernel path" *
          doctest::test_suite("cuda")) {
  // (shape, dim): short rows, long rows in one and two passes, many long rows,
  // narrow and wide columns, a bias-gradient-like (65536, 512) column sum.
  const std::vector<std::pair<Shape, int64_t>> cases = {
      {{1000, 7}, 1},    {{3, 100003}, 1},  {{100, 5000}, 1},  {{2000, 5000}, 1},
      {{100003, 3}, 0},  {{7, 513}, 0},     {{65536, 512}, 0}, {{4, 9, 33}, 1},
      {{5000, 2, 2}, 0}, {{2, 3, 4097}, 2}, {{1}, 0},          {{127, 1, 7}, 1},
      {{4097, 16}, 1},   {{3001, 3}, 1},    {{513, 33}, 1},    {{300, 2}, 1},
  };
  uint64_t seed = 200;
  for (const auto& [shape, dim] : cases)
    for (DType t : kFloatTypes) {
      CAPTURE(shape_str(shape));
      CAPTURE(dim);
      CAPTURE(t);
      Tensor x = randn64(shape, ++seed);
      CHECK(cuda_vs_cpu([d = dim](const Inputs& v) { return sum(v[0], d); }, {x}, t) <= tol_for(t));
      CHECK(cuda_vs_cpu([d = dim](const Inputs& v) { return mean(v[0], d, true); }, {x}, t) <=
            tol_for(t));
    }
  for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{127}, int64_t{4097}, int64_t{(1 << 22) + 5}})
    for (DType t : kFloatTypes) {
      CAPTURE(n);
      CAPTURE(t);
      Tensor x = rand64({n}, ++seed, -1.0, 3.0);  // mean away from 0: relative error is meaningful
      CHECK(cuda_vs_cpu([](const Inputs& v) { return sum(v[0]); }, {x}, t) <= tol_for(t));
      CHECK(cuda_vs_cpu([](const Inputs& v) { return mean(v[0]); }, {x}, t) <= tol_for(t));
    }
  Tensor m = randn64({300, 200}, ++seed);
  CHECK(cuda_vs_cpu([](const Inputs& v) { return sum(v[0].t(), 1); }, {m}, kFloat32) <= 1e-6);
  CHECK(cuda_vs_cpu([](const Inputs& v) { return sum(v[0].slice(1, 1, 200, 3), 0); }, {m},
                    kFloat32) <= 1e-6);
}

TEST_CASE("ops/cuda: reductions are bit-identical from run to run" * doctest::test_suite("cuda")) {
  Tensor x = randn({(1 << 23) + 11}, kCUDA);
  const float first = sum(x).item<float>();
  Tensor cols = randn({65536, 512}, kCUDA);
  const std::vector<float> col_first = sum(cols, 0).to_vector<float>();
  for (int i = 0; i < 5; ++i) {
    CHECK(sum(x).item<float>() == first);
    CHECK(sum(cols, 0).to_vector<float>() == col_first);
  }
}

TEST_CASE("ops/cuda: empty reductions" * doctest::test_suite("cuda")) {
  CHECK(sum(zeros({0}, kCUDA)).item() == 0.0);
  CHECK(std::isnan(mean(zeros({0}, kCUDA)).item()));
  Tensor s = sum(zeros({2, 0, 3}, kCUDA), 1);
  CHECK(s.is_cuda());
  CHECK(s.to_vector<double>() == V(6, 0.0));
  for (double v : mean(zeros({2, 0, 3}, kCUDA), 1).to_vector<double>()) CHECK(std::isnan(v));
  CHECK(sum(zeros({0, 3}, kCUDA), 0).to_vector<double>() == V(3, 0.0));
  CHECK(max(zeros({0, 3}, kCUDA), 1).values.numel() == 0);
  CHECK_THROWS_WITH_AS(max(zeros({3, 0}, kCUDA), 1),
                       doctest::Contains("max: cannot reduce over dim 1 of size 0"), Error);
}

TEST_CASE("ops/cuda: max and argmax equal the CPU reference exactly, ties and NaN included" *
          doctest::test_suite("cuda")) {
  const std::vector<std::pair<Shape, int64_t>> cases = {
      {{1000, 7}, 1},   {{3, 100003}, 1}, {{100, 5000}, 1}, {{100003, 3}, 0}, {{7, 513}, 0},
      {{65536, 64}, 0}, {{4, 9, 33}, 1},  {{4097}, 0},      {{4097, 5}, 1},   {{999, 17}, 1},
  };
  uint64_t seed = 300;
  for (const auto& [shape, dim] : cases)
    for (DType t : kFloatTypes) {
      CAPTURE(shape_str(shape));
      CAPTURE(dim);
      CAPTURE(t);
      // Few distinct values: many ties, so "first index" is exercised in every pass.
      Tensor x = mul(rand64(shape, ++seed, 0.0, 8.0).to(kInt64).to(kFloat64), 0.5).to(t);
      Tensor g = x.to(kCUDA);
      CHECK(max(g, dim).values.to_vector<double>() == max(x, dim).values.to_vector<double>());
      CHECK(argmax(g, dim).to_vector<int64_t>() == argmax(x, dim).to_vector<int64_t>());
      CHECK(argmax(g, dim, true).sizes() == argmax(x, dim, true).sizes());
    }
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor with_nan = randn64({4, 5000}, 9);
  with_nan[1][4321].fill_(nan);
  with_nan[2][17].fill_(nan);
  with_nan[2][4000].fill_(nan);
  Tensor g = with_nan.to(kCUDA);
  CHECK(argmax(g, 1).to_vector<int64_t>() == argmax(with_nan, 1).to_vector<int64_t>());
  CHECK(argmax(g, 1).to_vector<int64_t>()[2] == 17);
  CHECK(std::isnan(max(g, 1).values.to_vector<double>()[1]));
  Tensor infs = full({3000}, -std::numeric_limits<double>::infinity(), kCUDA);
  CHECK(argmax(infs, 0).item() == 0.0);
}

TEST_CASE("ops/cuda: reduction backward matches the CPU reference" * doctest::test_suite("cuda")) {
  for (DType t : {kFloat32, kFloat64}) {
    CAPTURE(t);
    Tensor x = randn64({37, 129}, 10);
    CHECK(grad_cuda_vs_cpu([](const Inputs& v) { return max(v[0], 1); }, {x}, t) <= tol_for(t));
    CHECK(grad_cuda_vs_cpu([](const Inputs& v) { return max(v[0], 0, true); }, {x}, t) <=
          tol_for(t));
    CHECK(grad_cuda_vs_cpu([](const Inputs& v) { return sum(v[0], 0) * mean(v[0], 0); }, {x}, t) <=
          tol_for(t));
    CHECK(grad_cuda_vs_cpu(
              [](const Inputs& v) {
                return sum_to(v[0] * 2.0, {1, 129});
              },
              {x}, t) <= tol_for(t));
  }
  Tensor b = randn64({16, 8}, 11);
  CHECK(grad_cuda_vs_cpu([](const Inputs& v) { return max(v[0], 1); }, {b}, kBFloat16) <= 1e-2);
}

TEST_CASE("ops/cuda: matmul matches the CPU reference (fp32 1e-5, fp64, bf16 1e-2)" *
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

TEST_CASE("ops/cuda: batched, shared-operand and strided matmul match the CPU reference" *
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

TEST_CASE("ops/cuda: matmul with empty sizes and TF32" * doctest::test_suite("cuda")) {
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

TEST_CASE("ops/cuda: matmul backward matches the CPU reference" * doctest::test_suite("cuda")) {
  for (DType t : {kFloat32, kFloat64}) {
    CAPTURE(t);
    const double tl = t == kFloat32 ? 1e-5 : 1e-12;
    auto mm = [](const Inputs& v) { return matmul(v[0], v[1]); };
    CHECK(grad_cuda_vs_cpu(mm, {randn64({33, 65}, 1), randn64({65, 17}, 2)}, t) <= tl);
    CHECK(grad_cuda_vs_cpu(mm, {randn64({3, 7, 127}, 3), randn64({3, 127, 9}, 4)}, t) <= tl);
    CHECK(grad_cuda_vs_cpu(mm, {randn64({4, 7, 12}, 5), randn64({12, 9}, 6)}, t) <= tl);
    CHECK(grad_cuda_vs_cpu([](const Inputs& v) { return matmul(v[0].t(), v[1]); },
                           {randn64({65, 33}, 7), randn64({65, 17}, 8)}, t) <= tl);
  }
}

TEST_CASE("ops/cuda: a small training step agrees with the CPU" * doctest::test_suite("cuda")) {
  TensorFn mlp = [](const Inputs& v) {
    Tensor h = relu(matmul(v[0], v[1].t()) + v[2]);  // x (64, 10), w1 (32, 10), b1 (32)
    Tensor y = matmul(h, v[3].t());                  // w2 (1, 32)
    return mean(pow(y - v[4], 2.0));
  };
  Inputs in = {randn64({64, 10}, 1), randn64({32, 10}, 2) * 0.3, randn64({32}, 3) * 0.1,
               randn64({1, 32}, 4) * 0.3, randn64({64, 1}, 5)};
  CHECK(grad_cuda_vs_cpu(mlp, in, kFloat32) <= 1e-5);
  CHECK(grad_cuda_vs_cpu(mlp, in, kFloat64) <= 1e-12);
}

TEST_CASE("ops/cuda: the same seed gives the same random numbers on CPU and CUDA" *
          doctest::test_suite("cuda")) {
  for (DType t : {kFloat32, kFloat64}) {
    CAPTURE(t);
    Generator c1(77), g1(77);
    Tensor uc = rand({4097}, t, &c1);
    Tensor ug = rand({4097}, TensorOptions(t).device(kCUDA), &g1);
    CHECK(ug.to_vector<double>() == uc.to_vector<double>());
    Tensor nc = randn({4097}, t, &c1);
    Tensor ng = randn({4097}, TensorOptions(t).device(kCUDA), &g1);
    // Box-Muller's log and cos may differ in the last bit between libm and CUDA.
    CHECK(rel_error(ng, nc) <= (t == kFloat32 ? 1e-7 : 1e-14));
  }
}

TEST_CASE("ops/cuda: operands on different devices throw naming both devices" *
          doctest::test_suite("cuda")) {
  Tensor c = ones({2, 2});
  Tensor g = ones({2, 2}, kCUDA);
  CHECK_THROWS_WITH_AS(
      c + g, doctest::Contains("add: operands are on different devices (cpu and cuda:0)"), Error);
  CHECK_THROWS_WITH_AS(
      g * c, doctest::Contains("mul: operands are on different devices (cuda:0 and cpu)"), Error);
  CHECK_THROWS_WITH_AS(matmul(c, g), doctest::Contains("matmul: operands are on different devices"),
                       Error);
  CHECK_THROWS_WITH_AS(cat({c, g}), doctest::Contains("cat: tensor 1 is float32 on cuda:0"), Error);
  CHECK_THROWS_WITH_AS(g.add_(c), doctest::Contains("add_: operands are on different devices"),
                       Error);
  CHECK_THROWS_WITH_AS(c.to(Device::cuda(cuda::device_count())),
                       doctest::Contains("is not available"), Error);
}
