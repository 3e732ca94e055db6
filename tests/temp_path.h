// A path in the system's temporary folder that no other process uses: the file name
// carries this process's id. Tests that write files run at the same time as other
// copies of themselves (CTest -j, the sanitizer stage running all four tools over the
// same test case at once), so a fixed name would let one copy read another's file.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

namespace ember::testing {

inline std::string temp_path(const std::string& prefix, const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          (prefix + std::to_string(static_cast<long>(getpid())) + "_" + name))
      .string();
}

}  // namespace ember::testing
