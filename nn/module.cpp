#include "nn/module.h"

#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>
#include <sstream>
#include <typeinfo>

#include "core/autograd.h"
#include "core/device_services.h"
#include "core/ops.h"

namespace ember::nn {

namespace {

void check_name(const char* what, const std::string& name) {
  EMBER_CHECK(!name.empty(), what, ": name must not be empty");
  EMBER_CHECK(name.find('.') == std::string::npos, what, ": name '", name,
              "' must not contain '.' (dots separate levels in state_dict keys)");
}

template <typename T>
bool has_key(const std::vector<std::pair<std::string, T>>& items, const std::string& name) {
  return std::any_of(items.begin(), items.end(), [&](const auto& it) { return it.first == name; });
}

// Replaces what `t` points at (storage, geometry, dtype) with a copy on `device`
// in `dtype`; the TensorImpl, and so every handle to it, stays the same object.
void move_in_place(const Tensor& t, Device device, DType dtype) {
  if (t.device() == device && t.dtype() == dtype) return;
  Tensor moved;
  {
    NoGradGuard no_grad;
    moved = t.detach().to(device).to(dtype);
  }
  TensorImpl& impl = t.impl();
  impl.storage = moved.storage();
  impl.offset = moved.storage_offset();
  impl.sizes = moved.sizes();
  impl.strides = moved.strides();
  impl.dtype = moved.dtype();
}

// "Linear(in_features=2, out_features=3, bias=true)", or "Net(...)" when it has
// children: a one-line name for messages.
std::string short_repr(const Module& m) {
  return m.named_children().empty() ? m.str() : m.name() + "(...)";
}

}  // namespace

Tensor Module::register_parameter(const std::string& name, Tensor t, bool requires_grad) {
  check_name("register_parameter", name);
  EMBER_CHECK(t.defined(), "register_parameter: parameter '", name, "' is an undefined tensor");
  EMBER_CHECK(!has_key(parameters_, name) && !has_key(buffers_, name) && !has_key(children_, name),
              "register_parameter: '", name, "' is already registered in ", this->name());
  EMBER_CHECK(t.is_leaf(), "register_parameter: parameter '", name,
              "' has a grad_fn; register a leaf (use detach())");
  t.set_requires_grad(requires_grad);
  parameters_.emplace_back(name, t);
  return t;
}

Tensor Module::register_buffer(const std::string& name, Tensor t) {
  check_name("register_buffer", name);
  EMBER_CHECK(t.defined(), "register_buffer: buffer '", name, "' is an undefined tensor");
  EMBER_CHECK(!has_key(parameters_, name) && !has_key(buffers_, name) && !has_key(children_, name),
              "register_buffer: '", name, "' is already registered in ", this->name());
  buffers_.emplace_back(name, t);
  return t;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> m) {
  check_name("register_module", name);
  EMBER_CHECK(m != nullptr, "register_module: module '", name, "' is null");
  EMBER_CHECK(m.get() != this, "register_module: a module cannot be its own child ('", name, "')");
  EMBER_CHECK(!has_key(parameters_, name) && !has_key(buffers_, name) && !has_key(children_, name),
              "register_module: '", name, "' is already registered in ", this->name());
  m->rename_scope(scope_path_ + "." + name);
  m->registered_ = true;
  children_.emplace_back(name, std::move(m));
}

std::shared_ptr<Module> Module::remove_child(const std::string& name) {
  auto it = std::find_if(children_.begin(), children_.end(),
                         [&](const auto& c) { return c.first == name; });
  EMBER_CHECK(it != children_.end(), this->name(), ": no child module named '", name, "'");
  std::shared_ptr<Module> m = std::move(it->second);
  children_.erase(it);
  return m;
}

void Module::warn_unregistered(const Module& outer) const noexcept {
  warned_unregistered_ = true;
  try {
    if (parameters().empty()) return;  // nothing to train, move or save: harmless
    ember::warn(short_repr(*this) + " ran inside the forward of " + outer.name() + " (" +
                outer.scope_path() +
                ") but is registered in no module: its parameters are "
                "missing from " +
                outer.name() +
                "'s parameters(), so an optimizer built from "
                "them never trains it, and to(), state_dict() and checkpoints skip it. Register "
                "it in the parent's constructor: member = register_module(\"name\", "
                "std::make_shared<...>(...))");
  } catch (...) {  // a warning must never turn a forward into a failure
  }
}

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_modules(
    const std::string& prefix, bool include_self) const {
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> out;
  std::vector<const Module*> seen{this};
  if (include_self) {
    std::shared_ptr<const Module> owned = weak_from_this().lock();
    // Not held by a shared_ptr (a module on the stack): a handle that owns nothing.
    std::shared_ptr<Module> self =
        owned ? std::const_pointer_cast<Module>(owned)
              : std::shared_ptr<Module>(std::shared_ptr<Module>(), const_cast<Module*>(this));
    out.emplace_back(prefix, std::move(self));
  }
  struct Walk {
    static void run(const Module& m, const std::string& prefix, std::vector<const Module*>& seen,
                    std::vector<std::pair<std::string, std::shared_ptr<Module>>>& out) {
      for (const auto& [name, child] : m.children_) {
        if (std::find(seen.begin(), seen.end(), child.get()) != seen.end()) continue;
        seen.push_back(child.get());
        const std::string path = prefix.empty() ? name : prefix + "." + name;
        out.emplace_back(path, child);
        run(*child, path, seen, out);
      }
    }
  };
  Walk::run(*this, prefix, seen, out);
  return out;
}

std::vector<std::shared_ptr<Module>> Module::modules(bool include_self) const {
  std::vector<std::shared_ptr<Module>> out;
  for (auto& [name, m] : named_modules("", include_self)) out.push_back(std::move(m));
  return out;
}

void Module::apply(const std::function<void(Module&)>& fn) {
  EMBER_CHECK(static_cast<bool>(fn), "Module::apply: the function is empty");
  for (const auto& [name, m] : named_modules()) fn(*m);
}

void Module::apply(const std::function<void(const std::string&, Module&)>& fn,
                   const std::string& prefix) {
  EMBER_CHECK(static_cast<bool>(fn), "Module::apply: the function is empty");
  for (const auto& [name, m] : named_modules(prefix)) fn(name, *m);
}

void Module::rename_scope(const std::string& path) {
  // Registration is rare (construction), so interning here costs nothing per step.
  scope_path_ = path;
  forward_scope_ = intern_site_name(path + ".forward");
  for (auto& [name, child] : children_) child->rename_scope(path + "." + name);
}

void Module::collect(const std::string& prefix, bool params, bool recurse,
                     std::vector<std::pair<std::string, Tensor>>& out,
                     std::vector<const TensorImpl*>& seen) const {
  for (const auto& [name, t] : params ? parameters_ : buffers_) {
    const TensorImpl* id = t.impl_ptr().get();
    if (std::find(seen.begin(), seen.end(), id) != seen.end()) continue;
    seen.push_back(id);
    out.emplace_back(prefix + name, t);
  }
  if (!recurse) return;
  for (const auto& [name, child] : children_)
    child->collect(prefix + name + ".", params, true, out, seen);
}

std::vector<std::pair<std::string, Tensor>> Module::named_parameters(bool recurse) const {
  std::vector<std::pair<std::string, Tensor>> out;
  std::vector<const TensorImpl*> seen;
  collect("", true, recurse, out, seen);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers(bool recurse) const {
  std::vector<std::pair<std::string, Tensor>> out;
  std::vector<const TensorImpl*> seen;
  collect("", false, recurse, out, seen);
  return out;
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_parameters(recurse)) out.push_back(t);
  return out;
}

std::vector<Tensor> Module::buffers(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_buffers(recurse)) out.push_back(t);
  return out;
}

std::vector<std::shared_ptr<Module>> Module::children() const {
  std::vector<std::shared_ptr<Module>> out;
  for (const auto& [name, child] : children_) out.push_back(child);
  return out;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

void Module::convert(Device device, DType dtype, bool change_dtype) {
  check_device(device);  // fails before moving anything: a bad device changes nothing
  auto target = [&](const Tensor& t) {
    return change_dtype && is_floating(t.dtype()) ? dtype : t.dtype();
  };
  for (const Tensor& p : parameters()) {
    move_in_place(p, device, target(p));
    if (p.grad().defined()) {
      Tensor g = p.grad();
      move_in_place(g, device, target(g));
    }
  }
  for (const Tensor& b : buffers()) move_in_place(b, device, target(b));
}

void Module::to(Device device) {
  convert(device, kFloat32, false);
}

void Module::to(DType dtype) {
  EMBER_CHECK(is_floating(dtype), "Module::to: parameters must stay floating-point, got ", dtype);
  std::vector<Tensor> ps = parameters();
  convert(ps.empty() ? kCPU : ps.front().device(), dtype, true);
}

void Module::to(Device device, DType dtype) {
  EMBER_CHECK(is_floating(dtype), "Module::to: parameters must stay floating-point, got ", dtype);
  convert(device, dtype, true);
}

void Module::zero_grad(bool set_to_none) {
  NoGradGuard no_grad;
  for (const Tensor& p : parameters()) {
    if (!p.grad().defined()) continue;
    if (set_to_none)
      p.set_grad(Tensor());
    else
      p.mutable_grad().zero_();
  }
}

StateDict Module::state_dict() const {
  StateDict sd;
  std::vector<const TensorImpl*> seen;
  // Per module: its parameters, then its buffers, then its children's, as PyTorch.
  struct Walk {
    static void run(const Module& m, const std::string& prefix, StateDict& sd,
                    std::vector<const TensorImpl*>& seen) {
      for (const auto* list : {&m.parameters_, &m.buffers_})
        for (const auto& [name, t] : *list) {
          if (std::find(seen.begin(), seen.end(), t.impl_ptr().get()) != seen.end()) continue;
          seen.push_back(t.impl_ptr().get());
          sd.insert(prefix + name, t.detach());
        }
      for (const auto& [name, child] : m.children_) run(*child, prefix + name + ".", sd, seen);
    }
  };
  Walk::run(*this, "", sd, seen);
  return sd;
}

void Module::check_state_dict(const StateDict& state, bool strict) const {
  StateDict mine = state_dict();
  std::ostringstream problems;
  int count = 0;
  auto problem = [&](const auto&... parts) {
    ++count;
    problems << "\n  ";
    (problems << ... << parts);
  };
  for (const auto& [name, t] : mine) {
    const Tensor* src = state.find(name);
    if (!src) {
      if (strict) problem("missing key '", name, "'");
      continue;
    }
    if (!src->defined())
      problem("'", name, "' is an undefined tensor");
    else if (src->sizes() != t.sizes())
      problem("shape mismatch for '", name, "': checkpoint has ", shape_str(src->sizes()),
              ", model has ", shape_str(t.sizes()));
    else if (src->dtype() != t.dtype())
      problem("dtype mismatch for '", name, "': checkpoint has ", src->dtype(), ", model has ",
              t.dtype());
  }
  if (strict)
    for (const auto& [name, t] : state)
      if (!mine.contains(name)) problem("unexpected key '", name, "'");
  EMBER_CHECK(count == 0, "load_state_dict: ", count, " problem", count == 1 ? "" : "s",
              " loading into ", name(), " (nothing was changed):", problems.str());
}

void Module::load_state_dict(const StateDict& state, bool strict) {
  check_state_dict(state, strict);
  NoGradGuard no_grad;
  for (const auto& [name, t] : state_dict()) {
    const Tensor* src = state.find(name);
    if (!src || src->is_same(t)) continue;
    Tensor dst = t;
    dst.copy_(*src);
  }
}

std::string Module::name() const {
  const char* mangled = typeid(*this).name();
  int status = 0;
  char* demangled = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string full = status == 0 && demangled ? demangled : mangled;
  std::free(demangled);
  size_t colon = full.rfind("::");
  return colon == std::string::npos ? full : full.substr(colon + 2);
}

void Module::print(std::ostream& os, int indent) const {
  os << name() << '(';
  std::string extra = extra_repr();
  if (children_.empty()) {
    os << extra << ')';
    return;
  }
  std::string pad(static_cast<size_t>(indent + 2), ' ');
  if (!extra.empty()) os << '\n' << pad << extra;
  for (const auto& [name, child] : children_) {
    os << '\n' << pad << '(' << name << "): ";
    child->print(os, indent + 2);
  }
  os << '\n' << std::string(static_cast<size_t>(indent), ' ') << ')';
}

std::string Module::str() const {
  std::ostringstream os;
  print(os, 0);
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Module& m) {
  return os << m.str();
}

}  // namespace ember::nn
