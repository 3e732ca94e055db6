// nn::Module: the base of every layer and model. It owns named parameters,
// buffers and child modules (held as std::shared_ptr, the one handle style used
// throughout ember), and gives recursive access to them by dotted names
// ("0.weight"), train/eval mode, in-place device/dtype moves, zero_grad,
// state_dict round trips and PyTorch-style printing.
//
// A child module must be registered (register_module) to exist for its parent:
// parameters(), to(), state_dict() and checkpoints see registered children only.
// C++ cannot see a module's data members, so an unregistered child cannot be found
// by looking; ember catches it where it can: an optimizer refuses an empty
// parameter list, and a module whose forward runs inside another module's
// ForwardScope without being registered anywhere is reported once by a warning.
#pragma once

#include <concepts>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "core/alloc_site.h"
#include "core/state_dict.h"
#include "core/tensor.h"

namespace ember::nn {

class Module : public std::enable_shared_from_this<Module> {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  Module(Module&&) = default;
  Module& operator=(Module&&) = default;

  // --- registration (names: non-empty, no '.', unique within this module)
  // Registers `m` as child `name` and returns it, typed as given.
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    add_child(name, m);
    return m;
  }
  // Registers `t` as parameter `name` (a leaf; requires_grad set as asked) and
  // returns the handle, which aliases the registered tensor.
  Tensor register_parameter(const std::string& name, Tensor t, bool requires_grad = true);
  // Makes the registered parameter `name` of this module the tensor `t` (a leaf
  // of the same shape) and returns it: weight tying, as PyTorch's
  // `head.weight = embedding.weight`. Assign the result to the module's member too:
  //   head->weight = head->replace_parameter("weight", embedding->weight);
  // A tensor registered under several names is one parameter: parameters(), the
  // optimizers built from it, state_dict() and checkpoints list it once (under
  // its first name) and its gradient sums every use.
  Tensor replace_parameter(const std::string& name, Tensor t);
  // Registers non-trainable state that moves with the module and is saved in
  // state_dict() (running statistics, masks).
  Tensor register_buffer(const std::string& name, Tensor t);

  // --- access, in registration order; shared tensors are listed once
  std::vector<Tensor> parameters(bool recurse = true) const;
  std::vector<std::pair<std::string, Tensor>> named_parameters(bool recurse = true) const;
  std::vector<Tensor> buffers(bool recurse = true) const;
  std::vector<std::pair<std::string, Tensor>> named_buffers(bool recurse = true) const;
  std::vector<std::shared_ptr<Module>> children() const;
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& named_children() const {
    return children_;
  }
  // This module (name "", when include_self) and every descendant, depth first in
  // registration order, with dotted names ("encoder.0"); a module reachable by
  // two paths is listed once, under the first. This module's own entry owns it
  // when it is held by a std::shared_ptr, and is a non-owning handle otherwise.
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_modules(
      const std::string& prefix = "", bool include_self = true) const;
  std::vector<std::shared_ptr<Module>> modules(bool include_self = true) const;
  // Calls `fn` on this module, then on each descendant (libtorch's order: the
  // module before its children, each module once). For initialisation:
  //   model->apply([](nn::Module& m) {
  //     if (auto* l = dynamic_cast<nn::Linear*>(&m)) nn::init::zeros_(l->bias); });
  void apply(const std::function<void(Module&)>& fn);
  // The same with each module's dotted name ("" for this one, or `prefix`).
  void apply(const std::function<void(const std::string&, Module&)>& fn,
             const std::string& prefix = "");
  // This module as an M (libtorch's as<M>()), or null when it is not one.
  template <typename M>
  M* as() noexcept {
    return dynamic_cast<M*>(this);
  }
  template <typename M>
  const M* as() const noexcept {
    return dynamic_cast<const M*>(this);
  }
  // True once some module has registered this one as its child.
  bool is_registered() const { return registered_; }

  // --- mode
  virtual void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // Moves every parameter, gradient and buffer in place: the Tensor handles stay
  // the same objects (an optimizer holding them stays valid), only their storage
  // and dtype change. An optimizer's state follows its parameters at the next
  // step(); moving the model before building the optimizer (as in PyTorch)
  // avoids that one-time copy.
  void to(Device device);
  void to(DType dtype);
  void to(Device device, DType dtype);

  // Drops (set_to_none) or zeroes the gradient of every parameter.
  void zero_grad(bool set_to_none = true);

  // --- state: parameters then buffers of each module, depth first, dotted names.
  // The tensors alias the module's (detached); clone them to keep a snapshot.
  StateDict state_dict() const;
  // Throws ember::Error listing every missing or unexpected key and every shape
  // or dtype mismatch, before changing anything; then copies values in place.
  // strict=false ignores missing and unexpected keys (mismatches still throw).
  void load_state_dict(const StateDict& state, bool strict = true);
  // The validation half of load_state_dict: throws as it would, changes nothing.
  void check_state_dict(const StateDict& state, bool strict = true) const;

  // --- printing, as PyTorch's repr: "Sequential(\n  (0): Linear(...)\n)"
  // The type's name ("Linear"); defaults to the demangled class name.
  virtual std::string name() const;
  // What goes between the parentheses when there are no children to list.
  virtual std::string extra_repr() const { return ""; }
  std::string str() const;

  // --- allocation scope (core/alloc_site.h): allocations made in this module's
  // forward are named "<path>.forward", the path being the dotted names from the
  // root ("model.fc1"). The root is called "model" unless renamed here.
  const char* forward_scope() const { return forward_scope_; }
  const std::string& scope_path() const { return scope_path_; }
  void set_scope_root(const std::string& root) { rename_scope(root); }

 protected:
  void add_child(const std::string& name, std::shared_ptr<Module> m);
  // Removes child `name` (containers: ModuleDict::pop) and returns it; throws
  // when there is no such child.
  std::shared_ptr<Module> remove_child(const std::string& name);

 private:
  void collect(const std::string& prefix, bool params, bool recurse,
               std::vector<std::pair<std::string, Tensor>>& out,
               std::vector<const TensorImpl*>& seen) const;
  void convert(Device device, DType dtype, bool change_dtype);
  void print(std::ostream& os, int indent) const;
  void rename_scope(const std::string& path);  // this module and its children

  std::vector<std::pair<std::string, Tensor>> parameters_;
  std::vector<std::pair<std::string, Tensor>> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
  bool registered_ = false;
  mutable bool warned_unregistered_ = false;
  std::string scope_path_ = "model";
  const char* forward_scope_ = intern_site_name("model.forward");

  friend class ForwardScope;
  void warn_unregistered(const Module& outer) const noexcept;
};

namespace detail {
// The module whose ForwardScope is innermost on this thread (null outside any).
inline thread_local const Module* t_forward_module = nullptr;
}  // namespace detail

// Opened at the top of a forward (every built-in module does; a custom module may,
// and should): what it allocates is named after the module, and a module with
// parameters whose forward runs inside another module's forward without being
// registered anywhere is reported once (ember::warn).
class ForwardScope {
 public:
  explicit ForwardScope(const Module& m) noexcept
      : scope_(m.forward_scope()), outer_(detail::t_forward_module) {
    if (outer_ != nullptr && !m.registered_ && !m.warned_unregistered_ && outer_ != &m) [[unlikely]]
      m.warn_unregistered(*outer_);
    detail::t_forward_module = &m;
  }
  ~ForwardScope() { detail::t_forward_module = outer_; }
  ForwardScope(const ForwardScope&) = delete;
  ForwardScope& operator=(const ForwardScope&) = delete;

 private:
  AllocationScope scope_;
  const Module* outer_;
};

std::ostream& operator<<(std::ostream& os, const Module& m);
// Printing a module through its handle prints the module (PyTorch's repr), not the
// pointer that std's operator<< for shared_ptr would.
template <typename M>
requires std::derived_from<M, Module> std::ostream& operator<<(std::ostream& os,
                                                               const std::shared_ptr<M>& m) {
  if (m == nullptr) return os << "(null module)";
  return os << static_cast<const Module&>(*m);
}

}  // namespace ember::nn
