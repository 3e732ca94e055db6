// Errors: every bad input throws ember::Error (a std::runtime_error) whose message
// names the op and what was wrong. EMBER_CHECK builds that message from its
// arguments only when the check fails, so it costs one branch on the hot path.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace ember {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Raised when a device (or simulated device) cannot satisfy an allocation even
// after the caching allocator freed its unused cache. The allocator stays
// consistent: catch it, lower the batch size, go on.
class OutOfMemoryError : public Error {
 public:
  using Error::Error;
};

// Warnings: for what is legal but almost certainly a mistake (a module used in a
// forward without being registered). Each goes to the current handler, by default
// one that prints "ember: warning: <message>" to stderr. Tests install their own.
using WarningHandler = void (*)(const std::string& message);
// Installs `handler` (nullptr: the default) and returns the previous one.
WarningHandler set_warning_handler(WarningHandler handler);
void warn(const std::string& message);

namespace detail {
template <typename... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
[[noreturn]] void throw_error(const char* file, int line, const std::string& msg);
}  // namespace detail

}  // namespace ember

#define EMBER_CHECK(cond, ...)                                                                 \
  do {                                                                                         \
    if (!(cond)) [[unlikely]]                                                                  \
      ::ember::detail::throw_error(__FILE__, __LINE__, ::ember::detail::str_cat(__VA_ARGS__)); \
  } while (0)

#define EMBER_FAIL(...) \
  ::ember::detail::throw_error(__FILE__, __LINE__, ::ember::detail::str_cat(__VA_ARGS__))
