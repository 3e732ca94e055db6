// The kernel table (core/kernel_table.h): one per device type, filled once by each
// device's registration. A family a device did not register throws when called,
// naming the family and the device, instead of calling through a null pointer.
#include <array>

#include "core/base/error.h"
#include "core/kernel_table.h"

namespace ember::kernels {

namespace {

[[noreturn]] void throw_missing(const char* family, Device device) {
  EMBER_FAIL(family, ": no kernel for device ", device, " (", device,
             " does not implement this kernel family)");
}

#define EMBER_MISSING(name, R, Args) \
  R missing_##name(const Args& a) {  \
    throw_missing(#name, a.device);  \
  }
EMBER_KERNEL_FAMILIES(EMBER_MISSING)
#undef EMBER_MISSING

void fill_missing(KernelTable& t) {
#define EMBER_FILL(name, R, Args) \
  if (t.name == nullptr) t.name = &missing_##name;
  EMBER_KERNEL_FAMILIES(EMBER_FILL)
#undef EMBER_FILL
}

}  // namespace

const KernelTable& table(DeviceType type) {
  static const std::array<KernelTable, kDeviceTypes> tables = [] {
    std::array<KernelTable, kDeviceTypes> t{};
    register_cpu(t[static_cast<size_t>(DeviceType::CPU)]);
    register_cuda(t[static_cast<size_t>(DeviceType::CUDA)]);
    register_meta(t[static_cast<size_t>(DeviceType::Meta)]);
    for (KernelTable& k : t) fill_missing(k);
    return t;
  }();
  return tables[static_cast<size_t>(type)];
}

std::vector<const char*> missing_families(DeviceType type) {
  const KernelTable& t = table(type);
  std::vector<const char*> missing;
#define EMBER_LIST_MISSING(name, R, Args) \
  if (t.name == &missing_##name) missing.push_back(#name);
  EMBER_KERNEL_FAMILIES(EMBER_LIST_MISSING)
#undef EMBER_LIST_MISSING
  return missing;
}

}  // namespace ember::kernels
