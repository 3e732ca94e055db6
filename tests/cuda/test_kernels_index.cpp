// The indexing kernels (cuda/kernels/index.cu) through index_select, gather,
// embedding and one_hot: values against the CPU on fresh random inputs (every
// dtype for the forward), the deterministic backward with many repeated indices
// against the CPU float64 reference and bit for bit from run to run; bad indices
// raised at the next synchronisation (no host sync per call) and cleared after;
// randint and randperm giving the CPU's numbers.
//
// Tolerances (DESIGN.md): forward selection is exact; backward sums up to
// thousands of gradients per row in float32: GEMM's 1e-5; bfloat16 1e-2.
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/ops.h"
#include "cuda/runtime.h"
#include "error_text.h"
#include "gradcheck.h"

using namespace ember;
using ember::testing::contains;
using ember::testing::error_of;
using ember::testing::randn64;
using ember::testing::rel_error;

namespace {

double tol(DType t) {
  return t == kFloat64 ? 1e-12 : t == kFloat32 ? 1e-5 : 1e-2;
}

Tensor random_indices(const Shape& shape, int64_t high, uint64_t seed) {
  Generator g(seed);
  return randint(0, high, shape, kInt64, &g);
}

}  // namespace

TEST_CASE("kernels/index: index_select and gather forward equal the CPU exactly, every dtype" *
          doctest::test_suite("cuda")) {
  Tensor x = randn64({6, 37, 5}, 1) * 10.0;
  for (DType dtype : {kFloat32, kFloat64, kBFloat16, kInt64, kBool}) {
    INFO(dtype);
    Tensor xc = x.to(dtype), xg = x.to(kCUDA, dtype);
    for (int64_t dim : {0, 1, 2}) {
      INFO("dim=", dim);
      Tensor idx = random_indices({50}, x.size(dim), 10 + dim);
      CHECK(index_select(xg, dim, idx.to(kCUDA)).to(kCPU).to_vector<double>() ==
            index_select(xc, dim, idx).to_vector<double>());
      Shape s = x.sizes();
      s[dim] = 9;
      s[(dim + 1) % 3] = 2;  // smaller than the input in another dim
      Tensor gi = random_indices(s, x.size(dim), 20 + dim);
      CHECK(gather(xg, dim, gi.to(kCUDA)).to(kCPU).to_vector<double>() ==
            gather(xc, dim, gi).to_vector<double>());
    }
  }
}

TEST_CASE("kernels/index: backward with repeated indices matches the CPU, bit for bit per run" *
          doctest::test_suite("cuda")) {
  for (DType dtype : {kFloat32, kBFloat16, kFloat64}) {
    INFO(dtype);
    // An embedding whose 50 rows are each hit about 400 times, one row 4000 times.
    Tensor w = randn64({50, 33}, 30).to(dtype).to(kFloat64);
    Tensor idx = random_indices({40, 500}, 50, 31);
    idx.select(0, 0).fill_(7);
    Tensor g = randn64({40, 500, 33}, 32).to(dtype).to(kFloat64);
    Tensor wc = w.detach().set_requires_grad(true);
    embedding(wc, idx).backward(g);
    auto run = [&] {
      Tensor wg = w.to(kCUDA, dtype).detach().set_requires_grad(true);
      embedding(wg, idx.to(kCUDA)).backward(g.to(kCUDA, dtype));
      return wg.grad().to(kCPU).to(kFloat64);
    };
    const Tensor first = run();
    CHECK(rel_error(first, wc.grad()) <= tol(dtype));
    for (int i = 0; i < 2; ++i) CHECK(run().to_vector<double>() == first.to_vector<double>());

    {
      // Long runs (a block per destination) over rows wider than one 128-column pass,
      // with an outer dim: (3, 10, 300) at 400 indices, 40 a destination on average.
      Tensor x = randn64({3, 10, 300}, 33).to(dtype).to(kFloat64);
      Tensor li = random_indices({400}, 10, 34);
      Tensor lg = randn64({3, 400, 300}, 35).to(dtype).to(kFloat64);
      Tensor xc = x.detach().set_requires_grad(true);
      index_select(xc, 1, li).backward(lg);
      auto long_run = [&] {
        Tensor xg = x.to(kCUDA, dtype).detach().set_requires_grad(true);
        index_select(xg, 1, li.to(kCUDA)).backward(lg.to(kCUDA, dtype));
        return xg.grad().to(kCPU).to(kFloat64);
      };
      const Tensor once = long_run();
      CHECK(rel_error(once, xc.grad()) <= tol(dtype));
      CHECK(long_run().to_vector<double>() == once.to_vector<double>());
    }

    for (int64_t dim : {0, 1, 2}) {
      INFO("dim=", dim);
      Tensor x = randn64({4, 30, 6}, 40 + dim).to(dtype).to(kFloat64);
      Tensor si = random_indices({200}, x.size(dim), 50 + dim);
      Shape gs = x.sizes();
      gs[dim] = 200;
      Tensor gg = randn64(gs, 60 + dim).to(dtype).to(kFloat64);
      Tensor xc = x.detach().set_requires_grad(true);
      index_select(xc, dim, si).backward(gg);
      Tensor xg = x.to(kCUDA, dtype).detach().set_requires_grad(true);
      index_select(xg, dim, si.to(kCUDA)).backward(gg.to(kCUDA, dtype));
      CHECK(rel_error(xg.grad().to(kCPU).to(kFloat64), xc.grad()) <= tol(dtype));

      Shape is = x.sizes();
      is[dim] = 50;
      Tensor gi = random_indices(is, x.size(dim), 70 + dim);
      Tensor gg2 = randn64(is, 80 + dim).to(dtype).to(kFloat64);
      Tensor xc2 = x.detach().set_requires_grad(true);
      gather(xc2, dim, gi).backward(gg2);
      Tensor xg2 = x.to(kCUDA, dtype).detach().set_requires_grad(true);
      gather(xg2, dim, gi.to(kCUDA)).backward(gg2.to(kCUDA, dtype));
      CHECK(rel_error(xg2.grad().to(kCPU).to(kFloat64), xc2.grad()) <= tol(dtype));
    }
  }
}

TEST_CASE("kernels/index: a bad index is raised at the next synchronisation, then cleared" *
          doctest::test_suite("cuda")) {
  Tensor w = randn64({10, 4}, 90).to(kCUDA, kFloat32);
  Tensor bad = tensor({3, 12, 1}, kInt64).to(kCUDA);
  Tensor out = embedding(w, bad);  // returns: no host sync per call
  const std::string msg = error_of([&] { out.to(kCPU); });
  CHECK(contains(msg, "embedding: index 12 is out of range [0, 10)"));
  CHECK(contains(msg, "reported at this synchronisation"));
  CHECK(error_of([&] { cuda::synchronize(0); }) == "(no error)");
  // The bad row read zeros; the good rows are right.
  const std::vector<double> rows = out.to(kCPU).to_vector<double>();
  CHECK(std::vector<double>(rows.begin() + 4, rows.begin() + 8) == std::vector<double>(4, 0.0));
  CHECK(std::vector<double>(rows.begin(), rows.begin() + 4) ==
        w.to(kCPU).select(0, 3).to_vector<double>());

  Tensor neg = tensor({-1}, kInt64).to(kCUDA);
  index_select(w, 1, neg);
  CHECK(contains(error_of([&] { cuda::synchronize(0); }),
                 "index_select: index -1 is out of range [0, 4)"));
  gather(w, 0, full({1, 4}, 10, TensorOptions(kInt64).device(kCUDA)));
  CHECK(contains(error_of([&] { cuda::synchronize(0); }), "gather: index 10 is out of range"));
  one_hot(tensor({0, 5}, kInt64).to(kCUDA), 5);
  CHECK(
      contains(error_of([&] { cuda::synchronize(0); }), "one_hot: index 5 is out of range [0, 5)"));
  // Backward skips what the forward recorded: no crash, the good rows' gradients.
  Tensor wr = w.detach().set_requires_grad(true);
  embedding(wr, bad).sum().backward();
  CHECK(contains(error_of([&] { wr.grad().to(kCPU); }), "embedding: index 12"));
  CHECK(wr.grad().to(kCPU).select(0, 3).to_vector<double>() == std::vector<double>(4, 1.0));
}

TEST_CASE("kernels/index: one_hot, stack, randint and randperm give the CPU's values" *
          doctest::test_suite("cuda")) {
  Tensor idx = random_indices({7, 3}, 6, 100);
  CHECK(one_hot(idx.to(kCUDA), 6).to(kCPU).to_vector<int64_t>() ==
        one_hot(idx, 6).to_vector<int64_t>());
  Tensor a = randn64({3, 4}, 101), b = randn64({3, 4}, 102);
  CHECK(stack({a.to(kCUDA), b.to(kCUDA)}, 1).to(kCPU).to_vector<double>() ==
        stack({a, b}, 1).to_vector<double>());
  for (int64_t n : {int64_t{1}, int64_t{1000}, int64_t{100003}}) {
    INFO("n=", n);
    Generator gc(7), gg(7);
    CHECK(randperm(n, TensorOptions(kInt64).device(kCUDA), &gg).to(kCPU).to_vector<int64_t>() ==
          randperm(n, kInt64, &gc).to_vector<int64_t>());
    Generator hc(8), hg(8);
    CHECK(randint(-5, 17, {n}, TensorOptions(kInt64).device(kCUDA), &hg)
              .to(kCPU)
              .to_vector<int64_t>() == randint(-5, 17, {n}, kInt64, &hc).to_vector<int64_t>());
  }
}
