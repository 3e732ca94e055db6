// CachingAllocator (core/memory/allocator_impl.h): the out-of-memory report: the
// message (what was asked, what is held and free, the largest sites, the
// advisor's line) and the OutOfMemoryError.
#include "core/memory/allocator_impl.h"

namespace ember::memory {

std::string CachingAllocator::Impl::out_of_memory_message(const OutOfMemoryRequest& r,
                                                          bool capturing) const {
  const int64_t allocated = c_.allocated_bytes.current();
  const int64_t unallocated = c_.reserved_bytes.current() - allocated;
  const std::string where = r.host ? "The host" : "GPU " + std::to_string(r.device);
  std::string msg = detail::str_cat(
      r.host ? "CPU" : "CUDA", " out of memory. Tried to allocate ",
      format_bytes(r.allocation_bytes), ". ", where, " has a total capacity of ",
      format_bytes(r.capacity), " of which ", format_bytes(r.free_bytes),
      " is free. Of the allocated memory ", format_bytes(static_cast<uint64_t>(allocated)),
      " is allocated by ember, and ", format_bytes(static_cast<uint64_t>(unallocated)),
      " is reserved by ember but unallocated.",
      expandable_
          ? ""
          : detail::str_cat(" If reserved but unallocated memory is large try setting ",
                            kAllocConfEnvVar, "=expandable_segments:True to avoid fragmentation."),
      capturing ? " A CUDA graph was being captured, so the cache was not freed to retry (and "
                  "the capacity was not queried): capture with more memory free."
                : "");

  MemoryStats gauges;
  fill_gauges(gauges);
  size_t cached_blocks = 0;
  size_t cached_bytes = 0;
  auto count = [&](const BlockSet& set) {
    for (const Block* b : set) {
      ++cached_blocks;
      cached_bytes += b->size;
    }
  };
  count(small_pool_);
  count(large_pool_);
  for (const auto& [id, p] : private_pools_) {
    count(p->small);
    count(p->large);
  }
  msg += detail::str_cat("\nLargest free block: ",
                         format_bytes(static_cast<uint64_t>(gauges.largest_free_block[kAggregate])),
                         " (", format_bytes(cached_bytes), " cached in ", cached_blocks,
                         " free block", cached_blocks == 1 ? "" : "s", ").");

  // Live bytes by allocation site (scope / tag), the largest first.
  std::map<std::pair<std::string, std::string>, std::pair<size_t, size_t>> sites;
  for (const auto& [base, seg] : segments_)
    for (const Block* b = seg->head; b != nullptr; b = b->next) {
      if (!b->allocated) continue;
      auto& [bytes, blocks] = sites[{b->scope ? b->scope : "", b->tag ? b->tag : ""}];
      bytes += b->size;
      ++blocks;
    }
  std::vector<std::pair<std::pair<size_t, size_t>, std::pair<std::string, std::string>>> top;
  for (auto& [site, use] : sites) top.emplace_back(use, site);
  std::sort(top.begin(), top.end(), [](const auto& a, const auto& b) {
    return a.first.first != b.first.first ? a.first.first > b.first.first : a.second < b.second;
  });
  if (!top.empty()) {
    msg += detail::str_cat("\nLive memory by allocation site (the largest ",
                           std::min(top.size(), kOomSites), " of ", top.size(), "):");
    for (size_t i = 0; i < std::min(top.size(), kOomSites); ++i) {
      const auto& [use, site] = top[i];
      const auto& [scope, tag] = site;
      const std::string name = !scope.empty() && !tag.empty() ? scope + " / " + tag
                               : !scope.empty()               ? scope
                               : !tag.empty()                 ? tag
                                                              : std::string("(untagged)");
      msg += detail::str_cat("\n  ", format_bytes(use.first), " in ", use.second, " block",
                             use.second == 1 ? "" : "s", ": ", name);
    }
  }

  const OutOfMemoryAdvisor* advisor = &advisor_;
  OutOfMemoryAdvisor fallback;
  if (!*advisor) {
    fallback = default_out_of_memory_advisor();
    advisor = &fallback;
  }
  if (*advisor) {
    try {
      std::optional<std::string> advice = (*advisor)(history_in_order(), r);
      if (advice && !advice->empty()) {
        std::string line = *advice;
        line.erase(std::find(line.begin(), line.end(), '\n'), line.end());  // one line
        msg += "\n" + line;
      }
    } catch (const std::exception&) {
      // An advisor that fails gives no advice; the error stays the OOM.
    }
  }
  return msg;
}

[[noreturn]] void CachingAllocator::Impl::throw_out_of_memory(size_t requested, size_t rounded,
                                                              size_t allocation,
                                                              cudaStream_t stream) {
  ++stats_.num_ooms;
  if (history_on_) record(TraceAction::oom, 0, allocation, stream, AllocationTag::current());
  OutOfMemoryRequest r;
  r.requested_bytes = requested;
  r.rounded_bytes = rounded;
  r.allocation_bytes = allocation;
  r.stream = stream;
  r.device = backend_->device();
  r.host = backend_->is_host();
  r.options = &options_;
  if (history_on_) {
    // For a replay of the history (the advisor): the blocks it may have begun after.
    try {
      for (const auto& [base, seg] : segments_)
        for (const Block* b = seg->head; b != nullptr; b = b->next)
          if (b->allocated || b->event_count > 0)
            r.live_blocks.push_back(
                LiveBlock{b->ptr, b->requested_size, reinterpret_cast<uintptr_t>(b->stream)});
    } catch (const std::exception&) {
      r.live_blocks.clear();  // out of host memory: advise without them
    }
  }
  const bool capturing = !capturing_.empty();
  try {
    if (!capturing) {  // a device query a capture may forbid
      const Backend::MemoryInfo info = backend_->memory_info();
      r.capacity = info.total;
      r.free_bytes = info.free;
    }
  } catch (const std::exception&) {
    // Leave capacity unknown (0) rather than replace the OOM with another error.
  }
  std::string message;
  try {
    message = out_of_memory_message(r, capturing);
  } catch (const std::exception&) {
    message = detail::str_cat(r.host ? "CPU" : "CUDA", " out of memory. Tried to allocate ",
                              format_bytes(allocation), ".");
  }
  throw OutOfMemoryError(message);
}

}  // namespace ember::memory
