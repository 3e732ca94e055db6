// nn::Module: the base of every layer and model. It owns named parameters,
// buffers and child modules (held as std::shared_ptr, the one handle style used
// throughout ember), and gives recursive access to them by dotted names
// ("0.weight"), train/eval mode, in-place device/dtype moves, zero_grad,
// state_dict round trips and PyTorch-style printing.
#pragma once

#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "core/alloc_site.h"
#include "core/state_dict.h"
#include "core/tensor.h"

namespace ember::nn {

class Module {
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
  std::string scope_path_ = "model";
  const char* forward_scope_ = intern_site_name("model.forward");
};

// Opened at the top of a forward: what it allocates is named after the module.
class ForwardScope {
 public:
  explicit ForwardScope(const Module& m) noexcept : scope_(m.forward_scope()) {}
  ForwardScope(const ForwardScope&) = delete;
  ForwardScope& operator=(const ForwardScope&) = delete;

 private:
  AllocationScope scope_;
};

std::ostream& operator<<(std::ostream& os, const Module& m);

}  // namespace ember::nn
