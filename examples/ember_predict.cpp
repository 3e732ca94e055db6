// ember-predict: will it fit? Runs a workload of examples/workloads.h on the meta
// device (core/predict.h) and prints the memory the GPU's allocator would report:
// per step, at the peak, the sites live there, and whether it fits. With
// --measure it also runs the workload for real (cuda:0, or the CPU through a
// simulated device) and prints the two side by side.
//
//   ember-predict list
//   ember-predict                  (the seed model: ember-predict seed_train)
//   ember-predict mlp_bf16 --capacity 80GiB --policy max_split_size_mb:128
//   ember-predict mlp_fp32 --capacity 40GiB --batch-search 256:65536
//   ember-predict leak_outputs_list --steps 20
//   ember-predict gpt_char --capture   (would cuda::Graph capture the step?)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/meta.h"
#include "examples/workloads.h"

using namespace ember;

namespace {

[[noreturn]] void usage(const char* why) {
  if (why != nullptr) std::fprintf(stderr, "ember-predict: %s\n", why);
  std::fprintf(stderr,
               "usage: ember-predict WORKLOAD|list [--steps N] [--capacity SIZE] "
               "[--mirror cuda|cpu] [--policy CONF]... [--top N] [--measure] "
               "[--batch-search LO:HI] [--capture]\n"
               "  SIZE: bytes, or a number with KiB, MiB, GiB (or KB, MB, GB)\n"
               "  --policy: EMBER_CUDA_ALLOC_CONF text, compared on the same run\n"
               "  --measure: also run it for real (cuda:0, else the CPU) and compare\n"
               "  --batch-search: the largest batch of an mlp_* workload that fits\n"
               "  --capture: after --steps eager steps (default 3) on the meta device, one\n"
               "    step as cuda::Graph::capture would see it: what it refuses, if anything\n");
  std::exit(2);
}

// --capture: `warmup` eager steps on the meta device mirroring CUDA (the optimizer's
// state and the allocator's blocks made, as a capture needs), then one step inside a
// simulated capture (core/meta.h's MetaCaptureScope). 0 when nothing refused it.
int capture_check(const std::string& name, const StepFactory& factory, int warmup) {
  MetaDeviceScope scope;
  const StepFunction step = factory(kMeta);
  for (int i = 0; i < warmup; ++i) step(i);
  try {
    MetaCaptureScope capture;
    step(warmup);
  } catch (const std::exception& e) {
    std::printf("ember-predict: %s: the step would not be captured by cuda::Graph: %s\n",
                name.c_str(), e.what());
    return 1;
  }
  std::printf(
      "ember-predict: %s: the step would be captured by cuda::Graph (after %d eager steps, "
      "nothing it runs refuses a capture; checked on the meta device, so not what only the "
      "CUDA runtime refuses inside a launcher)\n",
      name.c_str(), warmup);
  return 0;
}

size_t parse_size(const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  const std::string unit(end);
  double scale = 1;
  if (unit == "KiB")
    scale = 1024.0;
  else if (unit == "MiB")
    scale = 1024.0 * 1024;
  else if (unit == "GiB")
    scale = 1024.0 * 1024 * 1024;
  else if (unit == "KB")
    scale = 1e3;
  else if (unit == "MB")
    scale = 1e6;
  else if (unit == "GB")
    scale = 1e9;
  else if (!unit.empty() && unit != "B")
    usage(("bad size '" + text + "'").c_str());
  if (!(v > 0)) usage(("bad size '" + text + "'").c_str());
  return static_cast<size_t>(v * scale);
}

void compare(const MemoryPrediction& p, const MemoryPrediction& m) {
  std::printf("\npredicted vs measured (bytes):\n");
  auto line = [](const char* what, int64_t a, int64_t b) {
    std::printf("  %-16s %16lld %16lld   %s\n", what, static_cast<long long>(a),
                static_cast<long long>(b),
                a == b ? "equal" : ("differ by " + std::to_string(a - b)).c_str());
  };
  line("peak allocated", p.peak_allocated, m.peak_allocated);
  line("peak reserved", p.peak_reserved, m.peak_reserved);
  const size_t n = std::min(p.steps.size(), m.steps.size());
  size_t same = 0;
  for (size_t i = 0; i < n; ++i)
    same += p.steps[i].allocated == m.steps[i].allocated &&
            p.steps[i].reserved == m.steps[i].reserved &&
            p.steps[i].peak_allocated == m.steps[i].peak_allocated &&
            p.steps[i].peak_reserved == m.steps[i].peak_reserved;
  std::printf("  steps whose four figures are equal: %zu of %zu\n", same, n);
}

}  // namespace

int main(int argc, char** argv) {
  // Without arguments: the seed model (as `make demo` trains it).
  const std::string name = argc < 2 ? "seed_train" : argv[1];
  if (name == "--help" || name == "-h") usage(nullptr);
  const std::vector<workloads::Workload> all = workloads::all();
  if (name == "list") {
    for (const workloads::Workload& w : all)
      std::printf("%-28s %s\n", w.name.c_str(), w.about.c_str());
    return 0;
  }
  PredictOptions options;
  bool measure = false, capture = false;
  int steps = 3;
  int64_t search_lo = 0, search_hi = 0;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage((a + " needs a value").c_str());
      return argv[++i];
    };
    if (a == "--steps") {
      steps = std::atoi(value().c_str());
      options.steps(steps);
    } else if (a == "--capture")
      capture = true;
    else if (a == "--capacity")
      options.capacity(parse_size(value()));
    else if (a == "--mirror") {
      const std::string m = value();
      if (m != "cuda" && m != "cpu") usage("--mirror takes cuda or cpu");
      options.mirror(m == "cuda" ? DeviceType::CUDA : DeviceType::CPU);
    } else if (a == "--policy")
      options.policy(value());
    else if (a == "--top")
      options.top_sites(static_cast<size_t>(std::atoi(value().c_str())));
    else if (a == "--measure")
      measure = true;
    else if (a == "--batch-search") {
      const std::string r = value();
      const size_t colon = r.find(':');
      if (colon == std::string::npos) usage("--batch-search takes LO:HI");
      search_lo = std::atoll(r.substr(0, colon).c_str());
      search_hi = std::atoll(r.substr(colon + 1).c_str());
    } else {
      usage(("unknown option " + a).c_str());
    }
  }
  const workloads::Workload* w = nullptr;
  for (const workloads::Workload& c : all)
    if (c.name == name) w = &c;
  if (w == nullptr) usage(("no workload '" + name + "' (ember-predict list)").c_str());

  try {
    if (search_hi > 0) {
      workloads::Precision precision;
      if (name == "mlp_fp32")
        precision = workloads::Precision::fp32;
      else if (name == "mlp_tf32")
        precision = workloads::Precision::tf32;
      else if (name == "mlp_bf16")
        precision = workloads::Precision::bf16;
      else
        usage("--batch-search works on the mlp_* workloads");
      const BatchSearch s =
          largest_fitting_batch(workloads::mlp_batched(precision), search_lo, search_hi, options);
      std::printf("ember-predict: largest batch of %s in [%lld, %lld] that fits: %lld\n",
                  name.c_str(), static_cast<long long>(search_lo),
                  static_cast<long long>(search_hi), static_cast<long long>(s.batch));
      for (const auto& [batch, fits] : s.probes)
        std::printf("  batch %8lld  %s\n", static_cast<long long>(batch),
                    fits ? "fits" : "does not fit");
      std::printf("at batch %lld: %s", static_cast<long long>(s.batch), s.at_batch.table().c_str());
      if (measure && s.batch > 0 && cuda::is_available()) {
        // The GPU's own allocator cannot be given a smaller capacity: run the found
        // batch for real and compare its figures with the prediction's.
        const int64_t b = s.batch;
        const auto factory = workloads::mlp_batched(precision);
        const MemoryPrediction m =
            measure_memory([&](Device d) { return factory(d, b); }, kCUDA, options);
        std::printf("\nmeasured at batch %lld: %s", static_cast<long long>(b), m.table().c_str());
        compare(s.at_batch, m);
      }
      return 0;
    }
    const StepFactory factory = w->factory();
    if (capture) return capture_check(name, factory, steps);
    std::printf("ember-predict: %s (%s)\n", name.c_str(), w->about.c_str());
    const auto t0 = std::chrono::steady_clock::now();
    const MemoryPrediction p = predict_memory(factory, options);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%s", p.table().c_str());
    std::printf(
        "predicted in %.1f ms of host time (set-up and %zu steps%s)\n", ms, p.steps.size(),
        p.policies.empty() && p.fits ? "" : ", with the extra runs for policies / the need");
    if (measure) {
      const Device real =
          options.mirror_ == DeviceType::CUDA && cuda::is_available() ? kCUDA : kCPU;
      if (real.is_cpu() && options.mirror_ == DeviceType::CUDA)
        std::printf(
            "\n(no GPU: measuring on the CPU, whose kernels differ from CUDA's; use "
            "--mirror cpu to compare like with like)\n");
      PredictOptions m = options;
      m.capacity(p.capacity);
      const MemoryPrediction measured = measure_memory(factory, real, m);
      std::printf("\nmeasured: %s", measured.table().c_str());
      compare(p, measured);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ember-predict: %s\n", e.what());
    return 1;
  }
  return 0;
}
