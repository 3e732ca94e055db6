// tma_box_probe: the TMA behaviours the convolutions' implicit GEMM relies on
// (cuda/kernels/sm90/conv_gemm_plan.h), checked in one launch on an sm_90 GPU:
//   1. a 4-D tile-mode box with element strides {1, 2, 2, 1} lands as one 128-byte
//      row of 64 bf16 channels per pixel, pixels in (n, h, w) order, 128-byte swizzled
//      (chunk c of row r at chunk c ^ (r % 8));
//   2. a box starting at negative coordinates (the padding) reads zeros there;
//   3. a box wholly outside the tensor reads zeros and still completes its bytes;
//   4. the transaction count is the boxes' full size: expecting 16 bytes more never
//      completes (the wait times out).
// Prints one line per check and "probe ok" or "probe FAILED"; exits 1 on a failure.
//   nvcc -std=c++17 -arch=sm_90a -o tma_box_probe tools/tma_box_probe.cu -lcuda
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <vector>

namespace {

constexpr int kN = 2, kH = 6, kW = 6, kC = 128;
constexpr int kRows = 16;               // pixels per box: 4 (w) x 2 (h) x 2 (n)
constexpr int kBoxBytes = kRows * 128;  // 64 bf16 channels per pixel
constexpr long long kTimeoutCycles = 2000000000LL;

// Each element's 16 bits name it: (n, y, w, c) + 1, so 0 means "zero fill".
uint16_t tag(int n, int y, int w, int c) {
  return static_cast<uint16_t>(((n << 13) | (y << 10) | (w << 7) | c) + 1);
}

__global__ void probe_kernel(const __grid_constant__ CUtensorMap map, uint16_t* out, int extra,
                             int* timed_out) {
  __shared__ __align__(1024) uint16_t tile[2 * kBoxBytes / 2];
  __shared__ uint64_t bar;
  for (int i = threadIdx.x; i < 2 * kBoxBytes / 2; i += blockDim.x) tile[i] = 0xFFFF;
  const uint32_t b = static_cast<uint32_t>(__cvta_generic_to_shared(&bar));
  const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(tile));
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(b));
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // the 0xFFFF fill first
  __syncthreads();
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(b),
                 "r"(2 * kBoxBytes + extra)
                 : "memory");
    // Box 1: channels 64..127 from (w, h, n) = (-1, -1, 0), stride 2: partly padding.
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%3, %4, %5, %6}], [%2];\n" ::"r"(dst),
        "l"(reinterpret_cast<uint64_t>(&map)), "r"(b), "r"(64), "r"(-1), "r"(-1), "r"(0)
        : "memory");
    // Box 2: images 2 and 3, which do not exist: all zeros.
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%3, %4, %5, %6}], [%2];\n" ::"r"(dst + kBoxBytes),
        "l"(reinterpret_cast<uint64_t>(&map)), "r"(b), "r"(0), "r"(0), "r"(0), "r"(kN)
        : "memory");
  }
  uint32_t done = 0;
  const long long start = clock64();
  while (!done) {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(b)
        : "memory");
    if (clock64() - start > kTimeoutCycles) break;
  }
  if (!done) {
    if (threadIdx.x == 0) *timed_out = 1;
    return;
  }
  for (int i = threadIdx.x; i < 2 * kBoxBytes / 2; i += blockDim.x) out[i] = tile[i];
}

bool check(bool ok, const char* what) {
  std::printf("%-72s %s\n", what, ok ? "ok" : "FAILED");
  return ok;
}

}  // namespace

int main() {
  std::vector<uint16_t> host(static_cast<size_t>(kN) * kH * kW * kC);
  for (int n = 0; n < kN; ++n)
    for (int y = 0; y < kH; ++y)
      for (int w = 0; w < kW; ++w)
        for (int c = 0; c < kC; ++c)
          host[((static_cast<size_t>(n) * kH + y) * kW + w) * kC + c] = tag(n, y, w, c);
  void* image = nullptr;
  cudaMalloc(&image, host.size() * 2);
  cudaMemcpy(image, host.data(), host.size() * 2, cudaMemcpyHostToDevice);
  CUtensorMap map{};
  const cuuint64_t dims[4] = {kC, kW, kH, kN};
  const cuuint64_t strides[3] = {kC * 2, kW * kC * 2, kH * kW * kC * 2};
  const cuuint32_t box[4] = {64, 8, 4, 2}, elem[4] = {1, 2, 2, 1};  // 4 x 2 x 2 pixels
  const CUresult r =
      cuTensorMapEncodeTiled(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, image, dims, strides, box,
                             elem, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                             CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  bool ok = check(r == CUDA_SUCCESS, "cuTensorMapEncodeTiled: 4-D, element strides {1,2,2,1}");
  uint16_t* out = nullptr;
  int* timed_out = nullptr;
  cudaMalloc(&out, 2 * kBoxBytes);
  cudaMalloc(&timed_out, sizeof(int));
  for (const int extra : {0, 16}) {
    cudaMemset(out, 0xEE, 2 * kBoxBytes);
    cudaMemset(timed_out, 0, sizeof(int));
    probe_kernel<<<1, 128>>>(map, out, extra, timed_out);
    const cudaError_t e = cudaDeviceSynchronize();
    int t = 0;
    std::vector<uint16_t> got(kBoxBytes);  // both boxes: 2 x kRows x 64 elements
    cudaMemcpy(&t, timed_out, sizeof(int), cudaMemcpyDeviceToHost);
    cudaMemcpy(got.data(), out, 2 * kBoxBytes, cudaMemcpyDeviceToHost);
    if (extra != 0) {
      ok &= check(e == cudaSuccess && t == 1,
                  "4. expecting 16 bytes more than the boxes never completes");
      continue;
    }
    ok &= check(e == cudaSuccess && t == 0, "the two boxes complete their expected bytes");
    int layout_bad = 0, outside_bad = 0;
    for (int row = 0; row < 2 * kRows; ++row)
      for (int ch = 0; ch < 64; ++ch) {
        uint16_t want = 0;
        if (row < kRows) {  // box 1: row = (n * 2 + j) * 4 + i -> w = 2i - 1, y = 2j - 1
          const int i = row % 4, j = (row / 4) % 2, n = row / 8;
          const int w = 2 * i - 1, y = 2 * j - 1;
          if (w >= 0 && w < kW && y >= 0 && y < kH) want = tag(n, y, w, 64 + ch);
        }
        const int r8 = row % 8;
        const uint16_t have = got[static_cast<size_t>(row) * 64 + ((ch / 8) ^ r8) * 8 + ch % 8];
        if (have != want) {
          if (layout_bad + outside_bad < 4)
            std::printf("  row %d channel %d: got %04x, want %04x\n", row, ch, have, want);
          (row < kRows ? layout_bad : outside_bad)++;
        }
      }
    ok &= check(layout_bad == 0,
                "1-2. strided box: pixel rows in (n, h, w) order, swizzled, padding zeros");
    ok &= check(outside_bad == 0, "3. a box wholly outside the tensor reads zeros");
  }
  std::printf("probe %s\n", ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}
