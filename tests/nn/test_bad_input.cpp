// Bad input to modules, optimizers, the data loader and the checkpoint reader that
// the per-area suites do not already cover. Each is an ember::Error naming the
// problem; the model's parameters, the optimizer's state and the allocator's
// statistics are as they were before the call.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/memory.h"
#include "core/ops.h"
#include "cuda/runtime.h"
#include "error_text.h"
#include "nn/nn.h"
#include "optim/optim.h"
#include "temp_path.h"

using namespace ember;
using ember::testing::contains;
using ember::testing::error_of;

namespace {

std::vector<std::vector<double>> values(const nn::Module& m) {
  std::vector<std::vector<double>> out;
  for (const auto& [name, t] : m.state_dict()) out.push_back(t.to_vector<double>());
  return out;
}

std::shared_ptr<nn::Sequential> make_model() {
  return std::make_shared<nn::Sequential>(nn::Linear(3, 4), nn::Tanh(), nn::Linear(4, 2));
}

// --- checkpoint bytes built by hand, with a correct header, so the reader's
// entry parsing is reached (a wrong checksum stops it earlier).
uint64_t fnv1a64(const std::vector<unsigned char>& p) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : p) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

template <typename T>
void put(std::vector<unsigned char>& out, T v) {
  unsigned char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.insert(out.end(), b, b + sizeof(T));
}

struct Entry {
  std::string name;
  uint8_t dtype = 0;  // float32
  std::vector<int64_t> sizes;
  uint64_t nbytes = 0;
  std::vector<unsigned char> data;
};

std::vector<unsigned char> payload_of(const std::vector<Entry>& entries) {
  std::vector<unsigned char> p;
  for (const Entry& e : entries) {
    put<uint32_t>(p, static_cast<uint32_t>(e.name.size()));
    p.insert(p.end(), e.name.begin(), e.name.end());
    put<uint8_t>(p, e.dtype);
    put<uint8_t>(p, static_cast<uint8_t>(e.sizes.size()));
    put<uint16_t>(p, 0);
    for (int64_t s : e.sizes) put<int64_t>(p, s);
    put<uint64_t>(p, e.nbytes);
    p.insert(p.end(), e.data.begin(), e.data.end());
  }
  return p;
}

std::vector<unsigned char> file_of(const std::vector<unsigned char>& payload, uint32_t count) {
  std::vector<unsigned char> f{'E', 'M', 'B', 'E', 'R', 'C', 'K', 'P'};
  put<uint32_t>(f, 1);
  put<uint32_t>(f, count);
  put<uint64_t>(f, payload.size());
  put<uint64_t>(f, fnv1a64(payload));
  put<uint64_t>(f, 0);
  f.insert(f.end(), payload.begin(), payload.end());
  return f;
}

std::string parse_error(const std::vector<unsigned char>& file) {
  return error_of([&] { nn::parse_state_dict(file.data(), file.size(), "mem.ckp"); });
}

}  // namespace

TEST_CASE("bad input/modules: sizes and options out of range") {
  CHECK(contains(error_of([] { nn::Linear(3, 0); }),
                 "Linear: in_features and out_features "
                 "must be positive, got 3 and 0"));
  CHECK(contains(error_of([] { nn::Linear(-1, 3); }), "must be positive, got -1 and 3"));
  CHECK(contains(error_of([] { nn::Dropout(-0.1); }), "probability must be in [0, 1], got -0.1"));
  CHECK(contains(error_of([] { nn::Dropout(std::nan("")); }), "probability must be in [0, 1]"));
  CHECK(contains(error_of([] { nn::functional::dropout(ones({2}), 2.0, true); }),
                 "dropout: probability must be in [0, 1], got 2"));
  auto model = make_model();
  const auto before = values(*model);
  CHECK(contains(error_of([&] { model->to(kInt64); }), "parameters must stay floating-point"));
  CHECK(values(*model) == before);
  CHECK(model->parameters()[0].dtype() == kFloat32);
}

TEST_CASE("bad input/modules: a wrong input to forward changes nothing") {
  auto model = make_model();
  const auto before = values(*model);
  Tensor wide = ones({5, 7}), scalar = tensor({1.0}).sum(), dbl = ones({5, 3}, kFloat64);
  const int64_t allocated = memory_allocated(kCPU);
  CHECK(contains(error_of([&] { model->forward(wide); }),
                 "linear: input has 7 features (shape [5, 7]), weight expects 3"));
  CHECK(contains(error_of([&] { model->forward(scalar); }), "linear: input must have at least 1"));
  CHECK(contains(error_of([&] { model->forward(dbl); }), "linear: operands have different dtypes"));
  CHECK(memory_allocated(kCPU) == allocated);
  CHECK(values(*model) == before);
  for (const Tensor& p : model->parameters()) CHECK(!p.grad().defined());
  // The loss: shapes that differ are named, then a good step still works.
  Tensor out = model->forward(ones({5, 3}));
  CHECK(contains(error_of([&] { nn::MSELoss().forward(out, ones({5})); }),
                 "mse_loss: prediction of shape [5, 2] and target of shape [5] differ"));
  nn::MSELoss().forward(out, ones({5, 2})).backward();
  CHECK(model->parameters()[0].grad().defined());
}

TEST_CASE("bad input/optimizers: options out of range are refused with the value") {
  Tensor p = ones({2}, TensorOptions().requires_grad());
  const double nan = std::nan("");
  CHECK(contains(error_of([&] { optim::Adam({p}, optim::AdamOptions(-1e-3)); }),
                 "Adam: learning rate must be >= 0, got -0.001"));
  CHECK(contains(error_of([&] { optim::Adam({p}, optim::AdamOptions(nan)); }),
                 "Adam: learning rate must be >= 0, got nan"));
  CHECK(contains(error_of([&] { optim::Adam({p}, optim::AdamOptions().eps(nan)); }),
                 "eps must be >= 0"));
  CHECK(contains(error_of([&] {
                   optim::Adam({p}, optim::AdamOptions().betas({nan, 0.9}));
                 }),
                 "beta1 must be in [0, 1), got nan"));
  CHECK(contains(error_of([&] { optim::AdamW({p}, optim::AdamWOptions().weight_decay(-0.1)); }),
                 "AdamW: weight_decay must be >= 0"));
  CHECK(contains(error_of([&] { optim::SGD({p}, optim::SGDOptions(0.1).momentum(-1)); }),
                 "SGD: momentum must be >= 0, got -1"));
  CHECK(contains(error_of([&] { optim::SGD({p}, optim::SGDOptions(0.1).dampening(INFINITY)); }),
                 "SGD: dampening must be finite, got inf"));
  CHECK(contains(
      error_of([&] { optim::SGD(std::vector<optim::ParamGroup>{}, optim::SGDOptions(0.1)); }),
      "Optimizer: got an empty list of parameter groups"));
  CHECK(contains(error_of([&] { optim::SGD({Tensor()}, optim::SGDOptions(0.1)); }),
                 "add_param_group: parameter 0 is an undefined tensor"));
}

TEST_CASE("bad input/optimizers: a step that fails in a later group changes no group") {
  for (bool adam : {true, false}) {
    CAPTURE(adam);
    Tensor good = ones({3}, TensorOptions().requires_grad());
    Tensor bad = ones({2}, TensorOptions(kBFloat16).requires_grad());
    good.set_grad(full({3}, 0.5));
    bad.set_grad(ones({2}, kBFloat16));
    std::unique_ptr<optim::Optimizer> opt;
    std::vector<optim::ParamGroup> groups{optim::ParamGroup({good}), optim::ParamGroup({bad})};
    if (adam)
      opt = std::make_unique<optim::Adam>(groups, optim::AdamOptions(0.1));
    else
      opt = std::make_unique<optim::SGD>(groups, optim::SGDOptions(0.1).momentum(0.9));
    const int64_t allocated = memory_allocated(kCPU);
    const uint64_t version = good.version();
    CHECK(contains(error_of([&] { opt->step(); }), "must be float32 or float64, got bfloat16"));
    CHECK(good.to_vector<double>() == std::vector<double>{1, 1, 1});
    CHECK(good.version() == version);
    CHECK(opt->state(good) == nullptr);
    CHECK(memory_allocated(kCPU) == allocated);
    // Once the bad parameter has no gradient the same optimizer steps normally.
    bad.set_grad(Tensor());
    opt->step();
    CHECK(good.to_vector<double>()[0] < 1.0);
    CHECK(opt->state(good)->step == 1);
  }
}

TEST_CASE("bad input/data loader: options and datasets out of range") {
  auto data = std::make_shared<nn::TensorDataset>(ones({4, 2}), ones({4}));
  CHECK(contains(error_of([&] { nn::DataLoader(data, nn::DataLoaderOptions(-3)); }),
                 "DataLoader: batch_size must be positive, got -3"));
  CHECK(contains(error_of([&] { nn::DataLoader(nullptr, nn::DataLoaderOptions(2)); }),
                 "DataLoader: dataset is null"));
  CHECK(contains(error_of([] { nn::TensorDataset(tensor({1.0}).sum(), Tensor()); }),
                 "TensorDataset: data must be a tensor of at least 1 dim"));
  CHECK(contains(error_of([] { nn::TensorDataset(Tensor(), Tensor()); }),
                 "TensorDataset: data must be a tensor"));
  CHECK(contains(error_of([&] { data->get(4); }), "TensorDataset: index 4 out of range for 4"));
  {  // a device one past the last (cuda:0 without a GPU)
    const int n = cuda::device_count();
    CHECK(contains(
        error_of([&] { nn::DataLoader(data, nn::DataLoaderOptions(2).device(Device::cuda(n))); }),
        "cuda: device index " + std::to_string(n) + " is not available"));
  }
  // An empty dataset is no error: an epoch of no batches.
  nn::DataLoader none(std::make_shared<nn::TensorDataset>(zeros({0, 2}), Tensor()),
                      nn::DataLoaderOptions(2));
  CHECK(none.size() == 0);
  int batches = 0;
  for (const auto& b : none) (void)b, ++batches;
  CHECK(batches == 0);
}

TEST_CASE("bad input/checkpoint: corrupt entries behind a valid checksum are named") {
  const std::vector<unsigned char> four(4, 0);
  Entry ok{"model.w", 0, {1}, 4, four};
  // The well-formed file parses.
  auto sd = nn::parse_state_dict(file_of(payload_of({ok}), 1).data(),
                                 file_of(payload_of({ok}), 1).size(), "mem.ckp");
  CHECK(sd.at("model.w").sizes() == Shape{1});

  Entry e = ok;
  e.dtype = 9;
  CHECK(contains(parse_error(file_of(payload_of({e}), 1)),
                 "checkpoint 'mem.ckp': entry 'model.w' has unknown dtype code 9"));
  e = ok;
  e.sizes = {-1};
  CHECK(contains(parse_error(file_of(payload_of({e}), 1)), "entry 'model.w' has a negative size"));
  e = ok;
  e.sizes = {int64_t{1} << 40, int64_t{1} << 40};
  CHECK(contains(parse_error(file_of(payload_of({e}), 1)), "more elements than int64"));
  e = ok;
  e.sizes = {int64_t{1} << 62};  // 2^62 float32 elements: 2^64 bytes
  CHECK(contains(parse_error(file_of(payload_of({e}), 1)), "whose size overflows"));
  e = ok;
  e.sizes = {2};
  CHECK(contains(parse_error(file_of(payload_of({e}), 1)),
                 "holds 4 bytes of data, its shape [2] and dtype float32 need 8"));
  e = ok;
  e.nbytes = 1ull << 60;
  e.sizes = {1ll << 58};
  CHECK(contains(parse_error(file_of(payload_of({e}), 1)), "data runs past the end"));
  CHECK(contains(parse_error(file_of(payload_of({ok, ok}), 2)), "duplicate entry 'model.w'"));
  CHECK(contains(parse_error(file_of(payload_of({ok, ok}), 1)), "trailing bytes after 1 entries"));
  CHECK(contains(parse_error(file_of(payload_of({ok}), 2)), "name length runs past the end"));
  auto long_name = payload_of({ok});
  long_name[0] = 0xff;  // a name of 255+ bytes in a payload of ~30
  CHECK(contains(parse_error(file_of(long_name, 1)), "name runs past the end"));
  auto many_dims = payload_of({ok});
  many_dims[4 + ok.name.size() + 1] = 200;  // 200 sizes follow, the payload has one
  CHECK(contains(parse_error(file_of(many_dims, 1)), "sizes runs past the end"));
}

TEST_CASE("bad input/checkpoint: every truncation of a real file is an error, never a crash") {
  auto model = make_model();
  optim::Adam opt(model->parameters(), optim::AdamOptions(0.01));
  nn::MSELoss().forward(model->forward(ones({2, 3})), zeros({2, 2})).backward();
  opt.step();
  const std::string path = testing::temp_path("ember_test_", "truncation.ckp");
  nn::save(*model, opt, path);
  std::vector<unsigned char> good;
  {
    StateDict sd = nn::load_state_dict_file(path);
    CHECK(sd.contains("optimizer.state.0.exp_avg"));
    std::FILE* f = std::fopen(path.c_str(), "rb");
    REQUIRE(f != nullptr);
    for (int c; (c = std::fgetc(f)) != EOF;) good.push_back(static_cast<unsigned char>(c));
    std::fclose(f);
  }
  std::remove(path.c_str());
  size_t errors = 0;
  for (size_t n = 0; n < good.size(); ++n) {
    const std::string msg = error_of([&] { nn::parse_state_dict(good.data(), n, path); });
    errors += contains(msg, "checkpoint '" + path + "'") &&
              (contains(msg, "truncated") || contains(msg, "bad magic"));
  }
  CHECK(errors == good.size());
}

TEST_CASE("bad input/checkpoint: a wrong rng entry is refused before the model changes") {
  auto model = make_model();
  const std::string path = testing::temp_path("ember_test_", "bad_rng.ckp");
  StateDict sd;
  for (const auto& [name, t] : model->state_dict()) sd.insert("model." + name, t);
  sd.insert("rng.state", zeros({2}));  // float32, not int64
  nn::save_state_dict(sd, path);
  auto target = make_model();
  const auto before = values(*target);
  const uint64_t offset = default_generator().offset();
  CHECK(contains(error_of([&] { nn::load(*target, path); }),
                 "'rng.state' must be int64 of shape [2], got float32 [2]"));
  CHECK(values(*target) == before);
  CHECK(default_generator().offset() == offset);
  std::remove(path.c_str());
}
