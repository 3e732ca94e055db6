// The CPU's intra-op threads: how many threads one CPU op may use (element-wise ops,
// reductions, softmax, layer norm, optimizer updates, and matrix products as tiles
// of single-threaded OpenBLAS calls, all on ember's own pool), as libtorch's
// at::set_num_threads.
#pragma once

#include <string>

namespace ember {

/// Sets how many threads one CPU op may use (n >= 1; 1 runs everything on the
/// calling thread). Results are deterministic for a given count (work is split in
/// fixed chunks and partial sums combined in chunk order), though two counts may
/// round differently. Throws ember::Error when n < 1.
void set_num_threads(int n);

/// How many threads one CPU op may use: the last set_num_threads, else
/// EMBER_NUM_THREADS, else OMP_NUM_THREADS, else the hardware's concurrency.
int get_num_threads();

/// What the CPU's float32 and float64 matrix products run on: "OpenBLAS <its
/// configuration> (<core> kernels)" when ember was built with OpenBLAS, else
/// "none: the reference loops". Built with DYNAMIC_ARCH (Debian's packages),
/// OpenBLAS picks its kernels from the CPU at load time; on a CPU it does not know it
/// can fall back to old SSE3 kernels (Prescott), several times slower. ember then
/// warns once, at the first matrix product, naming OPENBLAS_CORETYPE, which must be
/// set before the program starts (Haswell for AVX2, SkylakeX for AVX-512).
std::string cpu_blas_info();

}  // namespace ember
