// Internal to core/kernels: each CPU kernel file's registration, called by the CPU
// device's register_cpu() (core/kernels/cpu_device.cpp) in one explicit list. The
// CUDA kernel files register from cuda/kernels/ (cuda/kernels/registration.h); the
// meta device registers all of its own in core/kernels/meta_device.cpp.
#pragma once

#include "core/kernel_table.h"

namespace ember::kernels {

void register_cpu_elementwise(KernelFamilies& t);
void register_cpu_reduce(KernelFamilies& t);
void register_cpu_linalg(KernelFamilies& t);
void register_cpu_optim(KernelFamilies& t);
void register_cpu_index(KernelFamilies& t);
void register_cpu_softmax(KernelFamilies& t);
void register_cpu_multi_tensor(KernelFamilies& t);
void register_cpu_sort(KernelFamilies& t);  // sort and cumsum
void register_cpu_batch_norm(KernelFamilies& t);
void register_cpu_conv(KernelFamilies& t);  // im2col and col2im

}  // namespace ember::kernels
