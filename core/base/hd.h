// EMBER_HD: marks the scalar math that host code (the CPU kernels) and device code
// (the CUDA kernels) share, so both devices run one definition of each formula.
#pragma once

#ifdef __CUDACC__
#define EMBER_HD __host__ __device__ __forceinline__
#else
#define EMBER_HD inline
#endif
