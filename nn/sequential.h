// nn::Sequential: children run in order, each output feeding the next. Children
// are held as std::shared_ptr; any module with `Tensor forward(const Tensor&)`
// (or taking Tensor by value) can be pushed, including user-defined ones.
#pragma once

#include <concepts>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "nn/module.h"

namespace ember::nn {

template <typename M>
concept TensorModule = std::derived_from<M, Module> && requires(M& m, const Tensor& x) {
  { m.forward(x) } -> std::convertible_to<Tensor>;
};

namespace detail {
template <typename T>
struct SharedModule : std::false_type {};
template <typename M>
struct SharedModule<std::shared_ptr<M>> : std::bool_constant<TensorModule<M>> {};
}  // namespace detail

// What Sequential accepts: a shared_ptr to a module, or a module moved in.
template <typename T>
concept SequentialItem = detail::SharedModule<std::remove_cvref_t<T>>::value ||
    (TensorModule<std::remove_cvref_t<T>> && !std::is_lvalue_reference_v<T>);

namespace detail {
template <typename T>
struct ModuleOf {
  using type = std::remove_cvref_t<T>;
};
template <typename M>
struct ModuleOf<std::shared_ptr<M>> {
  using type = M;
};
// Passed as an argument of type T: a module held in a named variable (an lvalue).
template <typename T>
inline constexpr bool kLvalueModule =
    std::is_lvalue_reference_v<T>&& std::derived_from<std::remove_cvref_t<T>, Module>;
// A module (or a shared_ptr to one) without Tensor forward(const Tensor&).
template <typename T>
inline constexpr bool kNoTensorForward =
    std::derived_from<typename ModuleOf<std::remove_cvref_t<T>>::type, Module> &&
    !TensorModule<typename ModuleOf<std::remove_cvref_t<T>>::type>;
template <typename... T>
inline constexpr bool kAlwaysFalse = false;
}  // namespace detail

class Sequential : public Module {
 public:
  Sequential() = default;
  template <SequentialItem... Ms>
  requires(sizeof...(Ms) > 0 &&
           !(sizeof...(Ms) == 1 && (std::is_same_v<std::remove_cvref_t<Ms>, Sequential> &&
                                    ...))) explicit Sequential(Ms&&... modules) {
    (push_back(std::forward<Ms>(modules)), ...);
  }
  // These two exist to turn a page of concept diagnostics into one sentence.
  template <typename... Ms>
  requires(sizeof...(Ms) > 0 && (detail::kLvalueModule<Ms> || ...)) explicit Sequential(Ms&&...) {
    static_assert(detail::kAlwaysFalse<Ms...>,
                  "nn::Sequential: a module held in a named variable (an lvalue) cannot be "
                  "added, since modules are not copyable. Pass a temporary "
                  "(nn::Linear(2, 3)), move it in (std::move(layer)), or share it "
                  "(std::make_shared<nn::Linear>(2, 3))");
  }
  template <typename... Ms>
  requires(sizeof...(Ms) > 0 && !(detail::kLvalueModule<Ms> || ...) &&
           (detail::kNoTensorForward<Ms> || ...)) explicit Sequential(Ms&&...) {
    static_assert(detail::kAlwaysFalse<Ms...>,
                  "nn::Sequential: every module must have Tensor forward(const Tensor&) "
                  "(a loss, whose forward takes two tensors, cannot be a layer)");
  }

  // Appends `m` under the name of its index ("0", "1", ...).
  template <TensorModule M>
  void push_back(std::shared_ptr<M> m) {
    push_back(std::to_string(forwards_.size()), std::move(m));
  }
  template <TensorModule M>
  requires(!std::is_lvalue_reference_v<M>) void push_back(M&& m) {
    push_back(std::make_shared<std::remove_cvref_t<M>>(std::move(m)));
  }
  template <typename M>
  requires std::derived_from<M, Module>
  void push_back(M&) {
    static_assert(detail::kAlwaysFalse<M>,
                  "nn::Sequential::push_back: a module held in a named variable (an lvalue) "
                  "cannot be added, since modules are not copyable. Pass a temporary, move it "
                  "in (std::move(layer)), or share it (std::make_shared<...>)");
  }
  template <TensorModule M>
  void push_back(const std::string& name, std::shared_ptr<M> m) {
    M* raw = m.get();
    register_module(name, std::move(m));  // checks the name and null
    forwards_.push_back([raw](const Tensor& x) {
      ForwardScope scope(*raw);  // names what any child allocates, built-in or not
      return Tensor(raw->forward(x));
    });
  }

  Tensor forward(const Tensor& x) const;
  size_t size() const { return forwards_.size(); }
  bool empty() const { return forwards_.empty(); }
  // The i-th module; throws for an index out of range.
  std::shared_ptr<Module> operator[](size_t i) const;
  // The i-th module as M; throws if it is not an M.
  template <typename M>
  std::shared_ptr<M> at(size_t i) const {
    auto typed = std::dynamic_pointer_cast<M>((*this)[i]);
    EMBER_CHECK(typed != nullptr, "Sequential::at: module ", i, " is a ", (*this)[i]->name(),
                ", not the type asked for");
    return typed;
  }

 private:
  std::vector<std::function<Tensor(const Tensor&)>> forwards_;
};

}  // namespace ember::nn
