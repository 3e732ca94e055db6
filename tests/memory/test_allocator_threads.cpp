// The caching allocator under concurrent use, on the simulated backend: threads
// allocate, write, check, free and record streams at once while another holds and
// releases a stream (events pending and completing) and a third reads statistics
// and snapshots and empties the cache. No block may be handed to two owners (each
// owner's bytes are checked before it frees them), and at the end, every stream
// released and the cache emptied, the statistics must balance exactly against
// what the threads counted. Under make test-tsan this is also the allocator's
// data-race test.
#include <doctest/doctest.h>

#include <atomic>
#include <cstdint>
#include <latch>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "core/memory/caching_allocator.h"

namespace {

using namespace ember::memory;

constexpr size_t kMiB = size_t{1} << 20;
constexpr int kWorkers = 4;
constexpr int kIterations = 1500;
constexpr int kStreams = 4;
constexpr size_t kMaxLive = 24;

cudaStream_t stream(int i) {
  return reinterpret_cast<cudaStream_t>(static_cast<uintptr_t>(i + 1) * 0x1000);
}

struct Live {
  unsigned char* ptr;
  size_t bytes;
  unsigned char mark;
};

// What one worker did, to balance the allocator's statistics against.
struct Tally {
  int64_t allocations = 0;
  int64_t rounded_bytes = 0;
  int64_t requested_bytes = 0;
  int corrupted = 0;  // blocks whose bytes another owner changed
};

// Small (most), medium and large requests, as a training step makes them.
size_t pick_size(std::mt19937& rng) {
  const unsigned r = rng() % 100;
  if (r < 70) return 1 + rng() % (256 * 1024);
  if (r < 95) return kMiB + rng() % (4 * kMiB);
  return 10 * kMiB + rng() % (6 * kMiB);
}

// Blocks start on 512-byte boundaries, so two blocks that overlap share one: a
// mark every 512 bytes (and on the last byte) shows another owner's writes.
void put_marks(const Live& l) {
  for (size_t i = 0; i < l.bytes; i += 512) l.ptr[i] = l.mark;
  l.ptr[l.bytes - 1] = l.mark;
}
bool intact(const Live& l) {
  for (size_t i = 0; i < l.bytes; i += 512)
    if (l.ptr[i] != l.mark) return false;
  return l.ptr[l.bytes - 1] == l.mark;
}

}  // namespace

TEST_CASE("allocator/threads: concurrent allocate, free and record_stream balance exactly") {
  auto owned = std::make_unique<SimulatedBackend>(size_t{4} << 30);
  SimulatedBackend& sim = *owned;
  CachingAllocator a(std::move(owned));
  std::vector<Tally> tallies(kWorkers);
  std::atomic<int> workers_left{kWorkers};
  std::latch start(kWorkers + 2);

  auto worker = [&](int id) {
    std::mt19937 rng(1234u + static_cast<unsigned>(id));
    Tally& tally = tallies[static_cast<size_t>(id)];
    std::vector<Live> live;
    unsigned char mark = static_cast<unsigned char>(id * 50 + 1);
    start.arrive_and_wait();
    for (int it = 0; it < kIterations; ++it) {
      // 40% allocate, 20% record a stream, 40% free; at most kMaxLive blocks held.
      const unsigned op = rng() % 10;
      if ((op < 4 && live.size() < kMaxLive) || live.empty()) {
        const size_t bytes = pick_size(rng);
        const cudaStream_t s = stream(static_cast<int>(rng() % kStreams));
        auto* p = static_cast<unsigned char*>(a.allocate(bytes, s));
        mark = static_cast<unsigned char>(mark + 1 == 0 ? 1 : mark + 1);
        live.push_back({p, bytes, mark});
        put_marks(live.back());
        ++tally.allocations;
        tally.rounded_bytes +=
            static_cast<int64_t>(CachingAllocator::round_size(bytes, a.options()));
        tally.requested_bytes += static_cast<int64_t>(bytes);
      } else if (op < 6) {
        // Used on another stream too: freed, it waits for that stream's event.
        const Live& l = live[rng() % live.size()];
        a.record_stream(l.ptr, stream(static_cast<int>(rng() % kStreams)));
      } else {
        const size_t i = rng() % live.size();
        if (!intact(live[i])) ++tally.corrupted;
        a.deallocate(live[i].ptr);
        live[i] = live.back();
        live.pop_back();
      }
    }
    for (const Live& l : live) {
      if (!intact(l)) ++tally.corrupted;
      a.deallocate(l.ptr);
    }
    workers_left.fetch_sub(1);
  };

  // Holds the last stream for a while, then lets its events complete, until the
  // workers are done: blocks freed meanwhile wait as pending frees.
  auto holder = [&] {
    start.arrive_and_wait();
    int rounds = 0;
    while (workers_left.load() > 0) {
      sim.hold(stream(kStreams - 1));
      std::this_thread::yield();
      sim.release(stream(kStreams - 1));
      ++rounds;
    }
    CHECK(rounds > 0);
  };
  // Reads what a user would while training runs, and empties the cache now and then.
  auto observer = [&] {
    start.arrive_and_wait();
    int reads = 0;
    while (workers_left.load() > 0) {
      const auto stats = a.memory_stats();
      CHECK(stats.at("allocated_bytes.all.current") <= stats.at("reserved_bytes.all.current"));
      (void)a.memory_snapshot();
      if (++reads % 8 == 0) a.empty_cache();
    }
  };

  std::vector<std::thread> threads;
  for (int id = 0; id < kWorkers; ++id) threads.emplace_back(worker, id);
  threads.emplace_back(holder);
  threads.emplace_back(observer);
  for (std::thread& t : threads) t.join();

  Tally total;
  for (const Tally& t : tallies) {
    total.allocations += t.allocations;
    total.rounded_bytes += t.rounded_bytes;
    total.requested_bytes += t.requested_bytes;
    total.corrupted += t.corrupted;
  }
  CHECK(total.corrupted == 0);
  a.empty_cache();  // every stream released: waits for the last events, returns every segment
  const auto s = a.memory_stats();
  CHECK(s.at("allocation.all.allocated") == total.allocations);
  CHECK(s.at("allocation.all.freed") == total.allocations);
  CHECK(s.at("allocation.all.current") == 0);
  // A block handed out whole (its remainder too small to split off) counts its full
  // size, as in PyTorch: at least the rounded requests, and every byte freed again.
  CHECK(s.at("allocated_bytes.all.allocated") >= total.rounded_bytes);
  CHECK(s.at("allocated_bytes.all.freed") == s.at("allocated_bytes.all.allocated"));
  CHECK(s.at("requested_bytes.all.allocated") == total.requested_bytes);
  CHECK(s.at("requested_bytes.all.freed") == total.requested_bytes);
  CHECK(s.at("allocated_bytes.all.current") == 0);
  CHECK(s.at("active_bytes.all.current") == 0);
  CHECK(s.at("active.all.current") == 0);
  CHECK(s.at("inactive_split.all.current") == 0);
  CHECK(s.at("reserved_bytes.all.current") == 0);
  CHECK(s.at("segment.all.current") == 0);
  CHECK(s.at("segment.all.allocated") == s.at("segment.all.freed"));
  CHECK(s.at("num_device_alloc") == s.at("num_device_free"));
  CHECK(s.at("num_ooms") == 0);
  CHECK(sim.used() == 0);
  CHECK(sim.raw_alloc_calls() == sim.raw_free_calls());
  CHECK(static_cast<int64_t>(sim.raw_alloc_calls()) == s.at("num_device_alloc"));
}
