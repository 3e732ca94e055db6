// Layers: Linear (shapes, PyTorch's default init, gradients), activations,
// Dropout's train/eval semantics, Sequential, MSELoss, init functions.
#include <doctest/doctest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/ops.h"
#include "gradcheck.h"
#include "nn/nn.h"

using namespace ember;
using ember::testing::randn64;

namespace {
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}
bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}
}  // namespace

TEST_CASE("nn/linear: shapes and PyTorch's default initialisation bounds") {
  manual_seed(1);
  nn::Linear lin(50, 20);
  CHECK(lin.weight.sizes() == Shape{20, 50});
  CHECK(lin.bias.sizes() == Shape{20});
  CHECK(lin.forward(ones({7, 50})).sizes() == Shape{7, 20});
  CHECK(lin.forward(ones({2, 3, 50})).sizes() == Shape{2, 3, 20});
  // kaiming_uniform_(a = sqrt(5)) gives U(-1/sqrt(in), 1/sqrt(in)); so does the bias.
  const double bound = 1.0 / std::sqrt(50.0);
  double lo = 1, hi = -1, sum_sq = 0;
  for (double v : lin.weight.to_vector<double>()) {
    lo = std::min(lo, v);
    hi = std::max(hi, v);
    sum_sq += v * v;
  }
  CHECK(lo >= -bound);
  CHECK(hi <= bound);
  CHECK(lo < -0.9 * bound);  // the range is used, not a narrower one
  CHECK(hi > 0.9 * bound);
  CHECK(sum_sq / 1000 == doctest::Approx(bound * bound / 3).epsilon(0.15));
  for (double v : lin.bias.to_vector<double>()) CHECK(std::abs(v) <= bound);

  nn::Linear no_bias(nn::LinearOptions(4, 3).bias(false));
  CHECK(!no_bias.bias.defined());
  CHECK(no_bias.parameters().size() == 1);
  CHECK(contains(error_of([] { nn::Linear(0, 3); }), "must be positive"));
}

TEST_CASE("nn/linear: gradients through the module match finite differences") {
  auto lin = std::make_shared<nn::Linear>(4, 3);
  lin->to(kFloat64);
  CHECK_GRADCHECK([lin](const std::vector<Tensor>& in) { return lin->forward(in[0]); },
                  {randn64({5, 4}, 21)});
  lin->forward(randn64({5, 4}, 22)).sum().backward();
  CHECK(lin->weight.grad().sizes() == Shape{3, 4});
  CHECK(lin->bias.grad().sizes() == Shape{3});
  for (double v : lin->bias.grad().to_vector<double>()) CHECK(v == doctest::Approx(5.0));
}

TEST_CASE("nn/linear: the activation option equals the activation applied after it") {
  for (Activation act : {Activation::Relu, Activation::Gelu, Activation::GeluTanh}) {
    INFO("act=", activation_name(act));
    manual_seed(7);
    nn::Linear fused(nn::LinearOptions(5, 4).activation(act));
    manual_seed(7);
    nn::Linear plain(5, 4);
    fused.to(kFloat64);
    plain.to(kFloat64);
    Tensor x = randn64({3, 5}, 8);
    Tensor y = fused.forward(x);
    Tensor p = plain.forward(x);
    Tensor ref = act == Activation::Relu ? relu(p)
                 : act == Activation::Gelu
                     ? nn::GELU().forward(p)
                     : nn::GELU(nn::GELUOptions().approximate("tanh")).forward(p);
    CHECK(ember::testing::rel_error(y, ref) <= 1e-15);
    CHECK(fused.str().find(std::string("activation=") + activation_name(act)) != std::string::npos);
  }
}

TEST_CASE("nn/activation: modules match their ops and have correct gradients") {
  Tensor x = randn64({3, 5}, 23);
  CHECK(testing::rel_error(nn::ReLU().forward(x), relu(x)) == 0.0);
  CHECK(testing::rel_error(nn::GELU().forward(x), gelu(x)) == 0.0);
  const nn::GELU gelu_tanh_module(nn::GELUOptions().approximate("tanh"));
  CHECK(testing::rel_error(gelu_tanh_module.forward(x), gelu_tanh(x)) == 0.0);
  CHECK(testing::rel_error(nn::functional::gelu(x, "tanh"), gelu_tanh(x)) == 0.0);
  CHECK(testing::rel_error(
            nn::functional::gelu(x, nn::functional::GELUFuncOptions().approximate("tanh")),
            gelu_tanh(x)) == 0.0);
  CHECK(testing::rel_error(nn::functional::gelu(x), gelu(x)) == 0.0);
  CHECK_THROWS_WITH_AS(nn::GELUOptions().approximate("fast"),
                       doctest::Contains("approximate must be \"none\" or \"tanh\""), Error);
  CHECK(testing::rel_error(nn::Tanh().forward(x), tanh(x)) == 0.0);
  CHECK(testing::rel_error(nn::Sigmoid().forward(x), sigmoid(x)) == 0.0);
  CHECK(nn::ReLU().forward(x).sizes() == x.sizes());
  // Inputs kept away from relu's kink at 0.
  Tensor away = add(abs(randn64({3, 5}, 24)), 0.1) * tensor({1, -1, 1, -1, 1}, kFloat64);
  CHECK_GRADCHECK([](const std::vector<Tensor>& in) { return nn::ReLU().forward(in[0]); }, {away});
  CHECK_GRADCHECK([](const std::vector<Tensor>& in) { return nn::GELU().forward(in[0]); }, {x});
  CHECK_GRADCHECK(
      [](const std::vector<Tensor>& in) {
        return nn::GELU(nn::GELUOptions().approximate("tanh")).forward(in[0]);
      },
      {x});
  CHECK_GRADCHECK([](const std::vector<Tensor>& in) { return nn::Tanh().forward(in[0]); }, {x});
  CHECK_GRADCHECK([](const std::vector<Tensor>& in) { return nn::Sigmoid().forward(in[0]); }, {x});
}

TEST_CASE("nn/dropout: active in training only, scaled by 1/(1-p)") {
  manual_seed(3);
  nn::Dropout drop(0.5);
  Tensor x = ones({4000});
  Tensor y = drop.forward(x);
  int zeros_seen = 0;
  for (double v : y.to_vector<double>()) {
    CHECK((v == 0.0 || v == 2.0));
    zeros_seen += v == 0.0;
  }
  CHECK(zeros_seen / 4000.0 == doctest::Approx(0.5).epsilon(0.1));
  // A fresh mask each call.
  CHECK(drop.forward(x).to_vector<double>() != y.to_vector<double>());

  drop.eval();
  CHECK(drop.forward(x).is_same(x));

  SUBCASE("the gradient is the mask times the scale") {
    drop.train();
    Tensor xs = ones({100}, TensorOptions(kFloat64).requires_grad());
    Tensor ys = drop.forward(xs);
    ys.sum().backward();
    CHECK(xs.grad().to_vector<double>() == ys.to_vector<double>());
  }
  SUBCASE("p = 0 and p = 1") {
    CHECK(nn::Dropout(0.0).forward(x).is_same(x));
    for (double v : nn::Dropout(1.0).forward(x).to_vector<double>()) CHECK(v == 0.0);
  }
  CHECK(contains(error_of([] { nn::Dropout(1.5); }), "probability must be in [0, 1], got 1.5"));
}

TEST_CASE("nn/sequential: chains forwards, indexes, accepts user modules") {
  struct Double : nn::Module {
    Tensor forward(Tensor x) { return x * 2.0; }  // by value, as libtorch users write it
  };
  nn::Sequential seq;
  CHECK(contains(error_of([&] { seq.forward(ones({1})); }), "the Sequential is empty"));
  seq.push_back(std::make_shared<Double>());
  seq.push_back(nn::Tanh());
  seq.push_back("last", std::make_shared<Double>());
  CHECK(seq.size() == 3);
  Tensor x = tensor({0.1, -0.3});
  std::vector<double> y = seq.forward(x).to_vector<double>();
  CHECK(y[0] == doctest::Approx(2 * std::tanh(0.2)));
  CHECK(y[1] == doctest::Approx(2 * std::tanh(-0.6)));
  CHECK(seq[1]->name() == "Tanh");
  CHECK(seq.at<nn::Tanh>(1) != nullptr);
  CHECK(contains(error_of([&] { seq.at<nn::Linear>(1); }), "module 1 is a Tanh"));
  CHECK(contains(error_of([&] { seq[3]; }), "index 3 out of range"));
  CHECK(seq.named_children()[2].first == "last");
}

TEST_CASE("nn/mseloss: reductions and gradients") {
  Tensor p = tensor({1, 2, 3}, TensorOptions(kFloat64).requires_grad());
  Tensor t = tensor({1, 1, 1}, kFloat64);
  CHECK(nn::MSELoss().forward(p, t).item() == doctest::Approx(5.0 / 3));
  CHECK(nn::MSELoss(nn::MSELossOptions().reduction(Reduction::Sum)).forward(p, t).item() ==
        doctest::Approx(5.0));
  CHECK(nn::MSELoss(Reduction::None).forward(p, t).sizes() == Shape{3});
  CHECK(nn::MSELoss(Reduction::Sum).str() == "MSELoss(reduction=sum)");
  for (Reduction r : {Reduction::Mean, Reduction::Sum, Reduction::None}) {
    nn::MSELoss loss(r);
    CHECK_GRADCHECK([&](const std::vector<Tensor>& in) { return loss.forward(in[0], in[1]); },
                    {randn64({4, 2}, 25), randn64({4, 2}, 26)});
  }
  CHECK(nn::functional::mse_loss(p, t).item() == doctest::Approx(5.0 / 3));
}

TEST_CASE("nn/init: bounds and statistics follow the fan conventions") {
  Generator gen(5);
  Tensor w = empty({64, 32, 3});  // fan_in 96, fan_out 192
  auto [fan_in, fan_out] = nn::init::calculate_fan_in_and_fan_out(w);
  CHECK(fan_in == 96);
  CHECK(fan_out == 192);
  nn::init::xavier_uniform_(w, 1.0, &gen);
  const double xb = std::sqrt(6.0 / (96 + 192));
  for (double v : w.to_vector<double>()) CHECK(std::abs(v) <= xb);
  nn::init::kaiming_uniform_(w, 0.0, nn::init::FanMode::FanOut, nn::init::Nonlinearity::ReLU, &gen);
  const double kb = std::sqrt(2.0) * std::sqrt(3.0 / 192);
  double max_abs = 0;
  for (double v : w.to_vector<double>()) max_abs = std::max(max_abs, std::abs(v));
  CHECK(max_abs <= kb);
  CHECK(max_abs > 0.95 * kb);
  nn::init::normal_(w, 1.0, 0.5, &gen);
  double mean = 0;
  for (double v : w.to_vector<double>()) mean += v / static_cast<double>(w.numel());
  CHECK(mean == doctest::Approx(1.0).epsilon(0.02));
  nn::init::zeros_(w);
  for (double v : w.to_vector<double>()) CHECK(v == 0.0);
  // Works on parameters (which require grad) without recording anything.
  Tensor p = zeros({3, 3}, TensorOptions().requires_grad());
  nn::init::uniform_(p, -1, 1, &gen);
  CHECK(p.is_leaf());
  CHECK(contains(error_of([] { nn::init::xavier_uniform_(empty({3})); }), "at least 2 dims"));
}
