// Memory of several devices side by side: the key rows of memory_summary()
// (allocated, reserved, active: current and peak; retries; OOMs) with one column
// per device or per rank, so that imbalance (the "GPU 0 holds everything"
// problem) shows at a glance.
#pragma once

#include <string>
#include <vector>

#include "core/base/device.h"
#include "parallel/communicator.h"

namespace ember::parallel {

// One column per device of this process (e.g. a DataParallel's devices()).
std::string memory_summary_all(const std::vector<Device>& devices);

// One column per rank: every rank passes its own device; the statistics travel
// through `comm` (an all_gather), and every rank gets the same table.
std::string memory_summary_all_ranks(Communicator& comm, Device device);

}  // namespace ember::parallel
