#include "core/memory.h"

#include "core/kernel_table.h"

namespace ember {

memory::CachingAllocator& caching_allocator(Device device) {
  return kernels::kernels_for(device).hooks.allocator(device.index);
}

std::map<std::string, int64_t> memory_stats(Device device) {
  return caching_allocator(device).memory_stats();
}
int64_t memory_allocated(Device device) {
  return caching_allocator(device).memory_allocated();
}
int64_t max_memory_allocated(Device device) {
  return caching_allocator(device).max_memory_allocated();
}
int64_t memory_reserved(Device device) {
  return caching_allocator(device).memory_reserved();
}
int64_t max_memory_reserved(Device device) {
  return caching_allocator(device).max_memory_reserved();
}
void reset_peak_memory_stats(Device device) {
  caching_allocator(device).reset_peak_memory_stats();
}
void reset_accumulated_memory_stats(Device device) {
  caching_allocator(device).reset_accumulated_memory_stats();
}
void empty_cache(Device device) {
  caching_allocator(device).empty_cache();
}
std::string memory_summary(Device device, bool abbreviated) {
  return caching_allocator(device).memory_summary(abbreviated);
}
memory::MemorySnapshot memory_snapshot(Device device) {
  return caching_allocator(device).memory_snapshot();
}
void record_memory_history(Device device, bool enabled, size_t max_entries) {
  caching_allocator(device).record_memory_history(enabled, max_entries);
}

}  // namespace ember
