// Replaying allocator traces (trace.h) through allocator policies, to ask "what
// if": what would this run have reserved with expandable segments, with
// max_split_size_mb:128, under cudaMallocAsync; how small a device would it fit.
//
// A trace is first compiled (ReplayProgram::compile): every row is checked (a free
// of an unknown address, an alloc over a live block, a free whose size differs from
// its alloc's, a free_completed without its free_requested: an ember::Error naming
// the row's line) and addresses become dense slots, so a replay is an array walk.
// A replay keeps the trace's order and streams: each block is allocated on its
// stream; a block whose free_completed comes later than its free_requested (with
// allocations in between) stays unusable until then, as it was in the recorded run.
// A run of segment_free rows is replayed as empty_cache() (the recording allocator
// returned its cache there; see ReplayOptions).
//
// Policies on the replay's simulated backend (ReplayBackend: a device of a set
// capacity whose segments are addresses only, with no host memory behind them, so
// a 100 GiB trace replays on a laptop) replay a trace deterministically: the same
// trace and options give the same numbers on any machine, and the smallest
// capacity a trace fits is found by bisection (find_min_capacity). Policies on a
// real GPU live in cuda/replay_policies.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/base/cuda_handles.h"
#include "core/memory/alloc_config.h"
#include "core/memory/backends.h"
#include "core/memory/caching_allocator.h"
#include "core/memory/trace.h"

namespace ember::memory {

// A simulated device for replays: raw_alloc hands out addresses from a counter
// (never dereferenced: the caching allocator only does arithmetic on them) while
// the segments fit the capacity. Events recorded on a held stream stay incomplete
// until it is released. Virtual memory (expandable segments) is modelled the
// same way: reservations are address ranges, mapped pages count against the
// capacity. Refuses fill/read (sanitizer mode), which need memory.
// Single-threaded, as a replay is.
class ReplayBackend final : public Backend {
 public:
  explicit ReplayBackend(uint64_t capacity);

  uint64_t used() const { return used_; }
  uint64_t capacity() const { return capacity_; }
  void hold(cudaStream_t stream);
  void release(cudaStream_t stream);

  void* raw_alloc(size_t bytes) override;
  void raw_free(void* ptr) noexcept override;
  MemoryInfo memory_info() override;
  EventHandle create_event() override;
  void record_event(EventHandle event, cudaStream_t stream) override;
  bool query_event(EventHandle event) override;
  void synchronize_event(EventHandle event) override;
  void destroy_event(EventHandle event) noexcept override;
  void fill(void* ptr, unsigned char value, size_t bytes, cudaStream_t stream) override;
  void read(void* host_dst, const void* ptr, size_t bytes, cudaStream_t stream) override;
  bool supports_virtual_memory(std::string* why = nullptr) override;
  size_t granularity() override { return kGranularity; }
  void* reserve_address_space(size_t bytes) override;
  bool map_pages(void* ptr, size_t bytes) override;
  void unmap_pages(void* ptr, size_t bytes) noexcept override;
  void release_address_space(void* base, size_t bytes) noexcept override;

  static constexpr size_t kGranularity = size_t{2} << 20;  // a CUDA GPU's page

 private:
  uint64_t take_addresses(uint64_t bytes);

  struct Event {
    cudaStream_t stream = nullptr;
    bool complete = true;
  };
  uint64_t capacity_;
  uint64_t used_ = 0;
  uint64_t next_address_;
  std::unordered_map<uintptr_t, uint64_t> sizes_;
  std::vector<Event> events_;       // id - 1
  std::vector<cudaStream_t> held_;  // few at once
};

struct ReplayOptions {
  // Replay each run of segment_free rows as one empty_cache() call. With it off,
  // segment rows are ignored entirely.
  bool empty_cache_at_segment_free = true;
};

// One step of a replay. Slots number the blocks live at once (dense, reused).
enum class ReplayOpKind : uint8_t {
  alloc,          // slot := allocate(size, stream)
  free,           // deallocate(slot); reusable at once
  free_deferred,  // deallocate(slot), reusable only at its `complete`
  complete,       // the deferred free of slot completes
  empty_cache,
  nop,  // a row with nothing to replay (segment_alloc, a merged free_completed)
};

struct ReplayOp {
  uint64_t size = 0;  // requested bytes (alloc)
  uint32_t slot = 0;
  uint32_t stream = 0;  // index into ReplayProgram::streams()
  ReplayOpKind kind = ReplayOpKind::nop;
};

class ReplayProgram {
 public:
  // Throws ember::Error naming the row (Trace::where) of the first inconsistent
  // one. Rows stay one op each, so op i is trace row i.
  static ReplayProgram compile(Trace trace, const ReplayOptions& options = {});

  const Trace& trace() const { return trace_; }
  const std::vector<ReplayOp>& ops() const { return ops_; }
  const std::vector<uint64_t>& streams() const { return streams_; }  // trace stream ids
  size_t slots() const { return slots_; }
  size_t allocs() const { return allocs_; }
  uint64_t largest_request() const { return largest_request_; }
  size_t largest_request_event() const { return largest_request_event_; }
  uint64_t peak_live_requested() const { return peak_live_requested_; }  // sum of sizes
  // What the recording allocator reserved, from the segment rows: the peak of
  // (segment_alloc bytes - segment_free bytes), or nullopt when the trace has no
  // segment rows or frees a segment it never allocated (recording began later).
  std::optional<uint64_t> recorded_peak_reserved() const { return recorded_peak_reserved_; }

 private:
  Trace trace_;
  std::vector<ReplayOp> ops_;
  std::vector<uint64_t> streams_;
  size_t slots_ = 0;
  size_t allocs_ = 0;
  uint64_t largest_request_ = 0;
  size_t largest_request_event_ = 0;
  uint64_t peak_live_requested_ = 0;
  std::optional<uint64_t> recorded_peak_reserved_;
};

// The first request a policy could not satisfy, and the state at that moment.
struct ReplayFailure {
  size_t event = 0;             // index into the trace's events
  uint64_t size = 0;            // requested bytes
  uint64_t stream = 0;          // the trace's stream id
  uint64_t live_requested = 0;  // bytes requested by the blocks live just before it
  int64_t allocated = 0;        // the allocator's allocated and reserved bytes then
  int64_t reserved = 0;
  std::string message;  // the OutOfMemoryError's text
};

struct ReplayResult {
  std::string policy;
  std::string skipped;    // non-empty: the policy did not run, and why
  uint64_t capacity = 0;  // the device capacity it ran with
  int64_t peak_allocated = 0;
  int64_t peak_reserved = 0;
  int64_t peak_segments = -1;  // -1: the policy has no segments to count
  int64_t retries = -1;        // backend failures answered by freeing the cache
  int64_t ooms = 0;            // requests that failed (the replay skips them and goes on)
  // At the first moment reserved memory reached its peak: 1 - largest free block /
  // free bytes cached (0 when nothing was cached); -1 when not measured.
  double fragmentation = -1;
  int64_t largest_free_at_peak = -1;
  int64_t free_cached_at_peak = -1;
  size_t events = 0;               // events replayed (all of them unless stopped at an OOM)
  size_t peak_reserved_event = 0;  // the alloc after which reserved memory first peaked
  double seconds = 0;              // wall time of the replay proper (no parsing)
  double cpu_seconds = 0;          // the replaying thread's CPU time over the same span
  std::optional<ReplayFailure> first_failure;
  std::optional<uint64_t> min_capacity;  // find_min_capacity's answer
  std::string min_capacity_note;         // why there is none ("real device", ...)

  // Per CPU-second of the replaying thread (a loaded machine does not distort it;
  // on an idle one it equals the wall-clock rate).
  double events_per_second() const {
    return cpu_seconds > 0 ? static_cast<double>(events) / cpu_seconds : 0;
  }
};

struct RunSettings {
  uint64_t capacity = kUnlimitedCapacity;
  bool stop_at_first_oom = false;     // bisection only asks "does it fit"
  bool measure_fragmentation = true;  // costs a second, partial replay
  // "Unlimited": 1 PiB, far above any device, yet leaving room in a 64-bit address
  // space for many reservations of that size (expandable segments reserve a
  // capacity and an eighth of address space each).
  static constexpr uint64_t kUnlimitedCapacity = uint64_t{1} << 50;
};

// A policy: a way to serve the trace's requests. run() never throws for an
// out-of-memory (it counts it); it throws ember::Error for what it cannot do.
class ReplayPolicy {
 public:
  virtual ~ReplayPolicy() = default;
  virtual std::string name() const = 0;
  // Non-empty when the policy cannot run here (no GPU, an option this build lacks).
  virtual std::string unavailable() const { return {}; }
  // True when it runs on the simulated backend: deterministic, bisectable.
  virtual bool simulated() const = 0;
  virtual ReplayResult run(const ReplayProgram& program, const RunSettings& settings) = 0;
};

// ember's caching allocator with `options` on a ReplayBackend of the run's capacity.
// Throws ember::Error for sanitizer mode (its guards need memory).
std::unique_ptr<ReplayPolicy> make_caching_policy(std::string name, AllocatorOptions options);
// The policy named by an EMBER_CUDA_ALLOC_CONF string ("" or "native": defaults;
// "expandable_segments:True", "max_split_size_mb:128,roundup_power2_divisions:4", ...).
// An option this build does not support gives a policy that reports itself unavailable.
std::unique_ptr<ReplayPolicy> make_caching_policy(const std::string& conf);
// The simulated default set: native and expandable segments.
std::vector<std::unique_ptr<ReplayPolicy>> default_simulated_policies();
// Whether this build's allocator takes expandable_segments:True (and why not).
bool expandable_segments_supported(std::string* why_not = nullptr);

// Replays `program` through an existing allocator, the core every caching policy
// shares. `streams` maps the program's stream indices to the streams to allocate
// on. With `events` (the allocator's ReplayBackend), a deferred free is held by a
// marker stream until its completion row; without it (a real device, whose events
// complete on their own), the deallocate itself waits for that row. Stops after
// event `last` (inclusive) when given. Fragmentation is not measured here.
ReplayResult replay_through(const ReplayProgram& program, CachingAllocator& allocator,
                            const std::vector<cudaStream_t>& streams, ReplayBackend* events,
                            const RunSettings& settings, std::optional<size_t> last = {});
// CPU time of the calling thread, in seconds (CLOCK_THREAD_CPUTIME_ID).
double thread_cpu_seconds();
// Fragmentation of an allocator's cache now (see ReplayResult::fragmentation),
// from its snapshot: {largest free block, free bytes cached}.
std::pair<int64_t, int64_t> free_cache_shape(const CachingAllocator& allocator);

// The smallest capacity, a multiple of `granularity` (segments are multiples of
// 2 MiB, so at that granularity the answer is exact for policies whose decisions
// do not depend on the capacity), on which `policy` replays `program` with no
// OOM, found by bisection between 0 and `upper` (a capacity known to fit, such as
// an unlimited run's peak reserved; doubled until it fits if it does not).
// nullopt when even 2^50 bytes do not fit. Assumes fitting is monotone in the
// capacity (garbage_collection_threshold, which acts on a fraction of it, may
// break that: the answer is then one capacity that fits, with none below it
// found by bisection).
std::optional<uint64_t> find_min_capacity(ReplayPolicy& policy, const ReplayProgram& program,
                                          uint64_t upper, uint64_t granularity = uint64_t{2} << 20);

// The table ember-replay prints for one trace.
struct ReplayTableOptions {
  bool markdown = false;
  bool show_capacity = false;  // the run used a set capacity (first failures are listed)
};
std::string format_replay_table(const ReplayProgram& program,
                                const std::vector<ReplayResult>& results,
                                const ReplayTableOptions& options = {});

// --- The out-of-memory suggestion: CachingAllocator's advisor when none is set
// (caching_allocator.h); suggest_options_for_oom does the work.
struct OomReplayInput {
  std::vector<TraceEntry> history;  // the allocator's recent history, oldest first (may be empty)
  std::vector<LiveBlock> live;      // blocks allocated or pending at the failure
  uint64_t request = 0;             // the requested bytes that failed
  uint64_t stream = 0;
  uint64_t capacity = 0;     // what the allocator could hold: reserved + device free
  AllocatorOptions options;  // the allocator's own
};
// When a replay of the history with the allocator's own options reproduces the
// failure and one with another option (expandable segments, a max_split_size_mb,
// roundup_power2_divisions) completes, a line naming the option(s); else "".
// Never throws. Without history it cannot tell and returns "".
std::string suggest_options_for_oom(const OomReplayInput& input);
// True on a thread that is running a replay: its allocators' OOMs do not ask for
// suggestions (which would replay again).
bool replay_in_progress();
// suggest_options_for_oom as an OutOfMemoryAdvisor: the history, the request's
// live blocks, its requested bytes and stream, and a capacity of the reserved
// bytes at the failure (the history's last entry) plus the backend's free bytes.
std::optional<std::string> replay_out_of_memory_advisor(const std::vector<TraceEntry>& history,
                                                        const OutOfMemoryRequest& request);

}  // namespace ember::memory
