// Storage: one contiguous allocation on one device, taken from that device's
// allocator (core/memory/allocator.h) and given back when the last tensor viewing it
// dies. It also carries the version counter shared by every alias of its bytes,
// so autograd can tell when a tensor saved for backward was changed in place.
// A storage may instead view bytes owned elsewhere (a file mapping): `owner`
// keeps them alive until the last tensor viewing them dies.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/base/device.h"

namespace ember {

namespace memory {
class Allocator;
}

class Storage {
 public:
  Storage(size_t nbytes, Device device);
  // Views `nbytes` at `data` on `device` without allocating or copying; `owner`
  // is released when the storage dies (nn::read_safetensors maps files so).
  Storage(void* data, size_t nbytes, Device device, std::shared_ptr<const void> owner);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

  uint64_t version() const { return version_; }
  void bump_version() { ++version_; }

  // Set by a backward that writes the gradients of adjacent views of one tensor into
  // this fresh storage, laid out as that tensor, every element written (the fused
  // attention's q, k and v): split's backward may pass it on whole
  // (core/ops/split_gradient.h).
  void mark_split_gradient() { split_gradient_ = true; }
  bool split_gradient() const { return split_gradient_; }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  memory::Allocator* allocator_ = nullptr;  // null for a view of external bytes
  std::shared_ptr<const void> owner_;
  uint64_t version_ = 0;
  bool split_gradient_ = false;
};

}  // namespace ember
