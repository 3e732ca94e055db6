// Loss modules, as libtorch's: MSELoss, CrossEntropyLoss, NLLLoss, BCELoss,
// BCEWithLogitsLoss, L1Loss, each with its options class. MSELoss and
// CrossEntropyLoss go through seam ops (core/ops.h) where fused CUDA
// loss+gradient kernels plug in.
#pragma once

#include <string>

#include "core/ops.h"
#include "nn/module.h"

namespace ember::nn {

class MSELossOptions {
 public:
  MSELossOptions(Reduction r = Reduction::Mean) : reduction_(r) {}
  MSELossOptions& reduction(Reduction r) {
    reduction_ = r;
    return *this;
  }
  Reduction reduction() const { return reduction_; }

 private:
  Reduction reduction_;
};

class MSELoss : public Module {
 public:
  explicit MSELoss(const MSELossOptions& options = {}) : options(options) {}
  Tensor forward(const Tensor& pred, const Tensor& target) const {
    return mse_loss(pred, target, options.reduction());
  }
  std::string extra_repr() const override;

  MSELossOptions options;
};

// The reduction an options class names, for printing.
std::string reduction_repr(Reduction r);

// libtorch's CrossEntropyLossOptions: reduction, ignore_index (-100), label_smoothing.
using CrossEntropyLossOptions = CrossEntropyOptions;

class CrossEntropyLoss : public Module {
 public:
  explicit CrossEntropyLoss(const CrossEntropyLossOptions& options = {});
  // logits (N, C) or (N, C, d...), target int64 (N) or (N, d...)
  Tensor forward(const Tensor& logits, const Tensor& target) const {
    return cross_entropy(logits, target, options);
  }
  std::string extra_repr() const override;

  CrossEntropyLossOptions options;
};

using NLLLossOptions = ember::NLLLossOptions;

class NLLLoss : public Module {
 public:
  explicit NLLLoss(const NLLLossOptions& options = {}) : options(options) {}
  Tensor forward(const Tensor& log_probs, const Tensor& target) const {
    return nll_loss(log_probs, target, options);
  }
  std::string extra_repr() const override;

  NLLLossOptions options;
};

// The options of the losses that take only a reduction (L1Loss, BCELoss).
class ReductionOptions {
 public:
  ReductionOptions(Reduction r = Reduction::Mean) : reduction_(r) {}
  ReductionOptions& reduction(Reduction r) {
    reduction_ = r;
    return *this;
  }
  Reduction reduction() const { return reduction_; }

 private:
  Reduction reduction_;
};
using L1LossOptions = ReductionOptions;
using BCELossOptions = ReductionOptions;

class L1Loss : public Module {
 public:
  explicit L1Loss(const L1LossOptions& options = {}) : options(options) {}
  Tensor forward(const Tensor& pred, const Tensor& target) const {
    return l1_loss(pred, target, options.reduction());
  }
  std::string extra_repr() const override { return reduction_repr(options.reduction()); }

  L1LossOptions options;
};

// Binary cross-entropy of probabilities in [0, 1].
class BCELoss : public Module {
 public:
  explicit BCELoss(const BCELossOptions& options = {}) : options(options) {}
  Tensor forward(const Tensor& probs, const Tensor& target) const {
    return binary_cross_entropy(probs, target, options.reduction());
  }
  std::string extra_repr() const override { return reduction_repr(options.reduction()); }

  BCELossOptions options;
};

class BCEWithLogitsLossOptions {
 public:
  BCEWithLogitsLossOptions(Reduction r = Reduction::Mean) : reduction_(r) {}
  BCEWithLogitsLossOptions& reduction(Reduction r) {
    reduction_ = r;
    return *this;
  }
  // Weight of the positive class, broadcast along the last dim (one per class).
  BCEWithLogitsLossOptions& pos_weight(const Tensor& w) {
    pos_weight_ = w;
    return *this;
  }
  Reduction reduction() const { return reduction_; }
  const Tensor& pos_weight() const { return pos_weight_; }

 private:
  Reduction reduction_;
  Tensor pos_weight_;
};

// Binary cross-entropy of logits (sigmoid and the loss in one stable expression).
// pos_weight, when given, is kept as a buffer (it moves with the module).
class BCEWithLogitsLoss : public Module {
 public:
  explicit BCEWithLogitsLoss(const BCEWithLogitsLossOptions& options = {});
  Tensor forward(const Tensor& logits, const Tensor& target) const {
    return binary_cross_entropy_with_logits(logits, target, pos_weight, options.reduction());
  }
  std::string extra_repr() const override { return reduction_repr(options.reduction()); }

  BCEWithLogitsLossOptions options;
  Tensor pos_weight;  // undefined unless the options give one
};

}  // namespace ember::nn
