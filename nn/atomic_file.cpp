#include "nn/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "core/base/error.h"

namespace ember::nn {

// A directory would get a confusing error later (a rename over it, or a read of
// zero bytes): say what it is.
void check_not_directory(const char* op, const char* kind, const std::string& path,
                         const char* example) {
  std::error_code ec;
  EMBER_CHECK(!std::filesystem::is_directory(path, ec), op, ": ", kind, " path '", path,
              "' is a directory; give a file name inside it (e.g. '",
              (std::filesystem::path(path) / example).string(), "')");
}

void write_file_atomically(const std::string& path, const char* op,
                           const std::function<bool(std::FILE*)>& write) {
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  EMBER_CHECK(f != nullptr, op, ": cannot open '", tmp, "' for writing: ", std::strerror(errno));
  bool written = false;
  try {
    written = write(f);
  } catch (...) {
    std::fclose(f);
    std::remove(tmp.c_str());
    throw;
  }
  written = written && std::fflush(f) == 0 && ::fsync(::fileno(f)) == 0;
  const int err = errno;
  const bool closed = std::fclose(f) == 0;
  if (!written || !closed) {
    std::remove(tmp.c_str());
    EMBER_FAIL(op, ": writing '", tmp, "' failed: ", std::strerror(err));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int rename_err = errno;
    std::remove(tmp.c_str());
    EMBER_FAIL(op, ": cannot rename '", tmp, "' to '", path, "': ", std::strerror(rename_err));
  }
  // Make the rename itself durable.
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash + 1);
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace ember::nn
