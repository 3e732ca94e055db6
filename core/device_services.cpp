// Device services (core/device_services.h), through each device's table hooks.
#include "core/device_services.h"

#include <utility>

#include "core/base/error.h"
#include "core/kernel_table.h"
#include "core/tensor.h"

namespace ember {

void check_device(Device device) {
  kernels::kernels_for(device).hooks.check(device.index);
}
void check_not_capturing(Device device, const char* what, const char* action) {
  kernels::kernels_for(device).hooks.check_not_capturing(device.index, what, action);
}
bool is_capturing(Device device) {
  return kernels::kernels_for(device).hooks.is_capturing(device.index);
}
RandomCounters draw_counters(Device device, Generator& gen, uint64_t n, const char* what) {
  const kernels::DeviceHooks& h = kernels::kernels_for(device).hooks;
  if (!h.is_capturing(device.index)) return {gen.seed(), gen.advance(n), nullptr};
  if (h.capture_random == nullptr)
    h.check_not_capturing(device.index, what,
                          "draw random numbers (this device cannot draw inside a graph)");
  RandomCounters c;
  c.seed = gen.seed();
  c.base = h.capture_random(device.index, &gen, gen.offset_slot(), n, &c.offset);
  return c;
}
void synchronize(Device device) {
  kernels::kernels_for(device).hooks.synchronize(device.index);
}
bool holds_data(Device device) {
  return kernels::kernels_for(device).hooks.holds_data;
}
void check_holds_data(Device device, const char* what) {
  if (!kernels::kernels_for(device).hooks.holds_data) [[unlikely]]
    detail::throw_no_data(device, what);
}
int device_count(DeviceType type) {
  return kernels::table(type).hooks.count();
}
bool pinned_staging(Device device) {
  return kernels::kernels_for(device).hooks.pinned_staging;
}

// --- pinned staging, through the hooks of the device that owns the buffer

PinnedStaging::~PinnedStaging() {
  release();
}

PinnedStaging::PinnedStaging(PinnedStaging&& other) noexcept
    : buffer_(std::exchange(other.buffer_, nullptr)), type_(other.type_) {}

PinnedStaging& PinnedStaging::operator=(PinnedStaging&& other) noexcept {
  if (this != &other) {
    release();
    buffer_ = std::exchange(other.buffer_, nullptr);
    type_ = other.type_;
  }
  return *this;
}

void PinnedStaging::release() noexcept {
  if (buffer_ != nullptr) kernels::table(type_).hooks.staging_free(buffer_);
  buffer_ = nullptr;
}

void* PinnedStaging::acquire(size_t bytes, Device device) {
  const kernels::DeviceHooks& h = kernels::kernels_for(device).hooks;
  EMBER_CHECK(h.pinned_staging, "PinnedStaging: device ", device,
              " takes no pinned host copies (pinned_staging() is false)");
  if (buffer_ == nullptr) {
    buffer_ = h.staging_new();
    type_ = device.type;
  }
  EMBER_CHECK(type_ == device.type, "PinnedStaging: a buffer made for ", type_,
              " devices used for ", device);
  return h.staging_acquire(buffer_, bytes);
}

void PinnedStaging::copy_to_device(void* dst, size_t bytes, Device device) {
  EMBER_CHECK(buffer_ != nullptr && type_ == device.type, "PinnedStaging: copy to ", device,
              " before acquire() for it");
  kernels::kernels_for(device).hooks.staging_copy(buffer_, dst, bytes, device.index);
}

}  // namespace ember
