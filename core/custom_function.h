// Custom autograd functions, as libtorch's torch::autograd::Function: a user
// class with a static forward and backward sharing a context, applied with
// MyFn::apply(args...). The forward runs with grad mode off; the output gets one
// node whose backward calls MyFn::backward. This is the public way to give an op
// its own backward (attach_grad_fn stays internal to ember's ops).
//
//   struct MulConst : ember::autograd::Function<MulConst> {
//     static Tensor forward(AutogradContext* ctx, const Tensor& x, double c) {
//       ctx->saved_data["c"] = c;
//       return x * c;
//     }
//     static tensor_list backward(AutogradContext* ctx, tensor_list grad_outputs) {
//       return {grad_outputs[0] * ctx->saved_data["c"].toDouble(), Tensor()};
//     }
//   };
//   Tensor y = MulConst::apply(x, 2.0);
//
// As in libtorch, backward returns one tensor per argument of forward (an
// undefined Tensor for non-tensor arguments and for inputs without a gradient);
// returning one per tensor argument only is accepted too. Differences: forward
// returns one Tensor (not a list), and tensor arguments are Tensors (not lists).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "core/autograd.h"
#include "core/tensor.h"

namespace ember::autograd {

using tensor_list = std::vector<Tensor>;
using variable_list = tensor_list;  // libtorch's older name

/// A small value kept in AutogradContext::saved_data, as libtorch's IValue:
/// an integer, a double, a bool, a string, a list of integers or a tensor.
class SavedValue {
 public:
  SavedValue() = default;
  SavedValue(int64_t v) : v_(v) {}  // NOLINT: implicit, as IValue
  SavedValue(int v) : v_(static_cast<int64_t>(v)) {}
  SavedValue(double v) : v_(v) {}
  SavedValue(bool v) : v_(v) {}
  SavedValue(std::string v) : v_(std::move(v)) {}
  SavedValue(const char* v) : v_(std::string(v)) {}
  SavedValue(std::vector<int64_t> v) : v_(std::move(v)) {}
  SavedValue(Tensor v) : v_(std::move(v)) {}

  bool isInt() const { return std::holds_alternative<int64_t>(v_); }
  bool isDouble() const { return std::holds_alternative<double>(v_); }
  bool isBool() const { return std::holds_alternative<bool>(v_); }
  bool isString() const { return std::holds_alternative<std::string>(v_); }
  bool isIntList() const { return std::holds_alternative<std::vector<int64_t>>(v_); }
  bool isTensor() const { return std::holds_alternative<Tensor>(v_); }
  bool isNone() const { return std::holds_alternative<std::monostate>(v_); }

  /// The value; throws ember::Error naming both kinds when it holds another.
  int64_t toInt() const { return get<int64_t>("an int"); }
  /// A double, or an int widened to double (as IValue::toDouble does not; handy).
  double toDouble() const {
    return isInt() ? static_cast<double>(toInt()) : get<double>("a double");
  }
  bool toBool() const { return get<bool>("a bool"); }
  const std::string& toStringRef() const { return get<std::string>("a string"); }
  const std::vector<int64_t>& toIntVector() const {
    return get<std::vector<int64_t>>("a list of ints");
  }
  const Tensor& toTensor() const { return get<Tensor>("a tensor"); }

 private:
  template <typename T>
  const T& get(const char* want) const {
    if (const T* p = std::get_if<T>(&v_)) return *p;
    throw_wrong_kind(want);
  }
  [[noreturn]] void throw_wrong_kind(const char* want) const;
  std::variant<std::monostate, int64_t, double, bool, std::string, std::vector<int64_t>, Tensor> v_;
};

/// What forward hands to backward: saved tensors (version-checked), small
/// values, and which inputs need a gradient.
class AutogradContext {
 public:
  AutogradContext() = default;
  AutogradContext(const AutogradContext&) = delete;
  AutogradContext& operator=(const AutogradContext&) = delete;

  /// Keeps tensors for backward. Each is kept as a history-free alias with its
  /// version: reading it after an in-place change throws.
  void save_for_backward(tensor_list to_save);
  /// The saved tensors, in order; throws ember::Error when one was modified in
  /// place since it was saved, or after the graph was freed.
  tensor_list get_saved_variables() const;
  /// Marks outputs of forward that get no gradient (an index, a mask): they do
  /// not require grad and no node is recorded for them.
  void mark_non_differentiable(const tensor_list& outputs);
  /// Whether forward's argument `index` (counting every argument, tensors or
  /// not) is a tensor that needs a gradient.
  bool needs_input_grad(size_t index) const;

  /// Small values for backward, by name (libtorch's saved_data).
  std::map<std::string, SavedValue> saved_data;

  // --- for Function<T>::apply (not part of the user's API)
  void set_needs_input_grad_(std::vector<bool> needs) { needs_input_grad_ = std::move(needs); }
  bool is_non_differentiable_(const Tensor& t) const;
  void set_name_(const char* name) { name_ = name; }
  void release_();

 private:
  struct Saved {
    Tensor data;
    uint64_t version = 0;
  };
  std::vector<Saved> saved_;
  std::vector<bool> needs_input_grad_;
  std::vector<Tensor> non_differentiable_;
  const char* name_ = "CustomFunction";
  bool released_ = false;
};

namespace detail {

// The node a Function's output gets: runs backward(ctx, {grad}) and maps the
// returned list onto the tensor arguments.
class CustomFunctionNode final : public Node {
 public:
  using Backward = tensor_list (*)(AutogradContext*, tensor_list);
  CustomFunctionNode(const char* name, std::shared_ptr<AutogradContext> ctx, Backward backward,
                     std::vector<size_t> tensor_positions, size_t num_args)
      : name_(name),
        ctx_(std::move(ctx)),
        backward_(backward),
        tensor_positions_(std::move(tensor_positions)),
        num_args_(num_args) {}
  const char* name() const override { return name_; }
  std::vector<Tensor> apply(const Tensor& grad_output) override;
  void release() override;

 private:
  const char* name_;
  std::shared_ptr<AutogradContext> ctx_;
  Backward backward_;
  std::vector<size_t> tensor_positions_;  // which of forward's arguments are tensors
  size_t num_args_;
};

// Records the node on `out` with edges to `inputs` (the tensor arguments).
Tensor record_custom_function(Tensor out, const char* name, std::shared_ptr<AutogradContext> ctx,
                              CustomFunctionNode::Backward backward,
                              const std::vector<const Tensor*>& inputs,
                              std::vector<size_t> tensor_positions, size_t num_args);

template <typename A>
constexpr bool is_tensor_arg = std::is_same_v<std::decay_t<A>, Tensor>;

// The name of T's node: T::name() when T has one, else "CustomFunctionBackward".
template <typename T, typename = void>
struct FunctionName {
  static const char* get() { return "CustomFunctionBackward"; }
};
template <typename T>
struct FunctionName<T, std::void_t<decltype(T::name())>> {
  static const char* get() { return T::name(); }
};

}  // namespace detail

/// The base of a custom function (CRTP, as libtorch's): T defines
///   static Tensor forward(AutogradContext* ctx, Args...);
///   static tensor_list backward(AutogradContext* ctx, tensor_list grad_outputs);
/// and optionally `static const char* name()` naming its node in errors and graphs.
template <typename T>
struct Function {
  /// Runs T::forward with grad mode off and records T::backward for its output.
  template <typename... Args>
  static Tensor apply(const Args&... args) {
    auto ctx = std::make_shared<AutogradContext>();
    const char* name = detail::FunctionName<T>::get();
    ctx->set_name_(name);
    std::vector<const Tensor*> inputs;
    std::vector<size_t> positions;
    std::vector<bool> needs;
    size_t index = 0;
    auto note = [&](const auto& a) {
      using A = decltype(a);
      if constexpr (detail::is_tensor_arg<A>) {
        inputs.push_back(&a);
        positions.push_back(index);
        needs.push_back(is_grad_enabled() && a.defined() && a.requires_grad());
      } else {
        needs.push_back(false);
      }
      ++index;
    };
    (note(args), ...);
    bool any = false;
    for (bool n : needs) any = any || n;
    ctx->set_needs_input_grad_(needs);
    Tensor out;
    {
      NoGradGuard no_grad;
      out = T::forward(ctx.get(), args...);  // lvalues: the inputs above stay valid
    }
    if (!any || !out.defined() || ctx->is_non_differentiable_(out)) return out;
    return detail::record_custom_function(std::move(out), name, std::move(ctx), &T::backward,
                                          inputs, std::move(positions), sizeof...(Args));
  }
};

}  // namespace ember::autograd
