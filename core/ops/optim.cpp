// The fused optimizer updates as ops (PyTorch's _fused_sgd_ and _fused_adam_):
// in place, the parameters and their state grouped by device, one call of the
// device's kernel per device (on CUDA: fused multi-tensor launches, capturable in
// a graph; on the CPU: loops in double), the per-element rule of
// core/base/optim_math.h. optim/ calls these.
#include <vector>

#include "core/kernel_table.h"
#include "core/ops.h"

namespace ember {

namespace {

void check_state(const char* op, const char* what, size_t i, const Tensor& p, const Tensor& t) {
  EMBER_CHECK(t.defined(), op, ": ", what, " ", i, " is undefined");
  EMBER_CHECK(t.sizes() == p.sizes() && t.dtype() == p.dtype() && t.device() == p.device() &&
                  t.is_contiguous(),
              op, ": ", what, " ", i, " (", shape_str(t.sizes()), " ", t.dtype(), " on ",
              t.device(), ") does not match its parameter (", shape_str(p.sizes()), " ", p.dtype(),
              " on ", p.device(), ", contiguous)");
}

void check_param(const char* op, size_t i, const Tensor& p, const Tensor& g) {
  EMBER_CHECK(p.defined(), op, ": parameter ", i, " is undefined");
  EMBER_CHECK(p.dtype() == kFloat32 || p.dtype() == kFloat64, op, ": parameter ", i, " is ",
              p.dtype(), "; the fused updates take float32 or float64");
  EMBER_CHECK(p.is_contiguous(), op, ": parameter ", i, " of shape ", shape_str(p.sizes()),
              " is not contiguous");
  check_state(op, "gradient", i, p, g);
}

void check_lengths(const char* op, size_t n,
                   std::initializer_list<std::pair<const char*, size_t>> lists) {
  for (const auto& [what, len] : lists)
    EMBER_CHECK(len == n, op, ": ", n, " parameters but ", len, " ", what);
}

// Runs `run(device, tensors)` once per device, the tensors in the order given.
template <typename F>
void per_device(const std::vector<Tensor>& params, const std::vector<OptimTensor>& all, F&& run) {
  std::vector<Device> devices;
  for (const Tensor& p : params) {
    bool seen = false;
    for (Device d : devices) seen |= d == p.device();
    if (!seen) devices.push_back(p.device());
  }
  std::vector<OptimTensor> on_device;
  for (Device d : devices) {
    on_device.clear();
    for (size_t i = 0; i < params.size(); ++i)
      if (params[i].device() == d) on_device.push_back(all[i]);
    run(d, on_device);
  }
}

OptimTensor entry(const Tensor& p, const Tensor& g) {
  OptimTensor t;
  t.param = p.raw_data();
  t.grad = g.raw_data();
  t.numel = p.numel();
  t.is_double = p.dtype() == kFloat64;
  return t;
}

}  // namespace

void fused_sgd_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                const std::vector<Tensor>& momentum_buffers, const std::vector<bool>& first_steps,
                const SgdConfig& config) {
  const char* op = "fused_sgd_";
  const size_t n = params.size();
  check_lengths(op, n, {{"gradients", grads.size()}, {"first-step flags", first_steps.size()}});
  EMBER_CHECK(momentum_buffers.empty() || momentum_buffers.size() == n, op, ": ", n,
              " parameters but ", momentum_buffers.size(), " momentum buffers");
  std::vector<OptimTensor> all(n);
  for (size_t i = 0; i < n; ++i) {
    check_param(op, i, params[i], grads[i]);
    all[i] = entry(params[i], grads[i]);
    if (!momentum_buffers.empty() && momentum_buffers[i].defined()) {
      check_state(op, "momentum buffer", i, params[i], momentum_buffers[i]);
      all[i].state[0] = momentum_buffers[i].raw_data();
    }
    all[i].first_step = first_steps[i];
  }
  per_device(params, all, [&](Device d, const std::vector<OptimTensor>& t) {
    kernels::kernels_for(d).fused_sgd({d, t.data(), static_cast<int64_t>(t.size()), config});
  });
  for (const Tensor& p : params) p.bump_version();
  for (const Tensor& b : momentum_buffers)
    if (b.defined()) b.bump_version();
}

void fused_adam_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                 const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
                 const std::vector<Tensor>& max_exp_avg_sqs, const std::vector<Tensor>& state_steps,
                 const AdamConfig& config) {
  const char* op = "fused_adam_";
  const size_t n = params.size();
  check_lengths(op, n,
                {{"gradients", grads.size()},
                 {"exp_avgs", exp_avgs.size()},
                 {"exp_avg_sqs", exp_avg_sqs.size()},
                 {"state_steps", state_steps.size()}});
  EMBER_CHECK(!config.amsgrad || max_exp_avg_sqs.size() == n, op, ": amsgrad needs ", n,
              " max_exp_avg_sqs, got ", max_exp_avg_sqs.size());
  std::vector<OptimTensor> all(n);
  for (size_t i = 0; i < n; ++i) {
    const Tensor& p = params[i];
    check_param(op, i, p, grads[i]);
    check_state(op, "exp_avg", i, p, exp_avgs[i]);
    check_state(op, "exp_avg_sq", i, p, exp_avg_sqs[i]);
    const Tensor& step = state_steps[i];
    EMBER_CHECK(step.defined() && step.dtype() == kInt64 && step.numel() == 1 &&
                    step.device() == p.device(),
                op, ": state_steps ", i, " must be a one-element int64 tensor on ", p.device());
    all[i] = entry(p, grads[i]);
    all[i].state[0] = exp_avgs[i].raw_data();
    all[i].state[1] = exp_avg_sqs[i].raw_data();
    if (config.amsgrad) {
      check_state(op, "max_exp_avg_sq", i, p, max_exp_avg_sqs[i]);
      all[i].state[2] = max_exp_avg_sqs[i].raw_data();
    }
    all[i].step = static_cast<int64_t*>(step.raw_data());
  }
  per_device(params, all, [&](Device d, const std::vector<OptimTensor>& t) {
    kernels::kernels_for(d).fused_adam({d, t.data(), static_cast<int64_t>(t.size()), config});
  });
  for (size_t i = 0; i < n; ++i) {
    params[i].bump_version();
    exp_avgs[i].bump_version();
    exp_avg_sqs[i].bump_version();
    state_steps[i].bump_version();
    if (config.amsgrad) max_exp_avg_sqs[i].bump_version();
  }
}

}  // namespace ember
