// 16-byte vectors of float32 or bfloat16 values as registers: one uint4 load or
// store moves 4 floats or 8 bfloat16s, converted to or from float in place.
// Unpacking through integer ops (a bfloat16 is the top half of a float) rather
// than through an array in memory keeps row-in-registers kernels from spilling.
// Included by .cu files only.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace ember::cuda {

template <typename S>
struct Vec16;

template <>
struct Vec16<float> {
  static constexpr int N = 4;
  __device__ __forceinline__ static void unpack(const uint4& r, float* out) {
    out[0] = __uint_as_float(r.x);
    out[1] = __uint_as_float(r.y);
    out[2] = __uint_as_float(r.z);
    out[3] = __uint_as_float(r.w);
  }
  __device__ __forceinline__ static uint4 pack(const float* v) {
    return make_uint4(__float_as_uint(v[0]), __float_as_uint(v[1]), __float_as_uint(v[2]),
                      __float_as_uint(v[3]));
  }
};

template <>
struct Vec16<__nv_bfloat16> {
  static constexpr int N = 8;
  __device__ __forceinline__ static void two(uint32_t w, float* out) {
    out[0] = __uint_as_float(w << 16);  // the low half is the first element
    out[1] = __uint_as_float(w & 0xffff0000u);
  }
  __device__ __forceinline__ static uint32_t bits2(float lo, float hi) {
    return static_cast<uint32_t>(__bfloat16_as_ushort(__float2bfloat16_rn(lo))) |
           (static_cast<uint32_t>(__bfloat16_as_ushort(__float2bfloat16_rn(hi))) << 16);
  }
  __device__ __forceinline__ static void unpack(const uint4& r, float* out) {
    two(r.x, out);
    two(r.y, out + 2);
    two(r.z, out + 4);
    two(r.w, out + 6);
  }
  __device__ __forceinline__ static uint4 pack(const float* v) {
    return make_uint4(bits2(v[0], v[1]), bits2(v[2], v[3]), bits2(v[4], v[5]), bits2(v[6], v[7]));
  }
};

}  // namespace ember::cuda
