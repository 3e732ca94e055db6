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

// OpenBLAS's name for the kernels it picked ("Zen", "Haswell", "SkylakeX", or in a
// build without DYNAMIC_ARCH "HASWELL", ...); "" without OpenBLAS.
std::string blas_core();
// Whether `core` (case-insensitive) is a kernel set older than AVX2 and FMA, which on
// a CPU that has both (cpu_has_avx2_fma) means OpenBLAS did not recognise the CPU.
bool blas_core_is_fallback(std::string_view core, bool cpu_has_avx2_fma);

}  // namespace ember::kernels::cpu
