#include "nn/pooling.h"

#include <sstream>

namespace ember::nn {

namespace {
std::string pair_str(Int2 v) {
  std::ostringstream os;
  os << '(' << v[0] << ", " << v[1] << ')';
  return os.str();
}
void check_kernel(const char* op, Int2 k, Int2 s) {
  EMBER_CHECK(k[0] > 0 && k[1] > 0, op, ": kernel_size must be positive, got ", pair_str(k));
  EMBER_CHECK(s[0] > 0 && s[1] > 0, op, ": stride must be positive, got ", pair_str(s));
}
}  // namespace

MaxPool2d::MaxPool2d(const MaxPool2dOptions& opts) : options(opts) {
  check_kernel("MaxPool2d", opts.kernel_size(), opts.stride());
}
Tensor MaxPool2d::forward(const Tensor& x) const {
  ForwardScope scope(*this);
  return max_pool2d(x, options.kernel_size(), options.stride(), options.padding(),
                    options.dilation(), options.ceil_mode());
}
ValuesAndIndices MaxPool2d::forward_with_indices(const Tensor& x) const {
  ForwardScope scope(*this);
  return max_pool2d_with_indices(x, options.kernel_size(), options.stride(), options.padding(),
                                 options.dilation(), options.ceil_mode());
}
std::string MaxPool2d::extra_repr() const {
  return "kernel_size=" + pair_str(options.kernel_size()) + ", stride=" +
         pair_str(options.stride()) + ", padding=" + pair_str(options.padding()) +
         (options.ceil_mode() ? ", ceil_mode=True" : "");
}

AvgPool2d::AvgPool2d(const AvgPool2dOptions& opts) : options(opts) {
  check_kernel("AvgPool2d", opts.kernel_size(), opts.stride());
}
Tensor AvgPool2d::forward(const Tensor& x) const {
  ForwardScope scope(*this);
  return avg_pool2d(x, options.kernel_size(), options.stride(), options.padding(),
                    options.ceil_mode(), options.count_include_pad(), options.divisor_override());
}
std::string AvgPool2d::extra_repr() const {
  return "kernel_size=" + pair_str(options.kernel_size()) + ", stride=" +
         pair_str(options.stride()) + ", padding=" + pair_str(options.padding());
}

AdaptiveAvgPool2d::AdaptiveAvgPool2d(const AdaptiveAvgPool2dOptions& opts) : options(opts) {
  const Int2 o = opts.output_size();
  EMBER_CHECK(o[0] > 0 && o[1] > 0, "AdaptiveAvgPool2d: output_size must be positive, got ",
              pair_str(o));
}
Tensor AdaptiveAvgPool2d::forward(const Tensor& x) const {
  ForwardScope scope(*this);
  return adaptive_avg_pool2d(x, options.output_size());
}
std::string AdaptiveAvgPool2d::extra_repr() const {
  return "output_size=" + pair_str(options.output_size());
}

}  // namespace ember::nn
