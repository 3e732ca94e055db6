#include "core/base/device.h"

#include <charconv>

#include "core/base/error.h"

namespace ember {

Device::Device(const std::string& spec) {
  if (spec == "cpu") {
    *this = Device::cpu();
    return;
  }
  if (spec == "meta") {
    *this = Device::meta();
    return;
  }
  if (spec == "cuda") {
    *this = Device::cuda(0);
    return;
  }
  if (spec.rfind("cuda:", 0) == 0) {
    int i = -1;
    const char* first = spec.data() + 5;
    const char* last = spec.data() + spec.size();
    auto [ptr, ec] = std::from_chars(first, last, i);
    EMBER_CHECK(ec == std::errc() && ptr == last && i >= 0, "Device: bad device index in '", spec,
                "' (expected cuda:N with N >= 0)");
    *this = Device::cuda(i);
    return;
  }
  EMBER_FAIL("Device: unknown device '", spec, "' (expected cpu, cuda, cuda:N or meta)");
}

std::string Device::str() const {
  switch (type) {
    case DeviceType::CPU:
      return "cpu";
    case DeviceType::Meta:
      return "meta";
    default:
      return "cuda:" + std::to_string(index);
  }
}

std::ostream& operator<<(std::ostream& os, Device d) {
  return os << d.str();
}

}  // namespace ember
