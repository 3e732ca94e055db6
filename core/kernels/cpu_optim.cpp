// CPU optimizer updates: the per-element rules of core/base/optim_math.h in double,
// the same formulas the fused CUDA kernels apply; a large tensor's elements are
// spread over the thread pool (each element alone: the same bits at any count).
#include "core/base/error.h"
#include "core/kernels/cpu_parallel.h"
#include "core/kernels/cpu_vec.h"
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

// Elements [lo, hi) of one Adam step, the switches fixed: no branch in the loop, so
// it vectorises (the double math is IEEE per operation: the same bits as one element
// at a time, up to the FMA contraction of the wider clones).
template <typename T, bool kWeightDecay, bool kDecoupled, bool kAmsgrad>
EMBER_CPU_CLONES void adam_range(const AdamConfig& c, T* p, const T* g, T* m, T* v, T* v_max,
                                 double step_size, double bc2_sqrt, int64_t lo, int64_t hi) {
  for (int64_t i = lo; i < hi; ++i) {
    double pv = p[i], mv = m[i], vv = v[i];
    double vm = 0.0;
    if constexpr (kAmsgrad) vm = v_max[i];
    adam_update_as<kWeightDecay, kDecoupled, kAmsgrad>(c, pv, static_cast<double>(g[i]), mv, vv, vm,
                                                       step_size, bc2_sqrt);
    p[i] = static_cast<T>(pv);
    m[i] = static_cast<T>(mv);
    v[i] = static_cast<T>(vv);
    if constexpr (kAmsgrad) v_max[i] = static_cast<T>(vm);
  }
}

template <typename T, bool kWeightDecay, bool kDecoupled, bool kAmsgrad>
void adam_elements(const OptimTensor& t, const AdamConfig& c, double step_size, double bc2_sqrt) {
  T* p = static_cast<T*>(t.param);
  const T* g = static_cast<const T*>(t.grad);
  T* m = static_cast<T*>(t.state[0]);
  T* v = static_cast<T*>(t.state[1]);
  T* v_max = static_cast<T*>(t.state[2]);
  if constexpr (kAmsgrad) EMBER_CHECK(v_max != nullptr, "adam: amsgrad without max_exp_avg_sq");
  cpu::parallel_for(t.numel, cpu::kElementwiseGrain / 4, [&](int64_t lo, int64_t hi) {
    adam_range<T, kWeightDecay, kDecoupled, kAmsgrad>(c, p, g, m, v, v_max, step_size, bc2_sqrt, lo,
                                                      hi);
  });
}

template <typename T>
void adam_one(const OptimTensor& t, const AdamConfig& c) {
  ++*t.step;
  double step_size = 0, bc2_sqrt = 1;
  adam_bias_corrections(c, static_cast<double>(*t.step), step_size, bc2_sqrt);
  with_adam_switches(c, [&]<bool kWeightDecay, bool kDecoupled, bool kAmsgrad>() {
    adam_elements<T, kWeightDecay, kDecoupled, kAmsgrad>(t, c, step_size, bc2_sqrt);
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
