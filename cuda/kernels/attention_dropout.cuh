// Attention dropout as every fused attention kernel draws it (versions 1 and 2 of the
// forward and the deterministic backward: cuda/kernels/attention.cu and sm90/).
//
// Weight (bh, i, j) is kept iff dropout_keeps(seed, offset + (bh tq + i) tk + j,
// threshold), the numbering of the composed path's (B, H, L, S) weights, so every path
// drops the same ones; kept weights are scaled by rscale = 1 / (1 - p). Inside a CUDA
// graph `base` points at the word each replay sets (cuda/graph.h): the counters start at
// *base + offset, read once at the kernel's start (start_of).
#pragma once

#include <cstdint>

#include "core/base/random.h"
#include "cuda/kernels/attention.h"

namespace ember::cuda {

struct AttentionDropout {
  uint64_t seed, offset;
  const uint64_t* base;
  uint32_t threshold;
  float rscale;
  uint32_t key;  // dropout_key(seed), made once on the host
};

// The problem's dropout (all zero without one).
inline AttentionDropout attention_dropout_of(const AttentionProblem& p) {
  AttentionDropout d{};
  if (p.dropout_p > 0.0) {
    d.seed = p.dropout_seed;
    d.offset = p.dropout_offset;
    d.base = p.dropout_base;
    d.threshold = dropout_threshold(p.dropout_p);
    d.rscale = static_cast<float>(1.0 / (1.0 - p.dropout_p));
    d.key = dropout_key(d.seed);
  }
  return d;
}

#ifdef __CUDACC__
__device__ __forceinline__ uint64_t start_of(const AttentionDropout& d) {
  return d.base != nullptr ? d.offset + *d.base : d.offset;
}

// The counter of weight (bh, i, 0) of a (tq, tk) problem, counters from `start`; weight
// (bh, i, j)'s is this plus j.
__device__ __forceinline__ uint64_t row_counter(uint64_t start, int64_t bh, int tq, int tk, int i) {
  return start +
         (static_cast<uint64_t>(bh) * static_cast<uint64_t>(tq) + static_cast<uint64_t>(i)) *
             static_cast<uint64_t>(tk);
}

// Whether the weight at `counter` is kept: dropout_keeps(seed, counter, threshold), the
// seed's key taken from d.
__device__ __forceinline__ bool keeps_at(const AttentionDropout& d, uint64_t counter) {
  return dropout_bits_keyed(d.key, counter) >= d.threshold;
}

// Whether weight (bh, i, j) of a (tq, tk) problem is kept, counters from `start`.
__device__ __forceinline__ bool keeps(const AttentionDropout& d, uint64_t start, int64_t bh, int tq,
                                      int tk, int i, int j) {
  return keeps_at(d, row_counter(start, bh, tq, tk, i) + static_cast<uint64_t>(j));
}
#endif

}  // namespace ember::cuda
