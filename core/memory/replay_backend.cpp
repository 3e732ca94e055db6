// ReplayBackend (core/memory/replay.h): the simulated device of replays, whose
// segments are addresses only.
#include "core/memory/replay.h"

#include <algorithm>
#include <cstdint>

#include "core/base/error.h"

namespace ember::memory {

ReplayBackend::ReplayBackend(uint64_t capacity)
    : capacity_(capacity), next_address_(uint64_t{1} << 40) {}

void ReplayBackend::hold(cudaStream_t stream) {
  if (std::find(held_.begin(), held_.end(), stream) == held_.end()) held_.push_back(stream);
}

void ReplayBackend::release(cudaStream_t stream) {
  auto it = std::find(held_.begin(), held_.end(), stream);
  if (it == held_.end()) return;
  *it = held_.back();
  held_.pop_back();
  for (Event& e : events_)
    if (e.stream == stream) e.complete = true;
}

uint64_t ReplayBackend::take_addresses(uint64_t bytes) {
  // Ranges never overlap and are never reused; 2 MiB aligned, as cudaMalloc's
  // large ones. From 2^40 up, 2^64 bytes hold some 16,000 reservations of a
  // 1 PiB device (the "unlimited" one) and an eighth.
  const uint64_t rounded = (bytes + kGranularity - 1) / kGranularity * kGranularity;
  EMBER_CHECK(rounded >= bytes && next_address_ <= UINT64_MAX - rounded,
              "replay backend: out of simulated address space");
  const uint64_t addr = next_address_;
  next_address_ += rounded;
  return addr;
}

void* ReplayBackend::raw_alloc(size_t bytes) {
  if (bytes > capacity_ - std::min(capacity_, used_)) return nullptr;
  const uint64_t addr = take_addresses(bytes);
  used_ += bytes;
  sizes_.emplace(addr, bytes);
  return reinterpret_cast<void*>(static_cast<uintptr_t>(addr));
}

bool ReplayBackend::supports_virtual_memory(std::string* /*why*/) {
  return true;
}

void* ReplayBackend::reserve_address_space(size_t bytes) {
  if (next_address_ > UINT64_MAX - bytes - kGranularity) return nullptr;
  return reinterpret_cast<void*>(static_cast<uintptr_t>(take_addresses(bytes)));
}

bool ReplayBackend::map_pages(void* /*ptr*/, size_t bytes) {
  if (bytes > capacity_ - std::min(capacity_, used_)) return false;
  used_ += bytes;
  return true;
}

void ReplayBackend::unmap_pages(void* /*ptr*/, size_t bytes) noexcept {
  used_ -= std::min<uint64_t>(used_, bytes);
}

void ReplayBackend::release_address_space(void* /*base*/, size_t /*bytes*/) noexcept {
  // Addresses are never reused: nothing to do.
}

void ReplayBackend::raw_free(void* ptr) noexcept {
  auto it = sizes_.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == sizes_.end()) return;
  used_ -= it->second;
  sizes_.erase(it);
}

Backend::MemoryInfo ReplayBackend::memory_info() {
  return MemoryInfo{static_cast<size_t>(capacity_ - std::min(capacity_, used_)),
                    static_cast<size_t>(capacity_)};
}

Backend::EventHandle ReplayBackend::create_event() {
  events_.push_back(Event{});
  return reinterpret_cast<EventHandle>(static_cast<uintptr_t>(events_.size()));
}

void ReplayBackend::record_event(EventHandle event, cudaStream_t stream) {
  Event& e = events_.at(reinterpret_cast<uintptr_t>(event) - 1);
  e.stream = stream;
  e.complete = std::find(held_.begin(), held_.end(), stream) == held_.end();
}

bool ReplayBackend::query_event(EventHandle event) {
  return events_.at(reinterpret_cast<uintptr_t>(event) - 1).complete;
}

void ReplayBackend::synchronize_event(EventHandle event) {
  // Waiting ends when the work does: here, at once.
  events_.at(reinterpret_cast<uintptr_t>(event) - 1).complete = true;
}

void ReplayBackend::destroy_event(EventHandle /*event*/) noexcept {
  // Ids stay valid (and unused) until the backend goes: an allocator keeps few.
}

void ReplayBackend::fill(void*, unsigned char, size_t, cudaStream_t) {
  EMBER_FAIL(
      "replay backend: its segments are addresses only; the allocator's sanitizer "
      "mode cannot be replayed");
}

void ReplayBackend::read(void*, const void*, size_t, cudaStream_t) {
  EMBER_FAIL(
      "replay backend: its segments are addresses only; the allocator's sanitizer "
      "mode cannot be replayed");
}

}  // namespace ember::memory
