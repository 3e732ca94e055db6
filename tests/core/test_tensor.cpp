// Tensor on CPU: factories, seeded random numbers, metadata, conversions,
// to_vector/item/printing, and the errors for bad sizes and misuse.
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "core/autograd.h"
#include "core/ops.h"
#include "gradcheck.h"

using namespace ember;

namespace {
using V = std::vector<double>;

// Mean and (population) variance, in double.
std::pair<double, double> moments(const Tensor& t) {
  const V v = t.to_vector<double>();
  double m = 0, s = 0;
  for (double x : v) m += x;
  m /= static_cast<double>(v.size());
  for (double x : v) s += (x - m) * (x - m);
  return {m, s / static_cast<double>(v.size())};
}
}  // namespace

TEST_CASE("tensor/factories: zeros, ones, full, empty have the asked shape, dtype and values") {
  Tensor z = zeros({2, 3});
  CHECK(z.sizes() == Shape{2, 3});
  CHECK(z.strides() == Shape{3, 1});
  CHECK(z.dtype() == kFloat32);
  CHECK(z.device() == kCPU);
  CHECK(z.numel() == 6);
  CHECK(z.dim() == 2);
  CHECK(z.nbytes() == 24);
  CHECK(z.to_vector<double>() == V(6, 0.0));
  CHECK(ones({3}, kFloat64).to_vector<double>() == V(3, 1.0));
  CHECK(ones({3}, kFloat64).dtype() == kFloat64);
  CHECK(full({2, 2}, -1.5, kBFloat16).to_vector<double>() == V(4, -1.5));
  CHECK(empty({4, 0}).numel() == 0);
  CHECK(zeros({}).numel() == 1);
  CHECK(zeros({}).dim() == 0);
  Tensor like = full_like(z, 2.0);
  CHECK(like.sizes() == z.sizes());
  CHECK(like.to_vector<double>() == V(6, 2.0));
  CHECK(zeros_like(like).to_vector<double>() == V(6, 0.0));
  CHECK(ones_like(like).to_vector<double>() == V(6, 1.0));
  CHECK(empty_like(like).sizes() == Shape{2, 3});
  CHECK(zeros({2}, TensorOptions().dtype(kFloat64).requires_grad()).requires_grad());
}

TEST_CASE("tensor/factories: negative sizes throw naming the factory and the shape") {
  CHECK_THROWS_WITH_AS(empty({2, -1}),
                       doctest::Contains("empty: negative size -1 in shape [2, -1]"), Error);
  CHECK_THROWS_WITH_AS(zeros({-3}), doctest::Contains("negative size -3"), Error);
  CHECK_THROWS_WITH_AS(rand({-1}), doctest::Contains("rand: negative size -1"), Error);
  CHECK_THROWS_WITH_AS(from_vector(V{1, 2}, {-2}), doctest::Contains("from_vector: negative size"),
                       Error);
}

TEST_CASE("tensor/factories: arange counts like numpy") {
  CHECK(arange(5).to_vector<double>() == V{0, 1, 2, 3, 4});
  CHECK(arange(1, 2, 0.25, kFloat64).to_vector<double>() == V{1, 1.25, 1.5, 1.75});
  CHECK(arange(5, 0, -2, kFloat64).to_vector<double>() == V{5, 3, 1});
  CHECK(arange(3, 3).numel() == 0);
  CHECK(arange(3, 1).numel() == 0);
  CHECK_THROWS_WITH_AS(arange(0, 1, 0),
                       doctest::Contains("arange: step must be finite and non-zero"), Error);
}

TEST_CASE("tensor/factories: arange's value i is fma(step, i, start) rounded into the dtype") {
  // One rounding in double (as the CUDA kernel's fma), then the dtype's: a fractional
  // step whose products round differently from a running sum, and every dtype.
  const double start = 0.1, step = 0.3;
  const int64_t n = 50;
  for (DType dt : {kFloat64, kFloat32, kBFloat16}) {
    CAPTURE(dtype_name(dt));
    const std::vector<double> got = arange(start, start + step * n, step, dt).to_vector<double>();
    REQUIRE(got.size() == static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      const double want = std::fma(step, static_cast<double>(i), start);
      const double rounded = dt == kFloat64   ? want
                             : dt == kFloat32 ? static_cast<double>(static_cast<float>(want))
                                              : full({}, want, dt).item();
      CHECK(got[static_cast<size_t>(i)] == rounded);
    }
  }
  CHECK(arange(-3, 4, 3, kInt64).to_vector<double>() == V{-3, 0, 3});
  CHECK(arange(4, kBool).to_vector<double>() == V{0, 1, 1, 1});
  // int64 values past its range are refused, not saturated.
  CHECK_THROWS_WITH_AS(arange(9.2e18, 9.3e18, 5e16, kInt64),
                       doctest::Contains("leaves int64's range"), Error);
  CHECK(arange(2, TensorOptions(kFloat32).requires_grad(true)).requires_grad());
}

TEST_CASE("tensor/factories: from_vector and tensor keep row-major order") {
  Tensor t = from_vector(V{1, 2, 3, 4, 5, 6}, {2, 3}, kFloat64);
  CHECK(t.sizes() == Shape{2, 3});
  CHECK(t[1][0].item() == 4.0);
  Tensor f = from_vector(std::vector<float>{1.5f, 2.5f}, {2});
  CHECK(f.dtype() == kFloat32);
  CHECK(f.to_vector<float>() == std::vector<float>{1.5f, 2.5f});
  Tensor m = tensor({{1, 2}, {3, 4}, {5, 6}});
  CHECK(m.sizes() == Shape{3, 2});
  CHECK(m.to_vector<double>() == V{1, 2, 3, 4, 5, 6});
  CHECK(tensor({1, 2, 3}).sizes() == Shape{3});
  CHECK_THROWS_WITH_AS(
      from_vector(V{1, 2, 3}, {2, 2}),
      doctest::Contains("from_vector: 3 values do not fill shape [2, 2] (4 elements)"), Error);
  CHECK_THROWS_WITH_AS(tensor({{1, 2}, {3}}), doctest::Contains("tensor: ragged rows"), Error);
}

TEST_CASE("tensor/random: the same seed gives the same numbers, and draws advance") {
  Generator g1(42), g2(42), g3(43);
  Tensor a = rand({100}, {}, &g1);
  Tensor b = rand({100}, {}, &g2);
  Tensor c = rand({100}, {}, &g3);
  CHECK(a.to_vector<double>() == b.to_vector<double>());
  CHECK(a.to_vector<double>() != c.to_vector<double>());
  Tensor a2 = rand({100}, {}, &g1);  // the generator moved on
  CHECK(a2.to_vector<double>() != a.to_vector<double>());
  CHECK(g1.offset() == 200);

  manual_seed(7);
  Tensor n1 = randn({50}, kFloat64);
  manual_seed(7);
  Tensor n2 = randn({50}, kFloat64);
  CHECK(n1.to_vector<double>() == n2.to_vector<double>());

  // The numbers depend only on (seed, position): float32 is float64 rounded.
  Generator h1(9), h2(9);
  Tensor d = randn({64}, kFloat64, &h1);
  Tensor s = randn({64}, kFloat32, &h2);
  CHECK(s.to_vector<double>() == d.to(kFloat32).to_vector<double>());
}

TEST_CASE("tensor/random: rand and randn have the right mean and variance for n = 1e5") {
  Generator g(123);
  Tensor u = rand({100000}, kFloat64, &g);
  auto [um, uv] = moments(u);
  CHECK(um == doctest::Approx(0.5).epsilon(0.01));
  CHECK(uv == doctest::Approx(1.0 / 12).epsilon(0.02));
  const V uvals = u.to_vector<double>();
  CHECK(*std::min_element(uvals.begin(), uvals.end()) >= 0.0);
  CHECK(*std::max_element(uvals.begin(), uvals.end()) < 1.0);

  Tensor n = randn({100000}, kFloat64, &g);
  auto [nm, nv] = moments(n);
  CHECK(std::abs(nm) < 0.015);  // 4.7 standard errors
  CHECK(nv == doctest::Approx(1.0).epsilon(0.02));

  Tensor t = empty({100000}, kFloat64);
  normal_(t, 3.0, 2.0, &g);
  auto [tm, tv] = moments(t);
  CHECK(tm == doctest::Approx(3.0).epsilon(0.01));
  CHECK(tv == doctest::Approx(4.0).epsilon(0.02));
  uniform_(t, -2.0, 2.0, &g);
  auto [wm, wv] = moments(t);
  CHECK(std::abs(wm) < 0.02);
  CHECK(wv == doctest::Approx(16.0 / 12).epsilon(0.02));
}

TEST_CASE("tensor/random: bad parameters and integer tensors throw") {
  Tensor t = empty({3});
  CHECK_THROWS_WITH_AS(uniform_(t, 1.0, 0.0),
                       doctest::Contains("uniform_: lower bound 1 is above upper bound 0"), Error);
  CHECK_THROWS_WITH_AS(normal_(t, 0.0, -1.0),
                       doctest::Contains("normal_: standard deviation must be >= 0"), Error);
  CHECK_THROWS_WITH_AS(rand({2}, kInt64),
                       doctest::Contains("rand: expects a floating-point tensor"), Error);
  Tensor w = ones({2}).set_requires_grad(true);
  CHECK_THROWS_WITH_AS(uniform_(w, 0.0, 1.0), doctest::Contains("uniform_: in-place operation"),
                       Error);
  Tensor strided = zeros({4, 2}, kFloat64).t();  // a non-contiguous target is filled too
  Generator g(5);
  uniform_(strided, 1.0, 2.0, &g);
  for (double v : strided.to_vector<double>()) CHECK((v >= 1.0 && v < 2.0));
}

TEST_CASE("tensor/item, to_vector: read values back on the host") {
  CHECK(tensor({3.5}).item() == 3.5);
  CHECK(full({}, 2.0).item<float>() == 2.0f);
  Tensor m = tensor({{1, 2}, {3, 4}});
  CHECK(m.t().to_vector<double>() == V{1, 3, 2, 4});
  CHECK(m.to_vector<float>() == std::vector<float>{1, 2, 3, 4});
  CHECK(m.to_vector<int64_t>() == std::vector<int64_t>{1, 2, 3, 4});
  CHECK(argmax(m[0], 0).item<int64_t>() == 1);
  CHECK_THROWS_WITH_AS(
      m.item(),
      doctest::Contains("item: tensor has 4 elements (shape [2, 2]), expected exactly one"), Error);
  CHECK_THROWS_WITH_AS(zeros({0}).item(), doctest::Contains("item: tensor has 0 elements"), Error);
  CHECK_THROWS_WITH_AS(m.data_ptr<double>(),
                       doctest::Contains("data_ptr: tensor is float32, asked for float64"), Error);
  CHECK_THROWS_WITH_AS(Tensor().numel(), doctest::Contains("tensor is undefined"), Error);
}

TEST_CASE("tensor/printing: reads like PyTorch's repr") {
  CHECK(tensor({1, 2.5}).str() == "tensor([1.0000, 2.5000])");
  CHECK(tensor({{1, 2}, {3, 4}}).str() ==
        "tensor([[1.0000, 2.0000],\n        [3.0000, 4.0000]], size=[2, 2])");
  CHECK(tensor({1}, kFloat64).str() == "tensor([1.0000], dtype=float64)");
  CHECK(full({}, 3.0).str() == "tensor(3.0000, size=[])");
  CHECK(zeros({0, 2}).str() == "tensor([], size=[0, 2])");
  CHECK(argmax(tensor({{1, 2}}), 1).str() == "tensor([1], dtype=int64)");
  CHECK(ones({2}).set_requires_grad(true).str() == "tensor([1.0000, 1.0000], requires_grad=true)");
  Tensor y = ones({2}).set_requires_grad(true) * 2.0;
  CHECK(y.str().find("grad_fn=<MulScalarBackward>") != std::string::npos);
  const std::string big = arange(2000).str();
  CHECK(big.find("...") != std::string::npos);
  CHECK(big.find("1999.0000") != std::string::npos);
  CHECK(big.size() < 200);
  CHECK(Tensor().str() == "tensor(undefined)");
  std::ostringstream os;
  os << tensor({1});
  CHECK(os.str() == "tensor([1.0000])");
}

TEST_CASE("tensor/to: same device and dtype return the tensor itself, others convert") {
  Tensor a = tensor({1.5, 2.5});
  CHECK(a.to(kCPU).is_same(a));
  CHECK(a.cpu().is_same(a));
  CHECK(a.to(kFloat32).is_same(a));
  Tensor d = a.to(kFloat64);
  CHECK(d.dtype() == kFloat64);
  CHECK(d.to_vector<double>() == V{1.5, 2.5});
  CHECK(a.to(kCPU, kBFloat16).dtype() == kBFloat16);
  CHECK_THROWS_WITH_AS(a.to(Device::cuda(63)),
                       doctest::Contains("cuda: device index 63 is not available"), Error);
}

TEST_CASE("tensor/clone, detach: copies and aliases") {
  Tensor a = tensor({1, 2}, TensorOptions().dtype(kFloat64).requires_grad());
  Tensor c = a.clone();
  CHECK(c.storage() != a.storage());
  CHECK(c.requires_grad());
  CHECK_FALSE(c.is_leaf());
  Tensor d = a.detach();
  CHECK(d.storage() == a.storage());
  CHECK_FALSE(d.requires_grad());
  CHECK(d.is_leaf());
}

TEST_CASE("tensor/requires_grad: only floating-point leaves can change it") {
  Tensor i = argmax(tensor({{1, 2}}), 1);
  CHECK_THROWS_WITH_AS(
      i.set_requires_grad(true),
      doctest::Contains("set_requires_grad: only floating-point tensors can require grad"), Error);
  Tensor y = ones({1}).set_requires_grad(true) * 2.0;
  CHECK_THROWS_WITH_AS(y.set_requires_grad(false), doctest::Contains("only leaf tensors"), Error);
}

TEST_CASE("tensor/device: parsing and printing") {
  CHECK(Device("cpu") == kCPU);
  CHECK(Device("cuda") == Device::cuda(0));
  CHECK(Device("cuda:3").index == 3);
  CHECK(Device("cuda:3").str() == "cuda:3");
  CHECK_THROWS_WITH_AS(Device("tpu"), doctest::Contains("Device: unknown device 'tpu'"), Error);
  CHECK_THROWS_WITH_AS(Device("cuda:x"), doctest::Contains("Device: bad device index in 'cuda:x'"),
                       Error);
}

TEST_CASE("autograd/grad: a leaf output and an unused input get correct gradients") {
  // Regression: the AccumulateGrad node of a leaf that no graph holds used to
  // die while the engine still pointed at it.
  Tensor x = tensor({1, 2}, TensorOptions().dtype(kFloat64).requires_grad());
  Tensor unused = tensor({5}, TensorOptions().dtype(kFloat64).requires_grad());
  Tensor y = x * 3.0;
  std::vector<Tensor> g = grad({y}, {x, unused}, {ones_like(y)});
  CHECK(g[0].to_vector<double>() == V{3, 3});
  CHECK(g[1].to_vector<double>() == V{0});
  std::vector<Tensor> self = grad({x}, {x}, {tensor({2, 4}, kFloat64)});
  CHECK(self[0].to_vector<double>() == V{2, 4});
  x.backward(tensor({1, 1}, kFloat64));
  CHECK(x.grad().to_vector<double>() == V{1, 1});
}
