// The fused MSE kernel (cuda/kernels/mse.cu) through mse_loss: loss and gradient
// against the CPU float64 reference at ragged sizes, misaligned and empty inputs,
// bit-identical results from run to run, and backward's use of the stashed
// gradient (incoming gradient 1, a scaled one, a retained graph).
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/autograd.h"
#include "core/ops.h"
#include "gradcheck.h"

using namespace ember;
using ember::testing::randn64;
using ember::testing::rel_error;

namespace {

double tol(DType t) {
  return t == kFloat64 ? 1e-12 : t == kFloat32 ? 1e-6 : 1e-2;
}

// Loss and d_pred of mse_loss on CUDA in dtype vs CPU float64 on the same rounded
// values. offset > 0 starts the CUDA inputs one element into a bigger buffer, so
// they are not 16-byte aligned (the kernel's scalar path).
std::pair<double, double> mse_vs_cpu(DType dtype, int64_t n, Reduction r, int64_t offset,
                                     uint64_t seed) {
  Tensor p = randn64({n + offset}, seed).to(dtype).to(kFloat64);
  Tensor t = randn64({n + offset}, seed + 1).to(dtype).to(kFloat64);
  Tensor pc = p.slice(0, offset, n + offset).detach().set_requires_grad(true);
  Tensor tc = t.slice(0, offset, n + offset);
  Tensor pg_base = p.to(kCUDA, dtype);
  Tensor pg = pg_base.slice(0, offset, n + offset).detach().set_requires_grad(true);
  Tensor tg = t.to(kCUDA, dtype).slice(0, offset, n + offset);
  Tensor loss_ref = mse_loss(pc, tc, r);
  loss_ref.backward();
  Tensor loss = mse_loss(pg, tg, r);
  loss.backward();
  const double e_loss = rel_error(loss.to(kCPU).to(kFloat64), loss_ref);
  const double e_grad = rel_error(pg.grad().to(kCPU).to(kFloat64), pc.grad());
  return {e_loss, e_grad};
}

template <typename T>
std::vector<unsigned char> bytes_of(const Tensor& t) {
  std::vector<T> v = t.to(kCPU).contiguous().template to_vector<T>();
  std::vector<unsigned char> out(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(out.data(), v.data(), out.size());
  return out;
}

}  // namespace

TEST_CASE("kernels/mse: loss and gradient match the CPU at ragged sizes in every dtype" *
          doctest::test_suite("cuda")) {
  uint64_t seed = 1;
  for (DType dtype : {kFloat32, kFloat64, kBFloat16})
    for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{127}, int64_t{4097}, int64_t{(1 << 20) + 3}})
      for (Reduction r : {Reduction::Mean, Reduction::Sum})
        for (int64_t offset : {int64_t{0}, int64_t{1}}) {
          auto [e_loss, e_grad] = mse_vs_cpu(dtype, n, r, offset, seed++);
          INFO(dtype, " n=", n, " sum=", r == Reduction::Sum, " offset=", offset);
          CHECK(e_loss <= tol(dtype));
          CHECK(e_grad <= tol(dtype));
        }
}

TEST_CASE("kernels/mse: the loss alone (no grad) matches the CPU; None stays element-wise" *
          doctest::test_suite("cuda")) {
  for (DType dtype : {kFloat32, kBFloat16}) {
    Tensor p = randn64({3000}, 5).to(dtype).to(kFloat64),
           t = randn64({3000}, 6).to(dtype).to(kFloat64);
    NoGradGuard no_grad;
    CHECK(rel_error(mse_loss(p.to(kCUDA, dtype), t.to(kCUDA, dtype)).to(kCPU).to(kFloat64),
                    mse_loss(p, t)) <= tol(dtype));
    CHECK(
        rel_error(
            mse_loss(p.to(kCUDA, dtype), t.to(kCUDA, dtype), Reduction::None).to(kCPU).to(kFloat64),
            mse_loss(p, t, Reduction::None)) <= tol(dtype));
  }
}

TEST_CASE("kernels/mse: empty inputs give NaN (mean) or 0 (sum) and an empty gradient" *
          doctest::test_suite("cuda")) {
  Tensor p = empty({0}, TensorOptions(kFloat32).device(kCUDA)).set_requires_grad(true);
  Tensor t = empty({0}, TensorOptions(kFloat32).device(kCUDA));
  CHECK(std::isnan(mse_loss(p, t).item()));
  Tensor s = mse_loss(p, t, Reduction::Sum);
  CHECK(s.item() == 0.0);
  s.backward();
  CHECK(p.grad().numel() == 0);
}

TEST_CASE("kernels/mse: two runs give the same bits (loss and gradient)" *
          doctest::test_suite("cuda")) {
  for (DType dtype : {kFloat32, kFloat64, kBFloat16}) {
    Tensor p = randn64({(1 << 22) + 5}, 11).to(kCUDA, dtype);
    Tensor t = randn64({(1 << 22) + 5}, 12).to(kCUDA, dtype);
    std::vector<std::vector<unsigned char>> loss_bits, grad_bits;
    for (int run = 0; run < 2; ++run) {
      Tensor pr = p.detach().set_requires_grad(true);
      Tensor l = mse_loss(pr, t);
      l.backward();
      if (dtype == kFloat64) {
        loss_bits.push_back(bytes_of<double>(l));
        grad_bits.push_back(bytes_of<double>(pr.grad()));
      } else {
        loss_bits.push_back(bytes_of<float>(l.to(kFloat32)));
        grad_bits.push_back(bytes_of<float>(pr.grad().to(kFloat32)));
      }
    }
    INFO(dtype);
    CHECK(loss_bits[0] == loss_bits[1]);
    CHECK(grad_bits[0] == grad_bits[1]);
  }
}

TEST_CASE("kernels/mse: backward scales the stashed gradient; a retained graph runs twice" *
          doctest::test_suite("cuda")) {
  Tensor p64 = randn64({1000}, 21), t64 = randn64({1000}, 22);
  Tensor expected = mul(sub(p64, t64), 2.0 / 1000);  // d mean / d pred
  Tensor p = p64.to(kCUDA, kFloat32).set_requires_grad(true);
  Tensor t = t64.to(kCUDA, kFloat32).set_requires_grad(true);
  SUBCASE("incoming gradient 3") {
    mul(mse_loss(p, t), 3.0).backward();
    CHECK(rel_error(p.grad().to(kCPU).to(kFloat64), mul(expected, 3.0)) <= 1e-6);
    CHECK(rel_error(t.grad().to(kCPU).to(kFloat64), mul(expected, -3.0)) <= 1e-6);
  }
  SUBCASE("retain_graph: the second backward recomputes and accumulates") {
    Tensor l = mse_loss(p, t);
    l.backward(Tensor(), /*retain_graph=*/true);
    l.backward();
    CHECK(rel_error(p.grad().to(kCPU).to(kFloat64), mul(expected, 2.0)) <= 1e-6);
  }
}
