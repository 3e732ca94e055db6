// Internal to core/kernels: each family file's registration, called by its
// device's register_*() (core/kernels/cpu_device.cpp, cuda_device.cpp; the meta
// device registers all of its own in core/kernels/meta_device.cpp).
#pragma once

#include "core/kernel_table.h"

namespace ember::kernels {

void register_cpu_elementwise(KernelTable& t);
void register_cpu_reduce(KernelTable& t);
void register_cpu_linalg(KernelTable& t);
void register_cpu_optim(KernelTable& t);
void register_cpu_index(KernelTable& t);
void register_cpu_softmax(KernelTable& t);
void register_cpu_multi_tensor(KernelTable& t);
void register_cpu_sort(KernelTable& t);  // sort and cumsum

void register_cuda_elementwise(KernelTable& t);
void register_cuda_reduce(KernelTable& t);
void register_cuda_linalg(KernelTable& t);
void register_cuda_loss(KernelTable& t);
void register_cuda_optim(KernelTable& t);
void register_cuda_index(KernelTable& t);
void register_cuda_softmax(KernelTable& t);
void register_cuda_norm(KernelTable& t);
void register_cuda_batch_norm(KernelTable& t);  // core/kernels/cuda_batch_norm.cpp
void register_cuda_attention(KernelTable& t);
void register_cuda_multi_tensor(KernelTable& t);
void register_cuda_sort(KernelTable& t);  // sort and cumsum

}  // namespace ember::kernels
