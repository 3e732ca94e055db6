#include "core/alloc_site.h"

#include <mutex>
#include <string>
#include <unordered_set>

namespace ember {

const char* intern_site_name(std::string_view name) {
  // Never destroyed: allocators and history entries keep these pointers until exit.
  static std::mutex* mutex = new std::mutex;
  static auto* names = new std::unordered_set<std::string>;
  std::lock_guard lock(*mutex);
  // unordered_set never moves its elements, so c_str() stays valid.
  return names->emplace(name).first->c_str();
}

std::string site_name(const char* scope, const char* tag) {
  if (scope && tag) return std::string(scope) + " / " + tag;
  if (scope) return scope;
  if (tag) return tag;
  return "(untagged)";
}

}  // namespace ember
