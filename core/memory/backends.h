// The raw memory a CachingAllocator carves up: whole segments from the device
// (cuda/cuda_backend.h), from the host (HostBackend) or from a simulated device with a set
// capacity, scripted failures and events whose completion a test controls. Backends with
// virtual memory management also reserve address space and map memory into it page by
// page, for expandable segments.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/base/cuda_handles.h"

namespace ember::memory {

// What a caching allocator needs from the memory below it. raw_alloc reports
// "no memory" by returning nullptr (the allocator then frees its cache and retries);
// any other failure throws ember::Error. A backend belongs to one allocator, whose
// lock serialises every call into it.
class Backend {
 public:
  // An opaque event: a cudaEvent_t for CUDA, an id for the simulated device.
  using EventHandle = void*;
  struct MemoryInfo {
    size_t free = 0;
    size_t total = 0;
  };

  virtual ~Backend() = default;

  virtual void* raw_alloc(size_t bytes) = 0;
  virtual void raw_free(void* ptr) noexcept = 0;
  // Capacity and free memory, for the out-of-memory message and garbage collection.
  virtual MemoryInfo memory_info() = 0;

  // Events mark work queued on a stream, so a block used on another stream is not
  // handed out again before that work finishes.
  virtual EventHandle create_event() = 0;
  virtual void record_event(EventHandle event, cudaStream_t stream) = 0;
  virtual bool query_event(EventHandle event) = 0;  // true once complete
  virtual void synchronize_event(EventHandle event) = 0;
  virtual void destroy_event(EventHandle event) noexcept = 0;

  // For the allocator's sanitizer mode (AllocatorOptions::sanitize): sets `bytes`
  // at `ptr` to `value` in `stream`'s order, and copies `bytes` from `ptr` into
  // host memory once the work queued on `stream` is done. The defaults are for
  // backends whose memory is host memory (host and simulated devices).
  virtual void fill(void* ptr, unsigned char value, size_t bytes, cudaStream_t stream);
  virtual void read(void* host_dst, const void* ptr, size_t bytes, cudaStream_t stream);

  // --- Virtual memory, for expandable segments (AllocatorOptions::expandable_segments).
  // Address space is reserved with nothing behind it; pages of granularity() bytes
  // inside it are backed by memory (mapped) on demand and given back (unmapped).
  // The defaults describe a backend without virtual memory management.

  // Whether the calls below work; when not, `why` (if given) says why not.
  virtual bool supports_virtual_memory(std::string* why = nullptr);
  // Bytes of one page (a power of two); every address and size below is a multiple.
  virtual size_t granularity() { return 0; }
  // Reserves `bytes` of address space; nullptr when none is left.
  virtual void* reserve_address_space(size_t bytes);
  // Backs [ptr, ptr + bytes) (unmapped pages of a reservation) with memory, usable
  // on this device. Returns false, with nothing mapped, when memory runs out.
  virtual bool map_pages(void* ptr, size_t bytes);
  // Gives the memory of mapped pages back; work already queued that uses them
  // completes first. The address space stays reserved.
  virtual void unmap_pages(void* ptr, size_t bytes) noexcept;
  // Returns a whole reservation (no page of it mapped) from reserve_address_space.
  virtual void release_address_space(void* base, size_t bytes) noexcept;

  // Host memory titles its summary "CPU" and says "CPU out of memory".
  virtual bool is_host() const { return false; }
  // The device index reported in summaries and messages.
  virtual int device() const { return 0; }
};

// Page-aligned host memory for CPU tensors. Host work is synchronous, so events
// are complete as soon as they are recorded.
class HostBackend final : public Backend {
 public:
  void* raw_alloc(size_t bytes) override;
  void raw_free(void* ptr) noexcept override;
  MemoryInfo memory_info() override;
  EventHandle create_event() override { return nullptr; }
  void record_event(EventHandle, cudaStream_t) override {}
  bool query_event(EventHandle) override { return true; }
  void synchronize_event(EventHandle) override {}
  void destroy_event(EventHandle) noexcept override {}
  bool is_host() const override { return true; }
};

// What a simulated device's segments are made of.
enum class SimulatedMemory : uint8_t {
  host,  // real (page-aligned, untouched) host memory: tensors may be written to
  none,  // addresses only, never backed nor touched (the meta device, core/meta.h)
};

// A device simulated so that every allocator path runs without a GPU. With
// SimulatedMemory::host its segments are host memory that may be written to; with
// SimulatedMemory::none they are distinct, non-canonical addresses that no host
// memory backs (any access faults), so a simulated device of any capacity costs
// nothing. Failures are scripted; events recorded on a held stream stay
// incomplete until the test releases that stream. Virtual memory is modelled with
// the host's: a reservation is inaccessible address space (mmap PROT_NONE), a mapped
// page is readable and writable and counts against the capacity, an unmapped one
// is inaccessible again and its contents are gone. With SimulatedMemory::none a
// reservation is a range of the same never-backed addresses and mapping only counts.
class SimulatedBackend final : public Backend {
 public:
  explicit SimulatedBackend(size_t capacity_bytes, int device = 0,
                            SimulatedMemory memory = SimulatedMemory::host);

  // --- failure schedule (all conditions combine) ---
  // Fails the n-th raw_alloc from now (1 = the next one); 0 cancels.
  void fail_nth_alloc(size_t n);
  // Fails every raw_alloc of more than `bytes`; SIZE_MAX cancels.
  void fail_allocs_above(size_t bytes);
  // Consumed one entry per raw_alloc: true fails it. Once used up, no more failures.
  void set_failure_schedule(std::vector<bool> schedule);
  void set_capacity(size_t capacity_bytes);
  // (The schedule above also applies to map_pages: each call is one allocation.)

  // --- virtual memory ---
  // Page size of map_pages/unmap_pages: a power of two, at least the host's page
  // (4 KiB); 2 MiB (a CUDA GPU's granularity) by default.
  void set_granularity(size_t bytes);
  // false models a driver without virtual memory management.
  void set_virtual_memory(bool supported);

  // --- streams and events ---
  // Events recorded on `stream` while it is held stay incomplete until release().
  void hold(cudaStream_t stream);
  void release(cudaStream_t stream);

  // --- what happened ---
  size_t used() const;
  size_t capacity() const;
  size_t raw_alloc_calls() const;
  size_t raw_free_calls() const;
  size_t live_events() const;
  size_t event_syncs() const;   // synchronize_event calls (each completes its event)
  size_t mapped_bytes() const;  // bytes of pages mapped now (part of used())
  size_t map_calls() const;     // map_pages calls, failed ones included
  size_t unmap_calls() const;
  size_t reservations() const;  // live address-space reservations
  size_t reserved_address_bytes() const;
  SimulatedMemory memory() const { return memory_; }

  void* raw_alloc(size_t bytes) override;
  void raw_free(void* ptr) noexcept override;
  MemoryInfo memory_info() override;
  EventHandle create_event() override;
  void record_event(EventHandle event, cudaStream_t stream) override;
  bool query_event(EventHandle event) override;
  void synchronize_event(EventHandle event) override;
  void destroy_event(EventHandle event) noexcept override;
  bool supports_virtual_memory(std::string* why = nullptr) override;
  size_t granularity() override;
  void* reserve_address_space(size_t bytes) override;
  bool map_pages(void* ptr, size_t bytes) override;
  void unmap_pages(void* ptr, size_t bytes) noexcept override;
  void release_address_space(void* base, size_t bytes) noexcept override;
  // SimulatedMemory::none has no bytes to write or read: these throw ember::Error
  // (the allocator's sanitizer mode cannot run on it).
  void fill(void* ptr, unsigned char value, size_t bytes, cudaStream_t stream) override;
  void read(void* host_dst, const void* ptr, size_t bytes, cudaStream_t stream) override;
  int device() const override { return device_; }

 private:
  struct FakeEvent {
    bool complete = true;
    cudaStream_t stream = nullptr;
  };

  bool should_fail(size_t bytes);  // consumes one schedule step

  // The test thread drives hold/release while allocator threads may query, so
  // this class has its own lock.
  mutable std::mutex mutex_;
  int device_;
  SimulatedMemory memory_;
  uintptr_t next_address_;  // SimulatedMemory::none: where the next segment starts
  size_t capacity_;
  size_t used_ = 0;
  size_t alloc_calls_ = 0;
  size_t free_calls_ = 0;
  size_t event_syncs_ = 0;
  size_t fail_countdown_ = 0;
  size_t fail_above_ = SIZE_MAX;
  std::vector<bool> schedule_;
  size_t schedule_pos_ = 0;
  std::unordered_map<void*, size_t> sizes_;
  std::unordered_set<cudaStream_t> held_;
  std::unordered_map<uintptr_t, FakeEvent> events_;
  uintptr_t next_event_ = 1;
  bool virtual_memory_ = true;
  size_t granularity_ = size_t{2} << 20;
  size_t mapped_ = 0;
  size_t map_calls_ = 0;
  size_t unmap_calls_ = 0;
  std::unordered_map<void*, size_t> reservations_;  // base -> bytes
  std::unordered_set<uintptr_t> mapped_pages_;
  size_t reserved_ = 0;
};

}  // namespace ember::memory
