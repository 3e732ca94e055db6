// bench_replay: how fast ember-replay's engine goes, on one CPU core.
// A synthetic trace of a training loop whose batch changes every step (three
// blocks of Linear 1024->4096, GELU, Linear 4096->1024 with AdamW, batch drawn
// from 64..4096, the shape of the varying-batch peer in the reference), made in
// memory, then: writing it as CSV, parsing it back, compiling it, and replaying it
// through the native policy, each timed in CPU seconds of this thread (median of 5
// runs for the replay; the machine may be shared, one core is the claim). Checks
// first: the parsed trace equals the generated one, and the replay's peak
// allocated equals the peak of live rounded sizes computed while generating.
// Usage: bench_replay [--steps N] [--json FILE] (default 40000 steps, about 5 million events)
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/memory/caching_allocator.h"
#include "core/memory/replay.h"
#include "core/memory/trace.h"

namespace {

using namespace ember::memory;

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "bench_replay: check failed: %s\n", what);
    std::exit(1);
  }
}

// The generator: addresses are handed out from a counter (a trace only needs
// them distinct while live); peak_allocated follows the native rounding.
struct Generator {
  Trace trace;
  uint64_t next_addr = 0x100000;
  int64_t allocated = 0, peak_allocated = 0;
  std::unordered_map<uint64_t, uint64_t> sizes;
  uint64_t rng = 0x9E3779B97F4A7C15ull;

  uint64_t alloc(uint64_t bytes) {
    const uint64_t a = next_addr;
    next_addr += (bytes + 511) / 512 * 512 + 512;
    trace.events.push_back(TraceEvent{a, bytes, 0, TraceOp::alloc});
    sizes[a] = bytes;
    allocated += static_cast<int64_t>(CachingAllocator::round_size(bytes, AllocatorOptions{}));
    peak_allocated = std::max(peak_allocated, allocated);
    return a;
  }
  void free(uint64_t a) {
    const uint64_t bytes = sizes.at(a);
    sizes.erase(a);
    trace.events.push_back(TraceEvent{a, bytes, 0, TraceOp::free_requested});
    trace.events.push_back(TraceEvent{a, bytes, 0, TraceOp::free_completed});
    allocated -= static_cast<int64_t>(CachingAllocator::round_size(bytes, AllocatorOptions{}));
  }
  uint64_t batch() {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return 64 + rng % (4096 - 64 + 1);
  }
};

Generator make_trace(int steps) {
  Generator g;
  constexpr uint64_t kD = 1024, kH = 4096, kF = 4;  // fp32
  std::vector<uint64_t> params;
  for (int layer = 0; layer < 3; ++layer)
    for (uint64_t bytes : {kD * kH * kF, kH * kF, kH * kD * kF, kD * kF})
      params.push_back(g.alloc(bytes));
  std::vector<uint64_t> adam_state;
  std::vector<uint64_t> grads;
  for (int step = 0; step < steps; ++step) {
    const uint64_t b = g.batch();
    const uint64_t x = g.alloc(b * kD * kF), target = g.alloc(b * kD * kF);
    std::vector<uint64_t> saved;  // what backward needs, in forward order
    uint64_t h = x;
    for (int layer = 0; layer < 3; ++layer) {
      const uint64_t pre = g.alloc(b * kH * kF);
      const uint64_t act = g.alloc(b * kH * kF);
      const uint64_t out = g.alloc(b * kD * kF);
      saved.insert(saved.end(), {pre, act});
      if (h != x) saved.push_back(h);
      h = out;
    }
    const uint64_t loss = g.alloc(4);
    for (uint64_t gr : grads) g.free(gr);  // zero_grad(set_to_none=True)
    grads.clear();
    uint64_t d = g.alloc(b * kD * kF);  // d(loss)/d(out)
    g.free(loss);
    g.free(h);
    for (int layer = 2; layer >= 0; --layer) {
      for (uint64_t bytes : {kH * kD * kF, kD * kF}) grads.push_back(g.alloc(bytes));
      const uint64_t d_act = g.alloc(b * kH * kF);
      g.free(d);
      const uint64_t d_pre = g.alloc(b * kH * kF);
      g.free(d_act);
      for (uint64_t bytes : {kD * kH * kF, kH * kF}) grads.push_back(g.alloc(bytes));
      d = g.alloc(b * kD * kF);
      g.free(d_pre);
      for (int k = 0; k < 3 && !saved.empty(); ++k) {
        g.free(saved.back());
        saved.pop_back();
      }
    }
    for (uint64_t s : saved) g.free(s);
    g.free(d);
    g.free(x);
    g.free(target);
    if (adam_state.empty())
      for (uint64_t p : params)
        for (int k = 0; k < 2; ++k) adam_state.push_back(g.alloc(g.sizes.at(p)));
    // The fused update's scratch: one small buffer per step.
    g.free(g.alloc(4096));
  }
  return g;
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 40000;
  const char* json = nullptr;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--steps") == 0 && i + 1 < argc) {
      steps = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--json") == 0 && i + 1 < argc) {
      json = argv[++i];
    } else {
      std::fprintf(stderr, "usage: bench_replay [--steps N] [--json FILE]\n");
      return 2;
    }
  }
  if (steps <= 0) {
    std::fprintf(stderr, "bench_replay: --steps must be a positive number of steps\n");
    return 2;
  }
  // CPU time of this thread: the machine may be shared, and one core is the claim.
  auto cpu = [] { return thread_cpu_seconds(); };
  double t0 = cpu();
  Generator g = make_trace(steps);
  g.trace.source = "synthetic";
  const size_t n = g.trace.events.size();
  std::printf(
      "bench_replay: %d steps of a varying-batch MLP loop, %zu events (generated in %.2f s)\n",
      steps, n, cpu() - t0);

  std::ostringstream csv;
  t0 = cpu();
  write_trace_csv(g.trace, csv);
  const double write_s = cpu() - t0;
  const std::string text = csv.str();
  t0 = cpu();
  Trace parsed = parse_trace_csv(text, "synthetic.csv");
  const double parse_s = cpu() - t0;
  check(parsed.events.size() == n, "parsed event count");
  for (size_t i = 0; i < n; ++i) {
    const TraceEvent &a = parsed.events[i], &b = g.trace.events[i];
    check(a.op == b.op && a.addr == b.addr && a.size == b.size && a.stream == b.stream,
          "parsed rows equal the generated ones");
  }
  t0 = cpu();
  const ReplayProgram program = ReplayProgram::compile(std::move(parsed));
  const double compile_s = cpu() - t0;

  auto policy = make_caching_policy("native");
  RunSettings settings;
  settings.measure_fragmentation = false;
  std::vector<double> rates;
  ReplayResult r;
  for (int run = 0; run < 5; ++run) {
    r = policy->run(program, settings);
    check(r.ooms == 0, "no OOM on an unlimited device");
    check(r.events == n, "every event replayed");
    check(r.peak_allocated == g.peak_allocated,
          "peak allocated = the generator's peak of rounded sizes");
    rates.push_back(r.events_per_second());
  }
  std::sort(rates.begin(), rates.end());
  std::printf("  write CSV  %6.1f M events/s (%.1f MB)\n", static_cast<double>(n) / write_s / 1e6,
              static_cast<double>(text.size()) / 1e6);
  std::printf("  parse CSV  %6.1f M events/s\n", static_cast<double>(n) / parse_s / 1e6);
  std::printf("  compile    %6.1f M events/s\n", static_cast<double>(n) / compile_s / 1e6);
  std::printf("  replay     %6.1f M events/s (native policy, median of 5; min %.1f, max %.1f)\n",
              rates[2] / 1e6, rates.front() / 1e6, rates.back() / 1e6);
  std::printf("  peak allocated %s, peak reserved %s (%.3fx)\n",
              format_bytes(static_cast<uint64_t>(r.peak_allocated)).c_str(),
              format_bytes(static_cast<uint64_t>(r.peak_reserved)).c_str(),
              static_cast<double>(r.peak_reserved) / static_cast<double>(r.peak_allocated));
  // The same trace with expandable segments, once (its speed and its peaks).
  const ReplayResult e = make_caching_policy("expandable_segments:True")->run(program, settings);
  check(e.ooms == 0 && e.peak_allocated == g.peak_allocated, "expandable: same allocated peak");
  std::printf("  expandable_segments:True: replay %.1f M events/s, peak reserved %s (%.3fx)\n",
              e.events_per_second() / 1e6,
              format_bytes(static_cast<uint64_t>(e.peak_reserved)).c_str(),
              static_cast<double>(e.peak_reserved) / static_cast<double>(e.peak_allocated));
  if (json != nullptr) {
    FILE* f = std::fopen(json, "w");
    if (f == nullptr) {
      std::fprintf(stderr, "bench_replay: cannot write %s\n", json);
      return 1;
    }
    std::fprintf(f,
                 "{\"benchmark\": \"replay\", \"events\": %zu, \"parse_events_per_s\": %.0f, "
                 "\"replay_events_per_s\": {\"median\": %.0f, \"min\": %.0f, \"max\": %.0f}, "
                 "\"expandable_events_per_s\": %.0f, \"peak_allocated\": %lld, "
                 "\"peak_reserved\": %lld, \"expandable_peak_reserved\": %lld}\n",
                 n, static_cast<double>(n) / parse_s, rates[2], rates.front(), rates.back(),
                 e.events_per_second(), static_cast<long long>(r.peak_allocated),
                 static_cast<long long>(r.peak_reserved), static_cast<long long>(e.peak_reserved));
    std::fclose(f);
  }
  return 0;
}
