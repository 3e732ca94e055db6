// The two seam ops the custom CUDA kernels replace: linear and mse_loss. Forward
// against hand-computed values, backward against finite differences, errors.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/ops.h"
#include "gradcheck.h"

using namespace ember;
using ember::testing::randn64;

namespace {
std::vector<double> vals(const Tensor& t) {
  return t.to_vector<double>();
}

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}
}  // namespace

TEST_CASE("nn/linear op: forward matches hand-computed values") {
  Tensor x = tensor({{1, 2}, {3, 4}});
  Tensor w = tensor({{1, 0}, {0, 1}, {1, 1}});
  Tensor b = tensor({0.5, -0.5, 1});
  CHECK(linear(x, w, b).sizes() == Shape{2, 3});
  CHECK(vals(linear(x, w, b)) == std::vector<double>{1.5, 1.5, 4, 3.5, 3.5, 8});
  CHECK(vals(linear(x, w)) == std::vector<double>{1, 2, 3, 3, 4, 7});
  SUBCASE("leading dims are kept, a 1-D input gives a 1-D output") {
    Tensor x3 = ones({2, 3, 2});
    CHECK(linear(x3, w, b).sizes() == Shape{2, 3, 3});
    CHECK(linear(tensor({1, 2}), w, b).sizes() == Shape{3});
  }
}

TEST_CASE("nn/linear op: backward matches finite differences") {
  SUBCASE("with bias") {
    CHECK_GRADCHECK([](const std::vector<Tensor>& in) { return linear(in[0], in[1], in[2]); },
                    {randn64({3, 4}, 1), randn64({5, 4}, 2), randn64({5}, 3)});
  }
  SUBCASE("without bias") {
    CHECK_GRADCHECK([](const std::vector<Tensor>& in) { return linear(in[0], in[1]); },
                    {randn64({3, 4}, 4), randn64({2, 4}, 5)});
  }
  SUBCASE("3-D input") {
    CHECK_GRADCHECK([](const std::vector<Tensor>& in) { return linear(in[0], in[1], in[2]); },
                    {randn64({2, 3, 4}, 6), randn64({5, 4}, 7), randn64({5}, 8)});
  }
  SUBCASE("only the input needs grad") {
    Tensor w = randn64({3, 4}, 9);
    CHECK_GRADCHECK([w](const std::vector<Tensor>& in) { return linear(in[0], w); },
                    {randn64({2, 4}, 10)});
  }
}

TEST_CASE("nn/linear op: gradients of weight and bias by hand") {
  Tensor x = tensor({{1, 2}, {3, 4}}, kFloat64);
  Tensor w = tensor({{1, 0}, {0, 1}, {1, 1}}, TensorOptions(kFloat64).requires_grad());
  Tensor b = zeros({3}, TensorOptions(kFloat64).requires_grad());
  linear(x, w, b).sum().backward();
  // dW[o, i] = sum_n x[n, i]; db[o] = N
  CHECK(vals(w.grad()) == std::vector<double>{4, 6, 4, 6, 4, 6});
  CHECK(vals(b.grad()) == std::vector<double>{2, 2, 2});
}

TEST_CASE("nn/linear op: bad shapes name the problem") {
  Tensor w = ones({3, 2});
  CHECK(error_of([&] {
          linear(ones({4, 5}), w);
        }).find("input has 5 features") != std::string::npos);
  CHECK(error_of([&] {
          linear(ones({4, 2}), ones({3}));
        }).find("weight must be 2-D") != std::string::npos);
  CHECK(error_of([&] {
          linear(ones({4, 2}), w, ones({4}));
        }).find("bias of shape [4]") != std::string::npos);
  CHECK(error_of([&] {
          linear(ones({4, 2}, kFloat64), w);
        }).find("different dtypes") != std::string::npos);
}

TEST_CASE("nn/mse_loss op: reductions match hand-computed values") {
  Tensor p = tensor({1, 2, 3});
  Tensor t = tensor({0, 0, 1});
  CHECK(mse_loss(p, t).item() == doctest::Approx(9.0 / 3));
  CHECK(mse_loss(p, t, Reduction::Sum).item() == doctest::Approx(9.0));
  CHECK(vals(mse_loss(p, t, Reduction::None)) == std::vector<double>{1, 4, 4});
}

TEST_CASE("nn/mse_loss op: gradient is 2 (pred - target) / N") {
  Tensor p = tensor({1, 2, 3}, TensorOptions(kFloat64).requires_grad());
  Tensor t = tensor({0, 0, 1}, TensorOptions(kFloat64).requires_grad());
  mse_loss(p, t).backward();
  CHECK(vals(p.grad()) == std::vector<double>{2.0 / 3, 4.0 / 3, 4.0 / 3});
  CHECK(vals(t.grad()) == std::vector<double>{-2.0 / 3, -4.0 / 3, -4.0 / 3});
  p.set_grad(Tensor());
  mse_loss(p, t.detach(), Reduction::Sum).backward();
  CHECK(vals(p.grad()) == std::vector<double>{2, 4, 4});
}

TEST_CASE("nn/mse_loss op: backward matches finite differences for every reduction") {
  for (Reduction r : {Reduction::Mean, Reduction::Sum, Reduction::None}) {
    CHECK_GRADCHECK([r](const std::vector<Tensor>& in) { return mse_loss(in[0], in[1], r); },
                    {randn64({3, 4}, 11), randn64({3, 4}, 12)});
  }
}

TEST_CASE("nn/mse_loss op: shapes must match") {
  CHECK(error_of([] {
          mse_loss(ones({3}), ones({3, 1}));
        }).find("mse_loss: prediction of shape [3]") != std::string::npos);
}

namespace {
// Gradients of sum(f(inputs) * w) on CUDA against the CPU, inputs rounded to
// float32 first; returns the largest relative error over inputs.
double grads_cuda_vs_cpu(const testing::TensorFn& f, const std::vector<Tensor>& inputs) {
  auto grads_on = [&](Device d) {
    std::vector<Tensor> leaves;
    for (const Tensor& x : inputs) {
      Tensor l = x.to(kFloat32).to(d);
      l.set_requires_grad(true);
      leaves.push_back(l);
    }
    Tensor out = f(leaves);
    Tensor w = testing::randn64(out.sizes(), 77).to(kFloat32).to(d);
    (out * w).sum().backward();
    std::vector<Tensor> g;
    for (const Tensor& l : leaves) g.push_back(l.grad().to(kCPU));
    return g;
  };
  std::vector<Tensor> cpu = grads_on(kCPU), gpu = grads_on(kCUDA);
  double worst = 0;
  for (size_t i = 0; i < cpu.size(); ++i)
    worst = std::max(worst, testing::rel_error(gpu[i], cpu[i]));
  return worst;
}
}  // namespace

TEST_CASE("nn/seam ops: CUDA matches the CPU reference" * doctest::test_suite("cuda")) {
  auto lin = [](const std::vector<Tensor>& in) { return linear(in[0], in[1], in[2]); };
  std::vector<Tensor> lin_in = {randn64({64, 96}, 31), randn64({48, 96}, 32), randn64({48}, 33)};
  CHECK(testing::cuda_vs_cpu(lin, lin_in, kFloat32) <= 1e-5);
  CHECK(grads_cuda_vs_cpu(lin, lin_in) <= 1e-5);
  std::vector<Tensor> lin3 = {randn64({4, 5, 96}, 34), randn64({48, 96}, 35), randn64({48}, 36)};
  CHECK(testing::cuda_vs_cpu(lin, lin3, kFloat32) <= 1e-5);
  for (Reduction r : {Reduction::Mean, Reduction::Sum, Reduction::None}) {
    auto mse = [r](const std::vector<Tensor>& in) { return mse_loss(in[0], in[1], r); };
    std::vector<Tensor> mse_in = {randn64({128, 33}, 37), randn64({128, 33}, 38)};
    CHECK(testing::cuda_vs_cpu(mse, mse_in, kFloat32) <= 1e-5);
    CHECK(grads_cuda_vs_cpu(mse, mse_in) <= 1e-6);
  }
}
