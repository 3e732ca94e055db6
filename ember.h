// ember's umbrella header. What each include brings:
//   core/tensor.h     Tensor, TensorOptions, DType, Device, factories, Generator
//   core/ops.h        every op (add, matmul, sum, relu, cat, linear, mse_loss, ...)
//   core/autograd.h   NoGradGuard, backward engine, grad(), hooks
//   core/custom_function.h autograd::Function: custom ops with their own backward
//   core/autocast.h   AutocastGuard: bf16 Linear on CUDA, float32 master weights
//   core/memory.h     memory_summary/memory_stats/empty_cache/... for any Device
//   cuda/runtime.h    cuda::is_available(), device count, streams, events
//   cuda/graph.h      cuda::Graph: capture a training step once, replay it
//   nn/nn.h           Module, Linear, activations, Sequential, ModuleList/ModuleDict,
//                     Flatten, Dropout, MSELoss, functional, init, Dataset/DataLoader,
//                     Checkpoint, utils::clip_grad_norm_
//   optim/optim.h     Optimizer, SGD, Adam, AdamW, learning-rate schedulers
//   core/leak_check.h StepLeakCheck, LeakTracker, mark_step: what survives a step
//   core/live_tensors.h live_tensors(): the census of live tensors
//   core/anomaly.h    set_detect_anomaly / DetectAnomalyGuard: name the op making NaN/Inf
//   core/profiler.h   profiler::Profile, RecordFunction: op spans, device times, table, trace
//   core/threads.h    set_num_threads / get_num_threads: the CPU ops' threads (docs/cpu.md)
// Not included (nvcc only): cuda/thrust_policy.h, Thrust/CUB scratch from ember's allocator.
#pragma once

#include "core/anomaly.h"
#include "core/autocast.h"
#include "core/autograd.h"
#include "core/custom_function.h"
#include "core/leak_check.h"
#include "core/live_tensors.h"
#include "core/memory.h"
#include "core/ops.h"
#include "core/profiler.h"
#include "core/tensor.h"
#include "core/threads.h"
#include "cuda/graph.h"
#include "cuda/runtime.h"
#include "nn/nn.h"
#include "optim/optim.h"
