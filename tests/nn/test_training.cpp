// Training end to end on the CPU: an MLP learns a known function; gradient
// accumulation over micro-batches equals one large batch; validation under
// NoGradGuard + eval() builds no graph.
#include <doctest/doctest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "core/autograd.h"
#include "core/ops.h"
#include "gradcheck.h"
#include "nn/nn.h"
#include "optim/optim.h"

using namespace ember;

namespace {
// y = sin(2 x0) + 0.5 x1 over [-1, 1]^2.
nn::Example make_data(int64_t n, uint64_t seed) {
  Generator gen(seed);
  Tensor x = rand({n, 2}, kFloat32, &gen) * 2.0 - 1.0;
  std::vector<double> xv = x.to_vector<double>(), yv;
  for (int64_t i = 0; i < n; ++i) yv.push_back(std::sin(2 * xv[2 * i]) + 0.5 * xv[2 * i + 1]);
  return {x, from_vector(yv, {n, 1})};
}
}  // namespace

TEST_CASE("nn/training: an MLP learns sin(2 x0) + 0.5 x1 on CPU") {
  manual_seed(0);
  auto [x, y] = make_data(128, 1);
  auto model = std::make_shared<nn::Sequential>(nn::Linear(2, 32), nn::Tanh(), nn::Linear(32, 1));
  optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
  nn::MSELoss criterion;
  double first = 0, last = 0;
  for (int step = 0; step < 500; ++step) {
    opt.zero_grad();
    Tensor loss = criterion.forward(model->forward(x), y);
    loss.backward();
    opt.step();
    (step == 0 ? first : last) = loss.item();
  }
  MESSAGE("loss " << first << " -> " << last);
  CHECK(last < 5e-3);
  CHECK(last < first / 20);
  // It generalises to fresh points of the same function.
  auto [xt, yt] = make_data(64, 2);
  NoGradGuard no_grad;
  CHECK(criterion.forward(model->forward(xt), yt).item() < 1e-2);
}

TEST_CASE("nn/training: 4 micro-batches with loss/4 accumulate the full-batch gradient") {
  manual_seed(4);
  auto [x, y] = make_data(32, 3);
  auto model = std::make_shared<nn::Sequential>(nn::Linear(2, 8), nn::ReLU(), nn::Linear(8, 1));
  model->to(kFloat64);
  x = x.to(kFloat64);
  y = y.to(kFloat64);
  nn::functional::mse_loss(model->forward(x), y).backward();
  std::vector<std::vector<double>> full;
  for (const Tensor& p : model->parameters()) full.push_back(p.grad().to_vector<double>());
  model->zero_grad();
  for (int64_t k = 0; k < 4; ++k) {
    Tensor xb = x.slice(0, 8 * k, 8 * (k + 1));
    Tensor yb = y.slice(0, 8 * k, 8 * (k + 1));
    (nn::functional::mse_loss(model->forward(xb), yb) / 4.0).backward();
  }
  size_t i = 0;
  for (const Tensor& p : model->parameters()) {
    std::vector<double> acc = p.grad().to_vector<double>();
    for (size_t j = 0; j < acc.size(); ++j)
      CHECK(acc[j] == doctest::Approx(full[i][j]).epsilon(1e-12));
    ++i;
  }
}

TEST_CASE("nn/training: validation under NoGradGuard and eval() builds no graph") {
  auto model =
      std::make_shared<nn::Sequential>(nn::Linear(4, 4), nn::Dropout(0.5), nn::Linear(4, 1));
  Tensor x = ones({3, 4});
  Tensor train_out = model->forward(x);
  CHECK(count_graph_nodes(train_out) > 0);
  model->eval();
  {
    NoGradGuard no_grad;
    Tensor a = model->forward(x);
    Tensor b = model->forward(x);
    CHECK(!a.requires_grad());
    CHECK(!a.grad_fn());
    CHECK(count_graph_nodes(a) == 0);
    CHECK(a.to_vector<double>() == b.to_vector<double>());  // dropout is off
  }
  model->train();
}
