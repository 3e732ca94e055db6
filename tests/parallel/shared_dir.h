// A fresh folder every rank of `comm` agrees on (named after rank 0's pid and
// `prefix`_`name`), for the checkpoint tests of tests/parallel.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

#include "core/tensor.h"
#include "parallel/communicator.h"

namespace ember::testing {

inline std::string shared_dir(parallel::Communicator& comm, const std::string& prefix,
                              const std::string& name) {
  Tensor pid = full({1}, comm.rank() == 0 ? static_cast<double>(getpid()) : 0.0, kInt64);
  comm.broadcast(pid, 0);
  const std::string dir =
      (std::filesystem::temp_directory_path() /
       (prefix + "_" + std::to_string(pid.to_vector<int64_t>()[0]) + "_" + name))
          .string();
  if (comm.rank() == 0) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
  }
  comm.barrier();
  return dir;
}

}  // namespace ember::testing
