#include "nn/container.h"

#include <algorithm>
#include <sstream>

namespace ember::nn {

// ---------------------------------------------------------------- ModuleList

void ModuleList::append(std::shared_ptr<Module> m) {
  EMBER_CHECK(m != nullptr, "ModuleList::push_back: the module is null");
  add_child(std::to_string(modules_.size()), m);  // checks self-registration too
  modules_.push_back(std::move(m));
}

void ModuleList::extend(const ModuleList& other) {
  EMBER_CHECK(&other != this, "ModuleList::extend: cannot extend a list with itself");
  for (const auto& m : other.modules_) append(m);
}

void ModuleList::insert(size_t index, std::shared_ptr<Module> m) {
  EMBER_CHECK(index <= modules_.size(), "ModuleList::insert: index ", index,
              " out of range for a list of ", modules_.size(), " modules");
  EMBER_CHECK(m != nullptr, "ModuleList::insert: the module is null");
  EMBER_CHECK(m.get() != this, "ModuleList::insert: a module cannot be its own child");
  // Children are named by position: take them all out and register them again.
  for (size_t i = modules_.size(); i-- > 0;) remove_child(std::to_string(i));
  modules_.insert(modules_.begin() + static_cast<std::ptrdiff_t>(index), std::move(m));
  for (size_t i = 0; i < modules_.size(); ++i) add_child(std::to_string(i), modules_[i]);
}

const std::shared_ptr<Module>& ModuleList::operator[](size_t index) const {
  EMBER_CHECK(index < modules_.size(), "ModuleList: index ", index, " out of range for a list of ",
              modules_.size(), " modules");
  return modules_[index];
}

// ---------------------------------------------------------------- ModuleDict

void ModuleDict::add(const std::string& key, std::shared_ptr<Module> m) {
  EMBER_CHECK(m != nullptr, "ModuleDict: the module for key '", key, "' is null");
  EMBER_CHECK(!contains(key), "ModuleDict: key '", key, "' is already present");
  add_child(key, std::move(m));  // checks the key as a name
}

void ModuleDict::update(const std::vector<Item>& items) {
  for (const auto& [key, m] : items) {
    EMBER_CHECK(m != nullptr, "ModuleDict::update: the module for key '", key, "' is null");
    if (!contains(key)) {
      add_child(key, m);
      continue;
    }
    // Replace in place, keeping the key's position: re-register everything after it.
    std::vector<Item> all = named_children();
    for (auto it = all.rbegin(); it != all.rend(); ++it) remove_child(it->first);
    for (auto& [k, old] : all) add_child(k, k == key ? m : old);
  }
}

std::shared_ptr<Module> ModuleDict::pop(const std::string& key) {
  EMBER_CHECK(contains(key), "ModuleDict::pop: no key '", key, "'");
  return remove_child(key);
}

void ModuleDict::clear() {
  const std::vector<std::string> all = keys();
  for (auto it = all.rbegin(); it != all.rend(); ++it) remove_child(*it);
}

bool ModuleDict::contains(const std::string& key) const {
  const auto& items = named_children();
  return std::any_of(items.begin(), items.end(), [&](const Item& i) { return i.first == key; });
}

const std::shared_ptr<Module>& ModuleDict::operator[](const std::string& key) const {
  for (const Item& i : named_children())
    if (i.first == key) return i.second;
  std::ostringstream known;
  for (const Item& i : named_children())
    known << (known.tellp() > 0 ? ", " : "") << "'" << i.first << "'";
  EMBER_FAIL("ModuleDict: no key '", key, "' (keys: ", known.str().empty() ? "none" : known.str(),
             ")");
}

std::vector<std::string> ModuleDict::keys() const {
  std::vector<std::string> out;
  for (const Item& i : named_children()) out.push_back(i.first);
  return out;
}

}  // namespace ember::nn
