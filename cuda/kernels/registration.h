// Each CUDA kernel file's registration: the function, defined at the end of that
// file beside its kernels and launchers, that puts its adapters (argument struct to
// launcher, on the device's current stream) into the CUDA device's table. The CUDA
// device (core/kernels/cuda_device.cpp) calls every one of them, in one explicit
// list: no self-registering static initialisers, which static libraries drop.
#pragma once

#include "core/base/kernel_families.h"

namespace ember::cuda {

void register_elementwise(kernels::KernelFamilies& t);    // kernels/elementwise.cu
void register_reduce(kernels::KernelFamilies& t);         // kernels/reduce.cu
void register_sort(kernels::KernelFamilies& t);           // kernels/sort.cu: sort and cumsum
void register_softmax(kernels::KernelFamilies& t);        // kernels/softmax.cu
void register_index(kernels::KernelFamilies& t);          // kernels/index.cu, randperm too
void register_linalg(kernels::KernelFamilies& t);         // gemm_dispatch.cpp: matmul, Linear
void register_mse(kernels::KernelFamilies& t);            // kernels/mse.cu
void register_cross_entropy(kernels::KernelFamilies& t);  // kernels/cross_entropy.cu
void register_layer_norm(kernels::KernelFamilies& t);     // kernels/layer_norm.cu, RMS norm too
void register_batch_norm(kernels::KernelFamilies& t);     // kernels/batch_norm.cu
void register_conv(kernels::KernelFamilies& t);           // kernels/conv.cu: im2col, col2im
void register_conv_gemm(kernels::KernelFamilies& t);      // kernels/conv_gemm.cu: implicit GEMM
void register_attention(kernels::KernelFamilies& t);      // kernels/attention.cu
void register_fused_optim(kernels::KernelFamilies& t);    // kernels/fused_optim.cu
void register_multi_tensor(kernels::KernelFamilies& t);   // kernels/multi_tensor.cu

}  // namespace ember::cuda
