// Containers of modules, as libtorch's: nn::ModuleList (children named by their
// index, "0", "1", ...) and nn::ModuleDict (children named by key, in insertion
// order). Both register what they hold, so parameters(), to(), state_dict() and
// checkpoints see it; neither has a forward (the owner decides how to call them):
//
//   layers = register_module("layers", std::make_shared<nn::ModuleList>());
//   for (int i = 0; i < 4; ++i) layers->push_back(nn::Linear(64, 64));
//   for (size_t i = 0; i < layers->size(); ++i) x = relu(layers->at<nn::Linear>(i)->forward(x));
#pragma once

#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "nn/module.h"

namespace ember::nn {

namespace detail {
// A module given by handle or by value (moved in), as a handle.
template <typename M>
std::shared_ptr<Module> module_handle(std::shared_ptr<M> m) {
  return m;
}
template <typename M>
requires(std::derived_from<std::remove_cvref_t<M>, Module> &&
         !std::is_lvalue_reference_v<M>) std::shared_ptr<Module> module_handle(M&& m) {
  return std::make_shared<std::remove_cvref_t<M>>(std::move(m));
}
// The module as M, or an error naming the container, the slot and both types.
template <typename M>
std::shared_ptr<M> module_as(const std::shared_ptr<Module>& m, const char* container,
                             const std::string& slot) {
  auto typed = std::dynamic_pointer_cast<M>(m);
  EMBER_CHECK(typed != nullptr, container, ": module ", slot, " is a ", m->name(),
              ", not the type asked for");
  return typed;
}
}  // namespace detail

class ModuleList : public Module {
 public:
  ModuleList() = default;
  // ModuleList(nn::Linear(2, 3), std::make_shared<nn::ReLU>(), ...)
  template <typename... Ms>
  requires(sizeof...(Ms) > 0 &&
           !(sizeof...(Ms) == 1 && (std::is_same_v<std::remove_cvref_t<Ms>, ModuleList> &&
                                    ...))) explicit ModuleList(Ms&&... modules) {
    (push_back(std::forward<Ms>(modules)), ...);
  }

  // Appends under the next index; a module by value is moved in.
  template <typename M>
  void push_back(M&& m) {
    append(detail::module_handle(std::forward<M>(m)));
  }
  void extend(const ModuleList& other);
  // Inserts before position `index` (0..size()); later modules are renamed.
  void insert(size_t index, std::shared_ptr<Module> m);

  size_t size() const { return modules_.size(); }
  bool is_empty() const { return modules_.empty(); }
  bool empty() const { return modules_.empty(); }
  // Throws for an index out of range.
  const std::shared_ptr<Module>& operator[](size_t index) const;
  template <typename M>
  std::shared_ptr<M> at(size_t index) const {
    return detail::module_as<M>((*this)[index], "ModuleList", std::to_string(index));
  }
  std::shared_ptr<Module> ptr(size_t index) const { return (*this)[index]; }
  template <typename M>
  std::shared_ptr<M> ptr(size_t index) const {
    return at<M>(index);
  }
  auto begin() const { return modules_.begin(); }
  auto end() const { return modules_.end(); }

 private:
  void append(std::shared_ptr<Module> m);
  std::vector<std::shared_ptr<Module>> modules_;
};

class ModuleDict : public Module {
 public:
  using Item = std::pair<std::string, std::shared_ptr<Module>>;
  ModuleDict() = default;
  explicit ModuleDict(const std::vector<Item>& items) { update(items); }

  // Adds `key` (a new key, as register_module's names: non-empty, no '.');
  // a module by value is moved in.
  template <typename M>
  void insert(const std::string& key, M&& m) {
    add(key, detail::module_handle(std::forward<M>(m)));
  }
  // Adds each item; an existing key is replaced in place (libtorch's update).
  void update(const std::vector<Item>& items);
  // Removes `key` and returns its module; throws when absent.
  std::shared_ptr<Module> pop(const std::string& key);
  void clear();

  size_t size() const { return named_children().size(); }
  bool empty() const { return named_children().empty(); }
  bool contains(const std::string& key) const;
  // Throws naming the key and the keys there are when absent.
  const std::shared_ptr<Module>& operator[](const std::string& key) const;
  template <typename M>
  std::shared_ptr<M> at(const std::string& key) const {
    return detail::module_as<M>((*this)[key], "ModuleDict", "'" + key + "'");
  }
  std::vector<std::string> keys() const;
  std::vector<std::shared_ptr<Module>> values() const { return children(); }
  const std::vector<Item>& items() const { return named_children(); }
  auto begin() const { return named_children().begin(); }
  auto end() const { return named_children().end(); }

 private:
  void add(const std::string& key, std::shared_ptr<Module> m);
};

}  // namespace ember::nn
