// nn::BatchNorm1d, BatchNorm2d and GroupNorm with libtorch's options, over
// batch_norm and group_norm (core/ops.h). Batch norm keeps running_mean,
// running_var and num_batches_tracked as buffers (saved in state dicts and
// checkpoints); train() normalises by the batch and updates them, eval() by them.
#pragma once

#include <optional>
#include <string>

#include "core/ops.h"
#include "nn/module.h"

namespace ember::nn {

class BatchNormOptions {
 public:
  BatchNormOptions(int64_t num_features) : num_features_(num_features) {}
  BatchNormOptions& eps(double v) {
    eps_ = v;
    return *this;
  }
  // std::nullopt: the cumulative average over the batches seen (PyTorch's
  // momentum=None), which reads num_batches_tracked on the host each step.
  BatchNormOptions& momentum(std::optional<double> v) {
    momentum_ = v;
    return *this;
  }
  BatchNormOptions& affine(bool on) {
    affine_ = on;
    return *this;
  }
  BatchNormOptions& track_running_stats(bool on) {
    track_running_stats_ = on;
    return *this;
  }
  BatchNormOptions& device(Device d) {
    device_ = d;
    return *this;
  }
  int64_t num_features() const { return num_features_; }
  double eps() const { return eps_; }
  std::optional<double> momentum() const { return momentum_; }
  bool affine() const { return affine_; }
  bool track_running_stats() const { return track_running_stats_; }
  Device device() const { return device_; }

 private:
  int64_t num_features_;
  double eps_ = 1e-5;
  std::optional<double> momentum_ = 0.1;
  bool affine_ = true, track_running_stats_ = true;
  Device device_ = kCPU;
};

// The shared body of BatchNorm1d and BatchNorm2d, which differ in the input ranks
// they accept ((N, C) or (N, C, L); (N, C, H, W)).
class BatchNormImplBase : public Module {
 public:
  BatchNormImplBase(const BatchNormOptions& options, const char* name, int min_dim, int max_dim);
  Tensor forward(const Tensor& x);
  // relu(forward(x)) as one op (batch_norm_relu: on CUDA one kernel each way).
  Tensor forward_relu(const Tensor& x);
  // Running statistics back to zeros and ones, the count to 0.
  void reset_running_stats();
  void reset_parameters();
  std::string extra_repr() const override;

  BatchNormOptions options;
  Tensor weight, bias;                                    // (C), with affine
  Tensor running_mean, running_var, num_batches_tracked;  // with track_running_stats

 private:
  Tensor run(const Tensor& x, bool relu);
  const char* name_;
  int min_dim_, max_dim_;
};

class BatchNorm1d : public BatchNormImplBase {
 public:
  explicit BatchNorm1d(const BatchNormOptions& options)
      : BatchNormImplBase(options, "BatchNorm1d", 2, 3) {}
  explicit BatchNorm1d(int64_t num_features) : BatchNorm1d(BatchNormOptions(num_features)) {}
};

class BatchNorm2d : public BatchNormImplBase {
 public:
  explicit BatchNorm2d(const BatchNormOptions& options)
      : BatchNormImplBase(options, "BatchNorm2d", 4, 4) {}
  explicit BatchNorm2d(int64_t num_features) : BatchNorm2d(BatchNormOptions(num_features)) {}
};

class GroupNormOptions {
 public:
  GroupNormOptions(int64_t num_groups, int64_t num_channels)
      : num_groups_(num_groups), num_channels_(num_channels) {}
  GroupNormOptions& eps(double v) {
    eps_ = v;
    return *this;
  }
  GroupNormOptions& affine(bool on) {
    affine_ = on;
    return *this;
  }
  int64_t num_groups() const { return num_groups_; }
  int64_t num_channels() const { return num_channels_; }
  double eps() const { return eps_; }
  bool affine() const { return affine_; }

 private:
  int64_t num_groups_, num_channels_;
  double eps_ = 1e-5;
  bool affine_ = true;
};

class GroupNorm : public Module {
 public:
  explicit GroupNorm(const GroupNormOptions& options);
  Tensor forward(const Tensor& x) const;
  std::string extra_repr() const override;
  GroupNormOptions options;
  Tensor weight, bias;  // (C), with affine
};

}  // namespace ember::nn
