// The PTX wrappers every sm_90a kernel of ember's (the Hopper GEMM, gemm_kernel.cuh, and
// the fused attention, attention_common.cuh) issues around its warpgroup MMAs: shared
// addresses, the async-proxy fence, wgmma's fence / commit / wait, the register fence and
// the shared-memory matrix descriptor. Include only in code compiled for sm_90a.
#pragma once

#include <cstdint>

namespace ember::cuda::sm90 {

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Orders this thread's generic-proxy shared-memory accesses (plain stores, cp.async's
// writes) before later async-proxy ones (wgmma's reads, TMA's writes), or the reverse.
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
// Waits until at most kPending committed wgmma groups of this warpgroup are in flight.
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// Keeps the compiler from moving accumulator reads or writes across wgmma.
template <int N>
__device__ __forceinline__ void fence_regs(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}

// A wgmma shared-memory matrix descriptor: start address, LBO and SBO in 16-byte
// units (bits 0-13, 16-29, 32-45), base offset 0 (tiles are 1024-byte aligned),
// layout type 1 = 128-byte swizzle (bits 62-63).
__device__ __forceinline__ uint64_t make_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) | (static_cast<uint64_t>(lbo >> 4) << 16) |
         (static_cast<uint64_t>(sbo >> 4) << 32) | (uint64_t{1} << 62);
}

}  // namespace ember::cuda::sm90
