// One error-check family for every GPU library call. Each macro evaluates the
// call once; on failure it throws ember::Error with the library, the call's text,
// the status and file:line. The _NOTHROW variants log instead (for destructors).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "core/base/error.h"

namespace ember::cuda::detail {
[[noreturn]] void throw_call_error(const char* lib, const char* expr, int code, const char* what,
                                   const char* file, int line);
void log_call_error(const char* lib, const char* expr, int code, const char* what, const char* file,
                    int line) noexcept;
}  // namespace ember::cuda::detail

#define EMBER_GPU_CALL_CHECK(lib, expr, ok, describe)                                       \
  do {                                                                                      \
    auto ember_status_ = (expr);                                                            \
    if (ember_status_ != (ok)) [[unlikely]]                                                 \
      ::ember::cuda::detail::throw_call_error(lib, #expr, static_cast<int>(ember_status_),  \
                                              describe(ember_status_), __FILE__, __LINE__); \
  } while (0)

#define EMBER_GPU_CALL_LOG(lib, expr, ok, describe)                                       \
  do {                                                                                    \
    auto ember_status_ = (expr);                                                          \
    if (ember_status_ != (ok)) [[unlikely]]                                               \
      ::ember::cuda::detail::log_call_error(lib, #expr, static_cast<int>(ember_status_),  \
                                            describe(ember_status_), __FILE__, __LINE__); \
  } while (0)

#define EMBER_CUDA_CHECK(expr) EMBER_GPU_CALL_CHECK("CUDA", expr, cudaSuccess, cudaGetErrorString)
#define EMBER_CUDA_CHECK_NOTHROW(expr) \
  EMBER_GPU_CALL_LOG("CUDA", expr, cudaSuccess, cudaGetErrorString)
#define EMBER_CUBLAS_CHECK(expr) \
  EMBER_GPU_CALL_CHECK("cuBLAS", expr, CUBLAS_STATUS_SUCCESS, cublasGetStatusString)
