// The live-tensor census: every TensorImpl registers itself while it lives, so
// ember::live_tensors() can list what is alive (device, dtype, shape, bytes, the
// op that made it, whether it still holds an autograd graph), largest first.
// Registration is a lock of one of several shards (picked per thread) and four
// pointer writes; benchmarks/alloc_site.cpp measures it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace ember {

struct LiveTensor {
  Device device;
  DType dtype = kFloat32;
  Shape sizes;
  size_t bytes = 0;                    // numel * element size of this view
  size_t storage_bytes = 0;            // its whole storage (shared by views)
  const void* storage_data = nullptr;  // identifies the storage (the allocator block)
  const char* op = nullptr;            // allocation tag when made ("linear", "full")
  const char* scope = nullptr;         // allocation scope when made ("model.fc1.forward")
  bool requires_grad = false;
  bool is_leaf = true;
  const char* grad_fn = nullptr;  // name of the node it holds, if any
  uint64_t grad_fn_sequence_nr = 0;
  std::string site() const;  // "<scope> / <op>"
};

// Every live tensor on `device` (all devices when empty), largest storage first.
// A consistent picture only while no other thread creates or drops tensors.
std::vector<LiveTensor> live_tensors(std::optional<Device> device = std::nullopt);
// The census as a table, with totals (storage shared by views counted once).
std::string live_tensors_table(std::optional<Device> device = std::nullopt, size_t max_rows = 20);
size_t live_tensor_count();
// Registration can be switched off (it is on by default; its cost is measured by
// benchmarks/alloc_site.cpp). Tensors made while it is off are never listed.
void set_live_tensor_registry(bool enabled);
bool live_tensor_registry_enabled();

namespace detail {
void register_live_tensor(TensorImpl& impl) noexcept;
void unregister_live_tensor(TensorImpl& impl) noexcept;
// Calls f on every live TensorImpl under the registry's locks (one shard at a
// time); f must not create or destroy tensors.
void for_each_live_tensor(const std::function<void(const TensorImpl&)>& f);
}  // namespace detail

}  // namespace ember
