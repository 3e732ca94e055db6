#include "core/custom_function.h"

#include "core/base/error.h"

namespace ember::autograd {

void SavedValue::throw_wrong_kind(const char* want) const {
  static constexpr const char* kKinds[] = {"nothing",  "an int",         "a double", "a bool",
                                           "a string", "a list of ints", "a tensor"};
  throw Error(std::string("saved_data: asked for ") + want + ", it holds " + kKinds[v_.index()]);
}

void AutogradContext::save_for_backward(tensor_list to_save) {
  saved_.clear();
  for (const Tensor& t : to_save) {
    Saved& s = saved_.emplace_back();
    if (t.defined()) {
      s.data = t.detach();
      s.version = t.version();
    }
  }
}

tensor_list AutogradContext::get_saved_variables() const {
  if (released_) ember::detail::throw_backward_twice(name_);
  tensor_list out;
  out.reserve(saved_.size());
  for (const Saved& s : saved_) {
    if (s.data.defined() && s.data.version() != s.version)
      ember::detail::throw_modified_in_place(name_, s.version, s.data.version());
    out.push_back(s.data);
  }
  return out;
}

void AutogradContext::mark_non_differentiable(const tensor_list& outputs) {
  for (const Tensor& t : outputs) non_differentiable_.push_back(t);
}

bool AutogradContext::is_non_differentiable_(const Tensor& t) const {
  for (const Tensor& n : non_differentiable_)
    if (n.defined() && n.is_same(t)) return true;
  return false;
}

bool AutogradContext::needs_input_grad(size_t index) const {
  EMBER_CHECK(index < needs_input_grad_.size(), name_, ": needs_input_grad(", index,
              ") asked of a forward with ", needs_input_grad_.size(), " arguments");
  return needs_input_grad_[index];
}

void AutogradContext::release_() {
  saved_.clear();
  saved_data.clear();
  non_differentiable_.clear();
  released_ = true;
}

namespace detail {

std::vector<Tensor> CustomFunctionNode::apply(const Tensor& grad_output) {
  if (!ctx_) ember::detail::throw_backward_twice(name_);
  tensor_list grads = backward_(ctx_.get(), tensor_list{grad_output});
  const size_t n = tensor_positions_.size();
  EMBER_CHECK(grads.size() == num_args_ || grads.size() == n, name_, ": backward returned ",
              grads.size(), " gradients; forward took ", num_args_, " arguments (", n,
              " of them tensors): return one per argument");
  std::vector<Tensor> out(n);
  for (size_t i = 0; i < n; ++i) {
    Tensor g = grads.size() == n ? grads[i] : grads[tensor_positions_[i]];
    if (next_edges[i].node) out[i] = std::move(g);  // an input needing no gradient gets none
  }
  return out;
}

void CustomFunctionNode::release() {
  if (ctx_) ctx_->release_();
  ctx_.reset();
  saved.clear();
}

Tensor record_custom_function(Tensor out, const char* name, std::shared_ptr<AutogradContext> ctx,
                              CustomFunctionNode::Backward backward,
                              const std::vector<const Tensor*>& inputs,
                              std::vector<size_t> tensor_positions, size_t num_args) {
  // forward may hand back an input (or a tensor with its own history, made under
  // an EnableGradGuard): the node goes on a fresh alias, never on that tensor.
  bool reused = out.requires_grad();
  for (const Tensor* in : inputs) reused = reused || out.is_same(*in);
  if (reused) out = out.detach();
  auto node = std::make_shared<CustomFunctionNode>(name, std::move(ctx), backward,
                                                   std::move(tensor_positions), num_args);
  ember::detail::attach_node(out, std::move(node), inputs.data(), inputs.size());
  return out;
}

}  // namespace detail

}  // namespace ember::autograd
