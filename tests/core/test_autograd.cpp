// Autograd semantics: accumulation, retain_graph, no_grad, detach, version
// counters, hooks, grad(), deep graphs, and the errors for each misuse.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/anomaly.h"
#include "core/autograd.h"
#include "core/ops.h"
#include "core/ops/split_gradient.h"

using namespace ember;

namespace {
Tensor leaf(std::initializer_list<double> v) {
  return tensor(v, TensorOptions().dtype(kFloat64).requires_grad());
}
std::vector<double> vals(const Tensor& t) {
  return t.to_vector<double>();
}
}  // namespace

TEST_CASE("autograd/backward: product rule by hand") {
  Tensor a = leaf({1, 2, 3});
  Tensor b = leaf({4, 5, 6});
  Tensor y = a * b + a;  // dy/da = b + 1, dy/db = a
  y.backward(ones_like(y));
  CHECK(vals(a.grad()) == std::vector<double>{5, 6, 7});
  CHECK(vals(b.grad()) == std::vector<double>{1, 2, 3});
}

TEST_CASE("autograd/accumulation: gradients add up across backward calls") {
  Tensor a = leaf({1, 2});
  for (int i = 0; i < 3; ++i) {
    Tensor y = a * 2.0;
    y.backward(ones_like(y));
  }
  CHECK(vals(a.grad()) == std::vector<double>{6, 6});
  a.set_grad(Tensor());
  Tensor y = a * a;
  y.backward(ones_like(y));
  CHECK(vals(a.grad()) == std::vector<double>{2, 4});
}

TEST_CASE("autograd/accumulation: a tensor used twice gets both contributions") {
  Tensor a = leaf({3});
  Tensor y = a * a * a;  // 3a^2 = 27
  y.backward(ones_like(y));
  CHECK(vals(a.grad())[0] == doctest::Approx(27));
}

TEST_CASE("autograd/retain_graph: a second backward needs retain_graph") {
  Tensor a = leaf({1, 2});
  Tensor y = a.exp();
  y.backward(ones_like(y), /*retain_graph=*/true);
  y.backward(ones_like(y));
  CHECK(vals(a.grad())[1] == doctest::Approx(2 * std::exp(2.0)));
  CHECK_THROWS_WITH_AS(y.backward(ones_like(y)),
                       doctest::Contains("backward through the graph a second time"), Error);
}

TEST_CASE("autograd/no_grad: no graph is built and results do not require grad") {
  Tensor a = leaf({1, 2});
  {
    NoGradGuard guard;
    CHECK_FALSE(is_grad_enabled());
    Tensor y = a * 2.0 + a;
    CHECK_FALSE(y.requires_grad());
    CHECK(y.grad_fn() == nullptr);
    {
      EnableGradGuard enable;
      CHECK((a * 2.0).requires_grad());
    }
  }
  CHECK(is_grad_enabled());
  CHECK((a * 2.0).requires_grad());
}

TEST_CASE("autograd/detach: shares data, drops history") {
  Tensor a = leaf({1, 2});
  Tensor y = a * 3.0;
  Tensor d = y.detach();
  CHECK_FALSE(d.requires_grad());
  CHECK(d.is_leaf());
  CHECK(d.storage() == y.storage());
  Tensor z = d * a;  // only a's path carries gradient
  z.backward(ones_like(z));
  CHECK(vals(a.grad()) == std::vector<double>{3, 6});
}

TEST_CASE("autograd/version: backward refuses a saved tensor changed in place") {
  Tensor a = leaf({1, 2});
  Tensor b = leaf({3, 4});
  Tensor prod = a * b;    // saves a and b
  Tensor e = prod.exp();  // saves its output
  {
    NoGradGuard guard;
    Tensor alias = e.detach();
    alias.add_(1.0);  // bumps the version shared by e's storage
  }
  CHECK_THROWS_WITH_AS(e.backward(ones_like(e)), doctest::Contains("modified by an in-place"),
                       Error);
}

TEST_CASE("autograd/version: in-place ops bump the counter, views share it") {
  Tensor t = zeros({4}, kFloat64);
  Tensor v = t.slice(0, 1, 3);
  uint64_t before = t.version();
  v.fill_(1.0);
  CHECK(t.version() == before + 1);
  CHECK(vals(t) == std::vector<double>{0, 1, 1, 0});
}

TEST_CASE("autograd/inplace: refused on a tensor that requires grad in grad mode") {
  Tensor a = leaf({1, 2});
  CHECK_THROWS_WITH_AS(
      a.add_(1.0), doctest::Contains("in-place operation on a tensor that requires grad"), Error);
  NoGradGuard guard;
  a.add_(1.0);
  CHECK(vals(a) == std::vector<double>{2, 3});
}

TEST_CASE("autograd/hooks: post-accumulate hooks fire after the gradient lands") {
  Tensor a = leaf({1, 2});
  Tensor b = leaf({5});
  std::vector<std::string> order;
  std::vector<double> seen;
  a.register_post_accumulate_grad_hook([&](const Tensor& p) {
    order.push_back("a");
    seen = p.grad().to_vector<double>();
  });
  b.register_post_accumulate_grad_hook([&](const Tensor&) { order.push_back("b"); });
  Tensor y = a * b;
  y.backward(ones_like(y));
  CHECK(seen == std::vector<double>{5, 5});
  CHECK(order.size() == 2);
  Tensor c = zeros({1}, kFloat64);
  CHECK_THROWS_AS(c.register_post_accumulate_grad_hook([](const Tensor&) {}), Error);
}

TEST_CASE("autograd/grad: returns gradients without touching .grad()") {
  Tensor a = leaf({1, 2, 3});
  Tensor y = a * a;
  std::vector<Tensor> g = grad({y}, {a}, {ones_like(y)});
  CHECK(vals(g[0]) == std::vector<double>{2, 4, 6});
  CHECK_FALSE(a.grad().defined());
}

TEST_CASE("autograd/errors: misuse is named") {
  Tensor plain = tensor({1.0, 2.0}, kFloat64);
  CHECK_THROWS_WITH_AS(plain.backward(ones_like(plain)), doctest::Contains("does not require grad"),
                       Error);
  Tensor a = leaf({1, 2});
  Tensor y = a * 2.0;
  CHECK_THROWS_WITH_AS(y.backward(), doctest::Contains("single-element"), Error);
  CHECK_THROWS_WITH_AS(y.backward(ones({3}, kFloat64)), doctest::Contains("gradient of shape"),
                       Error);
  CHECK_THROWS_WITH_AS(y.set_requires_grad(false), doctest::Contains("only leaf"), Error);
  Tensor idx = zeros({2}, kInt64);
  CHECK_THROWS_WITH_AS(idx.set_requires_grad(true), doctest::Contains("floating-point"), Error);
}

TEST_CASE("autograd/engine: a 100000-node chain runs and frees without recursion") {
  Tensor a = leaf({1.0});
  Tensor y = a;
  for (int i = 0; i < 100000; ++i) y = y + 1e-6;
  CHECK(count_graph_nodes(y) == 100001);  // 100000 adds + the accumulator
  y.backward(ones_like(y));
  CHECK(vals(a.grad())[0] == 1.0);
  y = Tensor();  // destroying the chain must not overflow the stack either
  Tensor z = a;
  for (int i = 0; i < 100000; ++i) z = z * 1.0;
  CHECK(count_graph_nodes(z) == 100001);
  z = Tensor();  // reaching the next line is the test: a recursive teardown would crash
  CHECK(a.grad().defined());
}

TEST_CASE("autograd/engine: diamond graphs run each node once, after all its inputs") {
  Tensor a = leaf({2});
  Tensor b = a * 3.0;  // 6
  Tensor c = b * b;    // 36, dc/db = 12
  Tensor d = b + c;    // dd/db = 13, dd/da = 39
  d.backward(ones_like(d));
  CHECK(vals(a.grad())[0] == doctest::Approx(39));
}

TEST_CASE("autograd/engine: slices add their gradients into one sum, by hand") {
  // Slices (a split's pieces, overlapping ones, strided ones) and the whole tensor
  // all feed x's gradient: SliceBackward adds each slice's part into the one sum.
  Tensor x = leaf({1, 2, 3, 4, 5, 6});
  std::vector<Tensor> parts = x.chunk(3);
  Tensor y = sum(parts[0] * 1.0) + sum(parts[1] * 2.0) + sum(parts[2] * 3.0) +
             sum(slice(x, 0, 1, 5) * 10.0) + sum(slice(x, 0, 0, 6, 2) * 100.0) + sum(x * x);
  y.backward(ones_like(y));
  // 1,1,2,2,3,3 + 0,10,10,10,10,0 + 100,0,100,0,100,0 + 2x
  CHECK(vals(x.grad()) == std::vector<double>{103, 15, 118, 20, 123, 15});
  // Twice through the same graph is still refused.
  Tensor z = sum(slice(x, 0, 0, 3) * 2.0);
  z.backward(ones_like(z));
  CHECK_THROWS_WITH(z.backward(ones_like(z)), doctest::Contains("a second time"));
}

TEST_CASE("autograd/engine: split's pieces assemble their gradients as a cat, by hand") {
  // Pieces 0 and 2 used (piece 2 twice), piece 1 not, x also used whole: x's gradient
  // is each used piece's gradient in its region, zeros in the unused one, plus 2x.
  auto run = [](bool anomaly) {
    Tensor x = leaf({1, 2, 3, 4, 5, 6, 7});
    std::vector<Tensor> p = split(x, 3);  // [0, 3), [3, 6), [6, 7)
    REQUIRE(p.size() == 3);
    CHECK(std::string(p[0].grad_fn()->name()) == "SplitBackward");
    DetectAnomalyGuard guard(anomaly);
    Tensor y = sum(p[0] * tensor({1.0, 10.0, 100.0}, kFloat64)) + sum(p[2] * 3.0) +
               sum(p[2] * 4.0) + sum(x * x);
    y.backward(ones_like(y));
    return vals(x.grad());
  };
  const std::vector<double> want{3, 14, 106, 8, 10, 12, 21};
  CHECK(run(false) == want);
  CHECK(run(true) == want);  // the engine sums zero-padded gradients instead
  // Every piece used, through chunk along dim 1, and a retained graph run twice
  // (the second backward assembles afresh and accumulates into .grad).
  Tensor m = tensor({{1.0, 2.0, 3.0, 4.0, 5.0}, {6.0, 7.0, 8.0, 9.0, 10.0}},
                    TensorOptions().dtype(kFloat64).requires_grad());
  std::vector<Tensor> c = m.chunk(2, 1);  // (2, 3) and (2, 2)
  Tensor z = sum(c[0] * 2.0) + sum(c[1] * c[1]);
  z.backward(ones_like(z), true);
  CHECK(vals(m.grad()) == std::vector<double>{2, 2, 2, 8, 10, 2, 2, 2, 18, 20});
  z.backward(ones_like(z));
  CHECK(vals(m.grad()) == std::vector<double>{4, 4, 4, 16, 20, 4, 4, 4, 36, 40});
  // No piece used at all: no gradient flows (the pieces' nodes never run).
  Tensor u = leaf({1, 2});
  std::vector<Tensor> up = split(u, 1);
  Tensor w = sum(u * 5.0);
  w.backward(ones_like(w));
  CHECK(vals(u.grad()) == std::vector<double>{5, 5});
}

namespace {
// y = p0 + 2 p1 + 3 p2 for three (2, 2) pieces, whose backward returns the pieces'
// gradients as views of one (2, 6) buffer laid out as a (2, 6) split input (piece i at
// columns [2i, 2i + 2)), every element written, marked for split's backward to pass on
// whole when `mark` (as the fused attention's backward does with q, k and v). `seen`:
// the buffer's storage, not owned.
Tensor three_into_one(const std::vector<Tensor>& p, bool mark, std::weak_ptr<Storage>* seen) {
  Tensor y = p[0] + p[1] * 2.0 + p[2] * 3.0;
  attach_grad_fn(y, "ThreeIntoOne", {&p[0], &p[1], &p[2]}, [mark, seen](const Tensor& g) {
    Tensor buf = empty({2, 6}, g.options());
    if (mark) detail::mark_split_gradient(buf);
    *seen = buf.storage();
    std::vector<Tensor> out;
    for (int64_t i = 0; i < 3; ++i) {
      Tensor part = make_view(buf, {2, 2}, {6, 1}, 2 * i);
      copy_(part, g * static_cast<double>(i + 1));
      out.push_back(part);
    }
    return out;
  });
  return y;
}
// x itself, its backward noting the storage of the gradient it receives (a leaf's .grad
// may be a copy of it).
Tensor probe(const Tensor& x, std::weak_ptr<Storage>* arrived) {
  Tensor x2 = x.detach();
  attach_grad_fn(x2, "Probe", {&x}, [arrived](const Tensor& g) {
    *arrived = g.storage();
    return std::vector<Tensor>{g};
  });
  return x2;
}
}  // namespace

TEST_CASE(
    "autograd/engine: split's backward passes on a marked buffer of its pieces' "
    "gradients whole, and copies otherwise") {
  const Tensor g = tensor({{1.0, 2.0}, {3.0, 4.0}}, TensorOptions().dtype(kFloat64));
  // x's gradient: piece i's region holds (i + 1) g.
  const std::vector<double> want{1, 2, 2, 4, 3, 6, 3, 4, 6, 8, 9, 12};
  for (bool mark : {true, false})
    for (bool retain : {false, true}) {
      INFO("marked: ", mark, ", graph retained: ", retain);
      Tensor x = zeros({2, 6}, TensorOptions().dtype(kFloat64).requires_grad());
      std::weak_ptr<Storage> buf, arrived;
      Tensor y = three_into_one(split(probe(x, &arrived), 2, 1), mark, &buf);
      y.backward(g, retain);
      CHECK(vals(x.grad().reshape({12})) == want);
      CHECK((arrived.lock() == buf.lock() && buf.lock() != nullptr) == mark);  // no copies
      if (retain) {  // again through the same graph: a fresh buffer, the sums accumulate
        y.backward(g);
        std::vector<double> twice = want;
        for (double& w : twice) w *= 2;
        CHECK(vals(x.grad().reshape({12})) == twice);
      }
    }
  // A piece with a second use: its total gradient (the buffer's region plus 5) lands in
  // its region, whichever way the engine sums it.
  Tensor x = zeros({2, 6}, TensorOptions().dtype(kFloat64).requires_grad());
  std::weak_ptr<Storage> buf;
  std::vector<Tensor> p = split(x, 2, 1);
  Tensor y = sum(three_into_one(p, true, &buf) * g) + sum(p[1] * 5.0);
  y.backward(ones_like(y));
  CHECK(vals(x.grad().reshape({12})) == std::vector<double>{1, 2, 7, 9, 3, 6, 3, 4, 11, 13, 9, 12});
  // Pieces of another layout (split along rows): the buffer is not the input's layout,
  // so copies.
  Tensor r = zeros({6, 2}, TensorOptions().dtype(kFloat64).requires_grad());
  std::weak_ptr<Storage> rarrived;
  Tensor ry = three_into_one(split(probe(r, &rarrived), 2, 0), true, &buf);
  ry.backward(g);
  CHECK(rarrived.lock() != buf.lock());
  CHECK(vals(r.grad().reshape({12})) == std::vector<double>{1, 2, 3, 4, 2, 4, 6, 8, 3, 6, 9, 12});
}

TEST_CASE("autograd/engine: an in-place sum never changes a gradient someone else holds") {
  // x's first gradient is the caller's own tensor, seen through a view (ViewBackward
  // passes it on); the slice's part must go into a copy, not into g_view.
  Tensor x = leaf({1, 2, 3, 4});
  Tensor s = slice(x, 0, 1, 3);
  Tensor v = x.view({2, 2});
  Tensor g_view = tensor({1.0, 1.0, 1.0, 1.0}, TensorOptions().dtype(kFloat64)).view({2, 2});
  Tensor g_slice = tensor({5.0, 7.0}, TensorOptions().dtype(kFloat64));
  run_backward({v, s}, {g_view, g_slice}, false);
  CHECK(vals(x.grad()) == std::vector<double>{1, 6, 8, 1});
  CHECK(vals(g_view.reshape({4})) == std::vector<double>{1, 1, 1, 1});
  CHECK(vals(g_slice) == std::vector<double>{5, 7});
  // The same through autograd::grad, with the slice created first.
  Tensor x2 = leaf({1, 2, 3});
  Tensor s2 = slice(x2, 0, 0, 2);
  Tensor w2 = x2 * 1.0;
  Tensor g_w = tensor({1.0, 1.0, 1.0}, TensorOptions().dtype(kFloat64));
  std::vector<Tensor> gx =
      grad({w2, s2}, {x2}, {g_w, tensor({3.0, 4.0}, TensorOptions().dtype(kFloat64))});
  CHECK(vals(gx[0]) == std::vector<double>{4, 5, 1});
  CHECK(vals(g_w) == std::vector<double>{1, 1, 1});
}

namespace {
// y = 2 x with a backward that folds its gradient into the sum the engine keeps for x
// when one has arrived (detail::backward_input_sum), as layer norm's fused backward
// does; `folds` counts the folds, `in_place` those written into the engine's own sum.
struct FoldCount {
  int folds = 0, in_place = 0;
};
Tensor doubled_folding(const Tensor& x, FoldCount& count) {
  Tensor out;
  {
    NoGradGuard ng;
    out = mul(x, 2.0);
  }
  if (any_requires_grad({&x}))
    attach_grad_fn(out, "FoldingBackward", {&x}, [&count](const Tensor& g) {
      Tensor mine = mul(g, 2.0);
      Tensor* sum = detail::backward_input_sum(0);
      if (sum == nullptr || !sum->defined()) return std::vector<Tensor>{mine};
      ++count.folds;
      if (detail::engine_holds_alone(*sum)) {
        ++count.in_place;
        sum->add_(mine);
      } else {
        *sum = add(*sum, mine);
      }
      return std::vector<Tensor>{Tensor()};
    });
  return out;
}
}  // namespace

TEST_CASE("autograd/engine: a backward folds its gradient into the engine's sum") {
  // Made first, the folding node runs last (later nodes run first), after x's other
  // gradients have arrived, and folds into their sum.
  FoldCount c;
  Tensor x = leaf({1, 2, 3});
  Tensor a = doubled_folding(x, c);  // made first: runs last
  Tensor b = x * 3.0;                // MulBackward's gradient: a tensor the engine alone holds
  Tensor y = sum(a * tensor({1.0, 10.0, 100.0}, kFloat64)) + sum(b);
  y.backward(ones_like(y));
  CHECK(vals(x.grad()) == std::vector<double>{5, 23, 203});
  CHECK(c.folds == 1);
  CHECK(c.in_place == 1);
  // A sum someone else holds (the caller's own gradient, passed on by a view) is not
  // written in place: the fold makes a new tensor and the caller's stays as it was.
  FoldCount c2;
  Tensor x2 = leaf({1, 2});
  Tensor f = doubled_folding(x2, c2);
  Tensor v = x2.view({2});
  Tensor g_v = tensor({7.0, 8.0}, kFloat64);
  run_backward({v, f}, {g_v, tensor({1.0, 1.0}, kFloat64)}, false);
  CHECK(vals(x2.grad()) == std::vector<double>{9, 10});
  CHECK(vals(g_v) == std::vector<double>{7, 8});
  CHECK(c2.folds == 1);
  CHECK(c2.in_place == 0);
  // Made last, it runs first: nothing to fold into yet, so it returns its gradient.
  FoldCount c3;
  Tensor x3 = leaf({1, 2});
  Tensor b3 = x3 * 3.0;
  Tensor a3 = doubled_folding(x3, c3);
  (sum(a3) + sum(b3)).backward();
  CHECK(vals(x3.grad()) == std::vector<double>{5, 5});
  CHECK(c3.folds == 0);
  // Anomaly mode offers no sums (each gradient is checked on its own); outside a
  // backward there is none either.
  FoldCount c4;
  Tensor x4 = leaf({1, 2});
  {
    DetectAnomalyGuard anomaly;
    (sum(doubled_folding(x4, c4)) + sum(x4 * 3.0)).backward();
  }
  CHECK(vals(x4.grad()) == std::vector<double>{5, 5});
  CHECK(c4.folds == 0);
  CHECK(detail::backward_input_sum(0) == nullptr);
}

TEST_CASE("tensor/contiguous: empty tensors count as contiguous and can be viewed") {
  Tensor e = make_view(zeros({3, 4}), {3, 0}, {1, 1}, 0);
  CHECK(e.is_contiguous());
  CHECK(e.view({0, 3}).sizes() == Shape{0, 3});
  CHECK(e.reshape({-1}).numel() == 0);
}
