// StateDict: an ordered name -> Tensor map, the currency of Module::state_dict(),
// Optimizer::state_dict() and checkpoints. Insertion order is kept (it is the
// order of the file and of printing); lookups by name are O(log n).
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace ember {

class StateDict {
 public:
  using Item = std::pair<std::string, Tensor>;

  // Adds `name`; throws if it is already present (names are unique).
  void insert(std::string name, Tensor value) {
    EMBER_CHECK(!index_.count(name), "StateDict: duplicate key '", name, "'");
    index_.emplace(name, items_.size());
    items_.emplace_back(std::move(name), std::move(value));
  }
  bool contains(const std::string& name) const { return index_.count(name) != 0; }
  // Null when absent.
  const Tensor* find(const std::string& name) const {
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : &items_[it->second].second;
  }
  const Tensor& at(const std::string& name) const {
    const Tensor* t = find(name);
    EMBER_CHECK(t != nullptr, "StateDict: no key '", name, "'");
    return *t;
  }
  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  std::vector<std::string> keys() const {
    std::vector<std::string> k;
    for (const auto& it : items_) k.push_back(it.first);
    return k;
  }
  const std::vector<Item>& items() const { return items_; }
  auto begin() const { return items_.begin(); }
  auto end() const { return items_.end(); }

 private:
  std::vector<Item> items_;
  std::map<std::string, size_t> index_;
};

}  // namespace ember
