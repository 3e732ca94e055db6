// Internal to the CPU kernels and their tests: the CPU matrix product's two paths.
// gemm_reference is the oracle (every product and sum in double, i-k-j order, one
// rounding at the end); gemm_blas runs float32 and float64 through the BLAS's
// sgemm/dgemm (transposed operands read in place) and bfloat16 through float32.
// The registered gemm takes gemm_blas when cpu::fast_paths() (cpu_parallel.h).
#pragma once

#include <string>
#include <string_view>

#include "core/kernel_table.h"

namespace ember::kernels::cpu {

void gemm_reference(const GemmArgs& g);
// false (having written nothing) when ember was built without a BLAS.
bool gemm_blas(const GemmArgs& g);

// Linear's forward fused (LinearArgs): where ember has OpenBLAS, fast paths are on
// (cpu::fast_paths()) and the dtype is float32 or float64; linear_fused throws
// where linear_fused_supported says no.
bool linear_fused_supported(DType dtype);
void linear_fused(const LinearArgs& a);
// Linear's backward products (the decisions of the kernel table): d_x = d_y w and
// d_w = d_y^T x as one GEMM each where linear_fused_supported and the sizes fit the
// CBLAS int; d_w declines a bias gradient (the CPU's bias predicate is false). The
// *_takes forms answer without computing, for the meta device mirroring the CPU.
bool linear_input_grad_takes(const LinearInputGradArgs& a);
bool linear_weight_grad_takes(const LinearWeightGradArgs& a);
bool linear_input_grad(const LinearInputGradArgs& a);
bool linear_weight_grad(const LinearWeightGradArgs& a);

// OpenBLAS's name for the kernels it picked ("Zen", "Haswell", "SkylakeX", or in a
// build without DYNAMIC_ARCH "HASWELL", ...); "" without OpenBLAS.
std::string blas_core();
// Whether `core` (case-insensitive) is a kernel set older than AVX2 and FMA, which on
// a CPU that has both (cpu_has_avx2_fma) means OpenBLAS did not recognise the CPU.
bool blas_core_is_fallback(std::string_view core, bool cpu_has_avx2_fma);
// The OPENBLAS_CORETYPE the fallback warning names: "SkylakeX" where the CPU has
// AVX-512 (F, BW, DQ, VL: OpenBLAS's SkylakeX kernels use them), else "Haswell" (AVX2
// and FMA).
const char* blas_coretype_for(bool cpu_has_avx512);

}  // namespace ember::kernels::cpu
