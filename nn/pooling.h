// nn::MaxPool2d, AvgPool2d and AdaptiveAvgPool2d with libtorch's options
// (MaxPool2dOptions(2).stride(2).ceil_mode(true)), over the pooling ops of core/ops.h.
#pragma once

#include <string>

#include "nn/conv.h"

namespace ember::nn {

class MaxPool2dOptions {
 public:
  MaxPool2dOptions(ExpandingInt2 kernel_size) : kernel_(kernel_size), stride_(kernel_size) {}
  MaxPool2dOptions& stride(ExpandingInt2 v) {
    stride_ = v;
    return *this;
  }
  MaxPool2dOptions& padding(ExpandingInt2 v) {
    padding_ = v;
    return *this;
  }
  MaxPool2dOptions& dilation(ExpandingInt2 v) {
    dilation_ = v;
    return *this;
  }
  MaxPool2dOptions& ceil_mode(bool on) {
    ceil_mode_ = on;
    return *this;
  }
  ExpandingInt2 kernel_size() const { return kernel_; }
  ExpandingInt2 stride() const { return stride_; }
  ExpandingInt2 padding() const { return padding_; }
  ExpandingInt2 dilation() const { return dilation_; }
  bool ceil_mode() const { return ceil_mode_; }

 private:
  ExpandingInt2 kernel_, stride_;
  ExpandingInt2 padding_ = 0, dilation_ = 1;
  bool ceil_mode_ = false;
};

class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(const MaxPool2dOptions& options);
  Tensor forward(const Tensor& x) const;
  // The values and the flat input index of each maximum (PyTorch's return_indices).
  ValuesAndIndices forward_with_indices(const Tensor& x) const;
  std::string extra_repr() const override;
  MaxPool2dOptions options;
};

class AvgPool2dOptions {
 public:
  AvgPool2dOptions(ExpandingInt2 kernel_size) : kernel_(kernel_size), stride_(kernel_size) {}
  AvgPool2dOptions& stride(ExpandingInt2 v) {
    stride_ = v;
    return *this;
  }
  AvgPool2dOptions& padding(ExpandingInt2 v) {
    padding_ = v;
    return *this;
  }
  AvgPool2dOptions& ceil_mode(bool on) {
    ceil_mode_ = on;
    return *this;
  }
  AvgPool2dOptions& count_include_pad(bool on) {
    count_include_pad_ = on;
    return *this;
  }
  // 0: none (divide by the window's count).
  AvgPool2dOptions& divisor_override(int64_t v) {
    divisor_override_ = v;
    return *this;
  }
  ExpandingInt2 kernel_size() const { return kernel_; }
  ExpandingInt2 stride() const { return stride_; }
  ExpandingInt2 padding() const { return padding_; }
  bool ceil_mode() const { return ceil_mode_; }
  bool count_include_pad() const { return count_include_pad_; }
  int64_t divisor_override() const { return divisor_override_; }

 private:
  ExpandingInt2 kernel_, stride_;
  ExpandingInt2 padding_ = 0;
  bool ceil_mode_ = false, count_include_pad_ = true;
  int64_t divisor_override_ = 0;
};

class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(const AvgPool2dOptions& options);
  Tensor forward(const Tensor& x) const;
  std::string extra_repr() const override;
  AvgPool2dOptions options;
};

class AdaptiveAvgPool2dOptions {
 public:
  AdaptiveAvgPool2dOptions(ExpandingInt2 output_size) : output_(output_size) {}
  ExpandingInt2 output_size() const { return output_; }

 private:
  ExpandingInt2 output_;
};

class AdaptiveAvgPool2d : public Module {
 public:
  explicit AdaptiveAvgPool2d(const AdaptiveAvgPool2dOptions& options);
  Tensor forward(const Tensor& x) const;
  std::string extra_repr() const override;
  AdaptiveAvgPool2dOptions options;
};

}  // namespace ember::nn
