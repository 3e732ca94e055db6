// The CPU's intra-op thread pool (cpu_parallel.h): threads - 1 workers and the
// calling thread run the chunks of one parallel_for at a time. A job is published
// under the pool's mutex with a new generation number; workers spin briefly on the
// generation, then sleep on a condition variable; chunks are claimed through an
// atomic index (which thread runs a chunk varies, its bounds do not) and counted done
// through another, on which the caller spins briefly before it sleeps. Also
// ember::set_num_threads / get_num_threads and the BLAS switch.
#include "core/kernels/cpu_parallel.h"

#include <algorithm>
#include <atomic>
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

class Pool {
 public:
  // Runs the job on `threads` threads (the caller included), or returns false
  // when another caller holds the pool.
  bool run(int threads, int64_t n, int64_t chunks, detail::ChunkFn fn, void* ctx) {
    std::unique_lock<std::mutex> own(caller_, std::try_to_lock);
    if (!own.owns_lock()) return false;
    resize(std::max(threads, get_num_threads()) - 1);
    {
      std::unique_lock<std::mutex> lk(m_);
      idle_.wait(lk, [&] { return active_ == 0; });  // no worker still reads the last job
      fn_ = fn;
      ctx_ = ctx;
      n_ = n;
      chunks_ = chunks;
      done_.store(0, std::memory_order_relaxed);
      next_.store(0, std::memory_order_relaxed);
      generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
    work(fn, ctx, n, chunks);
    // The workers' chunks are usually done within microseconds of the caller's: a
    // short spin saves the sleep and the wake (a futex round trip each way), which
    // cost as much as a 512x256 softmax's half.
    for (int i = 0; i < 2000 && done_.load(std::memory_order_acquire) != chunks; ++i)
      std::this_thread::yield();
    if (done_.load(std::memory_order_acquire) != chunks) {
      std::unique_lock<std::mutex> lk(m_);
      finished_.wait(lk, [&] { return done_.load(std::memory_order_acquire) == chunks; });
    }
    return true;
  }

 private:
  // Claims and runs chunks of the current job until none is left.
  void work(detail::ChunkFn fn, void* ctx, int64_t n, int64_t chunks) {
    const bool was = t_in_chunk;
    t_in_chunk = true;
    int64_t ran = 0;
    for (int64_t c = next_.fetch_add(1); c < chunks; c = next_.fetch_add(1), ++ran) {
      const auto [b, e] = chunk_bounds(n, chunks, c);
      fn(ctx, c, b, e);
    }
    t_in_chunk = was;
    // The chunks' writes are released to the caller, which acquires done_. The last
    // one notifies under the mutex, so a caller about to sleep cannot miss it.
    if (ran > 0 && done_.fetch_add(ran, std::memory_order_acq_rel) + ran == chunks) {
      std::lock_guard<std::mutex> lk(m_);
      finished_.notify_all();
    }
  }

  void worker_loop() {
    uint64_t seen = generation_.load(std::memory_order_acquire);
    for (;;) {
      // A short spin first: back-to-back ops hand off without a sleep and wake.
      for (int i = 0; i < 1000 && generation_.load(std::memory_order_acquire) == seen; ++i)
        std::this_thread::yield();
      detail::ChunkFn fn;
      void* ctx;
      int64_t n, chunks;
      {
        std::unique_lock<std::mutex> lk(m_);
        wake_.wait(lk, [&] { return stop_ || generation_.load() != seen; });
        if (stop_) return;
        seen = generation_.load();
        fn = fn_;
        ctx = ctx_;
        n = n_;
        chunks = chunks_;
        ++active_;
      }
      work(fn, ctx, n, chunks);
      std::lock_guard<std::mutex> lk(m_);
      if (--active_ == 0) idle_.notify_all();
    }
  }

  void resize(int workers) {  // with caller_ held: no job in flight
    if (static_cast<int>(workers_.size()) == workers) return;
    {
      std::lock_guard<std::mutex> lk(m_);
      stop_ = true;
    }
    wake_.notify_all();
    for (std::thread& t : workers_) t.join();
    workers_.clear();
    stop_ = false;
    for (int i = 0; i < workers; ++i) workers_.emplace_back([this] { worker_loop(); });
  }

  std::mutex caller_;  // held by the one caller whose job runs
  std::mutex m_;
  std::condition_variable wake_, finished_, idle_;
  std::vector<std::thread> workers_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int64_t> next_{0};
  detail::ChunkFn fn_ = nullptr;
  void* ctx_ = nullptr;
  int64_t n_ = 0, chunks_ = 0;
  std::atomic<int64_t> done_{0};
  int active_ = 0;
  bool stop_ = false;
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
