// Options of the caching allocator and their parser. The text syntax is
// PyTorch's PYTORCH_CUDA_ALLOC_CONF (`key:value,key:value`), read from the
// environment variable EMBER_CUDA_ALLOC_CONF; any malformed entry throws.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

namespace ember::memory {

inline constexpr const char* kAllocConfEnvVar = "EMBER_CUDA_ALLOC_CONF";

struct AllocatorOptions {
  // Number of power-of-two size intervals that roundup_power2_divisions can set:
  // [0, 2 MiB), [2 MiB, 4 MiB), ... and everything from 64 GiB up, as in PyTorch.
  static constexpr size_t kRoundupIntervals = 17;
  static constexpr size_t kNoMaxSplit = std::numeric_limits<size_t>::max();

  // Blocks of at least this many bytes are never split, and a request below it
  // never takes one. Set through max_split_size_mb (must be > 20).
  size_t max_split_size = kNoMaxSplit;
  // An oversize request (>= max_split_size) may take a cached block at most this
  // many bytes larger than itself.
  size_t max_non_split_rounding = size_t{20} << 20;
  // Per size interval (see round_size in caching_allocator.h): 0 or 1 means
  // "round to 512 bytes"; N > 1 rounds up to the next of N steps between powers of 2.
  std::array<uint32_t, kRoundupIntervals> roundup_power2_divisions{};
  // When > 0: on a cache miss with reserved memory above this fraction of the
  // device's capacity, free cached whole segments, oldest first, down to it.
  // PyTorch's rule (garbage_collect_cached_blocks): when > 0, on a cache miss with
  // reserved memory above this fraction of the allowed memory (the backend's
  // capacity: the device's total, or CudaBackend's limit), whole free segments of
  // the general large pool that have waited in the cache longer than the average
  // are returned (age = large-pool lookups since the block was cached), pass after
  // pass, until the excess is reclaimed or nothing more can be.
  double garbage_collection_threshold = 0.0;
  // expandable_segments:True: per stream and pool, one large range of address
  // space whose memory is mapped page by page at its end as it grows and unmapped
  // from its end by empty_cache() (see caching_allocator.h). Falls back to ordinary
  // segments, with a warning, where the backend has no virtual memory management.
  bool expandable_segments = false;

  // Sanitizer mode (sanitize:True): each block gets guard bytes before and after
  // what was asked, checked when it is freed; a freed block is poisoned and kept
  // in quarantine (not reused) until more than quarantine_blocks frees or
  // quarantine_bytes bytes came after it, and its poison is checked when it
  // leaves. Bugs found are reported with the block's allocation site (see
  // CachingAllocator::sanitizer_reports). Costs memory and time: for debugging.
  bool sanitize = false;
  size_t quarantine_blocks = 256;              // sanitize_quarantine_blocks
  size_t quarantine_bytes = size_t{64} << 20;  // sanitize_quarantine_mb

  // Parses `key:value,...`. Keys: max_split_size_mb, max_non_split_rounding_mb,
  // roundup_power2_divisions (N or [size_mb:N,...,>:N]), garbage_collection_threshold,
  // expandable_segments (True/False), sanitize (True/False),
  // sanitize_quarantine_blocks, sanitize_quarantine_mb. Throws ember::Error naming
  // the offending key or value.
  static AllocatorOptions parse(std::string_view text);
  // parse() of EMBER_CUDA_ALLOC_CONF, or defaults when it is unset or empty.
  static AllocatorOptions from_env();

  // The divisions that apply to a request of `bytes` (already >= 512).
  uint32_t divisions_for(size_t bytes) const;
};

}  // namespace ember::memory
