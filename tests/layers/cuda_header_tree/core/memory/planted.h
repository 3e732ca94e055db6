// Not compiled: a core/memory header that includes the CUDA runtime in angle
// brackets, for the CTest test that checks tools/check_layers.cmake refuses a CUDA
// header outside cuda/.
#pragma once

#include <cuda_runtime_api.h>
