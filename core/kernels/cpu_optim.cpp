// CPU optimizer updates: the per-element rules of core/base/optim_math.h in double,
// the same formulas the fused CUDA kernels apply; a large tensor's elements are
// spread over the thread pool (each element alone: the same bits at any count).
#include "core/kernels/cpu_parallel.h"
#include "core/kernels/registration.h"

namespace ember::kernels {

namespace {

template <typename T>
void sgd_one(const OptimTensor& t, const SgdConfig& c) {
  T* p = static_cast<T*>(t.param);
  const T* g = static_cast<const T*>(t.grad);
  T* buf = static_cast<T*>(t.state[0]);
  cpu::parallel_for(t.numel, cpu::kElementwiseGrain / 4, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      double pv = p[i], bv = buf ? static_cast<double>(buf[i]) : 0.0;
      sgd_update(c, pv, static_cast<double>(g[i]), bv, t.first_step);
      p[i] = static_cast<T>(pv);
      if (buf) buf[i] = static_cast<T>(bv);
    }
  });
}

template <typename T>
void adam_one(const OptimTensor& t, const AdamConfig& c) {
  ++*t.step;
  double step_size = 0, bc2_sqrt = 1;
  adam_bias_corrections(c, static_cast<double>(*t.step), step_size, bc2_sqrt);
  T* p = static_cast<T*>(t.param);
  const T* g = static_cast<const T*>(t.grad);
  T* m = static_cast<T*>(t.state[0]);
  T* v = static_cast<T*>(t.state[1]);
  T* v_max = static_cast<T*>(t.state[2]);
  cpu::parallel_for(t.numel, cpu::kElementwiseGrain / 4, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      double pv = p[i], mv = m[i], vv = v[i];
      double vm = v_max ? static_cast<double>(v_max[i]) : 0.0;
      adam_update(c, pv, static_cast<double>(g[i]), mv, vv, vm, step_size, bc2_sqrt);
      p[i] = static_cast<T>(pv);
      m[i] = static_cast<T>(mv);
      v[i] = static_cast<T>(vv);
      if (v_max) v_max[i] = static_cast<T>(vm);
    }
  });
}

void fused_sgd(const FusedSgdArgs& a) {
  for (int64_t k = 0; k < a.count; ++k) {
    if (a.tensors[k].is_double)
      sgd_one<double>(a.tensors[k], a.config);
    else
      sgd_one<float>(a.tensors[k], a.config);
  }
}

void fused_adam(const FusedAdamArgs& a) {
  for (int64_t k = 0; k < a.count; ++k) {
    if (a.tensors[k].is_double)
      adam_one<double>(a.tensors[k], a.config);
    else
      adam_one<float>(a.tensors[k], a.config);
  }
}

}  // namespace

void register_cpu_optim(KernelFamilies& t) {
  t.fused_sgd = &fused_sgd;
  t.fused_adam = &fused_adam;
}

}  // namespace ember::kernels
