// Internal to the CPU kernels: the intra-op thread pool behind ember::set_num_threads
// (core/threads.h). parallel_for splits [0, n) into fixed chunks (their bounds depend
// only on n, the grain and the thread count, never on timing), runs them on the pool's
// workers and the calling thread, and returns when all are done. Below two grains of
// work, or when called from inside a chunk or while another caller holds the pool, it
// runs f(0, n) on the calling thread: tiny tensors pay no hand-off, nested and
// concurrent calls never deadlock.
#pragma once

#include <cstdint>
#include <type_traits>
#include <utility>

namespace ember::kernels::cpu {

// Elements below which an element-wise loop stays on the calling thread (per chunk:
// a chunk has at least this many).
inline constexpr int64_t kElementwiseGrain = 32768;

// How many chunks parallel_for(n, grain) uses with the current thread count.
int64_t chunk_count(int64_t n, int64_t grain);
// Bounds of chunk c of `chunks` over [0, n).
inline std::pair<int64_t, int64_t> chunk_bounds(int64_t n, int64_t chunks, int64_t c) {
  return {n * c / chunks, n * (c + 1) / chunks};
}

namespace detail {
using ChunkFn = void (*)(void* ctx, int64_t chunk, int64_t begin, int64_t end);
// Runs fn(ctx, c, begin_c, end_c) for every chunk c of `chunks` over [0, n).
void run_chunks(int64_t n, int64_t chunks, ChunkFn fn, void* ctx);
}  // namespace detail

// f(begin, end) over fixed chunks of [0, n), each at least `grain` long (but one).
template <typename F>
void parallel_for(int64_t n, int64_t grain, F&& f) {
  if (n <= 0) return;
  const int64_t chunks = chunk_count(n, grain);
  if (chunks <= 1) {
    f(int64_t{0}, n);
    return;
  }
  auto call = [](void* ctx, int64_t, int64_t b, int64_t e) {
    (*static_cast<std::remove_reference_t<F>*>(ctx))(b, e);
  };
  detail::run_chunks(n, chunks, call, &f);
}

// f(chunk, begin, end) over the chunks of chunk_count(n, grain) (partial results
// indexed by chunk, combined by the caller in chunk order: deterministic).
template <typename F>
void parallel_chunks(int64_t n, int64_t chunks, F&& f) {
  if (n <= 0) return;
  if (chunks <= 1) {
    f(int64_t{0}, int64_t{0}, n);
    return;
  }
  auto call = [](void* ctx, int64_t c, int64_t b, int64_t e) {
    (*static_cast<std::remove_reference_t<F>*>(ctx))(c, b, e);
  };
  detail::run_chunks(n, chunks, call, &f);
}

// Whether the CPU kernels take their fast paths: the BLAS matrix product, the
// float32 softmax and the fused layer norm (false: the reference loops, the
// oracle tests compare with). EMBER_CPU_REFERENCE=1 in the environment starts it
// false; tests flip it. have_blas: ember was built with OpenBLAS.
bool fast_paths();
bool have_blas();
void set_fast_paths(bool on);

}  // namespace ember::kernels::cpu
