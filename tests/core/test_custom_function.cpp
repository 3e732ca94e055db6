// autograd::Function (core/custom_function.h): a hand-written backward through
// gradcheck, the context's saved tensors, saved values, needs_input_grad and
// mark_non_differentiable, and the errors (a saved tensor changed in place, a
// second backward, the wrong number of gradients, a saved value of another kind).
#include <doctest/doctest.h>

#include "core/custom_function.h"
#include "core/ops.h"
#include "error_text.h"
#include "gradcheck.h"

using namespace ember;
using autograd::AutogradContext;
using autograd::tensor_list;
using ember::testing::contains;
using ember::testing::error_of;
using ember::testing::randn64;
using ember::testing::rel_error;

namespace {

// y = x^3 * c, dy/dx = 3 c x^2
struct Cube : autograd::Function<Cube> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x, double c) {
    ctx->save_for_backward({x});
    ctx->saved_data["c"] = c;
    return x * x * x * c;
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list g) {
    const Tensor x = ctx->get_saved_variables()[0];
    return {g[0] * x * x * (3.0 * ctx->saved_data["c"].toDouble()), Tensor()};
  }
};

// out = a * b (one gradient per tensor argument only: accepted too)
struct Mul : autograd::Function<Mul> {
  static const char* name() { return "MulFnBackward"; }
  inline static std::vector<bool> seen;
  static Tensor forward(AutogradContext* ctx, const Tensor& a, int64_t tag, const Tensor& b) {
    ctx->save_for_backward({a, b});
    ctx->saved_data["tag"] = tag;
    seen = {ctx->needs_input_grad(0), ctx->needs_input_grad(1), ctx->needs_input_grad(2)};
    return a * b;
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list g) {
    const tensor_list s = ctx->get_saved_variables();
    CHECK(ctx->saved_data["tag"].toInt() == 7);
    return {ctx->needs_input_grad(0) ? g[0] * s[1] : Tensor(),
            ctx->needs_input_grad(2) ? g[0] * s[0] : Tensor()};
  }
};

struct ArgmaxFn : autograd::Function<ArgmaxFn> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x) {
    Tensor i = argmax(x, 0);
    ctx->mark_non_differentiable({i});
    return i;
  }
  static tensor_list backward(AutogradContext*, tensor_list) { return {Tensor()}; }
};

struct Identity : autograd::Function<Identity> {
  static Tensor forward(AutogradContext*, const Tensor& x) { return x; }
  static tensor_list backward(AutogradContext*, tensor_list g) { return {g[0] * 2.0}; }
};

struct TooMany : autograd::Function<TooMany> {
  static Tensor forward(AutogradContext*, const Tensor& x) { return x * 1.0; }
  static tensor_list backward(AutogradContext*, tensor_list g) { return {g[0], g[0], g[0]}; }
};

}  // namespace

TEST_CASE("autograd/function: a hand-written backward passes gradcheck") {
  CHECK_GRADCHECK([](const std::vector<Tensor>& x) { return Cube::apply(x[0], 0.5); },
                  {randn64({3, 4}, 1)});
  CHECK_GRADCHECK([](const std::vector<Tensor>& x) { return Mul::apply(x[0], int64_t{7}, x[1]); },
                  {randn64({5}, 2), randn64({5}, 3)});
  // composed with other ops on both sides
  CHECK_GRADCHECK(
      [](const std::vector<Tensor>& x) { return exp(Cube::apply(sin(x[0]), 2.0)) * x[0]; },
      {randn64({6}, 4)});
}

TEST_CASE("autograd/function: forward runs without grad; the output gets one named node") {
  Tensor a = randn64({4}, 5).set_requires_grad(true), b = randn64({4}, 6);
  Tensor y = Mul::apply(a, int64_t{7}, b);
  CHECK(y.requires_grad());
  REQUIRE(y.grad_fn() != nullptr);
  CHECK(std::string(y.grad_fn()->name()) == "MulFnBackward");
  CHECK(Mul::seen == std::vector<bool>{true, false, false});
  sum(y).backward();
  CHECK(rel_error(a.grad(), b) == 0.0);
  CHECK(!b.grad().defined());
  // no input needs grad (or grad mode is off): no node at all
  {
    NoGradGuard ng;
    CHECK(!Mul::apply(a, int64_t{7}, b).requires_grad());
  }
  CHECK(!Cube::apply(b, 1.0).requires_grad());
  CHECK(std::string(Cube::apply(a, 1.0).grad_fn()->name()) == "CustomFunctionBackward");
}

TEST_CASE("autograd/function: mark_non_differentiable and returning an input") {
  Tensor x = randn64({5}, 7).set_requires_grad(true);
  Tensor i = ArgmaxFn::apply(x);
  CHECK(!i.requires_grad());
  CHECK(i.dtype() == kInt64);
  Tensor y = Identity::apply(x);
  CHECK(!y.is_same(x));  // the node sits on an alias, never on the input itself
  CHECK(x.is_leaf());
  sum(y).backward();
  CHECK(rel_error(x.grad(), full({5}, 2.0, kFloat64)) == 0.0);
}

TEST_CASE("autograd/function: errors name the function") {
  Tensor x = randn64({3}, 8).set_requires_grad(true);
  SUBCASE("a saved tensor modified in place") {
    Tensor base = randn64({3}, 9);
    Tensor y = Cube::apply(base.set_requires_grad(false), 1.0);
    Tensor leaf = randn64({3}, 10).set_requires_grad(true);
    Tensor h = leaf * 1.0;
    Tensor z = Cube::apply(h, 1.0);
    {
      NoGradGuard ng;
      h.add_(1.0);
    }
    CHECK(contains(error_of([&] { sum(z).backward(); }), "modified"));
  }
  SUBCASE("a second backward") {
    Tensor y = Cube::apply(x, 1.0);
    sum(y).backward();
    CHECK(contains(error_of([&] { sum(y).backward(); }), "CustomFunctionBackward"));
  }
  SUBCASE("the wrong number of gradients") {
    const std::string e = error_of([&] { sum(TooMany::apply(x)).backward(); });
    CHECK(contains(e, "backward returned 3 gradients; forward took 1 arguments"));
  }
  SUBCASE("a saved value of another kind, needs_input_grad out of range") {
    autograd::SavedValue v(2.5);
    CHECK(v.toDouble() == 2.5);
    CHECK(contains(error_of([&] { (void)v.toInt(); }), "asked for an int, it holds a double"));
    CHECK(autograd::SavedValue(int64_t{3}).toDouble() == 3.0);
    CHECK(autograd::SavedValue("s").toStringRef() == "s");
    AutogradContext ctx;
    CHECK(contains(error_of([&] { (void)ctx.needs_input_grad(0); }), "needs_input_grad(0)"));
  }
}
