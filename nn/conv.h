// nn::Conv1d, Conv2d and ConvTranspose2d with libtorch's options
// (Conv2dOptions(in, out, 3).stride(1).padding(1), padding(nn::kSame)), over the
// convolution ops of core/ops.h, initialised as PyTorch does (kaiming_uniform_ with
// a = sqrt(5) on the weight, U(-1/sqrt(fan_in), 1/sqrt(fan_in)) on the bias).
// Also ExpandingInt2, the (height, width) pair that takes one int or a braced pair.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <variant>

#include "core/ops.h"
#include "nn/module.h"

namespace ember::nn {

// A (height, width) pair written 3 or {3, 5}, as libtorch's ExpandingArray<2>.
class ExpandingInt2 {
 public:
  ExpandingInt2(int64_t v) : v_{v, v} {}  // NOLINT: implicit, as libtorch's
  ExpandingInt2(std::initializer_list<int64_t> v);
  ExpandingInt2(Int2 v) : v_(v) {}  // NOLINT
  operator Int2() const { return v_; }  // NOLINT
  int64_t operator[](size_t i) const { return v_[i]; }

 private:
  Int2 v_;
};

// padding(nn::kSame) keeps the size (stride 1, odd kernels); kValid is no padding.
struct SamePadding {};
struct ValidPadding {};
inline constexpr SamePadding kSame{};
inline constexpr ValidPadding kValid{};

// How the input is padded before the convolution (PyTorch's padding_mode).
enum class PaddingMode { Zeros, Reflect, Replicate };

template <int D>
class ConvOptions {
 public:
  using Size = std::conditional_t<D == 1, int64_t, ExpandingInt2>;
  using Padding = std::variant<Size, SamePadding, ValidPadding>;
  ConvOptions(int64_t in_channels, int64_t out_channels, Size kernel_size)
      : in_(in_channels), out_(out_channels), kernel_(kernel_size) {}
  ConvOptions& stride(Size v) {
    stride_ = v;
    return *this;
  }
  ConvOptions& padding(Size v) {
    padding_ = v;
    return *this;
  }
  ConvOptions& padding(SamePadding) {
    padding_ = kSame;
    return *this;
  }
  ConvOptions& padding(ValidPadding) {
    padding_ = kValid;
    return *this;
  }
  ConvOptions& dilation(Size v) {
    dilation_ = v;
    return *this;
  }
  ConvOptions& groups(int64_t v) {
    groups_ = v;
    return *this;
  }
  ConvOptions& bias(bool on) {
    bias_ = on;
    return *this;
  }
  ConvOptions& padding_mode(PaddingMode m) {
    padding_mode_ = m;
    return *this;
  }
  ConvOptions& device(Device d) {
    device_ = d;
    return *this;
  }
  int64_t in_channels() const { return in_; }
  int64_t out_channels() const { return out_; }
  Size kernel_size() const { return kernel_; }
  Size stride() const { return stride_; }
  const Padding& padding() const { return padding_; }
  Size dilation() const { return dilation_; }
  int64_t groups() const { return groups_; }
  bool bias() const { return bias_; }
  PaddingMode padding_mode() const { return padding_mode_; }
  Device device() const { return device_; }

 private:
  int64_t in_, out_;
  Size kernel_;
  Size stride_ = 1;
  Padding padding_ = Size(0);
  Size dilation_ = 1;
  int64_t groups_ = 1;
  bool bias_ = true;
  PaddingMode padding_mode_ = PaddingMode::Zeros;
  Device device_ = kCPU;
};
using Conv1dOptions = ConvOptions<1>;
using Conv2dOptions = ConvOptions<2>;

// x (N, C, H, W) or (C, H, W) -> (N, out_channels, H', W').
class Conv2d : public Module {
 public:
  explicit Conv2d(const Conv2dOptions& options);
  Conv2d(int64_t in_channels, int64_t out_channels, ExpandingInt2 kernel_size)
      : Conv2d(Conv2dOptions(in_channels, out_channels, kernel_size)) {}
  Tensor forward(const Tensor& x) const;
  void reset_parameters();
  std::string extra_repr() const override;

  Conv2dOptions options;
  Tensor weight;  // (out, in / groups, kh, kw)
  Tensor bias;    // (out), undefined without bias
};

// x (N, C, L) or (C, L) -> (N, out_channels, L').
class Conv1d : public Module {
 public:
  explicit Conv1d(const Conv1dOptions& options);
  Conv1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size)
      : Conv1d(Conv1dOptions(in_channels, out_channels, kernel_size)) {}
  Tensor forward(const Tensor& x) const;
  void reset_parameters();
  std::string extra_repr() const override;

  Conv1dOptions options;
  Tensor weight;  // (out, in / groups, k)
  Tensor bias;
};

class ConvTranspose2dOptions {
 public:
  ConvTranspose2dOptions(int64_t in_channels, int64_t out_channels, ExpandingInt2 kernel_size)
      : in_(in_channels), out_(out_channels), kernel_(kernel_size) {}
  ConvTranspose2dOptions& stride(ExpandingInt2 v) {
    stride_ = v;
    return *this;
  }
  ConvTranspose2dOptions& padding(ExpandingInt2 v) {
    padding_ = v;
    return *this;
  }
  ConvTranspose2dOptions& output_padding(ExpandingInt2 v) {
    output_padding_ = v;
    return *this;
  }
  ConvTranspose2dOptions& dilation(ExpandingInt2 v) {
    dilation_ = v;
    return *this;
  }
  ConvTranspose2dOptions& groups(int64_t v) {
    groups_ = v;
    return *this;
  }
  ConvTranspose2dOptions& bias(bool on) {
    bias_ = on;
    return *this;
  }
  int64_t in_channels() const { return in_; }
  int64_t out_channels() const { return out_; }
  ExpandingInt2 kernel_size() const { return kernel_; }
  ExpandingInt2 stride() const { return stride_; }
  ExpandingInt2 padding() const { return padding_; }
  ExpandingInt2 output_padding() const { return output_padding_; }
  ExpandingInt2 dilation() const { return dilation_; }
  int64_t groups() const { return groups_; }
  bool bias() const { return bias_; }

 private:
  int64_t in_, out_;
  ExpandingInt2 kernel_;
  ExpandingInt2 stride_ = 1, padding_ = 0, output_padding_ = 0, dilation_ = 1;
  int64_t groups_ = 1;
  bool bias_ = true;
};

class ConvTranspose2d : public Module {
 public:
  explicit ConvTranspose2d(const ConvTranspose2dOptions& options);
  Tensor forward(const Tensor& x) const;
  void reset_parameters();
  std::string extra_repr() const override;

  ConvTranspose2dOptions options;
  Tensor weight;  // (in, out / groups, kh, kw)
  Tensor bias;    // (out)
};

}  // namespace ember::nn
