#include "core/profiler.h"

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <ostream>
#include <sstream>

#include "core/alloc_site.h"
#include "core/base/alloc_tag.h"
#include "core/base/error.h"
#include "core/base/json_text.h"
#include "core/kernel_table.h"

namespace ember::profiler {

namespace {

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct RawSpan {
  const char* name = nullptr;
  const char* tag = nullptr;
  const char* scope = nullptr;
  int64_t start_ns = 0;
  int64_t end_ns = -1;
  uint64_t bytes_at_start = 0;
  int64_t bytes = 0;
  int64_t dev_begin = -1;
  int64_t dev_end = -1;
  int32_t parent = -1;
  int32_t depth = 0;
  bool user = false;
};

// One thread's spans in one profile. Only its thread adds to it; the lock is
// uncontended but when stop() reads it.
struct ThreadBuffer {
  std::mutex mutex;
  uint32_t generation = 0;
  int thread = 0;
  int64_t origin_ns = 0;
  bool memory = true;
  const kernels::DeviceHooks* timer = nullptr;  // device timing, when on
  const kernels::DeviceHooks* nvtx = nullptr;   // NVTX ranges, when on
  std::vector<RawSpan> spans;
  std::vector<int32_t> open;  // indices of the open spans, innermost last
};

struct Session {
  uint32_t generation = 0;
  int64_t origin_ns = 0;
  bool memory = true;
  const kernels::DeviceHooks* timer = nullptr;
  const kernels::DeviceHooks* nvtx = nullptr;
  std::vector<std::shared_ptr<ThreadBuffer>> buffers;
};

std::mutex g_mutex;
Session* g_session = nullptr;  // guarded by g_mutex
// Which profile spans belong to; changes at every start and stop, so a span
// begun in a finished profile is never attributed to the next one.
std::atomic<uint32_t> g_generation{0};
std::atomic<int> g_next_thread{0};
thread_local std::shared_ptr<ThreadBuffer> t_buffer;
thread_local int t_thread = -1;

constexpr uint32_t kGenerationMask = 0x7fffffffu;

ThreadBuffer* attach(uint32_t generation) noexcept {
  try {
    std::lock_guard lock(g_mutex);
    if (g_session == nullptr || g_session->generation != generation) return nullptr;
    auto buffer = std::make_shared<ThreadBuffer>();
    if (t_thread < 0) t_thread = g_next_thread.fetch_add(1, std::memory_order_relaxed);
    buffer->generation = generation;
    buffer->thread = t_thread;
    buffer->origin_ns = g_session->origin_ns;
    buffer->memory = g_session->memory;
    buffer->timer = g_session->timer;
    buffer->nvtx = g_session->nvtx;
    buffer->spans.reserve(1024);
    g_session->buffers.push_back(buffer);
    t_buffer = std::move(buffer);
    return t_buffer.get();
  } catch (...) {
    return nullptr;
  }
}

const kernels::DeviceHooks& cuda_hooks() {
  return kernels::table(DeviceType::CUDA).hooks;
}

}  // namespace

namespace detail {

int64_t begin_span(const char* name, bool user) noexcept {
  const uint32_t generation = g_generation.load(std::memory_order_acquire);
  ThreadBuffer* b = t_buffer.get();
  if (b == nullptr || b->generation != generation) {
    b = attach(generation);
    if (b == nullptr) return -1;
  }
  RawSpan s;
  s.name = name;
  s.user = user;
  s.tag = AllocationTag::current();
  s.scope = AllocationScope::current();
  // The device event first, the clock after: the event's cost stays out of the span.
  if (b->timer != nullptr) s.dev_begin = b->timer->timing_event();
  if (b->memory) s.bytes_at_start = requested_bytes_on_thread();
  s.start_ns = steady_ns() - b->origin_ns;
  int64_t index = 0;
  {
    std::lock_guard lock(b->mutex);
    s.parent = b->open.empty() ? -1 : b->open.back();
    s.depth = static_cast<int32_t>(b->open.size());
    index = static_cast<int64_t>(b->spans.size());
    if (index > INT32_MAX) return -1;
    try {
      b->open.reserve(b->open.size() + 1);
      b->spans.push_back(s);
      b->open.push_back(static_cast<int32_t>(index));
    } catch (...) {
      return -1;
    }
  }
  if (b->nvtx != nullptr) b->nvtx->range_push(name);
  return (static_cast<int64_t>(generation & kGenerationMask) << 32) | index;
}

void end_span(int64_t handle) noexcept {
  const uint32_t generation = static_cast<uint32_t>(handle >> 32);
  const auto index = static_cast<int32_t>(handle & 0xffffffff);
  ThreadBuffer* b = t_buffer.get();
  if (b == nullptr || (b->generation & kGenerationMask) != generation) return;
  // The clock first, the device event after (as begin_span, mirrored).
  const int64_t end = steady_ns() - b->origin_ns;
  const uint64_t bytes = b->memory ? requested_bytes_on_thread() : 0;
  const int64_t dev = b->timer != nullptr ? b->timer->timing_event() : -1;
  if (b->nvtx != nullptr) b->nvtx->range_pop();
  std::lock_guard lock(b->mutex);
  if (static_cast<size_t>(index) >= b->spans.size()) return;
  RawSpan& s = b->spans[static_cast<size_t>(index)];
  if (s.end_ns >= 0) return;  // stop() closed it already
  s.end_ns = end;
  s.dev_end = dev;
  if (b->memory) s.bytes = static_cast<int64_t>(bytes - s.bytes_at_start);
  auto it = std::find(b->open.rbegin(), b->open.rend(), index);
  if (it != b->open.rend()) b->open.erase(std::next(it).base());
}

}  // namespace detail

// =================================================================================
// Profile

Profile::Profile(ProfileOptions options) : options_(options) {
  const kernels::DeviceHooks& cuda = cuda_hooks();
  const bool has_timer = cuda.timing_event != nullptr && cuda.count != nullptr;
  const bool timing = options_.record_device_time && has_timer && cuda.count() > 0;
  if (!options_.record_device_time)
    device_timing_ = "off: record_device_time is false";
  else if (!timing)
    device_timing_ = "off: no CUDA device";
  else
    device_timing_ = "CUDA events";
  auto session = std::make_unique<Session>();
  session->memory = options_.record_memory;
  session->timer = timing ? &cuda : nullptr;
  session->nvtx = options_.nvtx && cuda.range_push != nullptr ? &cuda : nullptr;
  {
    std::lock_guard lock(g_mutex);
    EMBER_CHECK(g_session == nullptr,
                "profiler::Profile: another profile is running; stop it first (one at a time "
                "per process)");
    if (timing) {
      cuda.timing_reset();
      start_mark_ = cuda.timing_event();
    }
    origin_ns_ = steady_ns();
    session->origin_ns = origin_ns_;
    session->generation = (g_generation.load(std::memory_order_relaxed) + 1) & kGenerationMask;
    g_session = session.release();
    g_generation.store(g_session->generation, std::memory_order_release);
    detail::g_active.store(true, std::memory_order_release);
  }
  running_ = true;
}

Profile::~Profile() {
  try {
    stop();
  } catch (...) {
    // A destructor never throws; stop() only fails when host memory runs out.
  }
}

void Profile::stop() {
  if (!running_) return;
  running_ = false;
  std::unique_ptr<Session> session;
  {
    std::lock_guard lock(g_mutex);
    detail::g_active.store(false, std::memory_order_release);
    g_generation.store((g_session->generation + 1) & kGenerationMask, std::memory_order_release);
    session.reset(g_session);
    g_session = nullptr;
  }
  wall_ns_ = steady_ns() - origin_ns_;
  std::sort(session->buffers.begin(), session->buffers.end(),
            [](const auto& a, const auto& b) { return a->thread < b->thread; });
  std::vector<std::pair<int64_t, int64_t>> marks;  // device events of each event
  for (const auto& buffer : session->buffers) {
    std::lock_guard lock(buffer->mutex);
    const auto offset = static_cast<int64_t>(events_.size());
    for (RawSpan& s : buffer->spans) {
      if (s.end_ns < 0) s.end_ns = wall_ns_;  // still open: it ends with the profile
      ProfileEvent e;
      e.name = s.name;
      e.user = s.user;
      e.thread = buffer->thread;
      e.depth = s.depth;
      e.parent = s.parent < 0 ? -1 : offset + s.parent;
      e.start_ns = s.start_ns;
      e.end_ns = s.end_ns;
      e.bytes = s.bytes;
      e.tag = s.tag;
      e.scope = s.scope;
      events_.push_back(e);
      marks.emplace_back(s.dev_begin, s.dev_end);
    }
  }
  const kernels::DeviceHooks* timer = session->timer;
  if (timer == nullptr) return;
  for (size_t i = 0; i < events_.size(); ++i) {
    const auto [begin, end] = marks[i];
    if (begin < 0 || end < 0) continue;
    const double ms = timer->timing_elapsed_ms(begin, end);
    if (std::isnan(ms)) continue;
    events_[i].device_us = ms * 1000.0;
    const double from_start = timer->timing_elapsed_ms(start_mark_, begin);
    if (!std::isnan(from_start)) events_[i].device_start_us = from_start * 1000.0;
  }
  timer->timing_reset();
}

void Profile::check_stopped(const char* what) const {
  EMBER_CHECK(!running_, "profiler::Profile::", what,
              ": the profile is still running; call stop() first");
}

const std::vector<ProfileEvent>& Profile::events() const {
  check_stopped("events");
  return events_;
}

int64_t Profile::wall_ns() const {
  check_stopped("wall_ns");
  return wall_ns_;
}

const std::string& Profile::device_timing() const {
  return device_timing_;
}

bool Profile::device_time_measured() const {
  return device_timing_ == "CUDA events";
}

std::vector<KeyAverage> Profile::key_averages() const {
  check_stopped("key_averages");
  // Children's host time, device time and bytes, for the self columns.
  std::vector<double> child_host(events_.size(), 0), child_device(events_.size(), 0);
  std::vector<int64_t> child_bytes(events_.size(), 0);
  double top_device = 0;
  for (const ProfileEvent& e : events_) {
    const double dev = e.device_us > 0 ? e.device_us : 0;
    if (e.parent < 0) {
      top_device += dev;
      continue;
    }
    const auto p = static_cast<size_t>(e.parent);
    child_host[p] += e.host_us();
    child_device[p] += dev;
    child_bytes[p] += e.bytes;
  }
  std::map<std::string, KeyAverage> rows;
  for (size_t i = 0; i < events_.size(); ++i) {
    const ProfileEvent& e = events_[i];
    KeyAverage& r = rows[e.name != nullptr ? e.name : "?"];
    const double dev = e.device_us > 0 ? e.device_us : 0;
    ++r.calls;
    r.host_total_us += e.host_us();
    r.host_self_us += std::max(0.0, e.host_us() - child_host[i]);
    r.device_total_us += dev;
    r.device_self_us += std::max(0.0, dev - child_device[i]);
    r.bytes += e.bytes;
    r.self_bytes += e.bytes - child_bytes[i];
  }
  const bool by_device = device_time_measured() && top_device > 0;
  std::vector<KeyAverage> out;
  out.reserve(rows.size());
  for (auto& [name, r] : rows) {
    r.op = name;
    r.share = by_device ? r.device_total_us / top_device
                        : (wall_ns_ > 0 ? r.host_total_us * 1000.0 / wall_ns_ : 0);
    out.push_back(std::move(r));
  }
  std::stable_sort(out.begin(), out.end(), [by_device](const KeyAverage& a, const KeyAverage& b) {
    if (by_device && a.device_total_us != b.device_total_us)
      return a.device_total_us > b.device_total_us;
    return a.host_total_us > b.host_total_us;
  });
  return out;
}

std::string Profile::table(std::string_view sort_by, size_t row_limit) const {
  check_stopped("table");
  std::vector<KeyAverage> rows = key_averages();
  auto by = [&](auto key) {
    std::stable_sort(rows.begin(), rows.end(),
                     [&](const KeyAverage& a, const KeyAverage& b) { return key(a) > key(b); });
  };
  if (sort_by == "device") {
    // key_averages' own order
  } else if (sort_by == "host") {
    by([](const KeyAverage& r) { return r.host_total_us; });
  } else if (sort_by == "self_host") {
    by([](const KeyAverage& r) { return r.host_self_us; });
  } else if (sort_by == "calls") {
    by([](const KeyAverage& r) { return static_cast<double>(r.calls); });
  } else if (sort_by == "bytes") {
    by([](const KeyAverage& r) { return static_cast<double>(r.bytes); });
  } else {
    EMBER_CHECK(false, "profiler::Profile::table: sort_by \"", sort_by,
                "\" is not one of device, host, self_host, calls, bytes");
  }
  if (row_limit > 0 && rows.size() > row_limit) rows.resize(row_limit);
  size_t width = 24;
  for (const KeyAverage& r : rows) width = std::max(width, std::min<size_t>(r.op.size(), 48));
  std::ostringstream out;
  char line[256];
  std::snprintf(line, sizeof line, "%-*s %7s %12s %12s %12s %12s %12s %7s\n",
                static_cast<int>(width), "op", "calls", "host total", "host self", "device total",
                "device self", "bytes", "share");
  out << line;
  out << std::string(std::strlen(line) - 1, '-') << "\n";
  const bool dev = device_time_measured();
  auto us = [](double v) {
    char b[32];
    if (v >= 10000)
      std::snprintf(b, sizeof b, "%.2fms", v / 1000);
    else
      std::snprintf(b, sizeof b, "%.1fus", v);
    return std::string(b);
  };
  for (const KeyAverage& r : rows) {
    std::string name = r.op.size() > width ? r.op.substr(0, width - 3) + "..." : r.op;
    std::snprintf(line, sizeof line,
                  "%-*s %7" PRId64 " %12s %12s %12s %12s %12" PRId64 " %6.1f%%\n",
                  static_cast<int>(width), name.c_str(), r.calls, us(r.host_total_us).c_str(),
                  us(r.host_self_us).c_str(), dev ? us(r.device_total_us).c_str() : "-",
                  dev ? us(r.device_self_us).c_str() : "-", r.bytes, 100.0 * r.share);
    out << line;
  }
  std::snprintf(line, sizeof line, "wall %.3f ms; %zu spans; device time: %s; share of %s\n",
                static_cast<double>(wall_ns_) / 1e6, events_.size(), device_timing_.c_str(),
                dev ? "the top-level spans' device time" : "the wall time");
  out << line;
  return out.str();
}

namespace {

void write_us(std::ostream& out, double us) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.3f", us);
  out << buf;
}

void write_span(std::ostream& out, const ProfileEvent& e, int pid, double ts_us, double dur_us) {
  out << ",\n{\"name\":";
  write_json_string(out, e.name);
  out << ",\"cat\":\"" << (e.user ? "user" : "op") << "\",\"ph\":\"X\",\"pid\":" << pid
      << ",\"tid\":" << e.thread << ",\"ts\":";
  write_us(out, ts_us);
  out << ",\"dur\":";
  write_us(out, dur_us);
  out << ",\"args\":{\"bytes\":" << e.bytes << ",\"depth\":" << e.depth;
  if (e.tag != nullptr) {
    out << ",\"tag\":";
    write_json_string(out, e.tag);
  }
  if (e.scope != nullptr) {
    out << ",\"scope\":";
    write_json_string(out, e.scope);
  }
  if (e.device_us >= 0) {
    out << ",\"device_us\":";
    write_us(out, e.device_us);
  }
  out << "}}";
}

void write_process(std::ostream& out, int pid, const std::string& name, bool first = false) {
  if (!first) out << ",\n";
  out << "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" << pid
      << ",\"tid\":0,\"args\":{\"name\":";
  write_json_string(out, name.c_str());
  out << "}}";
}

// The memory history's counters within [0, wall] on the profile's axis, each
// opened at 0 with the value it had when the profile began.
void write_memory(std::ostream& out, const memory::MemorySnapshot& snap, int64_t origin_ns,
                  int64_t wall_ns) {
  const int pid = 2;
  write_process(
      out, pid,
      snap.host ? "ember CPU memory" : "ember CUDA:" + std::to_string(snap.device) + " memory");
  int64_t before[2] = {-1, -1};  // allocated, reserved
  bool opened = false;
  auto counter = [&](const char* name, double ts_us, int64_t bytes) {
    out << ",\n{\"name\":\"" << name << "\",\"ph\":\"C\",\"pid\":" << pid << ",\"tid\":0,\"ts\":";
    write_us(out, ts_us);
    out << ",\"args\":{\"bytes\":" << bytes << "}}";
  };
  for (const memory::TraceEntry& e : snap.trace) {
    const int64_t t = snap.clock_origin_ns + e.time_ns - origin_ns;
    if (t > wall_ns) break;
    if (e.action == memory::TraceAction::free_completed || e.action == memory::TraceAction::oom)
      continue;
    if (t < 0) {
      before[0] = e.allocated_bytes;
      before[1] = e.reserved_bytes;
      continue;
    }
    if (!opened) {
      opened = true;
      if (before[0] >= 0) {
        counter("allocated", 0, before[0]);
        counter("reserved", 0, before[1]);
      }
    }
    if (e.action == memory::TraceAction::step) {
      out << ",\n{\"name\":";
      write_json_string(out, e.tag != nullptr ? e.tag : "step");
      out << ",\"cat\":\"step\",\"ph\":\"i\",\"s\":\"g\",\"pid\":" << pid << ",\"tid\":0,\"ts\":";
      write_us(out, static_cast<double>(t) / 1000.0);
      out << "}";
      continue;
    }
    counter("allocated", static_cast<double>(t) / 1000.0, e.allocated_bytes);
    counter("reserved", static_cast<double>(t) / 1000.0, e.reserved_bytes);
  }
}

}  // namespace

void Profile::export_chrome_trace(std::ostream& out, const memory::MemorySnapshot* history) const {
  check_stopped("export_chrome_trace");
  out << "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  write_process(out, 0, "ember host", true);
  const bool dev = device_time_measured();
  if (dev) write_process(out, 1, "ember device (CUDA events, per host thread's stream)");
  int last_thread = -1;
  for (const ProfileEvent& e : events_) {
    if (e.thread != last_thread) {
      last_thread = e.thread;
      for (int pid = 0; pid < (dev ? 2 : 1); ++pid)
        out << ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":" << pid
            << ",\"tid\":" << e.thread << ",\"args\":{\"name\":\"thread " << e.thread << "\"}}";
    }
    write_span(out, e, 0, static_cast<double>(e.start_ns) / 1000.0, e.host_us());
    if (e.device_us >= 0 && e.device_start_us >= 0)
      write_span(out, e, 1, e.device_start_us, e.device_us);
  }
  if (history != nullptr) write_memory(out, *history, origin_ns_, wall_ns_);
  out << "\n]}\n";
}

void Profile::export_chrome_trace(const std::string& path,
                                  const memory::MemorySnapshot* history) const {
  check_stopped("export_chrome_trace");
  std::ofstream file(path);
  EMBER_CHECK(file.good(), "profiler::Profile::export_chrome_trace: cannot open \"", path,
              "\" for writing");
  export_chrome_trace(file, history);
  file.flush();
  EMBER_CHECK(file.good(), "profiler::Profile::export_chrome_trace: failed writing \"", path, "\"");
}

// =================================================================================
// RecordFunction

RecordFunction::RecordFunction(std::string_view name) {
  EMBER_CHECK(!name.empty(), "profiler::RecordFunction: the name is empty");
  if (!detail::g_active.load(std::memory_order_relaxed)) return;
  handle_ = detail::begin_span(intern_site_name(name), true);
}

RecordFunction::~RecordFunction() {
  if (handle_ >= 0) detail::end_span(handle_);
}

}  // namespace ember::profiler
