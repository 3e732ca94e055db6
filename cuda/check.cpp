#include "cuda/check.h"

#include <cstdio>

namespace ember::cuda::detail {

void throw_call_error(const char* lib, const char* expr, int code, const char* what,
                      const char* file, int line) {
  throw Error(::ember::detail::str_cat(lib, " error ", code, " (", what, ") in ", expr, " at ",
                                       file, ":", line));
}

void log_call_error(const char* lib, const char* expr, int code, const char* what, const char* file,
                    int line) noexcept {
  std::fprintf(stderr, "ember: %s error %d (%s) in %s at %s:%d (ignored in a destructor)\n", lib,
               code, what, expr, file, line);
}

}  // namespace ember::cuda::detail
