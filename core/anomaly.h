// Anomaly mode: while on, every op recorded by autograd has its forward output
// checked for NaN/Inf, and every backward node the gradients it returns; the
// first to produce one throws ember::Error naming it (as PyTorch's
// torch.autograd.set_detect_anomaly, but throwing at the culprit). Off, it costs
// one predictable branch per op. Per thread, as grad mode is.
#pragma once

#include <cstddef>

namespace ember {

class Tensor;
class Node;

void set_detect_anomaly(bool enabled);
bool is_anomaly_enabled();

class DetectAnomalyGuard {
 public:
  explicit DetectAnomalyGuard(bool enabled = true);
  ~DetectAnomalyGuard();
  DetectAnomalyGuard(const DetectAnomalyGuard&) = delete;
  DetectAnomalyGuard& operator=(const DetectAnomalyGuard&) = delete;

 private:
  bool previous_;
};

// True when every element of t (any device, any dtype) is finite. Copies to the
// host: a diagnostic, not for hot paths.
bool all_finite(const Tensor& t);

namespace detail {
// Called by the autograd engine when anomaly mode is on. `grad_fn` names the
// node whose forward produced `out` from `inputs`.
void check_forward_anomaly(const Tensor& out, const char* grad_fn, const Tensor* const* inputs,
                           size_t n);
void check_backward_anomaly(const Node& node, size_t input, const Tensor& grad);
}  // namespace detail

}  // namespace ember
