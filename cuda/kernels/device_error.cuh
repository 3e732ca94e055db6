// Device side of cuda/device_error.h: how a kernel records a bad index or target.
// Included by .cu files only.
#pragma once

#include "cuda/device_error.h"

namespace ember::cuda {

// Records (op, kind, value, bound) unless something is already recorded. Plain
// stores to mapped host memory, made visible before `set` by a system fence; only
// the threads that found an error run it.
__device__ __forceinline__ void record_device_error(DeviceErrorRecord* r, const char* op, int kind,
                                                    int64_t value, int64_t bound) {
  volatile DeviceErrorRecord* v = r;
  if (v->set != 0) return;
  v->op = op;
  v->kind = kind;
  v->value = value;
  v->bound = bound;
  __threadfence_system();
  v->set = 1;
}

}  // namespace ember::cuda
