// The kernel table (core/kernel_table.h): one per device type, filled once by each
// device's registration. A family a device did not register throws when called,
// naming the family and the device, instead of calling through a null pointer;
// a predicate it did not register answers false (the op composes).
#include <array>

#include "core/base/error.h"
#include "core/kernel_table.h"

namespace ember::kernels {

namespace {

[[noreturn]] void throw_missing(const char* family, Device device) {
  EMBER_FAIL(family, ": no kernel for device ", device, " (", device,
             " does not implement this kernel family)");
}

#define EMBER_MISSING(name, R, Args, kind) \
  R missing_##name(const Args& a) {        \
    throw_missing(#name, a.device);        \
  }
EMBER_KERNEL_FAMILIES(EMBER_MISSING)
#undef EMBER_MISSING

// The answer of a predicate the device did not register: its fused kernel does
// not exist there, so the op composes.
template <typename Args>
bool not_supported(const Args&) {
  return false;
}

template <FamilyKind kind, typename R, typename Args>
void fill(R (*&slot)(const Args&), R (*missing)(const Args&)) {
  if (slot != nullptr) return;
  if constexpr (kind == FamilyKind::predicate)
    slot = &not_supported<Args>;
  else
    slot = missing;
}

void fill_missing(KernelTable& t) {
#define EMBER_FILL(name, R, Args, kind) fill<FamilyKind::kind>(t.name, &missing_##name);
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
#define EMBER_LIST_MISSING(name, R, Args, kind) \
  if (t.name == &missing_##name) missing.push_back(#name);
  EMBER_KERNEL_FAMILIES(EMBER_LIST_MISSING)
#undef EMBER_LIST_MISSING
  return missing;
}

}  // namespace ember::kernels
