// Device services (core/device_services.h), through each device's table hooks.
#include "core/device_services.h"

#include "core/kernel_table.h"

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
bool pinned_staging(Device device) {
  return kernels::kernels_for(device).hooks.pinned_staging;
}

}  // namespace ember
