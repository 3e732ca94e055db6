// ember-replay: replays allocator traces (core/memory/trace.h: ember's history,
// or PyTorch's through tools/convert_torch_trace.py) through a set of allocator
// policies and prints one table per trace: peaks, segments, retries, OOMs,
// fragmentation at the peak, replay speed and the smallest device each policy fits.
//
//   ember-replay tests/data/traces/*.csv
//   ember-replay --max-split-size-mb 64,256 --capacity 40GiB trace.csv
//
// Exit status: 0 done, 1 a trace or option was bad (the message names it), 2 usage.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "core/base/error.h"
#include "core/memory/caching_allocator.h"
#include "core/memory/replay.h"
#include "core/memory/trace.h"
#include "cuda/replay_policies.h"
#include "cuda/runtime.h"

namespace {

using namespace ember;
using namespace ember::memory;

constexpr const char* kUsage = R"(usage: ember-replay [options] TRACE.csv...

Replays each trace through a set of allocator policies and prints one table per trace.
Default policies: native and expandable_segments:True on the simulated device, plus
cudaMallocAsync and ember's allocator on cudaMalloc when a GPU is present.

  --policies LIST          the base set, from: native, expandable, async, cuda
                           (comma-separated; "none" for only the variants below)
  --policy CONF            add a native variant given as an EMBER_CUDA_ALLOC_CONF string,
                           e.g. "max_split_size_mb:128,roundup_power2_divisions:4" (repeatable)
  --max-split-size-mb N[,N...]          add a variant per value
  --roundup-power2-divisions N[,N...]   add a variant per value
  --gc-threshold T[,T...]               add a variant per value (garbage_collection_threshold;
                                        it acts on a fraction of the capacity, so without
                                        --capacity only its min capacity differs from native)
  --capacity BYTES         run on a device of this capacity (K, M, G, KiB, MiB, GiB suffixes)
                           and name each policy's first failing event (default: unlimited)
  --no-min-capacity        skip the search for the smallest device each policy fits
  --ignore-segment-free    do not replay runs of segment_free rows as empty_cache()
  --markdown               print the tables as Markdown
  --device N               the GPU for the GPU policies (default 0)
  -h, --help
)";

[[noreturn]] void usage_error(const std::string& msg) {
  std::fprintf(stderr, "ember-replay: %s\n%s", msg.c_str(), kUsage);
  std::exit(2);
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, sep))
    if (!item.empty()) out.push_back(item);
  return out;
}

uint64_t parse_capacity(const std::string& text) {
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text.c_str(), &end);
  EMBER_CHECK(end != text.c_str() && errno == 0 && v > 0, "--capacity: \"", text,
              "\" is not a positive size");
  const std::string unit(end);
  double mult = 1;
  if (unit == "" || unit == "B")
    mult = 1;
  else if (unit == "K" || unit == "KiB")
    mult = 1024.0;
  else if (unit == "M" || unit == "MiB")
    mult = 1024.0 * 1024;
  else if (unit == "G" || unit == "GiB")
    mult = 1024.0 * 1024 * 1024;
  else if (unit == "T" || unit == "TiB")
    mult = 1024.0 * 1024 * 1024 * 1024;
  else
    EMBER_FAIL("--capacity: unknown unit \"", unit, "\" in \"", text,
               "\" (B, K, M, G, T or KiB, MiB, GiB, TiB)");
  const double bytes = v * mult;
  EMBER_CHECK(bytes < static_cast<double>(RunSettings::kUnlimitedCapacity), "--capacity: ", text,
              " is not below the 1 PiB the replay treats as unlimited");
  return static_cast<uint64_t>(bytes);
}

struct Args {
  std::vector<std::string> traces;
  std::vector<std::string> base;  // empty: the default set
  std::vector<std::string> variants;
  uint64_t capacity = RunSettings::kUnlimitedCapacity;
  bool min_capacity = true;
  bool markdown = false;
  bool ignore_segment_free = false;
  int device = 0;
};

Args parse_args(int argc, char** argv) {
  Args a;
  auto value = [&](int& i) -> std::string {
    if (i + 1 >= argc) usage_error(std::string(argv[i]) + " needs a value");
    return argv[++i];
  };
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (arg == "--policies") {
      a.base = split(value(i), ',');
      if (a.base.size() == 1 && a.base[0] == "none") a.base = {"none"};
    } else if (arg == "--policy") {
      a.variants.push_back(value(i));
    } else if (arg == "--max-split-size-mb") {
      for (const auto& v : split(value(i), ',')) a.variants.push_back("max_split_size_mb:" + v);
    } else if (arg == "--roundup-power2-divisions") {
      for (const auto& v : split(value(i), ','))
        a.variants.push_back("roundup_power2_divisions:" + v);
    } else if (arg == "--gc-threshold") {
      for (const auto& v : split(value(i), ','))
        a.variants.push_back("garbage_collection_threshold:" + v);
    } else if (arg == "--capacity") {
      a.capacity = parse_capacity(value(i));
    } else if (arg == "--no-min-capacity") {
      a.min_capacity = false;
    } else if (arg == "--ignore-segment-free") {
      a.ignore_segment_free = true;
    } else if (arg == "--markdown") {
      a.markdown = true;
    } else if (arg == "--device") {
      a.device = std::atoi(value(i).c_str());
    } else if (!arg.empty() && arg[0] == '-') {
      usage_error("unknown option " + arg);
    } else {
      a.traces.push_back(arg);
    }
  }
  if (a.traces.empty()) usage_error("no trace given");
  return a;
}

std::vector<std::unique_ptr<ReplayPolicy>> make_policies(const Args& a) {
  std::vector<std::unique_ptr<ReplayPolicy>> out;
  std::vector<std::string> base = a.base;
  if (base.empty()) {
    base = {"native", "expandable"};
    if (cuda::is_available()) base.insert(base.end(), {"async", "cuda"});
  }
  for (const std::string& b : base) {
    if (b == "none") continue;
    if (b == "native")
      out.push_back(make_caching_policy("native"));
    else if (b == "expandable")
      out.push_back(make_caching_policy("expandable_segments:True"));
    else if (b == "async")
      out.push_back(cuda::make_cuda_malloc_async_policy(a.device));
    else if (b == "cuda")
      out.push_back(cuda::make_cuda_caching_policy(a.device));
    else
      usage_error("unknown policy \"" + b + "\" in --policies (native, expandable, async, cuda)");
  }
  // A variant string is parsed here, so a typo fails before any replay.
  for (const std::string& v : a.variants) out.push_back(make_caching_policy(v));
  if (out.empty()) usage_error("no policy to run");
  return out;
}

int run(const Args& a) {
  std::vector<std::unique_ptr<ReplayPolicy>> policies = make_policies(a);
  ReplayOptions replay_options;
  replay_options.empty_cache_at_segment_free = !a.ignore_segment_free;
  bool first = true;
  for (const std::string& path : a.traces) {
    const ReplayProgram program = ReplayProgram::compile(read_trace_csv(path), replay_options);
    if (a.capacity < RunSettings::kUnlimitedCapacity) {
      const size_t need =
          CachingAllocator::round_size(program.largest_request(), AllocatorOptions{});
      EMBER_CHECK(
          a.capacity >= need, "--capacity ", format_bytes(a.capacity),
          " is smaller than one request: ", program.trace().where(program.largest_request_event()),
          " allocates ", format_bytes(program.largest_request()), ", which no policy can fit");
    }
    std::vector<ReplayResult> results;
    for (auto& policy : policies) {
      ReplayResult r;
      const std::string why = policy->unavailable();
      if (!why.empty()) {
        r.policy = policy->name();
        r.skipped = why;
        results.push_back(r);
        continue;
      }
      RunSettings settings;
      settings.capacity = a.capacity;
      r = policy->run(program, settings);
      if (a.min_capacity && policy->simulated()) {
        const uint64_t upper = r.ooms == 0
                                   ? static_cast<uint64_t>(r.peak_reserved)
                                   : std::max<uint64_t>(a.capacity, program.largest_request());
        r.min_capacity = find_min_capacity(*policy, program, upper);
        if (!r.min_capacity) r.min_capacity_note = "none up to 1 PiB";
      }
      results.push_back(std::move(r));
    }
    ReplayTableOptions table;
    table.markdown = a.markdown;
    table.show_capacity = a.capacity < RunSettings::kUnlimitedCapacity;
    if (!first) std::fputs("\n", stdout);
    first = false;
    std::fputs(format_replay_table(program, results, table).c_str(), stdout);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse_args(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ember-replay: %s\n", e.what());
    return 1;
  }
}
