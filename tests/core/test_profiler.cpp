// The profiler (core/profiler.h): spans nest as the ops call each other, the
// top-level spans cover the step, key_averages counts every call, bytes go to
// the op that asked for them, nothing is recorded while no profile runs, the
// Chrome trace parses back with its events (and the memory history on the same
// axis), user ranges appear, threads get their own spans; on CUDA, device times
// from the profiler's events agree with a measurement of the same call.
#include <doctest/doctest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/autograd.h"
#include "core/device_services.h"
#include "core/memory.h"
#include "core/ops.h"
#include "core/profiler.h"
#include "cuda/runtime.h"
#include "error_text.h"
#include "nn/json.h"

using namespace ember;
using ember::testing::contains;
using profiler::Profile;
using profiler::ProfileEvent;
using profiler::ProfileOptions;

namespace {

bool named(const ProfileEvent& e, const char* name) {
  return e.name != nullptr && std::strcmp(e.name, name) == 0;
}

int64_t count_named(const std::vector<ProfileEvent>& events, const char* name) {
  int64_t n = 0;
  for (const ProfileEvent& e : events) n += named(e, name);
  return n;
}

const profiler::KeyAverage* row_of(const std::vector<profiler::KeyAverage>& rows,
                                   const std::string& op) {
  for (const auto& r : rows)
    if (r.op == op) return &r;
  return nullptr;
}

const nn::json::Value* member(const nn::json::Value& v, const std::string& key) {
  for (const auto& m : v.members)
    if (m.key == key) return &m.value;
  return nullptr;
}

}  // namespace

TEST_CASE("profiler/spans: a composed op's inner ops have it as their parent") {
  Tensor pred = randn({4, 5}), target = randn({4, 5});
  Profile prof(ProfileOptions().device_time(false));
  Tensor loss = mse_loss(pred, target);
  prof.stop();
  const auto& ev = prof.events();
  int64_t outer = -1;
  for (size_t i = 0; i < ev.size(); ++i)
    if (named(ev[i], "mse_loss")) outer = static_cast<int64_t>(i);
  REQUIRE(outer >= 0);
  CHECK(ev[static_cast<size_t>(outer)].parent == -1);
  CHECK(ev[static_cast<size_t>(outer)].depth == 0);
  std::set<std::string> children;
  for (const ProfileEvent& e : ev) {
    if (e.parent != outer) continue;
    children.insert(e.name);
    CHECK(e.depth == 1);
    // Children lie within their parent, and carry the outer op's allocation tag.
    CHECK(e.start_ns >= ev[static_cast<size_t>(outer)].start_ns);
    CHECK(e.end_ns <= ev[static_cast<size_t>(outer)].end_ns);
    REQUIRE(e.tag != nullptr);
    CHECK(std::string(e.tag) == "mse_loss");
  }
  CHECK(children.count("sub") == 1);
  CHECK(children.count("mul") == 1);
  CHECK(children.count("mean") == 1);
  // Every parent index points at an earlier span of the same thread, one level up.
  for (const ProfileEvent& e : ev) {
    if (e.parent < 0) continue;
    REQUIRE(e.parent < static_cast<int64_t>(ev.size()));
    CHECK(ev[static_cast<size_t>(e.parent)].depth == e.depth - 1);
    CHECK(ev[static_cast<size_t>(e.parent)].thread == e.thread);
  }
}

TEST_CASE("profiler/spans: the top-level spans of a loop of ops sum to most of the step") {
  Tensor a = randn({256, 256}), b = randn({256, 256});
  Profile prof(ProfileOptions().device_time(false));
  for (int i = 0; i < 20; ++i) Tensor c = matmul(a, b);
  prof.stop();
  int64_t top = 0;
  for (const ProfileEvent& e : prof.events()) {
    CHECK(e.start_ns >= 0);
    CHECK(e.end_ns >= e.start_ns);
    CHECK(e.end_ns <= prof.wall_ns());
    if (e.parent < 0) top += e.end_ns - e.start_ns;
  }
  CHECK(top <= prof.wall_ns());
  // 20 products of 256x256 dominate the loop; the rest is the loop and frees.
  CHECK(top >= prof.wall_ns() / 2);
}

TEST_CASE("profiler/key_averages: calls are counted exactly, host totals add up") {
  Tensor a = randn({8}), b = randn({8});
  Profile prof(ProfileOptions().device_time(false));
  for (int i = 0; i < 10; ++i) Tensor c = add(a, b);
  for (int i = 0; i < 3; ++i) Tensor c = mul(a, b);
  prof.stop();
  const auto rows = prof.key_averages();
  const auto* add_row = row_of(rows, "add");
  const auto* mul_row = row_of(rows, "mul");
  REQUIRE(add_row != nullptr);
  REQUIRE(mul_row != nullptr);
  CHECK(add_row->calls == 10);
  CHECK(mul_row->calls == 3);
  double add_host = 0;
  for (const ProfileEvent& e : prof.events())
    if (named(e, "add")) add_host += e.host_us();
  CHECK(add_row->host_total_us == doctest::Approx(add_host));
  CHECK(add_row->host_self_us <= add_row->host_total_us + 1e-9);
  CHECK(add_row->device_total_us == 0);
  CHECK(add_row->share > 0);
  CHECK(add_row->share <= 1.0);
  const std::string table = prof.table("calls", 2);
  CHECK(table.find("add") != std::string::npos);
  CHECK(table.find("device time: off") != std::string::npos);
  CHECK(contains(ember::testing::error_of([&] { (void)prof.table("speed"); }),
                 "sort_by \"speed\" is not one of device, host, self_host, calls, bytes"));
}

TEST_CASE("profiler/memory: bytes go to the op that asked for them") {
  Tensor a = randn({100}), b = randn({100});
  Profile prof(ProfileOptions().device_time(false));
  Tensor c = add(a, b);
  Tensor d = sum(c);
  prof.stop();
  const auto& ev = prof.events();
  int64_t children_bytes = 0;
  for (size_t i = 0; i < ev.size(); ++i) {
    if (named(ev[i], "add")) {
      CHECK(ev[i].bytes == 100 * 4);  // its output, asked for by its inner "empty"
      REQUIRE(ev[i].tag != nullptr);
      CHECK(std::string(ev[i].tag) == "add");
    }
    if (ev[i].parent >= 0 && named(ev[static_cast<size_t>(ev[i].parent)], "add")) {
      children_bytes += ev[i].bytes;
      REQUIRE(ev[i].tag != nullptr);
      CHECK(std::string(ev[i].tag) == "add");  // the outermost op's tag
    }
  }
  CHECK(children_bytes == 100 * 4);
  const auto rows = prof.key_averages();
  const auto* add_row = row_of(rows, "add");
  REQUIRE(add_row != nullptr);
  CHECK(add_row->bytes == 400);
  CHECK(add_row->self_bytes == 0);  // its child allocated them
  const auto* sum_row = row_of(rows, "sum");
  REQUIRE(sum_row != nullptr);
  CHECK(sum_row->bytes >= 4);

  Profile quiet(ProfileOptions().device_time(false).memory(false));
  Tensor e = add(a, b);
  quiet.stop();
  for (const ProfileEvent& x : quiet.events()) CHECK(x.bytes == 0);
}

TEST_CASE("profiler/off: nothing is recorded outside a profile, a second at once is refused") {
  Tensor a = randn({8}), b = randn({8});
  {
    Profile prof(ProfileOptions().device_time(false));
    Tensor c = add(a, b);
    CHECK(contains(ember::testing::error_of([] { Profile second; }), "another profile is running"));
    CHECK(contains(ember::testing::error_of([&] { (void)prof.events(); }), "still running"));
    prof.stop();
    const auto n = prof.events().size();
    for (int i = 0; i < 5; ++i) Tensor d = add(a, b);  // after stop: not recorded
    CHECK(prof.events().size() == n);
    CHECK(count_named(prof.events(), "add") == 1);
  }
  CHECK_FALSE(profiler::detail::g_active.load());
  Profile next(ProfileOptions().device_time(false));
  next.stop();
  CHECK(next.events().empty());  // the ops between the two profiles left nothing
}

TEST_CASE("profiler/record_function: user ranges are spans holding the ops inside") {
  Tensor a = randn({8}).set_requires_grad(true), b = randn({8});
  Profile prof(ProfileOptions().device_time(false));
  {
    profiler::RecordFunction step("step");
    Tensor loss = sum(mul(a, b));
    {
      profiler::RecordFunction bw("backward pass");
      loss.backward();
    }
  }
  prof.stop();
  const auto& ev = prof.events();
  int64_t step = -1, bw = -1;
  for (size_t i = 0; i < ev.size(); ++i) {
    if (named(ev[i], "step")) step = static_cast<int64_t>(i);
    if (named(ev[i], "backward pass")) bw = static_cast<int64_t>(i);
  }
  REQUIRE(step >= 0);
  REQUIRE(bw >= 0);
  CHECK(ev[static_cast<size_t>(step)].user);
  CHECK(ev[static_cast<size_t>(step)].parent == -1);
  CHECK(ev[static_cast<size_t>(bw)].parent == step);
  // Backward nodes are spans too, under the range that ran backward.
  bool saw_mul_backward = false;
  for (const ProfileEvent& e : ev) {
    if (!named(e, "MulBackward")) continue;
    saw_mul_backward = true;
    CHECK_FALSE(e.user);
    CHECK(e.parent == bw);
  }
  CHECK(saw_mul_backward);
  CHECK(count_named(ev, "sum") >= 1);
  CHECK(contains(ember::testing::error_of([] { profiler::RecordFunction r(""); }),
                 "the name is empty"));
}

TEST_CASE("profiler/threads: each thread's spans nest on their own") {
  Tensor a = randn({8}), b = randn({8});
  Profile prof(ProfileOptions().device_time(false));
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t)
    threads.emplace_back([&] {
      profiler::RecordFunction r("worker");
      for (int i = 0; i < 4; ++i) Tensor c = add(a, b);
    });
  for (auto& t : threads) t.join();
  prof.stop();
  const auto& ev = prof.events();
  CHECK(count_named(ev, "worker") == 3);
  CHECK(count_named(ev, "add") == 12);
  std::set<int> ids;
  for (const ProfileEvent& e : ev) {
    if (named(e, "worker")) ids.insert(e.thread);
    if (named(e, "add")) {
      REQUIRE(e.parent >= 0);
      CHECK(named(ev[static_cast<size_t>(e.parent)], "worker"));
      CHECK(ev[static_cast<size_t>(e.parent)].thread == e.thread);
    }
  }
  CHECK(ids.size() == 3);
}

TEST_CASE("profiler/chrome_trace: valid JSON with a span per event and the memory counters") {
  Tensor a = randn({64}), b = randn({64});
  memory::CachingAllocator& host = caching_allocator(kCPU);
  host.record_memory_history(true);
  Profile prof(ProfileOptions().device_time(false));
  {
    profiler::RecordFunction r("step \"one\"");  // quotes must be escaped
    for (int i = 0; i < 3; ++i) Tensor c = add(a, b);
  }
  prof.stop();
  const memory::MemorySnapshot snap = host.memory_snapshot();
  host.record_memory_history(false);
  std::ostringstream out;
  prof.export_chrome_trace(out, &snap);
  const nn::json::Value doc = nn::json::parse(out.str(), "profile trace");
  const nn::json::Value* events = member(doc, "traceEvents");
  REQUIRE(events != nullptr);
  REQUIRE(events->is_array());
  int64_t spans = 0, adds = 0, counters = 0, user = 0;
  for (const nn::json::Value& e : events->items) {
    const nn::json::Value* ph = member(e, "ph");
    const nn::json::Value* name = member(e, "name");
    REQUIRE(ph != nullptr);
    REQUIRE(name != nullptr);
    REQUIRE(member(e, "pid") != nullptr);
    if (ph->text == "X") {
      ++spans;
      REQUIRE(member(e, "ts") != nullptr);
      REQUIRE(member(e, "dur") != nullptr);
      REQUIRE(member(e, "tid") != nullptr);
      CHECK(std::stod(member(e, "ts")->text) >= 0);
      adds += name->text == "add";
      user += name->text == "step \"one\"";
    }
    if (ph->text == "C") {
      ++counters;
      const double ts = std::stod(member(e, "ts")->text);
      CHECK(ts >= 0);
      CHECK(ts <= static_cast<double>(prof.wall_ns()) / 1000.0 + 1e-3);
      const nn::json::Value* args = member(e, "args");
      REQUIRE(args != nullptr);
      CHECK(member(*args, "bytes") != nullptr);
    }
  }
  CHECK(spans == static_cast<int64_t>(prof.events().size()));
  CHECK(adds == 3);
  CHECK(user == 1);
  CHECK(counters >= 6);  // three outputs allocated and freed, each moving "allocated"
  CHECK(contains(
      ember::testing::error_of([&] { prof.export_chrome_trace("/nonexistent-dir/x/trace.json"); }),
      "cannot open"));
}

TEST_CASE("profiler/device: device time is off without a CUDA device or when not asked") {
  Profile prof(ProfileOptions().device_time(false));
  Tensor c = add(randn({4}), randn({4}));
  prof.stop();
  CHECK_FALSE(prof.device_time_measured());
  for (const ProfileEvent& e : prof.events()) CHECK(e.device_us == -1);
  if (!cuda::is_available()) {
    Profile asked;  // device time asked for, but there is no device
    asked.stop();
    CHECK(asked.device_timing() == "off: no CUDA device");
  }
}

TEST_SUITE("cuda") {
  TEST_CASE("profiler/cuda: device times are positive and a matmul's agrees with CUDA events") {
    const int64_t n = 1024;
    Tensor a = randn({n, n}, kCUDA), b = randn({n, n}, kCUDA);
    for (int i = 0; i < 3; ++i) Tensor w = matmul(a, b);  // warm-up (handles, workspaces)
    synchronize(kCUDA);
    // The reference: CUDA events around the same call, outside any profile.
    cuda::Event e0, e1;
    double ref_ms = 1e30;
    for (int i = 0; i < 5; ++i) {
      e0.record(cuda::current_stream(0));
      Tensor c = matmul(a, b);
      e1.record(cuda::current_stream(0));
      e1.synchronize();
      ref_ms = std::min<double>(ref_ms, e0.elapsed_ms(e1));
    }
    Profile prof;
    for (int i = 0; i < 5; ++i) {
      profiler::RecordFunction r("iteration");
      Tensor c = matmul(a, b);
    }
    prof.stop();
    REQUIRE(prof.device_time_measured());
    CHECK(prof.device_timing() == "CUDA events");
    double best_us = 1e30;
    double last_device_start = -1;
    for (const ProfileEvent& e : prof.events()) {
      REQUIRE(e.device_us >= 0);
      if (!named(e, "matmul")) continue;
      CHECK(e.device_us > 0);
      best_us = std::min(best_us, e.device_us);
      // In host order on the stream: each matmul starts after the previous one began.
      CHECK(e.device_start_us >= 0);
      CHECK(e.device_start_us >= last_device_start);
      last_device_start = e.device_start_us;
      // Its parent's device span encloses it.
      REQUIRE(e.parent >= 0);
      const ProfileEvent& p = prof.events()[static_cast<size_t>(e.parent)];
      CHECK(p.device_us >= e.device_us);
    }
    // A 1024^3 product is about 2 GFLOP; the two measurements see the same kernels,
    // so they agree within a generous factor (the profiler's events add only the
    // launch gaps of the span).
    CHECK(best_us > 0.25 * ref_ms * 1000.0);
    CHECK(best_us < 4.0 * ref_ms * 1000.0 + 50.0);
    const auto rows = prof.key_averages();
    REQUIRE_FALSE(rows.empty());
    const auto* mm = row_of(rows, "matmul");
    REQUIRE(mm != nullptr);
    CHECK(mm->calls == 5);
    CHECK(mm->device_total_us > 0);
    CHECK(mm->share > 0.5);  // the products are most of the step's device time
    CHECK(mm->share <= 1.0 + 1e-9);
    std::ostringstream out;
    prof.export_chrome_trace(out);
    const nn::json::Value doc = nn::json::parse(out.str(), "cuda profile trace");
    int64_t device_spans = 0;
    for (const nn::json::Value& e : member(doc, "traceEvents")->items)
      if (member(e, "ph")->text == "X" && member(e, "pid")->text == "1") ++device_spans;
    CHECK(device_spans == static_cast<int64_t>(prof.events().size()));
  }

  TEST_CASE("profiler/cuda: with NVTX ranges on, every span still gets its device time") {
    Tensor a = randn({64}, kCUDA), b = randn({64}, kCUDA);
    Profile prof(ProfileOptions().with_nvtx(true));
    for (int i = 0; i < 4; ++i) Tensor c = add(a, b);
    prof.stop();
    CHECK(count_named(prof.events(), "add") == 4);
    for (const ProfileEvent& e : prof.events()) CHECK(e.device_us >= 0);
  }
}
