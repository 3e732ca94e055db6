// nn::functional's convolution, pooling, batch-statistics and padding forms, with
// libtorch's FuncOptions: F::conv2d(x, w, F::Conv2dFuncOptions().stride(2).padding(1)),
// F::max_pool2d(x, F::MaxPool2dFuncOptions(2)), F::batch_norm(x, mean, var,
// F::BatchNormFuncOptions().training(true)), F::pad(x, F::PadFuncOptions({1, 1})).
#pragma once

#include <vector>

#include "nn/conv.h"
#include "nn/pooling.h"

namespace ember::nn::functional {

class Conv2dFuncOptions {
 public:
  Conv2dFuncOptions& bias(const Tensor& b) {
    bias_ = b;
    return *this;
  }
  Conv2dFuncOptions& stride(ExpandingInt2 v) {
    stride_ = v;
    return *this;
  }
  Conv2dFuncOptions& padding(ExpandingInt2 v) {
    padding_ = v;
    same_ = false;
    return *this;
  }
  Conv2dFuncOptions& padding(SamePadding) {
    same_ = true;
    return *this;
  }
  Conv2dFuncOptions& padding(ValidPadding) {
    padding_ = 0;
    same_ = false;
    return *this;
  }
  Conv2dFuncOptions& dilation(ExpandingInt2 v) {
    dilation_ = v;
    return *this;
  }
  Conv2dFuncOptions& groups(int64_t v) {
    groups_ = v;
    return *this;
  }
  const Tensor& bias() const { return bias_; }
  ExpandingInt2 stride() const { return stride_; }
  ExpandingInt2 padding() const { return padding_; }
  bool same() const { return same_; }
  ExpandingInt2 dilation() const { return dilation_; }
  int64_t groups() const { return groups_; }

 private:
  Tensor bias_;
  ExpandingInt2 stride_ = 1, padding_ = 0, dilation_ = 1;
  bool same_ = false;
  int64_t groups_ = 1;
};

inline Tensor conv2d(const Tensor& input, const Tensor& weight,
                     const Conv2dFuncOptions& o = {}) {
  Int2 pad = o.padding();
  if (o.same() && weight.defined() && weight.dim() == 4)
    pad = ember::detail::same_padding("conv2d", {weight.size(2), weight.size(3)}, o.stride(),
                                      o.dilation());
  return ember::conv2d(input, weight, o.bias(), o.stride(), pad, o.dilation(), o.groups());
}

using MaxPool2dFuncOptions = MaxPool2dOptions;
using AvgPool2dFuncOptions = AvgPool2dOptions;
using AdaptiveAvgPool2dFuncOptions = AdaptiveAvgPool2dOptions;

inline Tensor max_pool2d(const Tensor& input, const MaxPool2dFuncOptions& o) {
  return ember::max_pool2d(input, o.kernel_size(), o.stride(), o.padding(), o.dilation(),
                           o.ceil_mode());
}
inline Tensor avg_pool2d(const Tensor& input, const AvgPool2dFuncOptions& o) {
  return ember::avg_pool2d(input, o.kernel_size(), o.stride(), o.padding(), o.ceil_mode(),
                           o.count_include_pad(), o.divisor_override());
}
inline Tensor adaptive_avg_pool2d(const Tensor& input, const AdaptiveAvgPool2dFuncOptions& o) {
  return ember::adaptive_avg_pool2d(input, o.output_size());
}

class BatchNormFuncOptions {
 public:
  BatchNormFuncOptions& weight(const Tensor& t) {
    weight_ = t;
    return *this;
  }
  BatchNormFuncOptions& bias(const Tensor& t) {
    bias_ = t;
    return *this;
  }
  BatchNormFuncOptions& training(bool on) {
    training_ = on;
    return *this;
  }
  BatchNormFuncOptions& momentum(double v) {
    momentum_ = v;
    return *this;
  }
  BatchNormFuncOptions& eps(double v) {
    eps_ = v;
    return *this;
  }
  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }
  bool training() const { return training_; }
  double momentum() const { return momentum_; }
  double eps() const { return eps_; }

 private:
  Tensor weight_, bias_;
  bool training_ = false;  // libtorch's default, as F.batch_norm's
  double momentum_ = 0.1, eps_ = 1e-5;
};

inline Tensor batch_norm(const Tensor& input, const Tensor& running_mean,
                         const Tensor& running_var, const BatchNormFuncOptions& o = {}) {
  return ember::batch_norm(input, running_mean, running_var, o.weight(), o.bias(), o.training(),
                           o.momentum(), o.eps());
}

class GroupNormFuncOptions {
 public:
  GroupNormFuncOptions(int64_t num_groups) : num_groups_(num_groups) {}
  GroupNormFuncOptions& weight(const Tensor& t) {
    weight_ = t;
    return *this;
  }
  GroupNormFuncOptions& bias(const Tensor& t) {
    bias_ = t;
    return *this;
  }
  GroupNormFuncOptions& eps(double v) {
    eps_ = v;
    return *this;
  }
  int64_t num_groups() const { return num_groups_; }
  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }
  double eps() const { return eps_; }

 private:
  int64_t num_groups_;
  Tensor weight_, bias_;
  double eps_ = 1e-5;
};

inline Tensor group_norm(const Tensor& input, const GroupNormFuncOptions& o) {
  return ember::group_norm(input, o.num_groups(), o.weight(), o.bias(), o.eps());
}

class PadFuncOptions {
 public:
  PadFuncOptions(std::vector<int64_t> pad) : pad_(std::move(pad)) {}
  PadFuncOptions& mode(PadMode m) {
    mode_ = m;
    return *this;
  }
  PadFuncOptions& value(double v) {
    value_ = v;
    return *this;
  }
  const std::vector<int64_t>& pad() const { return pad_; }
  PadMode mode() const { return mode_; }
  double value() const { return value_; }

 private:
  std::vector<int64_t> pad_;
  PadMode mode_ = PadMode::Constant;
  double value_ = 0.0;
};

inline Tensor pad(const Tensor& input, const PadFuncOptions& o) {
  return ember::pad(input, o.pad(), o.mode(), o.value());
}

class UnfoldFuncOptions {
 public:
  UnfoldFuncOptions(ExpandingInt2 kernel_size) : kernel_(kernel_size) {}
  UnfoldFuncOptions& dilation(ExpandingInt2 v) {
    dilation_ = v;
    return *this;
  }
  UnfoldFuncOptions& padding(ExpandingInt2 v) {
    padding_ = v;
    return *this;
  }
  UnfoldFuncOptions& stride(ExpandingInt2 v) {
    stride_ = v;
    return *this;
  }
  ExpandingInt2 kernel_size() const { return kernel_; }
  ExpandingInt2 dilation() const { return dilation_; }
  ExpandingInt2 padding() const { return padding_; }
  ExpandingInt2 stride() const { return stride_; }

 private:
  ExpandingInt2 kernel_, dilation_ = 1, padding_ = 0, stride_ = 1;
};

inline Tensor unfold(const Tensor& input, const UnfoldFuncOptions& o) {
  return ember::unfold(input, o.kernel_size(), o.dilation(), o.padding(), o.stride());
}

class FoldFuncOptions {
 public:
  FoldFuncOptions(ExpandingInt2 output_size, ExpandingInt2 kernel_size)
      : output_(output_size), kernel_(kernel_size) {}
  FoldFuncOptions& dilation(ExpandingInt2 v) {
    dilation_ = v;
    return *this;
  }
  FoldFuncOptions& padding(ExpandingInt2 v) {
    padding_ = v;
    return *this;
  }
  FoldFuncOptions& stride(ExpandingInt2 v) {
    stride_ = v;
    return *this;
  }
  ExpandingInt2 output_size() const { return output_; }
  ExpandingInt2 kernel_size() const { return kernel_; }
  ExpandingInt2 dilation() const { return dilation_; }
  ExpandingInt2 padding() const { return padding_; }
  ExpandingInt2 stride() const { return stride_; }

 private:
  ExpandingInt2 output_, kernel_, dilation_ = 1, padding_ = 0, stride_ = 1;
};

inline Tensor fold(const Tensor& input, const FoldFuncOptions& o) {
  return ember::fold(input, o.output_size(), o.kernel_size(), o.dilation(), o.padding(),
                     o.stride());
}

// Zeroes whole channels with probability p (a (N, C) or (C) mask broadcast over the
// trailing dims) and scales the rest by 1 / (1 - p); identity when !training.
Tensor dropout2d(const Tensor& x, double p = 0.5, bool training = true,
                 Generator* gen = nullptr);

}  // namespace ember::nn::functional
