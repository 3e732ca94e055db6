#include "core/memory/backends.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/base/error.h"

namespace ember::memory {

namespace {

constexpr size_t kPageSize = 4096;

// Untouched pages of a large aligned_alloc cost address space only, so the
// simulated device can be given hundreds of MiB without using that much RAM.
void* page_aligned_alloc(size_t bytes) {
  return std::aligned_alloc(kPageSize, (bytes + kPageSize - 1) / kPageSize * kPageSize);
}

}  // namespace

// ---------------------------------------------------------------------------------
// Backend: sanitizer-mode access for host memory

void Backend::fill(void* ptr, unsigned char value, size_t bytes, cudaStream_t) {
  std::memset(ptr, value, bytes);
}

void Backend::read(void* host_dst, const void* ptr, size_t bytes, cudaStream_t) {
  std::memcpy(host_dst, ptr, bytes);
}

// ---------------------------------------------------------------------------------
// HostBackend

void* HostBackend::raw_alloc(size_t bytes) { return page_aligned_alloc(bytes); }

void HostBackend::raw_free(void* ptr) noexcept { std::free(ptr); }

Backend::MemoryInfo HostBackend::memory_info() {
  long pages = sysconf(_SC_PHYS_PAGES);
  long avail = sysconf(_SC_AVPHYS_PAGES);
  long page = sysconf(_SC_PAGESIZE);
  MemoryInfo info;
  if (pages > 0 && page > 0) info.total = static_cast<size_t>(pages) * static_cast<size_t>(page);
  if (avail > 0 && page > 0) info.free = static_cast<size_t>(avail) * static_cast<size_t>(page);
  return info;
}

// ---------------------------------------------------------------------------------
// SimulatedBackend

namespace {
// SimulatedMemory::none hands out addresses from here up: non-canonical on
// x86-64 and AArch64 (bits 48..62 neither all 0 nor all 1), so a stray access
// faults at once instead of touching host memory. Segments are multiples of
// 2 MiB, so blocks keep the allocator's 512-byte alignment.
constexpr uintptr_t kNoMemoryBase = uintptr_t{1} << 60;
}  // namespace

SimulatedBackend::SimulatedBackend(size_t capacity_bytes, int device, SimulatedMemory memory)
    : device_(device), memory_(memory), next_address_(kNoMemoryBase), capacity_(capacity_bytes) {}

void SimulatedBackend::fail_nth_alloc(size_t n) {
  std::lock_guard lock(mutex_);
  fail_countdown_ = n;
}

void SimulatedBackend::fail_allocs_above(size_t bytes) {
  std::lock_guard lock(mutex_);
  fail_above_ = bytes;
}

void SimulatedBackend::set_failure_schedule(std::vector<bool> schedule) {
  std::lock_guard lock(mutex_);
  schedule_ = std::move(schedule);
  schedule_pos_ = 0;
}

void SimulatedBackend::set_capacity(size_t capacity_bytes) {
  std::lock_guard lock(mutex_);
  capacity_ = capacity_bytes;
}

void SimulatedBackend::hold(cudaStream_t stream) {
  std::lock_guard lock(mutex_);
  held_.insert(stream);
}

void SimulatedBackend::release(cudaStream_t stream) {
  std::lock_guard lock(mutex_);
  held_.erase(stream);
  for (auto& [id, event] : events_)
    if (event.stream == stream) event.complete = true;
}

size_t SimulatedBackend::used() const {
  std::lock_guard lock(mutex_);
  return used_;
}
size_t SimulatedBackend::capacity() const {
  std::lock_guard lock(mutex_);
  return capacity_;
}
size_t SimulatedBackend::raw_alloc_calls() const {
  std::lock_guard lock(mutex_);
  return alloc_calls_;
}
size_t SimulatedBackend::raw_free_calls() const {
  std::lock_guard lock(mutex_);
  return free_calls_;
}
size_t SimulatedBackend::live_events() const {
  std::lock_guard lock(mutex_);
  return events_.size();
}
size_t SimulatedBackend::event_syncs() const {
  std::lock_guard lock(mutex_);
  return event_syncs_;
}

bool SimulatedBackend::should_fail(size_t bytes) {
  bool fail = false;
  if (fail_countdown_ > 0 && --fail_countdown_ == 0) fail = true;
  if (schedule_pos_ < schedule_.size() && schedule_[schedule_pos_++]) fail = true;
  if (bytes > fail_above_) fail = true;
  if (used_ + bytes > capacity_) fail = true;
  return fail;
}

void* SimulatedBackend::raw_alloc(size_t bytes) {
  std::lock_guard lock(mutex_);
  ++alloc_calls_;
  if (should_fail(bytes)) return nullptr;
  void* ptr = nullptr;
  if (memory_ == SimulatedMemory::none) {
    // Addresses rise and are never reused, as a device's fresh virtual ranges do;
    // 2^59 bytes of them outlast any run.
    ptr = reinterpret_cast<void*>(next_address_);
    next_address_ += (bytes + kPageSize - 1) / kPageSize * kPageSize;
  } else {
    ptr = page_aligned_alloc(bytes);
    EMBER_CHECK(ptr != nullptr, "simulated device: the host could not back a segment of ", bytes,
                " bytes");
  }
  used_ += bytes;
  sizes_.emplace(ptr, bytes);
  return ptr;
}

void SimulatedBackend::raw_free(void* ptr) noexcept {
  std::lock_guard lock(mutex_);
  ++free_calls_;
  auto it = sizes_.find(ptr);
  if (it == sizes_.end()) return;
  used_ -= it->second;
  sizes_.erase(it);
  if (memory_ == SimulatedMemory::host) std::free(ptr);
}

void SimulatedBackend::fill(void* ptr, unsigned char value, size_t bytes, cudaStream_t stream) {
  EMBER_CHECK(memory_ == SimulatedMemory::host,
              "simulated device without memory: cannot write ", bytes,
              " bytes (the allocator's sanitizer mode needs a backend with memory)");
  Backend::fill(ptr, value, bytes, stream);
}

void SimulatedBackend::read(void* host_dst, const void* ptr, size_t bytes, cudaStream_t stream) {
  EMBER_CHECK(memory_ == SimulatedMemory::host,
              "simulated device without memory: cannot read ", bytes,
              " bytes (the allocator's sanitizer mode needs a backend with memory)");
  Backend::read(host_dst, ptr, bytes, stream);
}

Backend::MemoryInfo SimulatedBackend::memory_info() {
  std::lock_guard lock(mutex_);
  return MemoryInfo{capacity_ - std::min(capacity_, used_), capacity_};
}

Backend::EventHandle SimulatedBackend::create_event() {
  std::lock_guard lock(mutex_);
  uintptr_t id = next_event_++;
  events_.emplace(id, FakeEvent{});
  return reinterpret_cast<EventHandle>(id);
}

void SimulatedBackend::record_event(EventHandle event, cudaStream_t stream) {
  std::lock_guard lock(mutex_);
  FakeEvent& e = events_.at(reinterpret_cast<uintptr_t>(event));
  e.stream = stream;
  e.complete = held_.count(stream) == 0;
}

bool SimulatedBackend::query_event(EventHandle event) {
  std::lock_guard lock(mutex_);
  return events_.at(reinterpret_cast<uintptr_t>(event)).complete;
}

void SimulatedBackend::synchronize_event(EventHandle event) {
  // Waiting on a real event ends when the stream's work does; here the wait is
  // the simulated work finishing at once.
  std::lock_guard lock(mutex_);
  ++event_syncs_;
  events_.at(reinterpret_cast<uintptr_t>(event)).complete = true;
}

void SimulatedBackend::destroy_event(EventHandle event) noexcept {
  std::lock_guard lock(mutex_);
  events_.erase(reinterpret_cast<uintptr_t>(event));
}

}  // namespace ember::memory
