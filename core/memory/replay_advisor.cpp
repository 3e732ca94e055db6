// The default out-of-memory advisor, installed from the replay side: an allocator
// without an advisor of its own asks default_out_of_memory_advisor()
// (core/memory/allocator_impl.h), which answers with the one
// set_default_out_of_memory_advisor set, else with replay_out_of_memory_advisor. So
// the allocator's files include nothing of replay, and replay includes the allocator.
#include <mutex>
#include <utility>

#include "core/memory/allocator_impl.h"
#include "core/memory/replay.h"

namespace ember::memory {

namespace {

std::mutex g_default_advisor_mutex;
OutOfMemoryAdvisor g_default_advisor;  // under g_default_advisor_mutex

}  // namespace

void set_default_out_of_memory_advisor(OutOfMemoryAdvisor advisor) {
  std::lock_guard lock(g_default_advisor_mutex);
  g_default_advisor = std::move(advisor);
}

OutOfMemoryAdvisor default_out_of_memory_advisor() {
  {
    std::lock_guard lock(g_default_advisor_mutex);
    if (g_default_advisor) return g_default_advisor;
  }
  return replay_out_of_memory_advisor;
}

}  // namespace ember::memory
