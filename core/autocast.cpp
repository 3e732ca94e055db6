#include "core/autocast.h"

#include "core/base/error.h"
#include "core/kernel_table.h"
#include "core/ops.h"

namespace ember {

namespace {
thread_local bool t_enabled = false;
thread_local DType t_dtype = DType::BFloat16;
}  // namespace

bool is_autocast_enabled() {
  return t_enabled;
}
DType autocast_dtype() {
  return t_dtype;
}

bool autocast_applies(Device device) {
  return kernels::kernels_for(device).hooks.autocasts(device.index);
}

bool autocast_lowers(std::initializer_list<const Tensor*> operands) {
  if (!t_enabled || operands.size() == 0) return false;
  const Tensor& first = **operands.begin();
  if (!first.defined() || !autocast_applies(first.device())) return false;
  bool any_f32 = false;
  for (const Tensor* t : operands) any_f32 |= t->defined() && t->dtype() == DType::Float32;
  return any_f32 && (first.dtype() == DType::Float32 || first.dtype() == t_dtype);
}

Tensor autocast_lower(const Tensor& t) {
  return t.defined() && t.dtype() == DType::Float32 ? cast(t, t_dtype) : t;
}

bool autocast_widens(const Tensor& a, const Tensor& b) {
  if (!t_enabled || !a.defined() || !b.defined() || !autocast_applies(a.device())) return false;
  auto ok = [](DType d) { return d == DType::Float32 || d == t_dtype; };
  return a.dtype() != b.dtype() && ok(a.dtype()) && ok(b.dtype());
}

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
