// The CPU's intra-op thread pool (cpu_parallel.h): threads - 1 workers and the
// calling thread run the chunks of one parallel_for at a time. The job lives on the
// caller's stack and is published through one atomic pointer and a generation
// number: no mutex on the hand-off. A worker announces itself (inside_) before it
// reads the pointer, and the caller clears the pointer and waits for inside_ to drain
// before it returns, so no worker touches a finished job. Workers spin on the
// generation (pause, then yield) for a bounded time, then sleep on a condition
// variable; the caller takes the mutex to wake them only when one sleeps. Chunks are
// claimed through an atomic index (which thread runs a chunk varies, its bounds do
// not) and counted done through another, on which the caller spins likewise before
// it sleeps. Also ember::set_num_threads / get_num_threads and the BLAS switch.
#include "core/kernels/cpu_parallel.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/base/error.h"
#include "core/threads.h"

namespace ember {

namespace {

int env_threads(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return 0;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  return end && *end == '\0' && n >= 1 && n <= 4096 ? static_cast<int>(n) : 0;
}

int default_threads() {
  if (int n = env_threads("EMBER_NUM_THREADS")) return n;
  if (int n = env_threads("OMP_NUM_THREADS")) return n;
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

std::atomic<int>& threads_setting() {
  static std::atomic<int> n{default_threads()};
  return n;
}

}  // namespace

void set_num_threads(int n) {
  EMBER_CHECK(n >= 1, "set_num_threads: the thread count must be at least 1, got ", n);
  threads_setting().store(n);
}

int get_num_threads() {
  return threads_setting().load();
}

}  // namespace ember

namespace ember::kernels::cpu {

namespace {

thread_local bool t_in_chunk = false;  // inside a chunk (a worker or the caller)

using Clock = std::chrono::steady_clock;

// One CPU-friendly wait step: the pause instruction where there is one.
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Spins until ready() or `spin` has passed: pauses for the first `pause`, then
// yields the core (so an oversubscribed machine, as CI's two cores under ctest -j,
// loses little to it). Returns ready()'s last answer. The hand-off between
// back-to-back ops (a few microseconds apart) is caught while pausing; a futex sleep
// and wake cost tens of microseconds, as much as a 512x256 layer norm on 16 threads.
template <typename Ready>
bool spin_until(Ready&& ready, std::chrono::microseconds pause, std::chrono::microseconds spin) {
  if (ready()) return true;
  const Clock::time_point start = Clock::now(), pause_end = start + pause, end = start + spin;
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (ready()) return true;
      cpu_relax();
    }
    const Clock::time_point now = Clock::now();
    if (now >= end) return ready();
    if (now >= pause_end) std::this_thread::yield();
  }
}

constexpr std::chrono::microseconds kWorkerPause{50}, kWorkerSpin{500};
constexpr std::chrono::microseconds kCallerPause{50}, kCallerSpin{500};

class Pool {
 public:
  // Runs the job on `threads` threads (the caller included), or returns false
  // when another caller holds the pool.
  bool run(int threads, int64_t n, int64_t chunks, detail::ChunkFn fn, void* ctx) {
    std::unique_lock<std::mutex> own(caller_, std::try_to_lock);
    if (!own.owns_lock()) return false;
    resize(std::max(threads, get_num_threads()) - 1);
    Job job{fn, ctx, n, chunks};
    job_.store(&job);
    generation_.fetch_add(1);
    if (sleeping_.load() > 0) {
      // Under the mutex: a worker between its check of the generation and its
      // wait holds it, so it cannot miss this.
      std::lock_guard<std::mutex> lk(m_);
      wake_.notify_all();
    }
    work(job, /*caller=*/true);
    const auto all_done = [&] { return job.done.load() == chunks; };  // seq_cst: see work()
    if (!spin_until(all_done, kCallerPause, kCallerSpin)) {
      std::unique_lock<std::mutex> lk(m_);
      caller_sleeping_.store(true);
      finished_.wait(lk, all_done);
      caller_sleeping_.store(false);
    }
    // No worker may read the job once this returns: clear the pointer, then wait for
    // those that had announced themselves (each leaves after one pass over the
    // chunk index, which is past the end).
    job_.store(nullptr);
    while (inside_.load() != 0) std::this_thread::yield();
    return true;
  }

 private:
  struct Job {
    detail::ChunkFn fn;
    void* ctx;
    int64_t n, chunks;
    alignas(64) std::atomic<int64_t> next{0};
    alignas(64) std::atomic<int64_t> done{0};
  };

  // Claims and runs chunks of `job` until none is left.
  void work(Job& job, bool caller = false) {
    const bool was = t_in_chunk;
    t_in_chunk = true;
    int64_t ran = 0;
    for (int64_t c = job.next.fetch_add(1); c < job.chunks; c = job.next.fetch_add(1), ++ran) {
      const auto [b, e] = chunk_bounds(job.n, job.chunks, c);
      job.fn(job.ctx, c, b, e);
    }
    t_in_chunk = was;
    // The chunks' writes are released to the caller, which acquires done. The last
    // one wakes the caller if it sleeps: a caller that saw done short set
    // caller_sleeping_ before (seq_cst), so this sees it; the notify is under the
    // mutex, which the caller holds from its check until it waits.
    if (ran > 0 && job.done.fetch_add(ran) + ran == job.chunks && !caller &&
        caller_sleeping_.load()) {
      std::lock_guard<std::mutex> lk(m_);
      finished_.notify_all();
    }
  }

  void worker_loop(uint64_t seen) {
    for (;;) {
      const auto published = [&] { return generation_.load() != seen; };
      if (!spin_until(published, kWorkerPause, kWorkerSpin)) {
        std::unique_lock<std::mutex> lk(m_);
        sleeping_.fetch_add(1);
        wake_.wait(lk, published);
        sleeping_.fetch_sub(1);
      }
      if (stop_.load()) return;
      seen = generation_.load();
      inside_.fetch_add(1);
      // A newer job than `seen`, or none (its caller already cleared it): either is
      // safe, since that caller waits for inside_ to drain before it returns.
      if (Job* job = job_.load()) work(*job);
      inside_.fetch_sub(1);
    }
  }

  void resize(int workers) {  // with caller_ held: no job in flight
    if (static_cast<int>(workers_.size()) == workers) return;
    {
      std::lock_guard<std::mutex> lk(m_);
      stop_.store(true);
      generation_.fetch_add(1);
    }
    wake_.notify_all();
    for (std::thread& t : workers_) t.join();
    workers_.clear();
    stop_.store(false);
    for (int i = 0; i < workers; ++i)
      workers_.emplace_back([this, seen = generation_.load()] { worker_loop(seen); });
  }

  std::mutex caller_;  // held by the one caller whose job runs
  std::mutex m_;       // only for sleeping and waking
  std::condition_variable wake_, finished_;
  std::vector<std::thread> workers_;
  std::atomic<Job*> job_{nullptr};
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> inside_{0}, sleeping_{0};
  std::atomic<bool> stop_{false};
  std::atomic<bool> caller_sleeping_{false};  // set and cleared under m_
};

Pool& pool() {
  static Pool* p = new Pool;  // never destroyed: workers may outlive static destructors
  return *p;
}

std::atomic<bool>& blas_flag() {
  static std::atomic<bool> on{[] {
    const char* v = std::getenv("EMBER_CPU_REFERENCE");
    return !(v && *v && std::string(v) != "0");
  }()};
  return on;
}

}  // namespace

int64_t chunk_count(int64_t n, int64_t grain) {
  if (n <= 0) return 0;
  const int64_t by_size = grain > 0 ? n / grain : n;
  return std::max<int64_t>(1, std::min<int64_t>(get_num_threads(), by_size));
}

namespace detail {
void run_chunks(int64_t n, int64_t chunks, ChunkFn fn, void* ctx) {
  const int threads = static_cast<int>(std::min<int64_t>(get_num_threads(), chunks));
  if (threads > 1 && !t_in_chunk && pool().run(threads, n, chunks, fn, ctx)) return;
  for (int64_t c = 0; c < chunks; ++c) {  // the same chunks, in order, on this thread
    const auto [b, e] = chunk_bounds(n, chunks, c);
    fn(ctx, c, b, e);
  }
}
}  // namespace detail

bool fast_paths() {
  return blas_flag().load(std::memory_order_relaxed);
}
bool have_blas() {
#if EMBER_HAS_OPENBLAS
  return true;
#else
  return false;
#endif
}
void set_fast_paths(bool on) {
  blas_flag().store(on);
}

}  // namespace ember::kernels::cpu
