// Error checks for the libraries parallel/ calls, in the family of cuda/check.h:
// EMBER_NCCL_CHECK and EMBER_MPI_CHECK throw ember::Error with the call's text,
// the status, its description and file:line; the _NOTHROW variants log (destructors).
#pragma once

#include <mpi.h>

#include "cuda/check.h"

#ifdef EMBER_HAVE_NCCL
#include <nccl.h>
#define EMBER_NCCL_CHECK(expr) EMBER_GPU_CALL_CHECK("NCCL", expr, ncclSuccess, ncclGetErrorString)
#define EMBER_NCCL_CHECK_NOTHROW(expr) \
  EMBER_GPU_CALL_LOG("NCCL", expr, ncclSuccess, ncclGetErrorString)
#endif

namespace ember::parallel::detail {
// MPI_Error_string's text for `code` (a thread-local buffer).
const char* mpi_error_string(int code);
}  // namespace ember::parallel::detail

#define EMBER_MPI_CHECK(expr) \
  EMBER_GPU_CALL_CHECK("MPI", expr, MPI_SUCCESS, ::ember::parallel::detail::mpi_error_string)
#define EMBER_MPI_CHECK_NOTHROW(expr) \
  EMBER_GPU_CALL_LOG("MPI", expr, MPI_SUCCESS, ::ember::parallel::detail::mpi_error_string)
