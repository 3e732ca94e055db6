// bench_digits_mlp: one training step of the digits classifier (examples/
// digits_mlp.cpp's MLP: 64-128-64-10 with ReLU, cross-entropy, Adam lr 1e-3,
// batch 64, UCI digits from examples/data/digits) on cuda:0, wall time per step
// over many steps (one sync per round, the median round), eager and captured in a
// cuda::Graph. benchmarks/peer_train_step.py runs the same steps in PyTorch from
// the same initial weights (written here with --init FILE, ember's checkpoint
// format) on the same batches.
//
// The work is fixed so both sides can repeat it: test set = every 5th example
// (360), training set = the rest (1,437) in file order, batch b = rows
// (64 b .. 64 b + 63) mod 1,437. Before timing, kValidationSteps steps are run on
// the GPU (float32) and on the CPU in float64 from the same weights; the final
// loss must agree to 1e-3 (relative) and the test accuracy to 1 example, and
// reach 0.9; then the graphed step must give the eager step's parameters.
// Usage: bench_digits_mlp [--json FILE] [--init FILE] [--quick]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "benchmarks/timing.h"
#include "core/autograd.h"
#include "core/ops.h"
#include "cuda/graph.h"
#include "nn/nn.h"
#include "optim/optim.h"

using namespace ember;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int64_t kBatch = 64;
constexpr int kValidationSteps = 300;

struct Digits {
  Tensor train_x, train_y, test_x, test_y;  // CPU, float64 images in [0, 1], int64 classes
};

Digits load(const std::string& path) {
  std::ifstream in(path);
  EMBER_CHECK(in.good(), "bench_digits_mlp: cannot open ", path);
  std::vector<double> px[2], cls[2];
  std::string line;
  for (int64_t i = 0; std::getline(in, line); ++i) {
    std::stringstream row(line);
    std::string cell;
    const int part = i % 5 == 0 ? 1 : 0;  // 1: test
    for (int k = 0; k < 64 && std::getline(row, cell, ','); ++k)
      px[part].push_back(std::stod(cell) / 16.0);
    std::getline(row, cell);
    cls[part].push_back(std::stod(cell));
  }
  Digits d;
  for (int part = 0; part < 2; ++part) {
    const auto n = static_cast<int64_t>(cls[part].size());
    (part ? d.test_x : d.train_x) = from_vector(px[part], {n, 64}, kFloat64);
    (part ? d.test_y : d.train_y) = from_vector(cls[part], {n}, kInt64);
  }
  return d;
}

std::shared_ptr<nn::Sequential> make_model() {
  return std::make_shared<nn::Sequential>(nn::Linear(64, 128), nn::ReLU(), nn::Linear(128, 64),
                                          nn::ReLU(), nn::Linear(64, 10));
}

// The digits training run of one device and dtype, with every batch made up front.
struct Run {
  std::shared_ptr<nn::Sequential> model = make_model();
  std::unique_ptr<optim::Adam> opt;
  std::vector<Tensor> xs, ys;
  Tensor test_x, test_y;

  Run(const Digits& d, const StateDict& init, Device device, DType dtype) {
    model->load_state_dict(init);
    model->to(device, dtype);
    opt = std::make_unique<optim::Adam>(model->parameters(), optim::AdamOptions(1e-3));
    const int64_t n = d.train_y.numel();
    const int64_t batches = (n + kBatch - 1) / kBatch;  // a batch wraps around the end
    for (int64_t b = 0; b < batches; ++b) {
      std::vector<double> idx;
      for (int64_t k = 0; k < kBatch; ++k) idx.push_back(static_cast<double>((b * kBatch + k) % n));
      Tensor rows = from_vector(idx, {kBatch}, kInt64);
      xs.push_back(index_select(d.train_x, 0, rows).to(device, dtype));
      ys.push_back(index_select(d.train_y, 0, rows).to(device));
    }
    test_x = d.test_x.to(device, dtype);
    test_y = d.test_y;
  }
  Tensor step(const Tensor& x, const Tensor& y) {
    opt->zero_grad();
    Tensor loss = nn::functional::cross_entropy(model->forward(x), y);
    loss.backward();
    opt->step();
    return loss;
  }
  double accuracy() {
    NoGradGuard no_grad;
    const std::vector<int64_t> p = model->forward(test_x).argmax(1).to_vector<int64_t>();
    const std::vector<int64_t> t = test_y.to_vector<int64_t>();
    int64_t ok = 0;
    for (size_t i = 0; i < t.size(); ++i) ok += p[i] == t[i];
    return static_cast<double>(ok) / static_cast<double>(t.size());
  }
  std::vector<double> params() const {
    std::vector<double> v;
    for (const Tensor& p : model->parameters())
      for (double x : p.to(kCPU).to_vector<double>()) v.push_back(x);
    return v;
  }
};

double wall_ms_per_step(const std::function<void(int)>& f, int warmup, int rounds, int steps) {
  for (int i = 0; i < warmup; ++i) f(i);
  cuda::synchronize(0);
  std::vector<double> per;
  int it = warmup;
  for (int r = 0; r < rounds; ++r) {
    const auto t0 = Clock::now();
    for (int s = 0; s < steps; ++s) f(it++);
    cuda::synchronize(0);
    per.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / steps);
  }
  std::sort(per.begin(), per.end());
  return per[per.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (!bench::have_gpu("bench_digits_mlp")) return 0;
  bool quick = false;
  std::string init_path = "digits_mlp_init.ckp";
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--quick")) quick = true;
    if (!std::strcmp(argv[i], "--init") && i + 1 < argc) init_path = argv[i + 1];
  }
  const Digits data = load(EMBER_DIGITS_CSV);
  manual_seed(0);
  const StateDict init = make_model()->state_dict();  // PyTorch's default initialisation
  nn::save_state_dict(init, init_path);               // for peer_train_step.py
  std::printf("initial weights in %s\n", init_path.c_str());
  bench::Table table("digits_mlp: one training step of the digits classifier, wall time");
  int failures = 0;

  // --- validation: GPU float32 against a CPU float64 reference, same start, same batches
  Run gpu(data, init, kCUDA, kFloat32), ref(data, init, kCPU, kFloat64);
  double gpu_loss = 0, ref_loss = 0;
  for (int s = 0; s < kValidationSteps; ++s) {
    const size_t b = static_cast<size_t>(s) % gpu.xs.size();
    gpu_loss = gpu.step(gpu.xs[b], gpu.ys[b]).item();
    ref_loss = ref.step(ref.xs[b], ref.ys[b]).item();
  }
  const double gpu_acc = gpu.accuracy(), ref_acc = ref.accuracy();
  const double rel = std::abs(gpu_loss - ref_loss) / std::abs(ref_loss);
  const bool valid =
      rel <= 1e-3 && std::abs(gpu_acc - ref_acc) <= 1.0 / 360 + 1e-12 && gpu_acc >= 0.9;
  std::printf(
      "validate: after %d steps loss %.6f (float64 reference %.6f, rel. diff %.1e), "
      "test accuracy %.4f (reference %.4f)%s\n",
      kValidationSteps, gpu_loss, ref_loss, rel, gpu_acc, ref_acc, valid ? "" : "  FAILED");
  failures += valid ? 0 : 1;
  char note[160];
  std::snprintf(note, sizeof note, "loss %.4f acc %.4f after %d steps", gpu_loss, gpu_acc,
                kValidationSteps);

  const int rounds = quick ? 3 : 7, steps = quick ? 100 : 500;
  // --- eager
  {
    Run r(data, init, kCUDA, kFloat32);
    const double ms = wall_ms_per_step(
        [&](int i) { r.step(r.xs[i % r.xs.size()], r.ys[i % r.ys.size()]); }, 20, rounds, steps);
    table.add({"digits mlp step", "f32", "64-128-64-10, b64", "eager", ms, 1.0 / ms, "k/s", note});
  }
  // --- graphed: checked against eager, bitwise, first
  {
    Run eager(data, init, kCUDA, kFloat32), graphed(data, init, kCUDA, kFloat32);
    const int warm = 3, checked = 30;
    for (int i = 0; i < warm; ++i) graphed.step(graphed.xs[i], graphed.ys[i]);
    Tensor sx = empty_like(graphed.xs[0]), sy = empty_like(graphed.ys[0]);
    cuda::Graph graph;
    Tensor static_loss;
    try {
      graph.capture([&] { static_loss = graphed.step(sx, sy); });
    } catch (const Error& e) {  // an op of the step that cannot be captured: say which
      std::printf("graphed step not measured: %s\n", e.what());
      table.write_json(bench::json_path(argc, argv));
      return failures ? 1 : 0;
    }
    auto replay = [&](int i) {
      const size_t b = static_cast<size_t>(i) % graphed.xs.size();
      sx.copy_(graphed.xs[b]);
      sy.copy_(graphed.ys[b]);
      graph.replay();
    };
    for (int i = warm; i < warm + checked; ++i) replay(i);
    for (int i = 0; i < warm + checked; ++i) {
      const size_t b = static_cast<size_t>(i) % eager.xs.size();
      eager.step(eager.xs[b], eager.ys[b]);
    }
    const bool same = eager.params() == graphed.params();
    std::printf("validate graph: parameters after %d steps %s the eager run's\n", warm + checked,
                same ? "equal (bitwise)" : "DIFFER FROM");
    failures += same ? 0 : 1;
    const double ms = wall_ms_per_step(replay, 5, rounds, steps);
    table.add({"digits mlp step", "f32", "64-128-64-10, b64", "graphed", ms, 1.0 / ms, "k/s",
               same ? "checked = eager, bitwise" : "MISMATCH"});
  }
  table.write_json(bench::json_path(argc, argv));
  if (failures) std::printf("%d validation failure(s)\n", failures);
  return failures ? 1 : 0;
}
