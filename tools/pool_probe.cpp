// Standalone probe (issue 30): what one parallel job costs at 1..N threads, on the
// CPU pool ember ships (core/kernels/cpu_parallel.cpp, compiled into this probe) and
// on OpenMP (the runtime libtorch's CPU kernels use), for a 512x256 and a 64x256
// float32 layer norm (the second mostly hand-off) (bench_cpu's layer_norm shape: about 30 us at 16
// threads on the GPU machine's host, 2.3x libtorch's, at bd2d314).
//
// Build (seconds; no CMake, no ember library):
//   g++ -O2 -march=native -std=c++20 -fopenmp -I. tools/pool_probe.cpp
//       core/base/error.cpp -o /tmp/pool_probe -lpthread   (one line)
// Run: /tmp/pool_probe [threads...]   (default 1 2 4 8 16, capped at nothing)
//   POOL_PROBE_REPS=7 repetitions, each the median of POOL_PROBE_CALLS=2000 calls' mean
//   over 10 batches. Variants alternate within each repetition (ember, omp).
//   POOL_PROBE_SKIP_OMP=1 runs the OpenMP column on one thread (for a -fsanitize=thread
//   build of the two pools: libgomp is not instrumented).
// Every variant's layer-norm output is compared bit for bit with a one-thread run
// before any time is printed (the rows are the same arithmetic on every thread).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <omp.h>

#include "core/kernels/cpu_parallel.cpp"  // ember's pool, as shipped

namespace {

using ember::kernels::cpu::chunk_bounds;
using ChunkFn = void (*)(void*, int64_t, int64_t, int64_t);

constexpr int64_t kRows = 512, kCols = 256;

// 16 partial sums per row (a fixed order: the same bits on every thread), so that GCC
// vectorises the row as ember's cpu_vec.h loops are (about 70 us for 512x256 on one
// thread of the host, as ember's layer norm there).
void layer_norm_rows(const float* x, const float* w, const float* b, float* y, int64_t r0,
                     int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    const float* xr = x + r * kCols;
    float* yr = y + r * kCols;
    float s[16] = {};
    for (int64_t c = 0; c < kCols; c += 16)
      for (int l = 0; l < 16; ++l) s[l] += xr[c + l];
    float sum = 0.f;
    for (float v : s) sum += v;
    const float mean = sum / kCols;
    float q[16] = {};
    for (int64_t c = 0; c < kCols; c += 16)
      for (int l = 0; l < 16; ++l) q[l] += (xr[c + l] - mean) * (xr[c + l] - mean);
    float var = 0.f;
    for (float v : q) var += v;
    const float rstd = 1.f / std::sqrt(var / kCols + 1e-5f);
    for (int64_t c = 0; c < kCols; ++c) yr[c] = (xr[c] - mean) * rstd * w[c] + b[c];
  }
}

double now_us() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> counts;
  for (int i = 1; i < argc; ++i) counts.push_back(std::atoi(argv[i]));
  if (counts.empty()) counts = {1, 2, 4, 8, 16};
  for (int t : counts)
    if (t < 1 || t > 1024) {
      std::fprintf(stderr, "pool_probe: thread counts are 1..1024, got %d\n", t);
      return 2;
    }
  const int reps =
      std::max(1, std::atoi(std::getenv("POOL_PROBE_REPS") ? std::getenv("POOL_PROBE_REPS") : "7"));
  const int calls = std::max(
      10, std::atoi(std::getenv("POOL_PROBE_CALLS") ? std::getenv("POOL_PROBE_CALLS") : "2000"));

  const bool skip_omp = std::getenv("POOL_PROBE_SKIP_OMP") != nullptr;
  std::vector<float> x(kRows * kCols), w(kCols), b(kCols), ref(kRows * kCols), y(kRows * kCols);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * i) * 3.f + 0.01f * (i % 17);
  for (int64_t c = 0; c < kCols; ++c) w[c] = 1.f + 0.001f * c, b[c] = 0.01f * (c % 5);
  layer_norm_rows(x.data(), w.data(), b.data(), ref.data(), 0, kRows);

  // Every variant splits the 512 rows into `threads` equal chunks (chunk_bounds).
  std::printf(
      "# pool_probe: %u hardware threads; per call, us: median over %d repetitions (min-max)\n",
      std::thread::hardware_concurrency(), reps);
  std::printf("| threads | job | ember pool | OpenMP | ember / OpenMP |\n");
  std::printf("|---|---|---|---|---|\n");
  for (int t : counts) {
    ember::set_num_threads(t);
    omp_set_num_threads(t);
    struct Ctx {
      const float *x, *w, *b;
      float* y;
    } ctx{x.data(), w.data(), b.data(), y.data()};
    for (const int64_t rows : {int64_t{512}, int64_t{64}}) {  // 512x256, then 64x256
      auto body = [&](int64_t r0, int64_t r1) {
        layer_norm_rows(ctx.x, ctx.w, ctx.b, ctx.y, r0, r1);
      };
      auto run_ember = [&] {
        ember::kernels::cpu::parallel_chunks(
            rows, t, [&](int64_t, int64_t r0, int64_t r1) { body(r0, r1); });
      };
      auto run_omp = [&] {
        if (skip_omp) return body(0, rows);  // under TSan: libgomp is not instrumented
#pragma omp parallel num_threads(t)
        {
          const int i = omp_get_thread_num(), n = omp_get_num_threads();
          const auto [r0, r1] = chunk_bounds(rows, n, i);
          body(r0, r1);
        }
      };
      // Validate each variant's output first.
      {
        const char* names[] = {"ember", "omp"};
        for (int v = 0; v < 2; ++v) {
          std::fill(y.begin(), y.end(), -1.f);
          v == 0 ? run_ember() : run_omp();
          if (std::memcmp(y.data(), ref.data(), rows * kCols * sizeof(float)) != 0 ||
              (rows < kRows && y[rows * kCols] != -1.f)) {
            std::fprintf(stderr, "pool_probe: %s at %d threads differs from the one-thread rows\n",
                         names[v], t);
            return 1;
          }
        }
      }
      std::vector<double> per[2];
      for (int r = 0; r < reps; ++r)
        for (int v = 0; v < 2; ++v) {
          auto once = [&] { v == 0 ? run_ember() : run_omp(); };
          // The other runtime's idle threads spin for a while after its last job (ember's
          // for 0.5 ms, libgomp's for its GOMP_SPINCOUNT): let them fall asleep first, or
          // on a machine without a free core for each they take this variant's cores.
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
          for (int i = 0; i < calls / 10; ++i) once();  // warm
          std::vector<double> batches;
          for (int k = 0; k < 10; ++k) {
            const double s = now_us();
            for (int i = 0; i < calls / 10; ++i) once();
            batches.push_back((now_us() - s) / (calls / 10));
          }
          std::nth_element(batches.begin(), batches.begin() + 5, batches.end());
          per[v].push_back(batches[5]);
        }
      double med[2];
      char cell[2][64];
      for (int v = 0; v < 2; ++v) {
        std::sort(per[v].begin(), per[v].end());
        med[v] = per[v][per[v].size() / 2];
        std::snprintf(cell[v], sizeof cell[v], "%.2f (%.2f-%.2f)", med[v], per[v].front(),
                      per[v].back());
      }
      std::printf("| %d | %s | %s | %s | %.2fx |\n", t,
                  rows == kRows ? "layer_norm 512x256" : "layer_norm 64x256", cell[0], cell[1],
                  med[0] / med[1]);
      std::fflush(stdout);
    }
  }
  return 0;
}
