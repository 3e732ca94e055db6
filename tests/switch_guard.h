// Restores a process-wide setting (core/base/env_switch.h: conv2d's implicit GEMM, the
// copies, the vectors, the layer norm's warp rows, ..., and the integer ones such as the
// attention forward's version) when a scope ends, whatever the test case did to it:
// SwitchGuard guard(cuda::row_copy, cuda::set_row_copy).
#pragma once

namespace ember::testing {

template <typename T>
class SwitchGuard {
 public:
  SwitchGuard(T (*get)(), void (*set)(T)) : set_(set), was_(get()) {}
  ~SwitchGuard() { set_(was_); }
  SwitchGuard(const SwitchGuard&) = delete;
  SwitchGuard& operator=(const SwitchGuard&) = delete;

 private:
  void (*set_)(T);
  T was_;
};

}  // namespace ember::testing
