#include "nn/batchnorm.h"

#include <sstream>

#include "core/autograd.h"
#include "nn/init.h"

namespace ember::nn {

BatchNormImplBase::BatchNormImplBase(const BatchNormOptions& opts, const char* name, int min_dim,
                                     int max_dim)
    : options(opts), name_(name), min_dim_(min_dim), max_dim_(max_dim) {
  EMBER_CHECK(opts.num_features() > 0, name, ": num_features must be positive, got ",
              opts.num_features());
  EMBER_CHECK(opts.eps() >= 0.0, name, ": eps must be >= 0, got ", opts.eps());
  if (opts.momentum())
    EMBER_CHECK(*opts.momentum() >= 0.0 && *opts.momentum() <= 1.0, name,
                ": momentum must be in [0, 1], got ", *opts.momentum());
  const int64_t c = opts.num_features();
  const TensorOptions where = TensorOptions().device(opts.device());
  if (opts.affine()) {
    weight = register_parameter("weight", empty({c}, where));
    bias = register_parameter("bias", empty({c}, where));
  }
  if (opts.track_running_stats()) {
    running_mean = register_buffer("running_mean", zeros({c}, where));
    running_var = register_buffer("running_var", ones({c}, where));
    num_batches_tracked = register_buffer("num_batches_tracked",
                                          zeros({}, TensorOptions(kInt64).device(opts.device())));
  }
  reset_parameters();
}

void BatchNormImplBase::reset_running_stats() {
  if (!running_mean.defined()) return;
  NoGradGuard no_grad;
  fill_(running_mean, 0.0);
  fill_(running_var, 1.0);
  fill_(num_batches_tracked, 0.0);
}

void BatchNormImplBase::reset_parameters() {
  reset_running_stats();
  if (weight.defined()) {
    init::ones_(weight);
    init::zeros_(bias);
  }
}

Tensor BatchNormImplBase::forward(const Tensor& x) {
  return run(x, false);
}

Tensor BatchNormImplBase::forward_relu(const Tensor& x) {
  return run(x, true);
}

Tensor BatchNormImplBase::run(const Tensor& x, bool relu) {
  ForwardScope scope(*this);
  check_defined(name_, x);
  EMBER_CHECK(x.dim() >= min_dim_ && x.dim() <= max_dim_, name_, ": expected a ", min_dim_,
              (min_dim_ == max_dim_ ? "" : " or " + std::to_string(max_dim_)),
              "-D input, got shape ", shape_str(x.sizes()));
  EMBER_CHECK(x.size(1) == options.num_features(), name_, ": expected ", options.num_features(),
              " channels (dim 1), got shape ", shape_str(x.sizes()));
  const bool use_batch = is_training() || !running_mean.defined();
  double momentum = options.momentum().value_or(0.0);
  if (is_training() && running_mean.defined()) {
    NoGradGuard no_grad;
    add_(num_batches_tracked, Scalar(int64_t{1}));
    if (!options.momentum())  // cumulative average: 1 / batches seen
      momentum = 1.0 / static_cast<double>(num_batches_tracked.item<int64_t>());
  }
  if (relu)
    return batch_norm_relu(x, running_mean, running_var, weight, bias, use_batch, momentum,
                           options.eps());
  return batch_norm(x, running_mean, running_var, weight, bias, use_batch, momentum, options.eps());
}

std::string BatchNormImplBase::extra_repr() const {
  std::ostringstream os;
  os << options.num_features() << ", eps=" << options.eps() << ", momentum=";
  if (options.momentum())
    os << *options.momentum();
  else
    os << "None";
  os << ", affine=" << (options.affine() ? "True" : "False")
     << ", track_running_stats=" << (options.track_running_stats() ? "True" : "False");
  return os.str();
}

GroupNorm::GroupNorm(const GroupNormOptions& opts) : options(opts) {
  EMBER_CHECK(opts.num_groups() > 0 && opts.num_channels() > 0 &&
                  opts.num_channels() % opts.num_groups() == 0,
              "GroupNorm: num_channels (", opts.num_channels(),
              ") must be divisible by num_groups (", opts.num_groups(), "), both positive");
  if (opts.affine()) {
    weight = register_parameter("weight", ones({opts.num_channels()}));
    bias = register_parameter("bias", zeros({opts.num_channels()}));
  }
}

Tensor GroupNorm::forward(const Tensor& x) const {
  ForwardScope scope(*this);
  check_defined("GroupNorm", x);
  EMBER_CHECK(x.dim() >= 2 && x.size(1) == options.num_channels(), "GroupNorm: expected ",
              options.num_channels(), " channels (dim 1), got shape ", shape_str(x.sizes()));
  return group_norm(x, options.num_groups(), weight, bias, options.eps());
}

std::string GroupNorm::extra_repr() const {
  std::ostringstream os;
  os << options.num_groups() << ", " << options.num_channels() << ", eps=" << options.eps()
     << ", affine=" << (options.affine() ? "True" : "False");
  return os.str();
}

}  // namespace ember::nn
