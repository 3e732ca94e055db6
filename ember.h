// ember's umbrella header. What each include brings:
//   core/tensor.h     Tensor, TensorOptions, DType, Device, factories, Generator
//   core/ops.h        every op (add, matmul, sum, relu, cat, ...) and operators
//   core/autograd.h   NoGradGuard, backward engine, grad(), hooks
//   cuda/runtime.h    cuda::is_available(), device count, streams, events
//   core/leak_check.h StepLeakCheck, LeakTracker, mark_step: what survives a step
//   core/live_tensors.h live_tensors(): the census of live tensors
#pragma once

#include "core/autograd.h"
#include "core/leak_check.h"
#include "core/live_tensors.h"
#include "core/ops.h"
#include "core/tensor.h"
#include "cuda/runtime.h"
