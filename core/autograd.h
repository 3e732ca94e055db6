// Autograd: a dynamic graph of Nodes built as ops run, walked backwards by an
// iterative engine. Each op attaches its own backward (a lambda saving only what
// it needs) right below its forward (see core/ops/*.cpp). Graphs are freed after
// backward unless retain_graph; saved tensors check their version on use.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "core/tensor.h"

namespace ember {

class Node;

struct Edge {
  std::shared_ptr<Node> node;  // null: the input needs no gradient
};

struct AutogradMeta {
  bool requires_grad = false;
  bool retains_grad = false;
  Tensor grad;                           // written under the AccumulateGrad's lock
  std::shared_ptr<Node> grad_fn;         // set for non-leaves
  std::weak_ptr<Node> grad_accumulator;  // for leaves, created on demand
  std::vector<GradHook> post_accumulate_hooks;
  // Guards grad_accumulator's creation: threads recording ops on a shared leaf at
  // once must all get the one AccumulateGrad (PyTorch's AutogradMeta::mutex_).
  std::mutex mutex;
};

// What backward needs to know about each input to check the gradient it returns.
struct InputMeta {
  Shape sizes;
  DType dtype;
  Device device;
};

// One input of a node: the edge its gradient flows along, and what that gradient
// must look like (one vector of these, so recording a node allocates once for both).
struct NextEdge : Edge {
  InputMeta input;
};

class Node {
 public:
  Node();
  virtual ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  virtual const char* name() const = 0;
  // Given the gradient of this node's output, the gradients of its inputs (one per
  // next edge; an undefined Tensor where none flows).
  virtual std::vector<Tensor> apply(const Tensor& grad_output) = 0;
  // Optional, for a node of one input whose gradient is zero outside a region of
  // that input (a slice): when adds_into_sum() says so, the engine calls
  // add_into() instead of apply(), and the node adds its gradient straight into
  // `sum`, the gradient the engine is summing for the input. `sum` is undefined
  // when nothing has arrived yet (the node then makes it); when defined, it has
  // the input's shape, dtype and device and the engine alone holds it, so changing
  // it in place is safe. A split's pieces so cost one zero-filled buffer and a
  // write per piece, not a zero-filled tensor per piece and the sums of those.
  virtual bool adds_into_sum() const { return false; }
  virtual void add_into(const Tensor& grad_output, Tensor& sum);
  // Frees what was saved for backward (after a backward without retain_graph).
  virtual void release() {}

  std::vector<NextEdge> next_edges;  // one per input
  uint64_t sequence_nr;              // creation order; the engine runs later nodes first

  // For diagnostics (core/leak_check.h). The storages its backward saved, as weak
  // references so that watching them keeps nothing alive (cleared on release),
  // and the allocation scope it was built in, under which its backward allocates.
  struct SavedRef {
    std::weak_ptr<Storage> storage;
    bool is_leaf = false;  // a leaf that requires grad (a weight), not an activation
  };
  std::vector<SavedRef> saved;
  const char* scope = nullptr;
};

using BackwardFn = std::function<std::vector<Tensor>(const Tensor& grad_output)>;

namespace detail {
[[noreturn]] void throw_backward_twice(const char* node);
[[noreturn]] void throw_modified_in_place(const char* node, uint64_t saved, uint64_t now);

// While the engine runs a node's backward on this thread (not in anomaly mode): the
// gradient the engine is summing for that node's input i, so a backward can fold its
// own gradient for input i into the sum in the same pass (layer norm's fused backward
// adds d_x to the residual stream's gradient) and return an undefined gradient for i.
// The folding backward sets *sum to a tensor holding the sum plus its gradient, of the
// input's shape, dtype and device, written in place only when
// engine_holds_alone(*sum). The sum is undefined when nothing has arrived yet (then
// return the gradient as usual); null when the engine offers none (no engine running,
// anomaly mode, or an input without gradient).
Tensor* backward_input_sum(size_t i);
// True when `t`, a sum the engine keeps, is held by nobody else and contiguous, so
// writing it in place changes no other tensor.
bool engine_holds_alone(const Tensor& t);
}  // namespace detail

// The tensors an op's backward reads, given to the node explicitly when the op
// attaches it (attach_grad_fn below). Each is kept as a history-free alias with
// the version it had, so reading it after an in-place change throws instead of
// giving a wrong gradient. Entries may be undefined (a side that needs nothing).
class SavedTensors {
 public:
  // The most tensors one node saves, kept inline: recording a node allocates
  // nothing for them, and a node that saves none pays for none.
  static constexpr size_t kMax = 4;

  SavedTensors() = default;
  SavedTensors(std::initializer_list<Tensor> tensors);
  SavedTensors(SavedTensors&& other) noexcept : node_(other.node_) {
    for (size_t i = 0; i < other.size_; ++i) new (slot(i)) Entry(std::move(*other.slot(i)));
    size_ = other.size_;
    other.clear();
  }
  SavedTensors& operator=(SavedTensors&& other) noexcept {
    if (this != &other) {
      clear();
      for (size_t i = 0; i < other.size_; ++i) new (slot(i)) Entry(std::move(*other.slot(i)));
      size_ = other.size_;
      node_ = other.node_;
      other.clear();
    }
    return *this;
  }
  SavedTensors(const SavedTensors&) = delete;
  SavedTensors& operator=(const SavedTensors&) = delete;
  ~SavedTensors() { clear(); }

  // The i-th saved tensor; throws ember::Error naming the node if it was modified
  // in place since it was saved.
  const Tensor& operator[](size_t i) const {
    const Entry& e = *slot(i);
    if (e.data.defined() && e.data.version() != e.version) [[unlikely]]
      detail::throw_modified_in_place(node_, e.version, e.data.version());
    return e.data;
  }
  size_t size() const { return size_; }
  // What the node's diagnostics see (Node::saved): storage, and whether a leaf.
  std::vector<Node::SavedRef> refs() const;
  void set_node_name(const char* name) { node_ = name; }
  void clear() noexcept {
    for (size_t i = 0; i < size_; ++i) slot(i)->~Entry();
    size_ = 0;
  }

 private:
  struct Entry {
    Tensor data;
    uint64_t version = 0;
    bool leaf = false;  // a leaf that requires grad (a weight)
  };
  Entry* slot(size_t i) { return std::launder(reinterpret_cast<Entry*>(storage_) + i); }
  const Entry* slot(size_t i) const {
    return std::launder(reinterpret_cast<const Entry*>(storage_) + i);
  }
  alignas(Entry) unsigned char storage_[kMax * sizeof(Entry)];
  size_t size_ = 0;
  const char* node_ = "";
};

// A node whose backward is a callable F: the lambda an op attaches, kept in the
// node itself (no std::function), so recording it allocates the node alone. F
// takes (grad_output) or (grad_output, const SavedTensors&). After release() it
// refuses to run again, which is how "backward through the graph a second time"
// is caught.
template <typename F>
class FunctionNode final : public Node {
 public:
  FunctionNode(const char* name, F fn, SavedTensors&& saved)
      : name_(name), fn_(std::move(fn)), saved_tensors_(std::move(saved)) {
    saved_tensors_.set_node_name(name);
  }
  const char* name() const override { return name_; }
  std::vector<Tensor> apply(const Tensor& grad_output) override {
    if (!fn_) [[unlikely]]
      detail::throw_backward_twice(name_);
    if constexpr (std::is_invocable_v<F&, const Tensor&, const SavedTensors&>)
      return (*fn_)(grad_output, saved_tensors_);
    else
      return (*fn_)(grad_output);
  }
  void release() override {
    fn_.reset();  // drops the lambda and everything it captured
    saved_tensors_.clear();
    saved.clear();
  }
  const SavedTensors& saved_tensors() const { return saved_tensors_; }

 private:
  const char* name_;
  std::optional<F> fn_;
  SavedTensors saved_tensors_;
};

// The sink for a leaf: adds the incoming gradient into leaf.grad(), then runs the
// leaf's post-accumulate hooks. There is one per leaf, shared by every graph that
// uses the leaf, so threads running backward over such graphs at once meet here:
// the accumulation and the hooks run under this node's lock, as in PyTorch (hooks
// must still be thread-safe themselves; reading .grad() while another thread's
// backward writes it is the caller's race, as in PyTorch).
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(Tensor leaf) : leaf_(std::move(leaf)) {}
  const char* name() const override { return "AccumulateGrad"; }
  std::vector<Tensor> apply(const Tensor& grad_output) override;
  const Tensor& leaf() const { return leaf_; }

 private:
  Tensor leaf_;
  std::mutex mutex_;
};

// --- grad mode (thread-local)
bool is_grad_enabled();
void set_grad_enabled(bool enabled);

class NoGradGuard {
 public:
  NoGradGuard() : previous_(is_grad_enabled()) { set_grad_enabled(false); }
  ~NoGradGuard() { set_grad_enabled(previous_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

class EnableGradGuard {
 public:
  EnableGradGuard() : previous_(is_grad_enabled()) { set_grad_enabled(true); }
  ~EnableGradGuard() { set_grad_enabled(previous_); }
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool previous_;
};

// --- helpers for ops
// True when grad mode is on and any defined input requires grad.
bool any_requires_grad(std::initializer_list<const Tensor*> inputs);
namespace detail {
// Makes `node` out's grad_fn, with an edge to each input (see attach_grad_fn).
void attach_node(Tensor& out, std::shared_ptr<Node> node, const Tensor* const* inputs, size_t n);
}  // namespace detail

// Attaches a backward to `out`, the one way every op wires itself into autograd:
// a FunctionNode named `name` running `fn`, with an edge to each input (a null
// edge for inputs without grad) and `saved`, the explicit list of tensors its
// backward reads, handed to fn as its second argument. fn returns one gradient
// per input (undefined where none flows).
template <typename F>
void attach_grad_fn(Tensor& out, const char* name, std::initializer_list<const Tensor*> inputs,
                    SavedTensors saved, F&& fn) {
  std::vector<Node::SavedRef> refs = saved.refs();
  auto node =
      std::make_shared<FunctionNode<std::decay_t<F>>>(name, std::forward<F>(fn), std::move(saved));
  node->saved = std::move(refs);
  detail::attach_node(out, std::move(node), inputs.begin(), inputs.size());
}
// For backwards that read no saved tensor.
template <typename F>
void attach_grad_fn(Tensor& out, const char* name, std::initializer_list<const Tensor*> inputs,
                    F&& fn) {
  attach_grad_fn(out, name, inputs, SavedTensors{}, std::forward<F>(fn));
}
template <typename F>
void attach_grad_fn(Tensor& out, const char* name, const std::vector<Tensor>& inputs, F&& fn) {
  std::vector<const Tensor*> ptrs;
  ptrs.reserve(inputs.size());
  for (const Tensor& t : inputs) ptrs.push_back(&t);
  auto node =
      std::make_shared<FunctionNode<std::decay_t<F>>>(name, std::forward<F>(fn), SavedTensors{});
  detail::attach_node(out, std::move(node), ptrs.data(), ptrs.size());
}
// The edge through which a gradient for `t` flows (null if t needs none).
Edge gradient_edge(const Tensor& t);

// Runs `fn` once when the backward pass running on this thread has finished
// (after every node ran), in the order queued; called from hooks, as DDP does
// to finish its gradient sync. Throws when no backward is running on this thread.
void queue_backward_callback(std::function<void()> fn);

// Runs backward from `roots` with the given output gradients.
void run_backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
                  bool retain_graph);

// Gradients of `outputs` with respect to `inputs` without touching .grad()
// (autograd.grad in PyTorch); used by gradcheck.
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs = {}, bool retain_graph = false);

// Counts the nodes reachable from t.grad_fn() (0 for leaves); for diagnostics.
size_t count_graph_nodes(const Tensor& t);

// What the graph behind t.grad_fn() holds: nodes, and the storages its nodes saved
// for backward that are still alive (each storage counted once). Activations are
// saved non-leaf tensors; saved leaves (weights) live on with the model anyway.
struct GraphStats {
  size_t nodes = 0;
  size_t nodes_before = 0;  // nodes (not AccumulateGrad) with sequence_nr < `since`
  size_t saved_tensors = 0;
  size_t saved_activation_bytes = 0;
  size_t saved_leaf_bytes = 0;
};
GraphStats graph_stats(const Tensor& t, uint64_t since = 0);
GraphStats graph_stats(const Node* root, uint64_t since = 0);
// The sequence_nr the next node will get: nodes made after this call have one >= it.
uint64_t next_node_sequence_nr();

}  // namespace ember
