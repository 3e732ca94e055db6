#include "core/anomaly.h"

#include <cmath>
#include <string>
#include <string_view>

#include "core/autograd.h"
#include "core/kernel_table.h"
#include "core/kernels/cpu_loops.h"
#include "core/tensor.h"

namespace ember {

namespace {
thread_local bool t_detect_anomaly = false;

// "MseLossBackward" -> "MseLoss": the forward op a backward node belongs to.
std::string forward_name(const char* grad_fn) {
  std::string_view n(grad_fn);
  constexpr std::string_view kSuffix = "Backward";
  if (n.size() > kSuffix.size() && n.substr(n.size() - kSuffix.size()) == kSuffix)
    n.remove_suffix(kSuffix.size());
  return std::string(n);
}

// "NaN", "Inf" or "NaN and Inf" for a tensor known not to be all finite.
const char* what_is_wrong(const Tensor& t) {
  Tensor h = t.detach().to(kCPU, kFloat64).contiguous();
  const double* p = h.data_ptr<double>();
  bool nan = false, inf = false;
  for (int64_t i = 0; i < h.numel(); ++i) {
    nan |= std::isnan(p[i]);
    inf |= std::isinf(p[i]);
  }
  return nan && inf ? "NaN and Inf" : nan ? "NaN" : "Inf";
}
}  // namespace

void set_detect_anomaly(bool enabled) {
  t_detect_anomaly = enabled;
}
bool is_anomaly_enabled() {
  return t_detect_anomaly;
}

DetectAnomalyGuard::DetectAnomalyGuard(bool enabled) : previous_(t_detect_anomaly) {
  t_detect_anomaly = enabled;
}
DetectAnomalyGuard::~DetectAnomalyGuard() {
  t_detect_anomaly = previous_;
}

bool all_finite(const Tensor& t) {
  if (!t.defined() || !is_floating(t.dtype()) || t.numel() == 0) return true;
  check_holds_data(t.device(), "anomaly detection (set_detect_anomaly)");
  check_not_capturing(t.device(), "anomaly detection (set_detect_anomaly)",
                      "read values back to the host");
  NoGradGuard no_grad;
  const Tensor h = t.detach().to(kCPU).contiguous();
  return detail::dispatch_cpu(h.dtype(), [&](auto tag) {
    using S = decltype(tag);
    const S* p = static_cast<const S*>(h.raw_data());
    for (int64_t i = 0; i < h.numel(); ++i)
      if (!std::isfinite(detail::load_as_double(p + i))) return false;
    return true;
  });
}

namespace detail {

void check_forward_anomaly(const Tensor& out, const char* grad_fn, const Tensor* const* inputs,
                           size_t n) {
  if (all_finite(out)) return;
  NoGradGuard no_grad;
  std::string origin = " from finite inputs";
  for (size_t i = 0; i < n; ++i) {
    if (!all_finite(*inputs[i])) {
      origin = " (its input " + std::to_string(i) + " already held " + what_is_wrong(*inputs[i]) +
               ", made outside autograd: the data, a parameter or a no-grad op)";
      break;
    }
  }
  EMBER_FAIL("anomaly detected: forward of ", forward_name(grad_fn), " (grad_fn ", grad_fn,
             ") produced ", what_is_wrong(out), " in its output of shape ", shape_str(out.sizes()),
             origin);
}

void check_backward_anomaly(const Node& node, size_t input, const Tensor& grad) {
  if (all_finite(grad)) return;
  NoGradGuard no_grad;
  EMBER_FAIL("anomaly detected: backward of ", node.name(), " returned ", what_is_wrong(grad),
             " in the gradient for its input ", input, " of shape ", shape_str(grad.sizes()));
}

}  // namespace detail

}  // namespace ember
