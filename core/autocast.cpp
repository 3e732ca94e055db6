#include "core/autocast.h"

#include "core/base/error.h"

namespace ember {

namespace {
thread_local bool t_enabled = false;
thread_local DType t_dtype = DType::BFloat16;
}  // namespace

bool is_autocast_enabled() { return t_enabled; }
DType autocast_dtype() { return t_dtype; }

AutocastGuard::AutocastGuard(DType dtype, bool enabled)
    : previous_enabled_(t_enabled), previous_dtype_(t_dtype) {
  EMBER_CHECK(dtype == DType::BFloat16, "AutocastGuard: dtype ", dtype,
              " is not supported; autocast runs Linear in bfloat16");
  t_enabled = enabled;
  t_dtype = dtype;
}

AutocastGuard::~AutocastGuard() {
  t_enabled = previous_enabled_;
  t_dtype = previous_dtype_;
}

}  // namespace ember
