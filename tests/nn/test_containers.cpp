// nn containers and module walks: Flatten, ModuleList, ModuleDict, named_modules,
// apply, printing through a handle, and the warning for a module used inside a
// forward without being registered.
#include <doctest/doctest.h>

#include <memory>
#include <sstream>
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

std::vector<std::string> captured_warnings;
void capture(const std::string& message) {
  captured_warnings.push_back(message);
}

// Installs the capturing handler for a test's lifetime.
struct WarningCapture {
  WarningHandler previous;
  WarningCapture() : previous(set_warning_handler(&capture)) { captured_warnings.clear(); }
  ~WarningCapture() { set_warning_handler(previous); }
};

template <typename Items>
std::vector<std::string> names_of(const Items& items) {
  std::vector<std::string> out;
  for (const auto& it : items) out.push_back(it.first);
  return out;
}

}  // namespace

TEST_CASE("nn/flatten: merges the dims after the batch dim, as a view") {
  Tensor x = arange(24).reshape({2, 3, 4});
  nn::Flatten flat;
  Tensor y = flat.forward(x);
  CHECK(y.sizes() == Shape{2, 12});
  CHECK(y.storage() == x.storage());  // contiguous input: a view
  CHECK(y.to_vector<double>() == x.to_vector<double>());
  CHECK(nn::Flatten(nn::FlattenOptions().start_dim(0).end_dim(1)).forward(x).sizes() ==
        Shape{6, 4});
  CHECK(nn::Flatten(nn::FlattenOptions().start_dim(-2)).forward(x).sizes() == Shape{2, 12});
  CHECK(flat.str() == "Flatten(start_dim=1, end_dim=-1)");
  // A transposed input is copied; the values follow the logical order.
  Tensor t = x.transpose(1, 2);
  Tensor ft = flat.forward(t);
  CHECK(ft.sizes() == Shape{2, 12});
  CHECK(ft.select(0, 0).to_vector<double>()[1] == 4.0);  // t[0][0][1] = x[0][1][0]
  CHECK(contains(error_of([&] { flat.forward(arange(3)); }), "flatten: dim 1 is out of range"));
  CHECK(
      contains(error_of([&] { flatten(x, 2, 1); }), "flatten: start_dim 2 comes after end_dim 1"));
  CHECK(flatten(tensor({5.0}).reshape({}), 0, -1).sizes() == Shape{1});
}

TEST_CASE("nn/flatten: the gradient flows back in the input's shape") {
  Tensor x = randn({2, 3, 2}, TensorOptions().requires_grad());
  Tensor y = nn::Flatten().forward(x);
  (y * arange(6).reshape({1, 6})).sum().backward();
  const std::vector<double> g = x.grad().to_vector<double>();
  for (size_t i = 0; i < g.size(); ++i) CHECK(g[i] == static_cast<double>(i % 6));
}

TEST_CASE("nn/modulelist: registers its modules under their index") {
  auto list = std::make_shared<nn::ModuleList>(nn::Linear(2, 3), std::make_shared<nn::ReLU>());
  list->push_back(nn::Linear(3, 1));
  CHECK(list->size() == 3);
  CHECK(names_of(list->named_parameters()) ==
        std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"});
  CHECK(list->at<nn::Linear>(2)->weight.sizes() == Shape{1, 3});
  CHECK(list->ptr(1)->name() == "ReLU");
  CHECK(contains(error_of([&] { list->at<nn::Linear>(1); }),
                 "ModuleList: module 1 is a ReLU, not the type asked for"));
  CHECK(
      contains(error_of([&] { (*list)[3]; }), "ModuleList: index 3 out of range for a list of 3"));
  // insert renames the modules after it; iteration follows the new order
  list->insert(0, std::make_shared<nn::Tanh>());
  std::vector<std::string> kinds;
  for (const auto& m : *list) kinds.push_back(m->name());
  CHECK(kinds == std::vector<std::string>{"Tanh", "Linear", "ReLU", "Linear"});
  CHECK(names_of(list->named_parameters()) ==
        std::vector<std::string>{"1.weight", "1.bias", "3.weight", "3.bias"});
  nn::ModuleList more(nn::Linear(1, 1));
  list->extend(more);
  CHECK(list->size() == 5);
  CHECK(list->state_dict().contains("4.weight"));
  CHECK(list->str() ==
        "ModuleList(\n  (0): Tanh()\n  (1): Linear(in_features=2, out_features=3, bias=true)\n"
        "  (2): ReLU()\n  (3): Linear(in_features=3, out_features=1, bias=true)\n"
        "  (4): Linear(in_features=1, out_features=1, bias=true)\n)");
  CHECK(contains(error_of([&] { list->extend(*list); }), "cannot extend a list with itself"));
}

TEST_CASE("nn/moduledict: keyed children in insertion order") {
  nn::ModuleDict dict(
      {{"encoder", std::make_shared<nn::Linear>(4, 2)}, {"act", std::make_shared<nn::ReLU>()}});
  dict.insert("decoder", nn::Linear(2, 4));
  CHECK(dict.keys() == std::vector<std::string>{"encoder", "act", "decoder"});
  CHECK(dict.contains("act"));
  CHECK(!dict.contains("nope"));
  CHECK(
      names_of(dict.named_parameters()) ==
      std::vector<std::string>{"encoder.weight", "encoder.bias", "decoder.weight", "decoder.bias"});
  CHECK(dict.at<nn::Linear>("decoder")->weight.sizes() == Shape{4, 2});
  CHECK(contains(error_of([&] { dict["nope"]; }),
                 "ModuleDict: no key 'nope' (keys: 'encoder', 'act', 'decoder')"));
  CHECK(
      contains(error_of([&] { dict.insert("act", nn::Tanh()); }), "key 'act' is already present"));
  CHECK(contains(error_of([&] { dict.insert("a.b", nn::Tanh()); }), "must not contain '.'"));
  // update replaces in place, keeping the position
  dict.update({{"act", std::make_shared<nn::Tanh>()}, {"extra", std::make_shared<nn::ReLU>()}});
  CHECK(dict.keys() == std::vector<std::string>{"encoder", "act", "decoder", "extra"});
  CHECK(dict["act"]->name() == "Tanh");
  auto popped = dict.pop("encoder");
  CHECK(popped->name() == "Linear");
  CHECK(dict.keys() == std::vector<std::string>{"act", "decoder", "extra"});
  CHECK(dict.parameters().size() == 2);
  dict.clear();
  CHECK(dict.empty());
}

namespace {

struct Block : nn::Module {
  Block() {
    fc = register_module("fc", std::make_shared<nn::Linear>(2, 2));
    act = register_module("act", std::make_shared<nn::ReLU>());
  }
  std::shared_ptr<nn::Linear> fc;
  std::shared_ptr<nn::ReLU> act;
};

struct Tower : nn::Module {
  Tower() {
    first = register_module("first", std::make_shared<Block>());
    second = register_module("second", std::make_shared<Block>());
    shared = register_module("shared", first);  // the same block by a second path
  }
  std::shared_ptr<Block> first, second, shared;
};

}  // namespace

TEST_CASE("nn/module: named_modules walks depth first, each module once") {
  auto tower = std::make_shared<Tower>();
  CHECK(names_of(tower->named_modules()) == std::vector<std::string>{"", "first", "first.fc",
                                                                     "first.act", "second",
                                                                     "second.fc", "second.act"});
  auto all = tower->named_modules();
  CHECK(all[0].second.get() == tower.get());
  CHECK(all[0].second.use_count() > 1);  // held by a shared_ptr: the entry owns it
  CHECK(names_of(tower->named_modules("net", false)).front() == "net.first");
  CHECK(tower->modules(false).size() == 6);
  // A module on the stack gets a non-owning handle to itself.
  Block block;
  auto own = block.named_modules();
  CHECK(own[0].second.get() == &block);
  CHECK(own.size() == 3);
}

TEST_CASE("nn/module: apply visits each module once, the parent first") {
  auto tower = std::make_shared<Tower>();
  std::vector<std::string> order;
  tower->apply([&](nn::Module& m) { order.push_back(m.name()); });
  CHECK(order ==
        std::vector<std::string>{"Tower", "Block", "Linear", "ReLU", "Block", "Linear", "ReLU"});
  // The usual use: initialise every Linear.
  tower->apply([](nn::Module& m) {
    if (auto* l = m.as<nn::Linear>()) {
      NoGradGuard no_grad;
      l->weight.fill_(0.5);
    }
  });
  for (const auto& [name, p] : tower->named_parameters())
    if (name.ends_with("weight"))
      for (double v : p.to_vector<double>()) CHECK(v == 0.5);
  std::vector<std::string> named;
  tower->apply([&](const std::string& name, nn::Module&) { named.push_back(name); }, "root");
  CHECK(named.front() == "root");
  CHECK(named[2] == "root.first.fc");
}

TEST_CASE("nn/module: printing through a shared_ptr prints the module") {
  auto seq = std::make_shared<nn::Sequential>(nn::Linear(2, 1), nn::ReLU());
  std::ostringstream os;
  os << seq;
  CHECK(os.str() == seq->str());
  std::shared_ptr<nn::Linear> null;
  std::ostringstream os2;
  os2 << null;
  CHECK(os2.str() == "(null module)");
}

TEST_CASE("shape: prints as [2, 3]") {
  std::ostringstream os;
  os << Shape{2, 3} << ' ' << Shape{} << ' ' << zeros({4, 1}).sizes();
  CHECK(os.str() == "[2, 3] [] [4, 1]");
}

namespace {

// The new user's mistake: the child is a member, never registered.
struct Forgetful : nn::Module {
  Forgetful() : fc(std::make_shared<nn::Linear>(2, 1)) {}
  Tensor forward(const Tensor& x) {
    nn::ForwardScope scope(*this);  // as built-in modules do
    return fc->forward(x);
  }
  std::shared_ptr<nn::Linear> fc;
};

}  // namespace

TEST_CASE(
    "nn/module: an unregistered child with parameters is reported once, and training it "
    "is refused") {
  WarningCapture capture;
  auto model = std::make_shared<Forgetful>();
  CHECK(model->parameters().empty());
  model->forward(ones({3, 2}));
  model->forward(ones({3, 2}));
  REQUIRE(captured_warnings.size() == 1);
  CHECK(contains(captured_warnings[0],
                 "Linear(in_features=2, out_features=1, bias=true) ran "
                 "inside the forward of Forgetful"));
  CHECK(contains(captured_warnings[0], "register_module"));
  CHECK(contains(error_of([&] { optim::Adam opt(model->parameters()); }),
                 "optimizer got an empty parameter list"));
  // Registered children, and parameter-free ones, are not reported.
  auto seq = std::make_shared<nn::Sequential>(nn::Linear(2, 2), nn::ReLU(), nn::Flatten());
  seq->forward(ones({1, 2}));
  nn::Linear lone(2, 2);
  lone.forward(ones({1, 2}));  // a root used on its own is fine
  CHECK(captured_warnings.size() == 1);
}
