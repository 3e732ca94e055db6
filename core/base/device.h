// Where a tensor lives: the host (CPU), one CUDA device (CUDA:n), or the meta
// device (shapes, dtypes and strides without data: core/meta.h), where a step runs
// to predict its memory before it touches a GPU.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

namespace ember {

enum class DeviceType : uint8_t { CPU, CUDA, Meta };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;  // meaningful for CUDA only

  constexpr Device() = default;
  constexpr Device(DeviceType t, int i = 0) : type(t), index(t == DeviceType::CUDA ? i : 0) {}
  // "cpu", "cuda", "cuda:1", "meta"; anything else throws ember::Error naming the text.
  explicit Device(const std::string& spec);
  Device(const char* spec) : Device(std::string(spec)) {}

  static constexpr Device cpu() { return Device(DeviceType::CPU); }
  static constexpr Device cuda(int i = 0) { return Device(DeviceType::CUDA, i); }
  static constexpr Device meta() { return Device(DeviceType::Meta); }

  constexpr bool is_cpu() const { return type == DeviceType::CPU; }
  constexpr bool is_cuda() const { return type == DeviceType::CUDA; }
  constexpr bool is_meta() const { return type == DeviceType::Meta; }
  std::string str() const;

  friend constexpr bool operator==(Device a, Device b) {
    return a.type == b.type && a.index == b.index;
  }
};

std::ostream& operator<<(std::ostream& os, Device d);

constexpr Device kCPU = Device::cpu();
constexpr Device kCUDA = Device::cuda(0);
constexpr Device kMeta = Device::meta();

}  // namespace ember
