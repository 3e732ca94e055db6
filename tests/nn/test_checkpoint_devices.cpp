// Checkpoints across devices (suite "cuda"): resuming a CUDA run continues it bit
// for bit (fused Adam with its step counts on the device, dropout from the counter
// generator), and a checkpoint saved on CUDA loads into a CPU model and optimizer
// with every value exact, and from there back onto CUDA, where training resumes as
// if never interrupted.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/ops.h"
#include "nn/nn.h"
#include "optim/optim.h"
#include "temp_path.h"

using namespace ember;

namespace {

std::string temp_path(const std::string& name) {
  return testing::temp_path("ember_test_", name);
}

std::shared_ptr<nn::Sequential> make_model(Device device) {
  auto m = std::make_shared<nn::Sequential>(nn::Linear(3, 8), nn::Tanh(), nn::Dropout(0.2),
                                            nn::Linear(8, 1));
  m->to(device);
  return m;
}

// One training step on a fixed batch (made on the CPU, so every device sees the
// same numbers); returns the loss.
double train_step(nn::Sequential& model, optim::Optimizer& opt, int step, Device device) {
  Generator gen(100 + static_cast<uint64_t>(step));
  Tensor x = randn({16, 3}, kFloat32, &gen).to(device);
  Tensor y = randn({16, 1}, kFloat32, &gen).to(device);
  opt.zero_grad();
  Tensor loss = nn::functional::mse_loss(model.forward(x), y);
  loss.backward();
  opt.step();
  return loss.item();
}

// Every value a checkpoint holds, as the CPU sees it: the model's state and the
// optimizer's (moments, step counts, options).
std::vector<std::vector<double>> values(const nn::Module& m, const optim::Optimizer& opt) {
  std::vector<std::vector<double>> out;
  for (const auto& [name, t] : m.state_dict()) out.push_back(t.to(kCPU).to_vector<double>());
  const StateDict os = opt.state_dict();
  for (const auto& [name, t] : os.items()) out.push_back(t.to(kCPU).to_vector<double>());
  return out;
}

}  // namespace

TEST_CASE("nn/checkpoint/cuda: resuming a CUDA run continues with bit-identical losses" *
          doctest::test_suite("cuda")) {
  const std::string path = temp_path("resume_cuda.ckp");
  manual_seed(11);
  auto model = make_model(kCUDA);
  optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
  for (int s = 0; s < 3; ++s) train_step(*model, opt, s, kCUDA);
  nn::save(*model, opt, path);
  std::vector<double> uninterrupted;
  for (int s = 3; s < 8; ++s) uninterrupted.push_back(train_step(*model, opt, s, kCUDA));

  manual_seed(999);  // as a fresh process: other weights, other generator position
  auto resumed = make_model(kCUDA);
  optim::Adam opt2(resumed->parameters(), optim::AdamOptions(5e-2));
  nn::load(*resumed, opt2, path);
  std::vector<double> after;
  for (int s = 3; s < 8; ++s) after.push_back(train_step(*resumed, opt2, s, kCUDA));
  CHECK(after == uninterrupted);  // exact: dropout masks, Adam's device step counts included
  CHECK(values(*resumed, opt2) == values(*model, opt));
  std::remove(path.c_str());
}

TEST_CASE("nn/checkpoint/cuda: saved on CUDA, loaded on the CPU exactly, and back onto CUDA" *
          doctest::test_suite("cuda")) {
  const std::string on_cuda = temp_path("from_cuda.ckp"), on_cpu = temp_path("from_cpu.ckp");
  manual_seed(21);
  auto gpu = make_model(kCUDA);
  optim::Adam gpu_opt(gpu->parameters(), optim::AdamOptions(1e-2).amsgrad(true));
  for (int s = 0; s < 4; ++s) train_step(*gpu, gpu_opt, s, kCUDA);
  nn::save(*gpu, gpu_opt, on_cuda);
  const std::vector<std::vector<double>> saved = values(*gpu, gpu_opt);
  Generator gen(77);
  const Tensor probe = randn({5, 3}, kFloat32, &gen);
  gpu->eval();
  const std::vector<double> gpu_out = gpu->forward(probe.to(kCUDA)).to(kCPU).to_vector<double>();
  gpu->train();
  std::vector<double> uninterrupted;  // the CUDA run, never interrupted
  for (int s = 4; s < 8; ++s) uninterrupted.push_back(train_step(*gpu, gpu_opt, s, kCUDA));

  // Onto the CPU: the same values, bit for bit, computing the same function.
  manual_seed(5);
  auto cpu = make_model(kCPU);
  optim::Adam cpu_opt(cpu->parameters(), optim::AdamOptions(3e-2));
  nn::load(*cpu, cpu_opt, on_cuda);
  for (const auto& [name, t] : cpu->state_dict()) CHECK(t.device() == kCPU);
  CHECK(values(*cpu, cpu_opt) == saved);
  CHECK(cpu_opt.param_groups()[0].options().get_lr() == 1e-2);
  cpu->eval();
  const std::vector<double> cpu_out = cpu->forward(probe).to_vector<double>();
  cpu->train();
  REQUIRE(cpu_out.size() == gpu_out.size());
  for (size_t i = 0; i < cpu_out.size(); ++i)
    CHECK(cpu_out[i] == doctest::Approx(gpu_out[i]).epsilon(1e-5));

  // And back: saved from the CPU (the generator where the CUDA save left it),
  // loaded onto a fresh CUDA model, the run goes on exactly as the uninterrupted one.
  nn::save(*cpu, cpu_opt, on_cpu);
  manual_seed(6);
  auto back = make_model(kCUDA);
  optim::Adam back_opt(back->parameters(), optim::AdamOptions(3e-2));
  nn::load(*back, back_opt, on_cpu);
  for (const auto& [name, t] : back->state_dict()) CHECK(t.device() == kCUDA);
  CHECK(values(*back, back_opt) == saved);
  std::vector<double> resumed;
  for (int s = 4; s < 8; ++s) resumed.push_back(train_step(*back, back_opt, s, kCUDA));
  CHECK(resumed == uninterrupted);
  // The CPU copy trains on as well.
  CHECK(std::isfinite(train_step(*cpu, cpu_opt, 4, kCPU)));
  std::remove(on_cuda.c_str());
  std::remove(on_cpu.c_str());
}
