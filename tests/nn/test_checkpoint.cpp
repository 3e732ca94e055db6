// Checkpoints: round trips, resuming with bit-identical losses, atomic saves,
// and a clear error (with the model left untouched) for every kind of bad file.
#include <doctest/doctest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "error_text.h"
#include "core/autograd.h"
#include "core/ops.h"
#include "nn/nn.h"
#include "optim/optim.h"

using namespace ember;
using ember::testing::contains;
using ember::testing::error_of;

namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("ember_test_" + name)).string();
}

std::vector<unsigned char> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
void write_bytes(const std::string& path, const std::vector<unsigned char>& b) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

std::shared_ptr<nn::Sequential> make_model() {
  return std::make_shared<nn::Sequential>(nn::Linear(3, 8), nn::Tanh(), nn::Dropout(0.2),
                                          nn::Linear(8, 1));
}

// One training step on a fixed batch; returns the loss bits.
double train_step(nn::Sequential& model, optim::Optimizer& opt, int step) {
  Generator gen(100 + static_cast<uint64_t>(step));
  Tensor x = randn({16, 3}, kFloat32, &gen);
  Tensor y = randn({16, 1}, kFloat32, &gen);
  opt.zero_grad();
  Tensor loss = nn::functional::mse_loss(model.forward(x), y);
  loss.backward();
  opt.step();
  return loss.item();
}

std::vector<std::vector<double>> values(const nn::Module& m) {
  std::vector<std::vector<double>> out;
  for (const auto& [name, t] : m.state_dict()) out.push_back(t.to_vector<double>());
  return out;
}

}  // namespace

TEST_CASE("nn/checkpoint: resuming continues with bit-identical losses") {
  const std::string path = temp_path("resume.ckp");
  manual_seed(11);
  auto model = make_model();
  optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2).amsgrad(true));
  for (int s = 0; s < 3; ++s) train_step(*model, opt, s);
  nn::save(*model, opt, path);
  CHECK(!std::filesystem::exists(path + ".tmp"));
  std::vector<double> uninterrupted;
  for (int s = 3; s < 8; ++s) uninterrupted.push_back(train_step(*model, opt, s));

  manual_seed(999);  // a fresh process: other weights, other generator state
  auto resumed = make_model();
  optim::Adam opt2(resumed->parameters(), optim::AdamOptions(5e-2));
  nn::load(*resumed, opt2, path);
  CHECK(opt2.param_groups()[0].options().get_lr() == 1e-2);
  std::vector<double> after;
  for (int s = 3; s < 8; ++s) after.push_back(train_step(*resumed, opt2, s));
  CHECK(after == uninterrupted);  // exact, dropout masks included
  CHECK(values(*resumed) == values(*model));
  std::remove(path.c_str());
}

TEST_CASE("nn/checkpoint: a model-only round trip") {
  const std::string path = temp_path("model.ckp");
  auto a = make_model(), b = make_model();
  nn::save(*a, path);
  nn::load(*b, path);
  CHECK(values(*a) == values(*b));
  StateDict raw = nn::load_state_dict_file(path);
  CHECK(raw.contains("model.0.weight"));
  CHECK(raw.contains("rng.state"));
  CHECK(raw.at("model.3.bias").sizes() == Shape{1});
  std::remove(path.c_str());
}

TEST_CASE("nn/checkpoint: bad files throw saying what is wrong, leaving the model untouched") {
  const std::string path = temp_path("bad.ckp");
  auto model = make_model();
  optim::SGD opt(model->parameters(), optim::SGDOptions(0.1).momentum(0.9));
  train_step(*model, opt, 0);
  nn::save(*model, opt, path);
  const std::vector<unsigned char> good = read_bytes(path);

  auto target = make_model();
  optim::SGD target_opt(target->parameters(), optim::SGDOptions(0.1).momentum(0.9));
  const auto before = values(*target);
  auto load_error = [&](const std::vector<unsigned char>& bytes) {
    write_bytes(path, bytes);
    std::string msg = error_of([&] { nn::load(*target, target_opt, path); });
    CHECK(values(*target) == before);
    CHECK(target_opt.state(target->parameters()[0]) == nullptr);
    return msg;
  };

  SUBCASE("flipped payload byte") {
    auto bytes = good;
    bytes[bytes.size() / 2] ^= 0x40;
    CHECK(contains(load_error(bytes), "checksum mismatch"));
  }
  SUBCASE("truncated") {
    auto bytes = good;
    bytes.resize(bytes.size() - 10);
    CHECK(contains(load_error(bytes), "truncated"));
    bytes.resize(20);
    CHECK(contains(load_error(bytes), "truncated"));
  }
  SUBCASE("bad magic") {
    auto bytes = good;
    bytes[0] = 'X';
    CHECK(contains(load_error(bytes), "bad magic"));
  }
  SUBCASE("future version") {
    auto bytes = good;
    bytes[8] = 2;
    CHECK(contains(load_error(bytes), "unsupported format version 2"));
  }
  SUBCASE("a checkpoint of another model") {
    auto other = std::make_shared<nn::Sequential>(nn::Linear(3, 4), nn::Tanh(), nn::Linear(4, 1));
    optim::SGD other_opt(other->parameters(), optim::SGDOptions(0.1).momentum(0.9));
    nn::save(*other, other_opt, path);
    const std::string msg = load_error(read_bytes(path));
    CHECK(contains(msg, "checkpoint '" + path + "': model"));
    CHECK(contains(msg, "shape mismatch for '0.weight': checkpoint has [4, 3], model has [8, 3]"));
  }
  SUBCASE("a missing entry") {
    StateDict sd = nn::load_state_dict_file(path);
    StateDict fewer;
    for (const auto& [name, t] : sd)
      if (name != "model.3.bias") fewer.insert(name, t);
    nn::save_state_dict(fewer, path);
    CHECK(contains(load_error(read_bytes(path)), "missing key '3.bias'"));
  }
  SUBCASE("optimizer state of another shape") {
    StateDict sd = nn::load_state_dict_file(path);
    StateDict changed;
    for (const auto& [name, t] : sd)
      changed.insert(name, name == "optimizer.state.0.momentum_buffer" ? zeros({2, 2}) : t);
    nn::save_state_dict(changed, path);
    const std::string msg = load_error(read_bytes(path));
    CHECK(contains(msg, "optimizer"));
    CHECK(contains(msg, "'state.0.momentum_buffer': state has [2, 2], parameter has [8, 3]"));
  }
  SUBCASE("no file") {
    std::remove(path.c_str());
    CHECK(contains(error_of([&] { nn::load(*target, target_opt, path); }), "cannot open"));
  }
  std::remove(path.c_str());
}

TEST_CASE("nn/checkpoint: a failed save leaves the previous checkpoint intact") {
  const std::string path = temp_path("atomic.ckp");
  auto model = make_model();
  nn::save(*model, path);
  const auto before = read_bytes(path);
  // A directory where the temporary file should go makes the save fail midway.
  std::filesystem::create_directory(path + ".tmp");
  auto other = make_model();
  CHECK(contains(error_of([&] { nn::save(*other, path); }), "cannot open"));
  CHECK(read_bytes(path) == before);
  std::filesystem::remove(path + ".tmp");
  std::remove(path.c_str());
}
