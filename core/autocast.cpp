#include "core/autocast.h"

#include <algorithm>
#include <atomic>
#include <unordered_map>
#include <utility>

#include "core/alloc_site.h"
#include "core/autograd.h"
#include "core/base/env_switch.h"
#include "core/base/error.h"
#include "core/base/multi_tensor.h"
#include "core/kernel_table.h"
#include "core/ops.h"

namespace ember {

// cast_parameters' casts, by the parameter's TensorImpl: the parameter (kept, so the
// key stays its), its version when cast, the cast, and whether the cast was recorded
// for autograd (grad mode on and the parameter requiring grad).
struct AutocastGuard::Cache {
  struct Entry {
    Tensor parameter;
    uint64_t version;
    Tensor cast;
    bool recorded;
  };
  std::unordered_map<const void*, Entry> entries;
  // t's cast, if one is kept and still stands for it (t's version and grad mode as
  // when it was cast); else nullptr.
  const Tensor* fresh(const Tensor& t) const {
    const auto it = entries.find(&t.impl());
    return it != entries.end() && it->second.version == t.version() &&
                   it->second.recorded == any_requires_grad({&t})
               ? &it->second.cast
               : nullptr;
  }
};

namespace {
thread_local bool t_enabled = false;
thread_local DType t_dtype = DType::BFloat16;
thread_local AutocastGuard::Cache* t_cache = nullptr;  // the innermost guard's that has one
std::atomic<int> g_cast_parameters{-1};                // -1: EMBER_CAST_PARAMETERS not read yet
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
  if (!t.defined() || t.dtype() != DType::Float32) return t;
  if (const Tensor* kept = t_cache != nullptr ? t_cache->fresh(t) : nullptr) return *kept;
  return cast(t, t_dtype);
}

bool autocast_widens(const Tensor& a, const Tensor& b) {
  if (!t_enabled || !a.defined() || !b.defined() || !autocast_applies(a.device())) return false;
  auto ok = [](DType d) { return d == DType::Float32 || d == t_dtype; };
  return a.dtype() != b.dtype() && ok(a.dtype()) && ok(b.dtype());
}

AutocastGuard::AutocastGuard(DType dtype, bool enabled)
    : previous_enabled_(t_enabled), previous_dtype_(t_dtype), previous_cache_(t_cache) {
  EMBER_CHECK(dtype == DType::BFloat16, "AutocastGuard: dtype ", dtype,
              " is not supported; autocast runs Linear in bfloat16");
  t_enabled = enabled;
  t_dtype = dtype;
}

AutocastGuard::~AutocastGuard() {
  t_enabled = previous_enabled_;
  t_dtype = previous_dtype_;
  t_cache = previous_cache_;
}

void AutocastGuard::cast_parameters(const std::vector<Tensor>& parameters) {
  // EMBER_CAST_PARAMETERS=0: casts nothing, so the ops cast as they run (for comparison).
  if (!t_enabled || !env_switch(g_cast_parameters, "EMBER_CAST_PARAMETERS", true)) return;
  OpSite site("cast");  // named as cast names its allocations
  if (cache_ == nullptr) cache_ = std::make_unique<Cache>();
  t_cache = cache_.get();
  // Per device, in the parameters' order: those autocast lowers (contiguous ones; the
  // rest are cast as the ops reach them), each once; one already cast and unchanged
  // since is left as it is.
  std::vector<std::pair<Device, std::vector<const Tensor*>>> groups;
  for (size_t i = 0; i < parameters.size(); ++i) {
    const Tensor& p = parameters[i];
    EMBER_CHECK(p.defined(), "AutocastGuard::cast_parameters: parameter ", i, " is undefined");
    if (p.dtype() != DType::Float32 || !autocast_applies(p.device()) || !p.is_contiguous())
      continue;
    if (cache_->fresh(p) != nullptr) continue;
    auto g = groups.begin();
    while (g != groups.end() && g->first != p.device()) ++g;
    if (g == groups.end()) g = groups.insert(groups.end(), {p.device(), {}});
    if (std::find_if(g->second.begin(), g->second.end(),
                     [&](const Tensor* q) { return q->is_same(p); }) == g->second.end())
      g->second.push_back(&p);
  }
  for (const auto& [device, members] : groups) {
    std::vector<TensorSpan> spans;
    std::vector<void*> dst;
    std::vector<Tensor> casts;
    for (const Tensor* p : members) {
      casts.push_back(empty(p->sizes(), TensorOptions(t_dtype).device(device)));
      spans.push_back(TensorSpan{p->raw_data(), p->numel(), DType::Float32});
      dst.push_back(casts.back().raw_data());
    }
    kernels::kernels_for(device).multi_tensor_cast(
        {device, spans.data(), dst.data(), static_cast<int64_t>(spans.size())});
    for (size_t j = 0; j < members.size(); ++j) {
      const Tensor& p = *members[j];
      detail::record_cast(casts[j], p);
      cache_->entries.insert_or_assign(
          &p.impl(), Cache::Entry{p, p.version(), casts[j], any_requires_grad({&p})});
    }
  }
}

}  // namespace ember
