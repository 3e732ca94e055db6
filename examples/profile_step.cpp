// The profiler on a training step: a small MLP trains a few steps under a
// profiler::Profile, each step a RecordFunction range, with the allocator's
// history recorded too; it prints the key_averages table sorted by device time
// (host time on a machine without a GPU) and writes one Chrome trace holding the
// op spans and the memory counters on one time axis (open it in Perfetto).
// Exits 1 unless the profile holds what a step must (CTest runs it).
// Usage: profile_step [output directory, default .]
#include <cstdio>
#include <memory>
#include <string>

#include "ember.h"

using namespace ember;

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : ".";
  const Device device = cuda::is_available() ? kCUDA : kCPU;
  manual_seed(0);
  Tensor x = randn({256, 16}).to(device);
  Tensor y = sum(x * x, 1, true).to(device);

  auto model = std::make_shared<nn::Sequential>(nn::Linear(16, 64), nn::ReLU(), nn::Linear(64, 1));
  model->to(device);
  optim::Adam optimizer(model->parameters(), optim::AdamOptions(1e-2));
  auto step = [&] {
    optimizer.zero_grad();
    Tensor loss = nn::functional::mse_loss(model->forward(x), y);
    loss.backward();
    optimizer.step();
    return loss;
  };
  step();  // warm-up: the first step pays for workspaces and library handles

  const int steps = 5;
  caching_allocator(device).record_memory_history(true);
  profiler::Profile prof;  // record_device_time, record_memory on; nvtx off
  for (int i = 0; i < steps; ++i) {
    profiler::RecordFunction range("step");
    step();
  }
  prof.stop();
  const memory::MemorySnapshot history = memory_snapshot(device);
  caching_allocator(device).record_memory_history(false);

  std::printf("%s", prof.table("device", 15).c_str());
  const std::string path = dir + "/profile_step.json";
  prof.export_chrome_trace(path, &history);
  std::printf("wrote %s (op spans and memory counters on one axis)\n", path.c_str());

  // What the profile must hold: one range per step, the ops and their backward
  // nodes inside them, and the optimizer's update.
  int64_t ranges = 0, linears = 0, backward_nodes = 0;
  for (const auto& row : prof.key_averages()) {
    if (row.op == "step") ranges = row.calls;
    if (row.op == "linear") linears = row.calls;
    if (row.op.find("Backward") != std::string::npos) backward_nodes += row.calls;
  }
  const bool ok = ranges == steps && linears == 2 * steps && backward_nodes > 0;
  std::printf("profile_step: %s (%lld steps, %lld linear calls, %lld backward nodes)\n",
              ok ? "ok" : "FAILED", static_cast<long long>(ranges), static_cast<long long>(linears),
              static_cast<long long>(backward_nodes));
  return ok ? 0 : 1;
}
