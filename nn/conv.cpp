#include "nn/conv.h"

#include <cmath>
#include <sstream>

#include "nn/init.h"

namespace ember::nn {

ExpandingInt2::ExpandingInt2(std::initializer_list<int64_t> v) {
  EMBER_CHECK(v.size() == 2, "ExpandingInt2: expected one value or two (height, width), got ",
              v.size());
  v_ = {*v.begin(), *(v.begin() + 1)};
}

namespace {

void check_conv_options(const char* op, int64_t in, int64_t out, int64_t groups) {
  EMBER_CHECK(in > 0 && out > 0, op, ": in_channels and out_channels must be positive, got ", in,
              " and ", out);
  EMBER_CHECK(groups >= 1 && in % groups == 0 && out % groups == 0, op, ": in_channels ", in,
              " and out_channels ", out, " must both be divisible by groups = ", groups);
}

void init_conv(Tensor& weight, Tensor& bias) {
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    const double fan_in = static_cast<double>(init::calculate_fan_in_and_fan_out(weight).first);
    const double bound = fan_in > 0 ? 1.0 / std::sqrt(fan_in) : 0.0;
    init::uniform_(bias, -bound, bound);
  }
}

// The explicit padding a Conv module's options ask for, and the input padded by
// its padding_mode where that is not zeros (then the conv itself pads nothing).
Int2 resolve_padding(const Conv2dOptions::Padding& p, Int2 kernel, Int2 stride, Int2 dilation,
                     const char* op) {
  if (std::holds_alternative<SamePadding>(p)) return ember::detail::same_padding(op, kernel, stride, dilation);
  if (std::holds_alternative<ValidPadding>(p)) return {0, 0};
  return std::get<ExpandingInt2>(p);
}

const char* mode_name(PaddingMode m) {
  return m == PaddingMode::Zeros ? "zeros" : m == PaddingMode::Reflect ? "reflect" : "replicate";
}

}  // namespace

// ---------------------------------------------------------------- Conv2d

Conv2d::Conv2d(const Conv2dOptions& opts) : options(opts) {
  check_conv_options("Conv2d", opts.in_channels(), opts.out_channels(), opts.groups());
  const Int2 k = opts.kernel_size();
  EMBER_CHECK(k[0] > 0 && k[1] > 0, "Conv2d: kernel_size must be positive, got (", k[0], ", ",
              k[1], ")");
  resolve_padding(opts.padding(), k, opts.stride(), opts.dilation(), "Conv2d");  // checks "same"
  const TensorOptions where = TensorOptions().device(opts.device());
  weight = register_parameter(
      "weight", empty({opts.out_channels(), opts.in_channels() / opts.groups(), k[0], k[1]}, where));
  if (opts.bias()) bias = register_parameter("bias", empty({opts.out_channels()}, where));
  reset_parameters();
}

void Conv2d::reset_parameters() {
  init_conv(weight, bias);
}

Tensor Conv2d::forward(const Tensor& x) const {
  ForwardScope scope(*this);
  const Int2 pad =
      resolve_padding(options.padding(), options.kernel_size(), options.stride(),
                      options.dilation(), "Conv2d");
  if (options.padding_mode() == PaddingMode::Zeros)
    return conv2d(x, weight, bias, options.stride(), pad, options.dilation(), options.groups());
  const PadMode mode =
      options.padding_mode() == PaddingMode::Reflect ? PadMode::Reflect : PadMode::Replicate;
  Tensor padded = ember::pad(x, {pad[1], pad[1], pad[0], pad[0]}, mode);
  return conv2d(padded, weight, bias, options.stride(), {0, 0}, options.dilation(),
                options.groups());
}

std::string Conv2d::extra_repr() const {
  std::ostringstream os;
  const Int2 k = options.kernel_size(), s = options.stride();
  os << options.in_channels() << ", " << options.out_channels() << ", kernel_size=(" << k[0]
     << ", " << k[1] << "), stride=(" << s[0] << ", " << s[1] << ")";
  if (std::holds_alternative<SamePadding>(options.padding()))
    os << ", padding=same";
  else if (std::holds_alternative<ExpandingInt2>(options.padding())) {
    const Int2 p = std::get<ExpandingInt2>(options.padding());
    if (p[0] != 0 || p[1] != 0) os << ", padding=(" << p[0] << ", " << p[1] << ")";
  }
  if (options.groups() != 1) os << ", groups=" << options.groups();
  if (!options.bias()) os << ", bias=false";
  if (options.padding_mode() != PaddingMode::Zeros)
    os << ", padding_mode=" << mode_name(options.padding_mode());
  return os.str();
}

// ---------------------------------------------------------------- Conv1d

Conv1d::Conv1d(const Conv1dOptions& opts) : options(opts) {
  check_conv_options("Conv1d", opts.in_channels(), opts.out_channels(), opts.groups());
  EMBER_CHECK(opts.kernel_size() > 0, "Conv1d: kernel_size must be positive, got ",
              opts.kernel_size());
  const TensorOptions where = TensorOptions().device(opts.device());
  weight = register_parameter(
      "weight",
      empty({opts.out_channels(), opts.in_channels() / opts.groups(), opts.kernel_size()}, where));
  if (opts.bias()) bias = register_parameter("bias", empty({opts.out_channels()}, where));
  reset_parameters();
}

void Conv1d::reset_parameters() {
  init_conv(weight, bias);
}

Tensor Conv1d::forward(const Tensor& x) const {
  ForwardScope scope(*this);
  int64_t pad = 0;
  const auto& p = options.padding();
  if (std::holds_alternative<SamePadding>(p))
    pad = ember::detail::same_padding("Conv1d", {1, options.kernel_size()}, {1, options.stride()},
                               {1, options.dilation()})[1];
  else if (std::holds_alternative<int64_t>(p))
    pad = std::get<int64_t>(p);
  if (options.padding_mode() == PaddingMode::Zeros)
    return conv1d(x, weight, bias, options.stride(), pad, options.dilation(), options.groups());
  const PadMode mode =
      options.padding_mode() == PaddingMode::Reflect ? PadMode::Reflect : PadMode::Replicate;
  return conv1d(ember::pad(x, {pad, pad}, mode), weight, bias, options.stride(), 0,
                options.dilation(), options.groups());
}

std::string Conv1d::extra_repr() const {
  std::ostringstream os;
  os << options.in_channels() << ", " << options.out_channels()
     << ", kernel_size=(" << options.kernel_size() << ",), stride=(" << options.stride() << ",)";
  if (options.groups() != 1) os << ", groups=" << options.groups();
  if (!options.bias()) os << ", bias=false";
  return os.str();
}

// ---------------------------------------------------------------- ConvTranspose2d

ConvTranspose2d::ConvTranspose2d(const ConvTranspose2dOptions& opts) : options(opts) {
  check_conv_options("ConvTranspose2d", opts.in_channels(), opts.out_channels(), opts.groups());
  const Int2 k = opts.kernel_size();
  EMBER_CHECK(k[0] > 0 && k[1] > 0, "ConvTranspose2d: kernel_size must be positive, got (", k[0],
              ", ", k[1], ")");
  weight = register_parameter(
      "weight", empty({opts.in_channels(), opts.out_channels() / opts.groups(), k[0], k[1]}));
  if (opts.bias()) bias = register_parameter("bias", empty({opts.out_channels()}));
  reset_parameters();
}

void ConvTranspose2d::reset_parameters() {
  // PyTorch's fan_in for a transposed conv's weight (in, out/g, kh, kw) is
  // (out/g) * kh * kw, which calculate_fan_in_and_fan_out reads off dim 1.
  init_conv(weight, bias);
}

Tensor ConvTranspose2d::forward(const Tensor& x) const {
  ForwardScope scope(*this);
  return conv_transpose2d(x, weight, bias, options.stride(), options.padding(),
                          options.output_padding(), options.groups(), options.dilation());
}

std::string ConvTranspose2d::extra_repr() const {
  std::ostringstream os;
  const Int2 k = options.kernel_size(), s = options.stride();
  os << options.in_channels() << ", " << options.out_channels() << ", kernel_size=(" << k[0]
     << ", " << k[1] << "), stride=(" << s[0] << ", " << s[1] << ")";
  return os.str();
}

}  // namespace ember::nn
