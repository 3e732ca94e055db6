// The scratch bytes of cub::DeviceRadixSort::SortPairs over uint64 keys and int64
// values (sort.cu, index.cu), from sizes alone: no CUDA runtime call, so the meta
// device answers the workspace queries built on it exactly as the CUDA device does,
// on a machine without a GPU too. Included by .cu files only.
//
// Why a formula. CUB's own size query (d_temp_storage == nullptr) launches nothing,
// but it asks the runtime for the device's PTX version (cudaFuncGetAttributes), and
// on its multi-pass path for the SM count and occupancy; without a GPU it fails.
// For 64-bit keys the policies of sm_90 and later (the only ones this build's
// architectures select: CMakeLists.txt, 90-real and 90-virtual) take the one-sweep
// path, whose scratch depends on the sizes and the policy's tile alone. The
// function below is CUB's computation (DispatchRadixSort::InvokeOnesweep and
// AliasTemporaries, CUB 3.0) over the constants of CUB's own policy type, so a
// retuned CUB changes the constants with it. Exactness is checked twice: the
// launchers ask CUB's query and fail if it wants more than this, and
// tests/cuda/test_kernels_sort.cpp ("the radix-sort scratch formula equals CUB's
// query") fails on the GPU if the two differ at all.
#pragma once

#include <cub/device/device_radix_sort.cuh>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "cuda/check.h"

namespace ember::cuda {

namespace radix_detail {

using Policy = cub::detail::radix::policy_hub<uint64_t, int64_t, unsigned long long>::Policy900;
static_assert(Policy::ONESWEEP,
              "radix_sort_bytes.cuh assumes CUB's one-sweep path for 64-bit keys");

#ifdef __CUDA_ARCH_LIST__
constexpr bool archs_from_sm90() {
  constexpr int archs[] = {__CUDA_ARCH_LIST__};
  for (int a : archs)
    if (a < 900) return false;
  return true;
}
static_assert(archs_from_sm90(),
              "radix_sort_bytes.cuh: CUB picks another radix-sort policy below sm_90; "
              "re-derive the formula (and run tests/cuda/test_kernels_sort.cpp)");
#endif

constexpr size_t align256(size_t v) {
  return (v + 255) / 256 * 256;
}

}  // namespace radix_detail

// What CUB's SortPairs(nullptr, bytes, ..., n, 0, end_bit) writes to bytes, for
// uint64 keys, int64 values and an int64 count (CUB's offset type: unsigned long long).
inline size_t radix_sort_pairs_bytes(int64_t n, int end_bit) {
  using P = radix_detail::Policy;
  using radix_detail::align256;
  using Offset = unsigned long long;
  if (n <= 0 || end_bit <= 0) return 1;
  // One tile: a single kernel, no scratch (CUB still asks for one byte).
  if (n <= int64_t{P::SingleTilePolicy::BLOCK_THREADS} * P::SingleTilePolicy::ITEMS_PER_THREAD)
    return 1;
  constexpr int kBits = P::ONESWEEP_RADIX_BITS;
  constexpr int64_t kDigits = int64_t{1} << kBits;
  constexpr int64_t kTile =
      int64_t{P::OnesweepPolicy::BLOCK_THREADS} * P::OnesweepPolicy::ITEMS_PER_THREAD;
  constexpr int64_t kPortion = ((int64_t{1} << 28) - 1) / kTile * kTile;
  const int64_t passes = (end_bit + kBits - 1) / kBits;
  const int64_t portions = (n + kPortion - 1) / kPortion;
  const int64_t max_blocks = (std::min(n, kPortion) + kTile - 1) / kTile;
  const size_t sizes[] = {
      static_cast<size_t>(portions * passes * kDigits) * sizeof(Offset),  // bins
      static_cast<size_t>(max_blocks * kDigits) * sizeof(int),            // lookback
      passes <= 1 ? 0 : static_cast<size_t>(n) * sizeof(uint64_t),        // the keys' other buffer
      passes <= 1 ? 0 : static_cast<size_t>(n) * sizeof(int64_t),  // the values' other buffer
      static_cast<size_t>(portions * passes) * sizeof(int),        // counters
  };
  size_t bytes = 0;
  for (size_t s : sizes) bytes += align256(s);
  return bytes + 255;
}

// CUB's own answer (asks the runtime): what the formula is checked against.
inline size_t cub_radix_sort_pairs_bytes(int64_t n, int end_bit) {
  size_t bytes = 0;
  EMBER_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
      nullptr, bytes, static_cast<const uint64_t*>(nullptr), static_cast<uint64_t*>(nullptr),
      static_cast<const int64_t*>(nullptr), static_cast<int64_t*>(nullptr), n, 0, end_bit));
  return bytes;
}

}  // namespace ember::cuda
