#include "core/base/error.h"

namespace ember::detail {

void throw_error(const char* /*file*/, int /*line*/, const std::string& msg) {
  // The message already names the op; file and line would only add noise for users.
  throw Error(msg);
}

}  // namespace ember::detail
