// matmul and bmm on CPU: 2-D, batched and shared-right-operand products against
// hand-computed values; torch.matmul's ranks (1-D operands, batch dims that
// broadcast) against per-batch 2-D products; transposed, strided and permuted
// batch operands, read in place (allocator statistics on the CPU and the meta
// device); empty sizes; backward against finite differences; the error paths.
#include <doctest/doctest.h>

#include <functional>
#include <string>

#include "core/autograd.h"
#include "core/memory.h"
#include "core/meta.h"
#include "core/ops.h"
#include "gradcheck.h"

using namespace ember;
using ember::testing::randn64;
using ember::testing::rel_error;

namespace {
using V = std::vector<double>;

// out[t] = a[t] @ b[t] by the definition, one output element at a time.
Tensor naive_matmul(const Tensor& a, const Tensor& b) {
  const bool batched = a.dim() == 3;
  const int64_t B = batched ? a.size(0) : 1, n = a.size(-2), k = a.size(-1), m = b.size(-1);
  std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>(), out;
  for (int64_t t = 0; t < B; ++t)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < m; ++j) {
        double s = 0;
        for (int64_t p = 0; p < k; ++p)
          s += av[(t * n + i) * k + p] * bv[(b.dim() == 3 ? t * k * m : 0) + p * m + j];
        out.push_back(s);
      }
  return from_vector(out, batched ? Shape{B, n, m} : Shape{n, m}, kFloat64);
}

// torch.matmul by its definition for operands of >= 2 dims: both expanded to the
// broadcast batch shape, then one 2-D product per batch (by naive_matmul).
Tensor broadcast_matmul(const Tensor& a, const Tensor& b) {
  const Shape ba(a.sizes().begin(), a.sizes().end() - 2);
  const Shape bb(b.sizes().begin(), b.sizes().end() - 2);
  const Shape batch = broadcast_shapes(ba, bb, "test");
  Shape sa = batch, sb = batch, so = batch;
  sa.push_back(a.size(-2)), sa.push_back(a.size(-1));
  sb.push_back(b.size(-2)), sb.push_back(b.size(-1));
  so.push_back(a.size(-2)), so.push_back(b.size(-1));
  const int64_t count = numel_of(batch);
  Tensor ea = a.expand(sa).contiguous().reshape({count, a.size(-2), a.size(-1)});
  Tensor eb = b.expand(sb).contiguous().reshape({count, b.size(-2), b.size(-1)});
  return naive_matmul(ea, eb).reshape(so);
}
}  // namespace

TEST_CASE("ops/matmul: 2-D products match hand-computed values") {
  Tensor a = tensor({{1, 2}, {3, 4}});
  Tensor b = tensor({{5, 6}, {7, 8}});
  Tensor c = matmul(a, b);
  CHECK(c.sizes() == Shape{2, 2});
  CHECK(c.to_vector<double>() == V{19, 22, 43, 50});
  CHECK(a.matmul(b).to_vector<double>() == V{19, 22, 43, 50});
  Tensor r = matmul(tensor({{1, 2, 3}, {4, 5, 6}}), from_vector(V{1, 0, -1}, {3, 1}));
  CHECK(r.sizes() == Shape{2, 1});
  CHECK(r.to_vector<double>() == V{-2, -2});
  CHECK(matmul(tensor({{1, 2, 3}}), ones({3, 1})).item() == 6.0);
}

TEST_CASE("ops/matmul: batched and shared right operand match the definition") {
  Tensor a = randn64({3, 4, 5}, 11);
  Tensor b = randn64({3, 5, 2}, 12);
  Tensor c = matmul(a, b);
  CHECK(c.sizes() == Shape{3, 4, 2});
  CHECK(rel_error(c, naive_matmul(a, b)) < 1e-14);
  for (int64_t t = 0; t < 3; ++t)
    CHECK(rel_error(c.select(0, t), matmul(a.select(0, t), b.select(0, t))) < 1e-14);

  Tensor w = randn64({5, 6}, 13);
  Tensor s = matmul(a, w);
  CHECK(s.sizes() == Shape{3, 4, 6});
  CHECK(rel_error(s, naive_matmul(a, w)) < 1e-14);
}

TEST_CASE("ops/matmul: transposed, sliced and expanded views give the same product") {
  Tensor a = randn64({4, 3}, 14);
  Tensor b = randn64({4, 5}, 15);
  Tensor ref = naive_matmul(a.t().contiguous(), b);
  CHECK(rel_error(matmul(a.t(), b), ref) < 1e-14);
  Tensor bt = randn64({5, 4}, 16);
  CHECK(rel_error(matmul(a.t(), bt.t()), naive_matmul(a.t().contiguous(), bt.t().contiguous())) <
        1e-14);
  Tensor wide = randn64({4, 10}, 17);
  Tensor cols = wide.slice(1, 2, 7);  // (4, 5) with row stride 10
  CHECK(rel_error(matmul(a.t(), cols), naive_matmul(a.t().contiguous(), cols.contiguous())) <
        1e-14);
  Tensor every_other = wide.slice(1, 0, 10, 2);  // column stride 2
  CHECK(rel_error(matmul(a.t(), every_other),
                  naive_matmul(a.t().contiguous(), every_other.contiguous())) < 1e-14);
  Tensor x = randn64({2, 3, 4}, 18);
  Tensor shared = randn64({4, 2}, 19);
  Tensor expanded = shared.unsqueeze(0).expand({2, 4, 2});  // batch stride 0
  CHECK(rel_error(matmul(x, expanded), matmul(x, shared)) < 1e-14);
  CHECK(rel_error(matmul(x.transpose(1, 2).contiguous().transpose(1, 2), shared),
                  matmul(x, shared)) < 1e-14);
}

TEST_CASE("ops/matmul: float32 and bfloat16 on CPU round the double result once") {
  Tensor a = tensor({{1, 2}, {3, 4}}, kFloat32);
  Tensor b = tensor({{0.5, 0.25}, {0.125, 1}}, kFloat32);
  Tensor c = matmul(a, b);
  CHECK(c.dtype() == kFloat32);
  CHECK(c.to_vector<double>() == V{0.75, 2.25, 2.0, 4.75});
  Tensor cb = matmul(a.to(kBFloat16), b.to(kBFloat16));
  CHECK(cb.dtype() == kBFloat16);
  CHECK(cb.to_vector<double>() == V{0.75, 2.25, 2.0, 4.75});
}

TEST_CASE("ops/matmul: empty operands give empty or zero results") {
  CHECK(matmul(zeros({0, 3}), zeros({3, 2})).sizes() == Shape{0, 2});
  CHECK(matmul(zeros({2, 3}), zeros({3, 0})).sizes() == Shape{2, 0});
  Tensor z = matmul(ones({2, 0}), ones({0, 3}));
  CHECK(z.sizes() == Shape{2, 3});
  CHECK(z.to_vector<double>() == V(6, 0.0));
  CHECK(matmul(zeros({0, 2, 3}), zeros({0, 3, 4})).sizes() == Shape{0, 2, 4});
  Tensor zb = matmul(ones({2, 2, 0}), ones({0, 3}));
  CHECK(zb.to_vector<double>() == V(12, 0.0));
}

TEST_CASE("ops/matmul: wrong shapes and dtypes throw naming both operands") {
  CHECK_THROWS_WITH_AS(
      matmul(zeros({2, 3}), zeros({2, 3})),
      doctest::Contains(
          "matmul: shapes [2, 3] and [2, 3] cannot be multiplied (3 columns vs 2 rows)"),
      Error);
  CHECK_THROWS_WITH_AS(matmul(zeros({3}), zeros({4, 2})),
                       doctest::Contains("matmul: shapes [3] and [4, 2] cannot be multiplied"),
                       Error);
  CHECK_THROWS_WITH_AS(matmul(zeros({2, 3}), zeros({2})),
                       doctest::Contains("matmul: shapes [2, 3] and [2] cannot be multiplied"),
                       Error);
  CHECK_THROWS_WITH_AS(
      matmul(zeros({3}), zeros({4})),
      doctest::Contains("matmul: shapes [3] and [4] cannot be multiplied (vectors of 3 and 4"),
      Error);
  CHECK_THROWS_WITH_AS(matmul(zeros(Shape{}), zeros({3})),
                       doctest::Contains("matmul: shapes [] and [3]: both operands need at least"),
                       Error);
  CHECK_THROWS_WITH_AS(matmul(zeros({2, 3, 4}), zeros({3, 4, 5})),
                       doctest::Contains("matmul: shapes [2, 3, 4] and [3, 4, 5] have batch dims "
                                         "[2] and [3] that do not broadcast"),
                       Error);
  CHECK_THROWS_WITH_AS(matmul(zeros({2, 2, 3, 4}), zeros({3, 1, 4, 5})),
                       doctest::Contains("matmul: shapes [2, 2, 3, 4] and [3, 1, 4, 5] have batch "
                                         "dims [2, 2] and [3, 1] that do not broadcast"),
                       Error);
  CHECK_THROWS_WITH_AS(
      matmul(zeros({2, 3}), zeros({3, 2}, kFloat64)),
      doctest::Contains("matmul: operands have different dtypes (float32 and float64)"), Error);
  Tensor i = argmax(zeros({2, 2, 2}), 0);
  CHECK_THROWS_WITH_AS(matmul(i, i), doctest::Contains("matmul: expects a floating-point tensor"),
                       Error);
  CHECK_THROWS_WITH_AS(matmul(Tensor(), zeros({2})), doctest::Contains("matmul"), Error);
}

TEST_CASE("ops/bmm: strictly 3-D operands with the same batch, else an error naming both") {
  Tensor a = randn64({3, 2, 4}, 40), b = randn64({3, 4, 5}, 41);
  Tensor c = bmm(a, b);
  CHECK(c.sizes() == Shape{3, 2, 5});
  CHECK(rel_error(c, naive_matmul(a, b)) < 1e-14);
  CHECK(rel_error(bmm(a.transpose(1, 2).contiguous().transpose(1, 2), b), c) < 1e-14);
  CHECK(bmm(zeros({0, 2, 3}), zeros({0, 3, 4})).sizes() == Shape{0, 2, 4});
  CHECK(bmm(ones({2, 2, 0}), ones({2, 0, 3})).to_vector<double>() == V(12, 0.0));
  CHECK_THROWS_WITH_AS(
      bmm(zeros({2, 3}), zeros({3, 2})),
      doctest::Contains("bmm: shapes [2, 3] and [3, 2]: both operands must be 3-D"), Error);
  CHECK_THROWS_WITH_AS(
      bmm(zeros({2, 2, 3}), zeros({3, 2})),
      doctest::Contains("bmm: shapes [2, 2, 3] and [3, 2]: both operands must be 3-D"), Error);
  CHECK_THROWS_WITH_AS(bmm(zeros({1, 2, 2, 3}), zeros({1, 2, 3, 2})),
                       doctest::Contains("both operands must be 3-D"), Error);
  // no broadcasting, not even of a batch of 1
  CHECK_THROWS_WITH_AS(bmm(zeros({1, 2, 3}), zeros({4, 3, 2})),
                       doctest::Contains("bmm: shapes [1, 2, 3] and [4, 3, 2] have different "
                                         "batch sizes (1 vs 4)"),
                       Error);
  CHECK_THROWS_WITH_AS(
      bmm(zeros({2, 2, 3}), zeros({2, 4, 2})),
      doctest::Contains(
          "bmm: shapes [2, 2, 3] and [2, 4, 2] cannot be multiplied (3 columns vs 4 rows)"),
      Error);
  CHECK_THROWS_WITH_AS(
      bmm(zeros({2, 2, 3}), zeros({2, 3, 2}, kFloat64)),
      doctest::Contains("bmm: operands have different dtypes (float32 and float64)"), Error);
  CHECK_GRADCHECK([](const std::vector<Tensor>& v) { return bmm(v[0], v[1]); },
                  {randn64({2, 3, 4}, 42), randn64({2, 4, 2}, 43)});
  Tensor ga = randn64({2, 3, 4}, 44).set_requires_grad(true);
  CHECK(std::string(bmm(ga, randn64({2, 4, 1}, 45)).grad_fn()->name()) == "BmmBackward");
}

TEST_CASE("ops/matmul: 2-D backward matches finite differences") {
  auto f = [](const std::vector<Tensor>& v) { return matmul(v[0], v[1]); };
  CHECK_GRADCHECK(f, {randn64({3, 4}, 21), randn64({4, 2}, 22)});
  CHECK_GRADCHECK(f, {randn64({1, 5}, 23), randn64({5, 1}, 24)});
  CHECK_GRADCHECK([](const std::vector<Tensor>& v) { return matmul(v[0].t(), v[1].t()); },
                  {randn64({4, 3}, 25), randn64({2, 4}, 26)});
}

TEST_CASE("ops/matmul: batched and shared-operand backward match finite differences") {
  auto f = [](const std::vector<Tensor>& v) { return matmul(v[0], v[1]); };
  CHECK_GRADCHECK(f, {randn64({2, 3, 4}, 27), randn64({2, 4, 5}, 28)});
  CHECK_GRADCHECK(f, {randn64({3, 2, 4}, 29), randn64({4, 3}, 30)});
  CHECK_GRADCHECK(
      [](const std::vector<Tensor>& v) {
        return matmul(v[0].transpose(1, 2), v[1].transpose(1, 2));
      },
      {randn64({2, 4, 3}, 31), randn64({2, 5, 4}, 32)});
}

TEST_CASE("ops/matmul: only the operand that needs a gradient gets one") {
  Tensor a = randn64({2, 3}, 33).set_requires_grad(true);
  Tensor b = randn64({3, 2}, 34);
  matmul(a, b).sum().backward();
  CHECK(a.grad().defined());
  CHECK_FALSE(b.grad().defined());
  // d(sum(a @ b))/da = ones @ b^T
  CHECK(rel_error(a.grad(), matmul(ones({2, 2}, kFloat64), b.t())) < 1e-15);
}

TEST_CASE("ops/matmul: 1-D operands are promoted and the added dim removed") {
  Tensor v = from_vector(V{1, 2, 3}, {3}, kFloat64);
  Tensor w = from_vector(V{4, -5, 6}, {3}, kFloat64);
  Tensor dot = matmul(v, w);
  CHECK(dot.dim() == 0);
  CHECK(dot.item() == 12.0);  // 4 - 10 + 18
  Tensor m = from_vector(V{1, 2, 3, 4, 5, 6}, {3, 2}, kFloat64);
  Tensor vm = matmul(v, m);  // [1, 2, 3] @ [[1, 2], [3, 4], [5, 6]]
  CHECK(vm.sizes() == Shape{2});
  CHECK(vm.to_vector<double>() == V{22, 28});
  Tensor mv = matmul(m.t(), v);
  CHECK(mv.sizes() == Shape{2});
  CHECK(mv.to_vector<double>() == V{22, 28});
  Tensor b3 = randn64({2, 3, 4}, 50);
  Tensor vb = matmul(v, b3);  // (3) x (2, 3, 4) -> (2, 4)
  CHECK(vb.sizes() == Shape{2, 4});
  CHECK(rel_error(vb, broadcast_matmul(v.unsqueeze(0), b3).squeeze(1)) < 1e-14);
  Tensor a3 = randn64({2, 4, 3}, 51);
  Tensor av = matmul(a3, v);  // (2, 4, 3) x (3) -> (2, 4)
  CHECK(av.sizes() == Shape{2, 4});
  CHECK(rel_error(av, broadcast_matmul(a3, v.unsqueeze(1)).squeeze(2)) < 1e-14);
  Tensor a4 = randn64({2, 1, 4, 3}, 52);
  CHECK(matmul(a4, v).sizes() == Shape{2, 1, 4});
  CHECK(matmul(zeros({0}), zeros({0})).item() == 0.0);
  CHECK(matmul(zeros({3}), zeros({2, 3, 0})).sizes() == Shape{2, 0});
}

TEST_CASE("ops/matmul: batch dims of any rank broadcast, as torch.matmul") {
  struct Case {
    Shape a, b, out;
  };
  const std::vector<Case> cases = {
      {{3, 4}, {2, 4, 5}, {2, 3, 5}},              // 2-D x 3-D
      {{2, 3, 4}, {4, 5}, {2, 3, 5}},              // 3-D x 2-D
      {{2, 3, 4, 5}, {2, 3, 5, 4}, {2, 3, 4, 4}},  // 4-D x 4-D
      {{2, 1, 4, 5}, {3, 5, 6}, {2, 3, 4, 6}},     // [2, 1] with [3]
      {{1, 3, 2, 3}, {2, 1, 3, 2}, {2, 3, 2, 2}},  // both broadcast
      {{2, 2, 1, 2, 3}, {2, 3, 4}, {2, 2, 2, 2, 4}},
      {{4, 5}, {2, 1, 3, 5, 2}, {2, 1, 3, 4, 2}},
      {{0, 1, 2, 3}, {4, 3, 2}, {0, 4, 2, 2}},  // an empty batch
  };
  uint64_t seed = 60;
  for (const Case& c : cases) {
    CAPTURE(c.a);
    CAPTURE(c.b);
    Tensor a = randn64(c.a, ++seed), b = randn64(c.b, ++seed);
    Tensor out = matmul(a, b);
    CHECK(out.sizes() == c.out);
    CHECK(rel_error(out, broadcast_matmul(a, b)) < 1e-14);
    Tensor out32 = matmul(a.to(kFloat32), b.to(kFloat32));
    CHECK(out32.sizes() == c.out);
    CHECK(rel_error(out32, broadcast_matmul(a, b)) < 1e-6);
  }
}

TEST_CASE("ops/matmul: transposed, strided and permuted batch operands") {
  Tensor a = randn64({2, 3, 5, 4}, 70), b = randn64({2, 3, 5, 6}, 71);
  // transposed matrices of every batch
  Tensor at = a.transpose(-1, -2);  // (2, 3, 4, 5)
  CHECK(rel_error(matmul(at, b), broadcast_matmul(at.contiguous(), b)) < 1e-14);
  Tensor bt = randn64({2, 3, 6, 5}, 72).transpose(-1, -2);  // (2, 3, 5, 6)
  CHECK(rel_error(matmul(at, bt), broadcast_matmul(at.contiguous(), bt.contiguous())) < 1e-14);
  // the batch dims swapped: no single batch stride covers them
  Tensor ap = a.transpose(0, 1), bp = b.transpose(0, 1);  // (3, 2, 5, 4), (3, 2, 5, 6)
  Tensor r = matmul(ap.transpose(-1, -2), bp);
  CHECK(r.sizes() == Shape{3, 2, 4, 6});
  CHECK(rel_error(r, broadcast_matmul(ap.transpose(-1, -2).contiguous(), bp.contiguous())) < 1e-14);
  // every second batch, and every second batch of a broadcast operand
  Tensor big = randn64({6, 4, 3}, 73);
  Tensor every_other = big.slice(0, 0, 6, 2);  // (3, 4, 3), batch stride 24
  Tensor w = randn64({3, 3, 2}, 74);
  CHECK(rel_error(matmul(every_other, w), broadcast_matmul(every_other.contiguous(), w)) < 1e-14);
  Tensor sel = big.slice(0, 1, 6, 5).unsqueeze(0);  // (1, 1, 4, 3)
  Tensor w4 = randn64({2, 3, 3, 2}, 75);
  CHECK(rel_error(matmul(sel, w4), broadcast_matmul(sel.contiguous(), w4)) < 1e-14);
  // a batch of columns with stride 2 (copied: neither matrix dim has a unit stride)
  Tensor cols = randn64({2, 4, 6}, 76).slice(2, 0, 6, 2);  // (2, 4, 3)
  Tensor w2 = w.slice(0, 0, 2);
  CHECK(rel_error(matmul(cols, w2), broadcast_matmul(cols.contiguous(), w2)) < 1e-14);
  // an operand expanded along a batch dim (stride 0)
  Tensor e = randn64({4, 1, 3}, 77).expand({4, 5, 3}).transpose(0, 1);  // (5, 4, 3)
  CHECK(rel_error(matmul(e, w.select(0, 0)), broadcast_matmul(e.contiguous(), w.select(0, 0))) <
        1e-14);
}

TEST_CASE("ops/matmul: transposed and strided batch operands are read in place, not copied") {
  // Only the output is allocated (CPU: the host allocator; float64, which OpenBLAS
  // reads directly). Every size is a multiple of the allocator's 512-byte rounding.
  Tensor a = randn64({4, 16, 8}, 80), b = randn64({4, 16, 8}, 81);
  Tensor big = randn64({8, 8, 16}, 82);
  auto allocated_by = [](const std::function<Tensor()>& f, Device dev) {
    reset_peak_memory_stats(dev);
    const int64_t before = memory_allocated(dev);
    Tensor out = f();
    return max_memory_allocated(dev) - before;
  };
  const int64_t out_bytes = 4 * 8 * 8 * 8;  // (4, 8, 8) float64
  CHECK(allocated_by([&] { return matmul(a.transpose(1, 2), b); }, kCPU) == out_bytes);
  CHECK(
      allocated_by([&] { return matmul(a.transpose(1, 2), big.slice(0, 0, 8, 2).transpose(1, 2)); },
                   kCPU) == out_bytes);
  CHECK(allocated_by([&] { return matmul(a.unsqueeze(0).transpose(-1, -2), b.unsqueeze(1)); },
                     kCPU) == 4 * out_bytes);  // (1, 4, 8, 16) x (4, 1, 16, 8) -> (4, 4, 8, 8)
  // neither matrix dim with a unit stride: that operand alone is copied
  CHECK(
      allocated_by([&] { return matmul(a.slice(2, 0, 8, 2).transpose(1, 2), b.slice(2, 0, 8, 2)); },
                   kCPU) == 512 + 2 * 2048);  // the (4, 4, 4) output and two (4, 16, 4) copies

  // The meta device (mirroring CUDA) predicts the same: predict_memory sees no copy.
  MetaDeviceScope scope;
  Tensor ma = empty({4, 16, 8}, TensorOptions(kFloat32).device(kMeta));
  Tensor mb = empty({4, 16, 8}, TensorOptions(kFloat32).device(kMeta));
  Tensor mbig = empty({8, 8, 16}, TensorOptions(kFloat32).device(kMeta));
  CHECK(allocated_by([&] { return matmul(ma.transpose(1, 2), mb); }, kMeta) == 1024);
  CHECK(
      allocated_by([&] { return bmm(ma.transpose(1, 2), mbig.slice(0, 0, 8, 2).transpose(1, 2)); },
                   kMeta) == 1024);
  Tensor mo = matmul(ma.unsqueeze(0).transpose(-1, -2), mb.unsqueeze(1));
  CHECK(mo.device() == kMeta);
  CHECK(mo.sizes() == Shape{4, 4, 8, 8});
  CHECK(mo.dtype() == kFloat32);
}

TEST_CASE("ops/matmul: broadcast and 1-D backward match finite differences") {
  auto f = [](const std::vector<Tensor>& v) { return matmul(v[0], v[1]); };
  CHECK_GRADCHECK(f, {randn64({4}, 90), randn64({4}, 91)});
  CHECK_GRADCHECK(f, {randn64({3}, 92), randn64({2, 3, 2}, 93)});
  CHECK_GRADCHECK(f, {randn64({2, 2, 3}, 94), randn64({3}, 95)});
  CHECK_GRADCHECK(f, {randn64({2, 3}, 96), randn64({2, 3, 2}, 97)});
  CHECK_GRADCHECK(f, {randn64({2, 1, 2, 3}, 98), randn64({3, 3, 2}, 99)});
  CHECK_GRADCHECK(f, {randn64({1, 2, 2, 3}, 100), randn64({2, 1, 3, 2}, 101)});
  CHECK_GRADCHECK(
      [](const std::vector<Tensor>& v) {
        return matmul(v[0].transpose(0, 1).transpose(-1, -2), v[1]);
      },
      {randn64({2, 3, 3, 2}, 102), randn64({3, 2, 3, 2}, 103)});
}

TEST_CASE("ops/matmul: a broadcast operand's gradient is summed back to its shape") {
  Tensor a = randn64({2, 1, 3, 4}, 110).set_requires_grad(true);
  Tensor b = randn64({5, 4, 2}, 111).set_requires_grad(true);
  matmul(a, b).sum().backward();
  REQUIRE(a.grad().defined());
  REQUIRE(b.grad().defined());
  CHECK(a.grad().sizes() == Shape{2, 1, 3, 4});
  CHECK(b.grad().sizes() == Shape{5, 4, 2});
  // d/da sum(a @ b) = sum over b's batches of ones @ b_t^T
  Tensor ref_a = matmul(ones({3, 2}, kFloat64), b.detach().sum(0).t()).unsqueeze(0).unsqueeze(0);
  CHECK(rel_error(a.grad(), ref_a.expand({2, 1, 3, 4})) < 1e-14);
  Tensor ref_b = matmul(a.detach().sum(0).sum(0).t(), ones({3, 2}, kFloat64));
  CHECK(rel_error(b.grad(), ref_b.unsqueeze(0).expand({5, 4, 2})) < 1e-14);
  Tensor v = randn64({4}, 112).set_requires_grad(true);
  matmul(v, b).sum().backward();
  CHECK(v.grad().sizes() == Shape{4});
}
