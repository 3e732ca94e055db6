#include "parallel/check.h"

namespace ember::parallel::detail {

const char* mpi_error_string(int code) {
  thread_local char text[MPI_MAX_ERROR_STRING + 1];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return "unknown MPI error";
  text[length] = '\0';
  return text;
}

}  // namespace ember::parallel::detail
