// The helpers every kernel file of cuda/kernels shares: grid arithmetic, the
// conversions between a storage type and the type a kernel computes in, dtype
// dispatch from a DType to a typed null pointer, 16-byte alignment checks, and
// the multiprocessor count cached per device (read once, not per launch).
// Included by .cu files only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>
#include <type_traits>

#include "core/base/dtype.h"
#include "core/base/error.h"
#include "cuda/check.h"

namespace ember::cuda {

// ------------------------------------------------------------------ grids

// ceil(a / b) for a >= 0, b > 0: blocks of b that cover a.
__host__ __device__ constexpr int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// The multiprocessors of `device`, asked of the runtime once per device.
inline int sm_count(int device) {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> counts[kMaxDevices] = {};
  const bool cached = device >= 0 && device < kMaxDevices;
  int n = cached ? counts[device].load(std::memory_order_relaxed) : 0;
  if (n == 0) {
    EMBER_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device));
    if (n < 1) n = 1;
    if (cached) counts[device].store(n, std::memory_order_relaxed);
  }
  return n;
}

// The current device of this thread (one runtime call, no driver round trip).
inline int current_device() {
  int d = 0;
  EMBER_CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

// ------------------------------------------------------------------ conversions

// A stored value as the type kernels compute in: float for float32 and bfloat16,
// double for float64.
__device__ __forceinline__ float widen(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
__device__ __forceinline__ float widen(float v) {
  return v;
}
__device__ __forceinline__ double widen(double v) {
  return v;
}

// A computed value rounded to the storage type S (bfloat16: round to nearest even,
// from double through float).
template <typename S, typename C>
__device__ __forceinline__ S narrow(C v) {
  if constexpr (std::is_same_v<S, __nv_bfloat16>)
    return __float2bfloat16_rn(static_cast<float>(v));
  else
    return static_cast<S>(v);
}

// The type a kernel computes a storage type S in (as widen gives it).
template <typename S>
struct CompOf {
  using type = float;
};
template <>
struct CompOf<double> {
  using type = double;
};

// ------------------------------------------------------------------ dispatch

// Calls f with a typed null pointer of the storage type of `t` (float32, float64,
// bfloat16); any other dtype fails naming `op`.
template <typename F>
void dispatch_float(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::Float32:
      f(static_cast<float*>(nullptr));
      return;
    case DType::Float64:
      f(static_cast<double*>(nullptr));
      return;
    case DType::BFloat16:
      f(static_cast<__nv_bfloat16*>(nullptr));
      return;
    default:
      EMBER_FAIL(op, ": dtype ", t, " is not supported on CUDA");
  }
}

// The same for the fused kernels that take float32 and bfloat16 only.
template <typename F>
void dispatch_float32_bf16(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::Float32:
      f(static_cast<float*>(nullptr));
      return;
    case DType::BFloat16:
      f(static_cast<__nv_bfloat16*>(nullptr));
      return;
    default:
      EMBER_FAIL(op, ": the fused kernel takes float32 and bfloat16, got ", t);
  }
}

// ------------------------------------------------------------------ alignment

// Whether `p` may be read or written as 16-byte vectors (Vec16, vec16.cuh); on the host
// (a launcher's choice) and in kernels (a chunk's own start).
__host__ __device__ inline bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

}  // namespace ember::cuda
