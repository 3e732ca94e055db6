// The kernel table (core/kernel_table.h): every device type has an entry for
// every family (its kernel, or one that throws naming the family and the device),
// fused-op predicates answer per device and dtype, and device services go through
// the device's hooks.
#include <doctest/doctest.h>

#include <string>
#include <utility>
#include <vector>

#include "core/kernel_table.h"
#include "core/kernels/cpu_parallel.h"
#include "core/ops.h"
#include "error_text.h"

using namespace ember;
using ember::testing::contains;
using ember::testing::error_of;

TEST_CASE("kernel table: every family of every device type is callable") {
  for (DeviceType type : {DeviceType::CPU, DeviceType::CUDA, DeviceType::Meta}) {
    const kernels::KernelTable& t = kernels::table(type);
#define EMBER_CHECK_FAMILY(name, R, Args, kind) CHECK(static_cast<bool>(t.name));
    EMBER_KERNEL_FAMILIES(EMBER_CHECK_FAMILY)
#undef EMBER_CHECK_FAMILY
    CHECK(static_cast<bool>(t.hooks.check));
    CHECK(static_cast<bool>(t.hooks.allocator));
    CHECK(static_cast<bool>(t.hooks.tensor_allocator));
    CHECK(static_cast<bool>(t.hooks.autocasts));
    CHECK(static_cast<bool>(t.hooks.count));
  }
}

TEST_CASE("kernel table: a family the device lacks throws naming it and the device") {
  const kernels::KernelTable& cpu = kernels::kernels_for(kCPU);
  // A predicate a device leaves out answers false: the CPU has no fused bias
  // gradient or MSE (linear() and mse_loss() compose there). Its fused Linear
  // forward runs through OpenBLAS (float32 and float64) and not in bfloat16.
  CHECK_FALSE(cpu.linear_bias_grad_fused_supported({kCPU, kFloat32}));
  CHECK_FALSE(cpu.linear_fused_supported({kCPU, kBFloat16}));
  CHECK_FALSE(cpu.mse_fused_supported({kCPU, kFloat32}));
  // (layer norm, cross-entropy and batch norm have CPU fast paths in float32 only:
  // core/kernels/cpu_softmax.cpp, cpu_batch_norm.cpp)
  CHECK_FALSE(cpu.cross_entropy_fused_supported({kCPU, kFloat64, 4, 10}));
  CHECK_FALSE(cpu.layer_norm_fused_supported({kCPU, kFloat64, 4, 10}));
  CHECK_FALSE(cpu.rms_norm_fused_supported({kCPU, kFloat32, 4, 10}));
  CHECK_FALSE(cpu.batch_norm_fused_supported({kCPU, kFloat64, 4, 3, 10}));  // composes
  CHECK(cpu.batch_norm_fused_supported({kCPU, kFloat32, 4, 3, 10}) == kernels::cpu::fast_paths());
  // Predicates are not missing families; the CPU's compute ones it lacks are.
  for (const char* family : kernels::missing_families(DeviceType::CPU))
    CHECK(std::string(family).find("_supported") == std::string::npos);
  kernels::MseArgs args{};
  args.device = kCPU;
  const std::string e = error_of([&] { cpu.mse_fused(args); });
  CHECK(contains(e, "mse_fused: no kernel for device cpu"));
}

TEST_CASE("kernel table: device services go through the device's hooks") {
  CHECK_NOTHROW(check_device(kCPU));
  CHECK(kernels::kernels_for(kCPU).hooks.count() == 1);
  CHECK_FALSE(is_capturing(kCPU));
  CHECK_NOTHROW(check_not_capturing(kCPU, "item()"));
  // A CUDA device past the last one is refused with its index named.
  const int n = kernels::kernels_for(kCUDA).hooks.count();
  CHECK(contains(error_of([&] { check_device(Device::cuda(n + 3)); }), std::to_string(n + 3)));
}

TEST_CASE("device services: device counts and pinned staging answer through the hooks") {
  CHECK(device_count(DeviceType::CPU) == 1);
  CHECK(device_count(DeviceType::Meta) == 1);
  CHECK(device_count(DeviceType::CUDA) >= 0);
  // The host and the meta device take no pinned copies: a buffer is refused there.
  for (Device d : {kCPU, kMeta}) {
    CHECK_FALSE(pinned_staging(d));
    PinnedStaging s;
    CHECK(contains(error_of([&] { s.acquire(16, d); }), "takes no pinned host copies"));
  }
}

TEST_CASE("device services: a pinned staging buffer copies to the GPU and is reused" *
          doctest::test_suite("cuda")) {
  REQUIRE(pinned_staging(kCUDA));
  PinnedStaging s;
  const Tensor t = empty({4}, TensorOptions(kFloat32).device(kCUDA));
  for (float base : {1.0f, 10.0f}) {  // the second acquire waits for the first copy
    auto* p = static_cast<float*>(s.acquire(4 * sizeof(float), kCUDA));
    for (int i = 0; i < 4; ++i) p[i] = base + static_cast<float>(i);
    s.copy_to_device(t.raw_data(), 4 * sizeof(float), kCUDA);
    CHECK(t.to_vector<float>() == std::vector<float>{base, base + 1, base + 2, base + 3});
  }
  PinnedStaging moved(std::move(s));  // the buffer moves; s frees nothing
  CHECK(moved.acquire(8, kCUDA) != nullptr);
}
