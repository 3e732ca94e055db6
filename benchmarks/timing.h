// What every kernel benchmark shares: "is there a GPU", CUDA-event timing (warm-up,
// then the median of many runs), a results table printed as it fills, and the
// same rows written as JSON with --json FILE.
#pragma once

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>

#include "cuda/check.h"
#include "cuda/runtime.h"

namespace bench {

// The median of repeated measurements and their range (min, max): a reader
// compares two medians only where the ranges say the difference is real.
struct Spread {
  double median = 0, min = 0, max = 0;
};
inline Spread spread_of(std::vector<double> v) {
  if (v.empty()) return {};
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v.front(), v.back()};
}

// Milliseconds of f() over `iters` runs after `warmup`, each bracketed by events on
// `stream` (f must launch on it): the median and range, or the median alone.
template <typename F>
Spread spread_ms(F&& f, int warmup, int iters, cudaStream_t stream = nullptr) {
  for (int i = 0; i < warmup; ++i) f();
  cudaEvent_t start, stop;
  EMBER_CUDA_CHECK(cudaEventCreate(&start));
  EMBER_CUDA_CHECK(cudaEventCreate(&stop));
  std::vector<double> ms;
  for (int i = 0; i < iters; ++i) {
    EMBER_CUDA_CHECK(cudaEventRecord(start, stream));
    f();
    EMBER_CUDA_CHECK(cudaEventRecord(stop, stream));
    EMBER_CUDA_CHECK(cudaEventSynchronize(stop));
    float t = 0;
    EMBER_CUDA_CHECK(cudaEventElapsedTime(&t, start, stop));
    ms.push_back(t);
  }
  EMBER_CUDA_CHECK(cudaEventDestroy(start));
  EMBER_CUDA_CHECK(cudaEventDestroy(stop));
  return spread_of(std::move(ms));
}
template <typename F>
double median_ms(F&& f, int warmup, int iters, cudaStream_t stream = nullptr) {
  return spread_ms(std::forward<F>(f), warmup, iters, stream).median;
}

struct Row {
  std::string name, dtype, shape, impl;
  double ms = 0, rate = 0;  // rate: TFLOP/s or GB/s, as the benchmark says
  std::string rate_unit, note;
  double ms_min = 0, ms_max = 0;  // the range of the repetitions ms is the median of (0: not kept)
};

class Table {
 public:
  explicit Table(const char* title) : title_(title) {
    std::printf("\n%s\n%-22s %-6s %-22s %-10s %10s %12s  %s\n", title, "workload", "dtype", "shape",
                "impl", "ms", "rate", "note");
  }
  void add(Row r) {
    char range[48] = "";
    if (r.ms_min > 0) std::snprintf(range, sizeof range, "[%.4f-%.4f] ", r.ms_min, r.ms_max);
    std::printf("%-22s %-6s %-22s %-10s %10.4f %8.1f %-4s %s%s\n", r.name.c_str(), r.dtype.c_str(),
                r.shape.c_str(), r.impl.c_str(), r.ms, r.rate, r.rate_unit.c_str(), range,
                r.note.c_str());
    std::fflush(stdout);
    rows_.push_back(std::move(r));
  }
  void write_json(const char* path) const {
    if (path == nullptr) return;
    FILE* f = std::fopen(path, "w");
    if (f == nullptr) {
      std::fprintf(stderr, "cannot write %s\n", path);
      return;
    }
    std::fprintf(f, "{\"benchmark\": \"%s\", \"rows\": [\n", title_.c_str());
    for (size_t i = 0; i < rows_.size(); ++i) {
      const Row& r = rows_[i];
      std::fprintf(f,
                   "  {\"workload\": \"%s\", \"dtype\": \"%s\", \"shape\": \"%s\", \"impl\": "
                   "\"%s\", \"ms\": %.6f, \"ms_min\": %.6f, \"ms_max\": %.6f, \"rate\": %.3f, "
                   "\"unit\": \"%s\", \"note\": \"%s\"}%s\n",
                   r.name.c_str(), r.dtype.c_str(), r.shape.c_str(), r.impl.c_str(), r.ms,
                   r.ms_min > 0 ? r.ms_min : r.ms, r.ms_max > 0 ? r.ms_max : r.ms, r.rate,
                   r.rate_unit.c_str(), r.note.c_str(), i + 1 < rows_.size() ? "," : "");
    }
    std::fprintf(f, "]}\n");
    std::fclose(f);
  }

 private:
  std::string title_;
  std::vector<Row> rows_;
};

// The value after --json, or null.
inline const char* json_path(int argc, char** argv) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--json") == 0) return argv[i + 1];
  return nullptr;
}

// False (after saying so) when there is no CUDA device: the caller exits 0.
inline bool have_gpu(const char* name) {
  if (ember::cuda::is_available()) {
    cudaDeviceProp prop{};
    EMBER_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    std::printf("%s on %s (%d SMs, %.0f MB L2)\n", name, prop.name, prop.multiProcessorCount,
                prop.l2CacheSize / 1e6);
    return true;
  }
  std::printf("%s: no CUDA device, nothing to measure\n", name);
  return false;
}

}  // namespace bench
