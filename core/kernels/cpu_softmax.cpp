// CPU softmax and log_softmax over the middle axis of (outer, n, inner), in
// double: the reference for cuda/kernels/softmax.cu.
#include <cmath>
#include <vector>

#include "core/kernels/cpu_loops.h"
#include "core/kernels/registration.h"

namespace ember::kernels {

namespace {

using detail::dispatch_cpu;
using detail::load_as_double;
using detail::store_from_double;

void softmax(const SoftmaxArgs& a) {
  dispatch_cpu(a.dtype, [&](auto tag) {
    using S = decltype(tag);
    const S* x = static_cast<const S*>(a.x);
    S* y = static_cast<S*>(a.y);
    for (int64_t o = 0; o < a.outer; ++o)
      for (int64_t i = 0; i < a.inner; ++i) {
        auto at = [&](int64_t k) { return (o * a.n + k) * a.inner + i; };
        double m = -INFINITY;
        for (int64_t k = 0; k < a.n; ++k) m = std::fmax(m, load_as_double(x + at(k)));
        bool nan = false;
        for (int64_t k = 0; k < a.n; ++k) nan = nan || std::isnan(load_as_double(x + at(k)));
        if (nan) m = NAN;  // fmax skips NaN; a NaN anywhere makes the row NaN
        double s = 0.0;
        for (int64_t k = 0; k < a.n; ++k) s += std::exp(load_as_double(x + at(k)) - m);
        const double log_s = std::log(s);
        for (int64_t k = 0; k < a.n; ++k) {
          const double v = load_as_double(x + at(k)) - m;
          store_from_double(y + at(k), a.log ? v - log_s : std::exp(v) / s);
        }
      }
  });
}

void softmax_backward(const SoftmaxBackwardArgs& a) {
  dispatch_cpu(a.dtype, [&](auto tag) {
    using S = decltype(tag);
    const S* y = static_cast<const S*>(a.y);
    const S* dy = static_cast<const S*>(a.d_y);
    S* dx = static_cast<S*>(a.d_x);
    for (int64_t o = 0; o < a.outer; ++o)
      for (int64_t i = 0; i < a.inner; ++i) {
        auto at = [&](int64_t k) { return (o * a.n + k) * a.inner + i; };
        double dot = 0.0;  // sum(d_y y) for softmax, sum(d_y) for log_softmax
        for (int64_t k = 0; k < a.n; ++k)
          dot += a.log ? load_as_double(dy + at(k))
                       : load_as_double(dy + at(k)) * load_as_double(y + at(k));
        for (int64_t k = 0; k < a.n; ++k) {
          const double yv = load_as_double(y + at(k)), g = load_as_double(dy + at(k));
          store_from_double(dx + at(k), a.log ? g - std::exp(yv) * dot : yv * (g - dot));
        }
      }
  });
}

}  // namespace

void register_cpu_softmax(KernelTable& t) {
  t.softmax = &softmax;
  t.softmax_backward = &softmax_backward;
}

}  // namespace ember::kernels
