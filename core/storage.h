// Storage: one contiguous allocation on one device, taken from that device's
// allocator (core/memory/allocator.h) and given back when the last tensor viewing it
// dies. It also carries the version counter shared by every alias of its bytes,
// so autograd can tell when a tensor saved for backward was changed in place.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/base/device.h"

namespace ember {

namespace memory {
class Allocator;
}

class Storage {
 public:
  Storage(size_t nbytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

  uint64_t version() const { return version_; }
  void bump_version() { ++version_; }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  memory::Allocator* allocator_ = nullptr;
  uint64_t version_ = 0;
};

}  // namespace ember
