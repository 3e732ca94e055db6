// The memory timeline: records the allocator's history through 30 steps of
// validation without NoGradGuard (leaking) and 30 with it (fixed), marking every
// step, and writes each as Chrome trace JSON (Perfetto, chrome://tracing), as a
// self-contained HTML page where a leak is a rising staircase (and the leaking site
// a widening band), and as a trace CSV that ember-replay replays. Exits 1 unless the
// leaking run's allocated memory grew and the fixed run's did not (CTest runs it).
// Usage: memory_timeline [output directory, default .]
#include <cstdint>
#include <cstdio>
#include <string>

#include "core/memory/memory_timeline.h"
#include "core/memory/trace.h"
#include "leak_demo.h"

using namespace ember;

// Records one run; returns how much allocated memory grew over its 30 steps.
int64_t record(bool fixed, const std::string& dir) {
  const Device dev = demo::pick_device();
  manual_seed(0);
  auto model = std::make_shared<demo::Net>();
  model->to(dev);
  Tensor xv = randn({1024, demo::kIn}).to(dev), yv = randn({1024, 1}).to(dev);

  empty_cache(dev);  // so each page starts from what this run reserves
  caching_allocator(dev).record_memory_history(true);
  Tensor val_total = zeros({}, dev);
  double val_value = 0;
  const int64_t before = memory_allocated(dev);
  for (int batch = 0; batch < 30; ++batch) {
    mark_step("step " + std::to_string(batch), {dev});
    if (fixed) {
      NoGradGuard no_grad;
      val_value += mse_loss(model->forward(xv), yv).item();
    } else {
      val_total = val_total + mse_loss(model->forward(xv), yv);
    }
  }
  mark_step("end", {dev});
  const int64_t growth = memory_allocated(dev) - before;
  memory::MemorySnapshot snap = memory_snapshot(dev);
  caching_allocator(dev).record_memory_history(false);

  const std::string name = dir + "/memory_timeline_" + (fixed ? "fixed" : "leak");
  memory::write_chrome_trace(snap, name + ".json");
  memory::write_memory_timeline_html(
      snap, name + ".html",
      fixed ? "validation under NoGradGuard (fixed): flat"
            : "validation without NoGradGuard (leaking): a rising staircase");
  memory::write_trace_csv(memory::trace_from_history(snap.trace, name), name + ".csv");
  std::printf("wrote %s.html, .json and .csv (allocated at the end: %lld bytes)\n", name.c_str(),
              static_cast<long long>(memory_allocated(dev)));
  return growth;
}

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : ".";
  const int64_t leak = record(false, dir);
  const int64_t fixed = record(true, dir);
  const bool right = leak > 0 && fixed == 0;
  std::printf("verdict: %s (allocated memory grew %lld bytes leaking, %lld fixed)\n",
              right ? "the leak rises, the fix is flat" : "WRONG", static_cast<long long>(leak),
              static_cast<long long>(fixed));
  return right ? 0 : 1;
}
