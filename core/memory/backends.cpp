#include "core/memory/backends.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstdio>
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

bool Backend::supports_virtual_memory(std::string* why) {
  if (why != nullptr) *why = "this backend has no virtual memory management";
  return false;
}

void* Backend::reserve_address_space(size_t) {
  return nullptr;
}

bool Backend::map_pages(void*, size_t) {
  EMBER_FAIL("map_pages: this backend has no virtual memory management");
}

void Backend::unmap_pages(void*, size_t) noexcept {}

void Backend::release_address_space(void*, size_t) noexcept {}

// ---------------------------------------------------------------------------------
// HostBackend

void* HostBackend::raw_alloc(size_t bytes) {
  return page_aligned_alloc(bytes);
}

void HostBackend::raw_free(void* ptr) noexcept {
  std::free(ptr);
}

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
  EMBER_CHECK(memory_ == SimulatedMemory::host, "simulated device without memory: cannot write ",
              bytes, " bytes (the allocator's sanitizer mode needs a backend with memory)");
  Backend::fill(ptr, value, bytes, stream);
}

void SimulatedBackend::read(void* host_dst, const void* ptr, size_t bytes, cudaStream_t stream) {
  EMBER_CHECK(memory_ == SimulatedMemory::host, "simulated device without memory: cannot read ",
              bytes, " bytes (the allocator's sanitizer mode needs a backend with memory)");
  Backend::read(host_dst, ptr, bytes, stream);
}

// ---------------------------------------------------------------------------------
// SimulatedBackend: virtual memory on the host's

namespace {

constexpr int kNoAccess = PROT_NONE;
constexpr int kMapFlags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;

// A misuse of the simulated device's virtual memory is a bug in the allocator
// above it; a noexcept call cannot throw it, so it ends the program loudly.
[[noreturn]] void simulated_vm_bug(const char* what, const void* ptr, size_t bytes) {
  std::fprintf(stderr, "ember: simulated device: %s (%p, %zu bytes)\n", what, ptr, bytes);
  std::abort();
}

}  // namespace

void SimulatedBackend::set_granularity(size_t bytes) {
  EMBER_CHECK(std::has_single_bit(bytes) && bytes >= kPageSize,
              "SimulatedBackend::set_granularity: ", bytes,
              " is not a power of two of at least 4096 bytes");
  std::lock_guard lock(mutex_);
  EMBER_CHECK(reservations_.empty(),
              "SimulatedBackend::set_granularity: address space is "
              "already reserved with the old granularity");
  granularity_ = bytes;
}

void SimulatedBackend::set_virtual_memory(bool supported) {
  std::lock_guard lock(mutex_);
  virtual_memory_ = supported;
}

size_t SimulatedBackend::mapped_bytes() const {
  std::lock_guard lock(mutex_);
  return mapped_;
}
size_t SimulatedBackend::map_calls() const {
  std::lock_guard lock(mutex_);
  return map_calls_;
}
size_t SimulatedBackend::unmap_calls() const {
  std::lock_guard lock(mutex_);
  return unmap_calls_;
}
size_t SimulatedBackend::reservations() const {
  std::lock_guard lock(mutex_);
  return reservations_.size();
}
size_t SimulatedBackend::reserved_address_bytes() const {
  std::lock_guard lock(mutex_);
  return reserved_;
}

bool SimulatedBackend::supports_virtual_memory(std::string* why) {
  std::lock_guard lock(mutex_);
  if (!virtual_memory_ && why != nullptr)
    *why = "the simulated driver has no virtual memory management";
  return virtual_memory_;
}

size_t SimulatedBackend::granularity() {
  std::lock_guard lock(mutex_);
  return virtual_memory_ ? granularity_ : 0;
}

void* SimulatedBackend::reserve_address_space(size_t bytes) {
  std::lock_guard lock(mutex_);
  EMBER_CHECK(virtual_memory_,
              "reserve_address_space: the simulated driver has no virtual "
              "memory management");
  EMBER_CHECK(bytes > 0 && bytes % granularity_ == 0, "reserve_address_space: ", bytes,
              " bytes is not a positive multiple of the granularity (", granularity_, ")");
  if (memory_ == SimulatedMemory::none) {  // addresses only, aligned to the granularity
    const uintptr_t base = (next_address_ + granularity_ - 1) & ~(uintptr_t{granularity_} - 1);
    next_address_ = base + bytes;
    reservations_.emplace(reinterpret_cast<void*>(base), bytes);
    reserved_ += bytes;
    return reinterpret_cast<void*>(base);
  }
  // Over-reserve by one page and trim both ends, so that the range is aligned to
  // the granularity as a GPU's reservation is.
  void* raw = mmap(nullptr, bytes + granularity_, kNoAccess, kMapFlags, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const auto start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t base = (start + granularity_ - 1) & ~(uintptr_t{granularity_} - 1);
  if (base > start) munmap(raw, base - start);
  const uintptr_t end = start + bytes + granularity_;
  if (end > base + bytes) munmap(reinterpret_cast<void*>(base + bytes), end - (base + bytes));
  reservations_.emplace(reinterpret_cast<void*>(base), bytes);
  reserved_ += bytes;
  return reinterpret_cast<void*>(base);
}

// The reservation holding [ptr, ptr + bytes), or null.
static bool inside(const std::unordered_map<void*, size_t>& reservations, const void* ptr,
                   size_t bytes) {
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  for (const auto& [base, size] : reservations) {
    const auto b = reinterpret_cast<uintptr_t>(base);
    if (p >= b && p + bytes <= b + size) return true;
  }
  return false;
}

bool SimulatedBackend::map_pages(void* ptr, size_t bytes) {
  std::lock_guard lock(mutex_);
  ++map_calls_;
  EMBER_CHECK(bytes > 0 && bytes % granularity_ == 0 &&
                  reinterpret_cast<uintptr_t>(ptr) % granularity_ == 0,
              "map_pages: ", ptr, " + ", bytes, " bytes is not whole pages of ", granularity_);
  EMBER_CHECK(inside(reservations_, ptr, bytes), "map_pages: ", ptr, " + ", bytes,
              " bytes is not inside one reservation");
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  for (uintptr_t page = p; page < p + bytes; page += granularity_)
    EMBER_CHECK(mapped_pages_.count(page) == 0, "map_pages: the page at ",
                reinterpret_cast<void*>(page), " is already mapped");
  if (should_fail(bytes)) return false;
  EMBER_CHECK(memory_ == SimulatedMemory::none || mprotect(ptr, bytes, PROT_READ | PROT_WRITE) == 0,
              "map_pages: the host refused to back ", bytes, " bytes");
  for (uintptr_t page = p; page < p + bytes; page += granularity_) mapped_pages_.insert(page);
  used_ += bytes;
  mapped_ += bytes;
  return true;
}

void SimulatedBackend::unmap_pages(void* ptr, size_t bytes) noexcept {
  std::lock_guard lock(mutex_);
  ++unmap_calls_;
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  if (bytes == 0 || bytes % granularity_ != 0 || p % granularity_ != 0)
    simulated_vm_bug("unmap_pages of a range that is not whole pages", ptr, bytes);
  for (uintptr_t page = p; page < p + bytes; page += granularity_)
    if (mapped_pages_.erase(page) == 0)
      simulated_vm_bug("unmap_pages of an unmapped page", ptr, bytes);
  // Replacing the pages discards their contents, as giving memory back does.
  if (memory_ == SimulatedMemory::host &&
      mmap(ptr, bytes, kNoAccess, kMapFlags | MAP_FIXED, -1, 0) == MAP_FAILED)
    simulated_vm_bug("the host could not unmap", ptr, bytes);
  used_ -= bytes;
  mapped_ -= bytes;
}

void SimulatedBackend::release_address_space(void* base, size_t bytes) noexcept {
  std::lock_guard lock(mutex_);
  auto it = reservations_.find(base);
  if (it == reservations_.end() || it->second != bytes)
    simulated_vm_bug("release_address_space of something never reserved", base, bytes);
  const auto b = reinterpret_cast<uintptr_t>(base);
  for (uintptr_t page = b; page < b + bytes; page += granularity_)
    if (mapped_pages_.count(page) != 0)
      simulated_vm_bug("release_address_space with pages still mapped", base, bytes);
  if (memory_ == SimulatedMemory::host) munmap(base, bytes);
  reservations_.erase(it);
  reserved_ -= bytes;
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
