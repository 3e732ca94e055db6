// Restores a process-wide on/off switch (core/base/env_switch.h: conv2d's implicit
// GEMM, the copies, the vectors, the layer norm's warp rows, ...) when a scope ends,
// whatever the test case did to it: SwitchGuard guard(cuda::row_copy, cuda::set_row_copy).
#pragma once

namespace ember::testing {

class SwitchGuard {
 public:
  SwitchGuard(bool (*get)(), void (*set)(bool)) : set_(set), was_(get()) {}
  ~SwitchGuard() { set_(was_); }
  SwitchGuard(const SwitchGuard&) = delete;
  SwitchGuard& operator=(const SwitchGuard&) = delete;

 private:
  void (*set_)(bool);
  bool was_;
};

}  // namespace ember::testing
