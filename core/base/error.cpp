#include "core/base/error.h"

#include <atomic>
#include <cstdio>

namespace ember {

namespace {

void print_warning(const std::string& message) {
  std::fprintf(stderr, "ember: warning: %s\n", message.c_str());
}

std::atomic<WarningHandler> g_warning_handler{&print_warning};

}  // namespace

WarningHandler set_warning_handler(WarningHandler handler) {
  return g_warning_handler.exchange(handler != nullptr ? handler : &print_warning);
}

void warn(const std::string& message) {
  g_warning_handler.load()(message);
}

namespace detail {

void throw_error(const char* /*file*/, int /*line*/, const std::string& msg) {
  // The message already names the op; file and line would only add noise for users.
  throw Error(msg);
}

}  // namespace detail

}  // namespace ember
