// ember's Hopper GEMMs (cuda/kernels/gemm_sm90.cu, built for sm_90a only):
//   D (m, n) = epilogue(sum_k A(m, k) B(n, k))
// on the warpgroup MMA (wgmma) with operands brought into shared memory by the
// Tensor Memory Accelerator: a multi-stage mbarrier pipeline, one producer
// warpgroup feeding two consumer warpgroups, a persistent grid walking the tiles
// in groups of row blocks (L2 reuse), the epilogue fused (bias, activation,
// pre-activation, bf16 or fp32 output, the row sums of A for a bias gradient).
// bf16 operands accumulate in fp32; fp32 operands run as TF32. Ragged m, n, k
// are read through TMA's zero fill; stores are bounds-checked.
//
// Each operand is K-major (its k contiguous) or M/N-major (its m or n
// contiguous), so Linear's three products need no transposing copy:
//   forward  y  = x w^T      A = x (K-major),      B = w (K-major)
//   backward dx = dy w       A = dy (K-major),     B = w (N-major)
//            dw = dy^T x     A = dy (M-major),     B = x (N-major), bias_grad = d_b
// TF32 takes K-major operands only (PTX's wgmma transposes 16-bit types only).
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "core/base/dtype.h"
#include "core/base/elementwise_ops.h"  // Activation

namespace ember::cuda {

// Element (r, k) of an operand: data[r * ld + k] when k_major, else data[k * ld + r].
struct Sm90Operand {
  const void* data = nullptr;
  int64_t ld = 0;
  bool k_major = true;
};

struct GemmEpilogue {
  const void* bias = nullptr;  // (n), the operands' dtype: D[i][j] += bias[j]
  void* pre = nullptr;         // (m, n), row stride ldc, the output dtype: D + bias before act
  void* bias_grad = nullptr;   // (m), the output dtype: sum_k A(i, k) (bf16 with M-major A)
  Activation act = Activation::None;
  DType out = DType::BFloat16;  // the output's dtype: BFloat16 or Float32
};

// Block tiles (rows of D x columns of D). 128x256 is the default for large
// problems, 128x128 where that would leave multiprocessors idle. 128x64: the
// convolutions' implicit GEMMs alone (launch_sm90_conv), for 64 output channels.
enum class Sm90Tile { Auto, k128x256, k128x128, k128x64 };

// How the two consumer warpgroups share the work (gemm_kernel.cuh):
// cooperative (both on each tile, half its rows each) or ping-pong (each on whole
// tiles in turn, one's epilogue under the other's MMAs; 128x128 tiles only: a
// whole 128x256 tile needs more accumulator registers than a thread has). Auto:
// ping-pong for bf16 K/K from 4096 x 4096 outputs, cooperative elsewhere.
enum class Sm90Schedule { Auto, Cooperative, Pingpong };

// Knobs for measuring and debugging; the defaults are what dispatch uses.
struct Sm90Tuning {
  Sm90Tile tile = Sm90Tile::Auto;
  Sm90Schedule schedule = Sm90Schedule::Auto;
  int group_m = 0;           // row blocks per rasterisation group (0: chosen from the grid)
  int max_ctas = 0;          // persistent grid size (0: one block per multiprocessor)
  int max_tiles = 0;         // process only the first tiles (0: all): one-tile debugging
  int* watchdog = nullptr;   // with EMBER_GEMM_WATCHDOG builds: where a stuck wait reports
  bool no_epilogue = false;  // write nothing (timing the main loop alone; D is left as it was)
};

// Empty when launch_sm90_gemm can run the problem on `device`, else why not:
// the device must be compute capability 9.0 and the kernels built for it, the
// dtype bf16 (fp32 operands: TF32, K-major only), each operand's base 16-byte
// aligned with a row stride of a multiple of 16 bytes (TMA), the output's
// dtype bf16 or fp32 (fp32 for TF32), bias_grad only with an M-major bf16 A.
const char* sm90_gemm_unsupported(DType dtype, int64_t m, int64_t n, int64_t k,
                                  const Sm90Operand& a, const Sm90Operand& b,
                                  const GemmEpilogue& epi, int device);

// Runs D (m, n) (row stride ldc, epi.out's dtype) on `stream`. m, n, k >= 0;
// throws ember::Error naming what is unsupported (see above).
void launch_sm90_gemm(DType dtype, int64_t m, int64_t n, int64_t k, const Sm90Operand& a,
                      const Sm90Operand& b, void* d, int64_t ldc, const GemmEpilogue& epi,
                      cudaStream_t stream, const Sm90Tuning& tuning = {});

}  // namespace ember::cuda
