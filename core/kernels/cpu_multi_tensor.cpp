// CPU multi-tensor kernels: the norm of many tensors together and their scaling,
// loops in double through core/base/multi_tensor.h (the formulas the CUDA kernels use),
// and float32-to-bfloat16 casts of many tensors.
#include "core/base/dtype.h"
#include "core/base/error.h"
#include "core/base/multi_tensor.h"
#include "core/kernels/cpu_loops.h"
#include "core/kernels/registration.h"

namespace ember::kernels {

namespace {

void multi_tensor_norm(const MultiTensorNormArgs& a) {
  const NormKind k = norm_kind(a.norm_type);
  double total = norm_identity();
  for (int64_t t = 0; t < a.count; ++t) {
    const TensorSpan& s = a.tensors[t];
    detail::dispatch_cpu(s.dtype, [&](auto tag) {
      using S = decltype(tag);
      const S* x = static_cast<const S*>(s.data);
      for (int64_t i = 0; i < s.numel; ++i)
        total = norm_combine(k, total, norm_term(k, a.norm_type, detail::load_as_double(x + i)));
    });
  }
  *a.total = norm_finish(k, a.norm_type, total);
  if (a.clip_coef != nullptr) *a.clip_coef = clip_coefficient(a.max_norm, *a.total);
}

size_t multi_tensor_norm_workspace_bytes(const MultiTensorQuery&) {
  return 0;
}

void multi_tensor_scale(const MultiTensorScaleArgs& a) {
  const double scale = *a.scale;
  for (int64_t t = 0; t < a.count; ++t) {
    const TensorSpan& s = a.tensors[t];
    detail::dispatch_cpu(s.dtype, [&](auto tag) {
      using S = decltype(tag);
      S* x = static_cast<S*>(s.data);
      for (int64_t i = 0; i < s.numel; ++i)
        detail::store_from_double(x + i, detail::load_as_double(x + i) * scale);
    });
  }
}

void multi_tensor_cast(const MultiTensorCastArgs& a) {
  for (int64_t t = 0; t < a.count; ++t) {
    const TensorSpan& s = a.tensors[t];
    EMBER_CHECK(s.dtype == DType::Float32, "multi_tensor_cast: tensor ", t, " is ", s.dtype,
                "; float32 expected");
    const float* x = static_cast<const float*>(s.data);
    BFloat16* y = static_cast<BFloat16*>(a.dst[t]);
    for (int64_t i = 0; i < s.numel; ++i) y[i] = BFloat16(x[i]);
  }
}

}  // namespace

void register_cpu_multi_tensor(KernelFamilies& t) {
  t.multi_tensor_norm = &multi_tensor_norm;
  t.multi_tensor_norm_workspace_bytes = &multi_tensor_norm_workspace_bytes;
  t.multi_tensor_scale = &multi_tensor_scale;
  t.multi_tensor_cast = &multi_tensor_cast;
}

}  // namespace ember::kernels
