// nn::Module: registration, recursive access by dotted names, train/eval, in-place
// moves that keep parameter handles, zero_grad, state_dict round trips and the
// errors load_state_dict gives, printing.
#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/ops.h"
#include "error_text.h"
#include "nn/nn.h"
#include "optim/optim.h"

using namespace ember;
using ember::testing::contains;
using ember::testing::error_of;

namespace {

struct Net : nn::Module {
  Net() {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(3, 4));
    act = register_module("act", std::make_shared<nn::ReLU>());
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(nn::LinearOptions(4, 2).bias(false)));
    scale = register_buffer("scale", ones({2}));
  }
  Tensor forward(const Tensor& x) { return fc2->forward(act->forward(fc1->forward(x))) * scale; }
  std::shared_ptr<nn::Linear> fc1, fc2;
  std::shared_ptr<nn::ReLU> act;
  Tensor scale;
};

std::vector<std::string> names(const std::vector<std::pair<std::string, Tensor>>& items) {
  std::vector<std::string> out;
  for (const auto& it : items) out.push_back(it.first);
  return out;
}

}  // namespace

TEST_CASE("nn/module: named_parameters are dotted and in registration order") {
  Net net;
  CHECK(names(net.named_parameters()) ==
        std::vector<std::string>{"fc1.weight", "fc1.bias", "fc2.weight"});
  CHECK(net.named_parameters(false).empty());
  CHECK(names(net.named_buffers()) == std::vector<std::string>{"scale"});
  CHECK(net.parameters().size() == 3);
  CHECK(net.children().size() == 3);
  CHECK(net.named_children()[1].first == "act");
  for (const Tensor& p : net.parameters()) CHECK(p.requires_grad());
  CHECK(net.parameters()[0].is_same(net.fc1->weight));

  auto seq = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(3, 4), nn::ReLU(),
                                              nn::Linear(4, 2));
  CHECK(names(seq->named_parameters()) ==
        std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"});
}

TEST_CASE("nn/module: a parameter shared by two children is listed once") {
  auto a = std::make_shared<nn::Linear>(2, 2);
  nn::Sequential seq(a, a);
  CHECK(seq.parameters().size() == 2);
  CHECK(seq.state_dict().size() == 2);
}

TEST_CASE("nn/module: registration rejects bad and duplicate names") {
  nn::Module m;
  m.register_parameter("w", zeros({2}));
  CHECK(contains(error_of([&] { m.register_parameter("w", zeros({2})); }), "already registered"));
  CHECK(contains(error_of([&] { m.register_buffer("w", zeros({2})); }), "already registered"));
  CHECK(
      contains(error_of([&] { m.register_parameter("a.b", zeros({2})); }), "must not contain '.'"));
  CHECK(contains(error_of([&] { m.register_parameter("", zeros({2})); }), "must not be empty"));
  CHECK(contains(error_of([&] { m.register_module("c", std::shared_ptr<nn::Linear>()); }),
                 "is null"));
  Tensor x = ones({2}, TensorOptions().requires_grad());
  CHECK(contains(error_of([&] { m.register_parameter("y", x * 2.0); }), "register a leaf"));
}

TEST_CASE("nn/module: train and eval reach every descendant") {
  Net net;
  CHECK(net.is_training());
  net.eval();
  CHECK(!net.is_training());
  CHECK(!net.fc1->is_training());
  CHECK(!net.act->is_training());
  net.train();
  CHECK(net.fc2->is_training());
}

TEST_CASE("nn/module: zero_grad drops or zeroes gradients") {
  Net net;
  net.forward(ones({5, 3})).sum().backward();
  for (const Tensor& p : net.parameters()) CHECK(p.grad().defined());
  net.zero_grad(false);
  for (const Tensor& p : net.parameters()) {
    REQUIRE(p.grad().defined());
    for (double v : p.grad().to_vector<double>()) CHECK(v == 0.0);
  }
  net.zero_grad();
  for (const Tensor& p : net.parameters()) CHECK(!p.grad().defined());
}

TEST_CASE("nn/module: to(dtype) changes parameters in place, keeping their handles") {
  manual_seed(0x5eed);  // an initialisation whose ReLU passes a gradient, whatever ran before
  Net net;
  Tensor w = net.fc1->weight;
  const std::vector<double> before = w.to_vector<double>();
  optim::SGD sgd(net.parameters(), optim::SGDOptions(0.1));
  optim::Adam adam(net.parameters());
  net.forward(ones({2, 3})).sum().backward();
  adam.step();  // Adam state now exists in float32
  net.zero_grad();
  const std::vector<double> stepped = w.to_vector<double>();
  net.to(kFloat64);
  CHECK(w.dtype() == kFloat64);
  CHECK(w.is_same(net.parameters()[0]));
  CHECK(net.scale.dtype() == kFloat64);
  CHECK(w.to_vector<double>() == stepped);  // float32 -> float64 is exact
  CHECK(stepped != before);
  // Optimizers built before the move still update the same parameters; their
  // state follows the new dtype.
  net.forward(ones({2, 3}, kFloat64)).sum().backward();
  sgd.step();
  adam.step();
  CHECK(w.to_vector<double>() != stepped);
  CHECK(adam.state(w)->buffers[0].second.dtype() == kFloat64);
}

TEST_CASE("nn/module: state_dict round trip copies values into another model") {
  Net a, b;
  StateDict sd = a.state_dict();
  // As PyTorch: a module's own parameters and buffers, then its children's.
  CHECK(sd.keys() == std::vector<std::string>{"scale", "fc1.weight", "fc1.bias", "fc2.weight"});
  CHECK(b.fc1->weight.to_vector<double>() != a.fc1->weight.to_vector<double>());
  b.load_state_dict(sd);
  for (const auto& [name, t] : b.state_dict())
    CHECK(t.to_vector<double>() == sd.at(name).to_vector<double>());
  // Loaded by copy: b's tensors are still its own.
  CHECK(!b.fc1->weight.is_same(a.fc1->weight));
  CHECK(b.fc1->weight.storage() != a.fc1->weight.storage());
}

TEST_CASE("nn/module: load_state_dict lists every mismatch and changes nothing") {
  Net net;
  const std::vector<double> w_before = net.fc1->weight.to_vector<double>();
  StateDict good = Net().state_dict();

  StateDict bad;
  for (const auto& [name, t] : good) {
    if (name == "fc1.bias") continue;  // missing
    if (name == "fc2.weight")
      bad.insert(name, zeros({3, 3}));  // shape
    else if (name == "scale")
      bad.insert(name, t.to(kFloat64));  // dtype
    else
      bad.insert(name, t);
  }
  bad.insert("extra", zeros({1}));  // unexpected
  const std::string msg = error_of([&] { net.load_state_dict(bad); });
  CHECK(contains(msg, "4 problems"));
  CHECK(contains(msg, "missing key 'fc1.bias'"));
  CHECK(contains(msg, "shape mismatch for 'fc2.weight': checkpoint has [3, 3], model has [2, 4]"));
  CHECK(contains(msg, "dtype mismatch for 'scale'"));
  CHECK(contains(msg, "unexpected key 'extra'"));
  CHECK(net.fc1->weight.to_vector<double>() == w_before);

  SUBCASE("strict=false skips missing and unexpected keys") {
    StateDict partial;
    partial.insert("fc1.weight", good.at("fc1.weight"));
    partial.insert("other", zeros({1}));
    net.load_state_dict(partial, false);
    CHECK(net.fc1->weight.to_vector<double>() == good.at("fc1.weight").to_vector<double>());
  }
}

TEST_CASE("nn/module: printing follows PyTorch's repr") {
  auto seq =
      std::make_shared<nn::Sequential>(nn::Linear(10, 20), nn::ReLU(), nn::Dropout(0.25),
                                       nn::Linear(nn::LinearOptions(20, 1).bias(false)), nn::GELU(),
                                       nn::GELU(nn::GELUOptions().approximate("tanh")));
  const std::string expected =
      "Sequential(\n"
      "  (0): Linear(in_features=10, out_features=20, bias=true)\n"
      "  (1): ReLU()\n"
      "  (2): Dropout(p=0.25)\n"
      "  (3): Linear(in_features=20, out_features=1, bias=false)\n"
      "  (4): GELU(approximate='none')\n"
      "  (5): GELU(approximate='tanh')\n"
      ")";
  CHECK(seq->str() == expected);
  Net net;
  CHECK(net.str() ==
        "Net(\n"
        "  (fc1): Linear(in_features=3, out_features=4, bias=true)\n"
        "  (act): ReLU()\n"
        "  (fc2): Linear(in_features=4, out_features=2, bias=false)\n"
        ")");
}

TEST_CASE("nn/module: to(cuda) moves parameters, gradients and buffers in place" *
          doctest::test_suite("cuda")) {
  Net net;
  Tensor w = net.fc1->weight;
  const std::vector<double> before = w.to_vector<double>();
  net.forward(ones({2, 3})).sum().backward();
  net.to(kCUDA);
  CHECK(w.is_cuda());
  CHECK(w.grad().is_cuda());
  CHECK(net.scale.is_cuda());
  CHECK(w.to_vector<double>() == before);
  Tensor y = net.forward(ones({2, 3}, TensorOptions().device(kCUDA)));
  CHECK(y.is_cuda());
  net.to(kCPU);
  CHECK(w.is_cpu());
}
