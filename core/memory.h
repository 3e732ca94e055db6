// Memory statistics and cache control by ember::Device: CPU goes to the host
// allocator, CUDA:n to device n's, meta to this thread's meta device's
// (core/meta.h). Thin wrappers over core/memory/caching_allocator.h for users who
// think in devices rather than allocator objects.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "core/base/device.h"
#include "core/memory/caching_allocator.h"

namespace ember {

// The allocator every tensor byte on `device` comes from. Throws ember::Error for
// a CUDA device that does not exist.
memory::CachingAllocator& caching_allocator(Device device);

std::map<std::string, int64_t> memory_stats(Device device);  // PyTorch's keys
int64_t memory_allocated(Device device);
int64_t max_memory_allocated(Device device);
int64_t memory_reserved(Device device);
int64_t max_memory_reserved(Device device);
void reset_peak_memory_stats(Device device);
void reset_accumulated_memory_stats(Device device);
// Returns every unused cached segment of `device` to the system.
void empty_cache(Device device);
// torch.cuda.memory_summary()'s table for `device`.
std::string memory_summary(Device device, bool abbreviated = false);
memory::MemorySnapshot memory_snapshot(Device device);
void record_memory_history(Device device, bool enabled,
                           size_t max_entries = memory::kDefaultHistoryEntries);

}  // namespace ember
