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

#include "core/autograd.h"
#include "core/ops.h"
#include "error_text.h"
#include "nn/nn.h"
#include "optim/optim.h"
#include "temp_path.h"

using namespace ember;
using ember::testing::contains;
using ember::testing::error_of;

namespace {

std::string temp_path(const std::string& name) {
  return testing::temp_path("ember_test_", name);
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

// ---------------------------------------------------------------- whole runs

namespace {

// A training run over a shuffled DataLoader with dropout, Adam, a warm-up then
// step schedule and gradient clipping: every piece of state a resume must carry.
struct Run {
  std::shared_ptr<nn::Sequential> model;
  std::unique_ptr<optim::Adam> opt;
  std::unique_ptr<optim::SequentialLR> sched;
  std::unique_ptr<nn::DataLoader> loader;

  Run(Device device, uint64_t init_seed) {
    manual_seed(init_seed);
    model = make_model();
    model->to(device);
    opt = std::make_unique<optim::Adam>(model->parameters(), optim::AdamOptions(1e-2));
    auto warmup = std::make_shared<optim::LinearLR>(*opt, 0.5, 1.0, 4);
    auto decay = std::make_shared<optim::StepLR>(*opt, 3, 0.7);
    sched = std::make_unique<optim::SequentialLR>(
        *opt, std::vector<std::shared_ptr<optim::LRScheduler>>{warmup, decay},
        std::vector<int64_t>{4});
    Generator data(7);  // the data set is the same in every run
    Tensor x = randn({70, 3}, kFloat32, &data);
    Tensor y = randn({70, 1}, kFloat32, &data);
    loader = std::make_unique<nn::DataLoader>(
        nn::TensorDataset(x, y),
        nn::DataLoaderOptions(16).shuffle(true).seed(3).prefetch(true).device(device));
  }

  double step(const nn::Example& batch) {
    opt->zero_grad();
    Tensor loss = nn::functional::mse_loss(model->forward(batch.data), batch.target);
    loss.backward();
    nn::utils::clip_grad_norm_(model->parameters(), 0.5);
    opt->step();
    return loss.item();
  }
  nn::Checkpoint checkpoint() {
    nn::Checkpoint ckp(*model);
    ckp.optimizer(*opt).scheduler(*sched).loader(*loader);
    return ckp;
  }
};

constexpr int kEpochs = 3;  // of 5 batches each (70 examples in 16s)

// Losses of an uninterrupted run, one per step.
std::vector<double> run_through(Device device) {
  Run run(device, 1);
  std::vector<double> losses;
  for (int epoch = 0; epoch < kEpochs; ++epoch) {
    for (const nn::Example& batch : *run.loader) losses.push_back(run.step(batch));
    run.sched->step();
  }
  return losses;
}

// Runs until `stop` steps were taken, saving a checkpoint after that step (inside
// the loop), then, in a fresh Run built from other weights and another generator
// state, loads it and finishes: the losses of both halves.
std::vector<double> run_interrupted(Device device, int stop, const std::string& path) {
  std::vector<double> losses;
  {
    Run run(device, 1);
    int steps = 0;
    for (int epoch = 0; epoch < kEpochs && steps < stop; ++epoch) {
      for (const nn::Example& batch : *run.loader) {
        losses.push_back(run.step(batch));
        if (++steps == stop) {
          nn::Checkpoint ckp = run.checkpoint();
          ckp.set("epoch", epoch).set("step", steps).set("note", 0.25);
          ckp.set("ema", run.model->parameters()[0] * 2.0);
          ckp.save(path);
          break;
        }
      }
      if (steps < stop) run.sched->step();
    }
  }
  Run resumed(device, 999);
  manual_seed(12345);  // a fresh process draws differently
  nn::Checkpoint ckp = resumed.checkpoint();
  ckp.load(path);
  CHECK(ckp.get<int>("step") == stop);
  CHECK(ckp.get<double>("note") == 0.25);
  CHECK(ckp.get<Tensor>("ema").sizes() == Shape{8, 3});
  const int64_t saved_epoch = ckp.get<int64_t>("epoch");
  // The loader knows whether the saved epoch was finished: it continues inside it
  // or starts the next one; the loop below only has to know when to step the
  // scheduler (once per finished epoch).
  for (int64_t epoch = saved_epoch; epoch < kEpochs; ++epoch) {
    if (epoch == saved_epoch && resumed.loader->epoch() > static_cast<uint64_t>(epoch)) {
      resumed.sched->step();  // the saved step was the epoch's last: it ended there
      continue;
    }
    for (const nn::Example& batch : *resumed.loader) losses.push_back(resumed.step(batch));
    resumed.sched->step();
  }
  return losses;
}

}  // namespace

TEST_CASE(
    "nn/checkpoint: a run resumed mid-epoch continues bit for bit (loader, scheduler, "
    "entries)") {
  const std::string path = temp_path("midepoch.ckp");
  const std::vector<double> straight = run_through(kCPU);
  REQUIRE(straight.size() == 15);
  for (int stop : {3, 5, 7, 12}) {  // inside an epoch, at an epoch's end, ...
    CAPTURE(stop);
    CHECK(run_interrupted(kCPU, stop, path) == straight);
  }
  std::remove(path.c_str());
}

TEST_CASE("nn/checkpoint: a run resumed mid-epoch continues bit for bit on CUDA" *
          doctest::test_suite("cuda")) {
  const std::string path = temp_path("midepoch_cuda.ckp");
  const std::vector<double> straight = run_through(kCUDA);
  for (int stop : {3, 5, 12}) {
    CAPTURE(stop);
    CHECK(run_interrupted(kCUDA, stop, path) == straight);
  }
  std::remove(path.c_str());
}

TEST_CASE("nn/checkpoint: the loader's position, in and between epochs") {
  nn::DataLoader loader(nn::TensorDataset(arange(10).reshape({10, 1})),
                        nn::DataLoaderOptions(4).shuffle(true).seed(9));
  auto position = [&] {
    StateDict sd = loader.state_dict();
    return std::pair<int64_t, int64_t>(sd.at("epoch").item<int64_t>(),
                                       sd.at("batch").item<int64_t>());
  };
  CHECK(position() == std::pair<int64_t, int64_t>(0, 0));
  std::vector<std::pair<int64_t, int64_t>> seen;
  for (const nn::Example& b : loader) {
    (void)b;
    seen.push_back(position());
  }
  CHECK(seen == std::vector<std::pair<int64_t, int64_t>>{{0, 1}, {0, 2}, {1, 0}});
  CHECK(position() == std::pair<int64_t, int64_t>(1, 0));
  // Resume epoch 1 after its first batch: the same batches as an unbroken epoch 1.
  std::vector<std::vector<double>> unbroken;
  for (const nn::Example& b : loader) unbroken.push_back(b.data.to_vector<double>());
  nn::DataLoader again(nn::TensorDataset(arange(10).reshape({10, 1})),
                       nn::DataLoaderOptions(4).shuffle(true).seed(9));
  StateDict sd = loader.state_dict();
  StateDict at;
  for (const auto& [k, t] : sd)
    at.insert(k, k == "epoch" ? full({}, 1, kInt64) : k == "batch" ? full({}, 1, kInt64) : t);
  again.load_state_dict(at);
  std::vector<std::vector<double>> rest;
  for (const nn::Example& b : again) rest.push_back(b.data.to_vector<double>());
  CHECK(rest == std::vector<std::vector<double>>(unbroken.begin() + 1, unbroken.end()));
  CHECK(again.epoch() == 2);
  // A loader that would not give the same sequence refuses the state.
  nn::DataLoader other(nn::TensorDataset(arange(12).reshape({12, 1})),
                       nn::DataLoaderOptions(4).shuffle(true).seed(8));
  CHECK(contains(error_of([&] { other.load_state_dict(sd); }),
                 "saved by a loader with dataset_size 10 (this loader: 12), seed 9 (this loader: "
                 "8)"));
}

TEST_CASE(
    "nn/checkpoint: clear errors for what the file does not hold, directories and user "
    "entries") {
  const std::string path = temp_path("plain.ckp");
  auto model = make_model();
  optim::SGD opt(model->parameters(), optim::SGDOptions(0.1));
  nn::save(*model, path);  // model only
  CHECK(contains(error_of([&] { nn::load(*model, opt, path); }),
                 "checkpoint '" + path +
                     "' holds no optimizer state (it was saved without "
                     "one); load it with nn::load(model, path)"));
  optim::StepLR sched(opt, 2);
  nn::save(*model, opt, path);
  CHECK(
      contains(error_of([&] { nn::Checkpoint(*model).optimizer(opt).scheduler(sched).load(path); }),
               "holds no learning-rate scheduler state"));
  nn::DataLoader loader(nn::TensorDataset(zeros({4, 3})), nn::DataLoaderOptions(2));
  CHECK(contains(error_of([&] { nn::Checkpoint(*model).loader(loader).load(path); }),
                 "holds no data loader state"));
  // A directory as the path, for saving and for loading.
  const std::string dir = std::filesystem::temp_directory_path().string();
  CHECK(contains(error_of([&] { nn::save(*model, dir); }),
                 "save: checkpoint path '" + dir + "' is a directory"));
  CHECK(contains(error_of([&] { nn::load(*model, dir); }),
                 "load: checkpoint path '" + dir + "' is a directory"));
  // A scheduler attached with another optimizer.
  optim::SGD other(model->parameters(), optim::SGDOptions(0.1));
  CHECK(contains(error_of([&] { nn::Checkpoint(*model).optimizer(other).scheduler(sched); }),
                 "this StepLR was built for another optimizer than the checkpoint's"));
  CHECK(contains(error_of([&] { nn::Checkpoint(*model).scheduler(sched); }),
                 "attach the scheduler's optimizer first"));
  // User entries: types, replacement, names listed when one is missing.
  nn::Checkpoint ckp(*model);
  ckp.set("epoch", 3).set("lr", 0.5).set("epoch", int64_t{4});
  CHECK(ckp.names() == std::vector<std::string>{"lr", "epoch"});
  CHECK(ckp.get<int64_t>("epoch") == 4);
  CHECK(ckp.get<float>("lr") == 0.5f);
  CHECK(contains(error_of([&] { ckp.get<int>("lr"); }),
                 "'lr' is a float64 tensor of shape [], not an integer"));
  CHECK(contains(error_of([&] { ckp.get<double>("steps"); }),
                 "no entry 'steps' (entries: 'lr', 'epoch')"));
  Tensor kept = ones({2});
  ckp.set("kept", kept);
  kept.fill_(5);  // set() took a snapshot
  ckp.save(path);
  nn::Checkpoint back(*model);
  back.load(path);
  CHECK(back.get<Tensor>("kept").to_vector<double>() == std::vector<double>{1, 1});
  CHECK(back.get<int64_t>("epoch") == 4);
  std::remove(path.c_str());
}
