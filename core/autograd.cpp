#include "core/autograd.h"

#include <atomic>
#include <mutex>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "core/anomaly.h"
#include "core/live_tensors.h"
#include "core/memory/caching_allocator.h"
#include "core/ops.h"
#include "core/profiler_span.h"

namespace ember {

namespace {
thread_local bool t_grad_enabled = true;
std::atomic<uint64_t> g_next_sequence_nr{0};

// Destroying a long chain of nodes recursively (each ~Node dropping the only
// reference to the next) would overflow the stack on deep graphs. Instead, a
// node about to die hands its sole-owned successors to this thread-local list,
// and the outermost destructor drains it in a loop.
thread_local std::vector<std::shared_ptr<Node>> t_pending_deletes;
thread_local bool t_draining_deletes = false;

}  // namespace

bool is_grad_enabled() {
  return t_grad_enabled;
}
void set_grad_enabled(bool enabled) {
  t_grad_enabled = enabled;
}

TensorImpl::~TensorImpl() {
  detail::unregister_live_tensor(*this);
  // A tensor's grad_fn can be the head of a long chain; route it through the
  // same iterative deletion as nodes.
  if (autograd && autograd->grad_fn && autograd->grad_fn.use_count() == 1) {
    std::shared_ptr<Node> head = std::move(autograd->grad_fn);
    head.reset();
  }
}

Node::Node()
    : sequence_nr(g_next_sequence_nr.fetch_add(1, std::memory_order_relaxed)),
      scope(AllocationScope::current()) {}

uint64_t next_node_sequence_nr() {
  return g_next_sequence_nr.load(std::memory_order_relaxed);
}

Node::~Node() {
  for (Edge& e : next_edges)
    if (e.node && e.node.use_count() == 1) t_pending_deletes.push_back(std::move(e.node));
  next_edges.clear();
  if (t_draining_deletes) return;  // an outer destructor is draining the list
  t_draining_deletes = true;
  while (!t_pending_deletes.empty()) {
    std::shared_ptr<Node> n = std::move(t_pending_deletes.back());
    t_pending_deletes.pop_back();
    n.reset();  // its destructor appends its own sole-owned successors
  }
  t_draining_deletes = false;
}

void Node::add_into(const Tensor&, Tensor&) {
  EMBER_FAIL("backward: ", name(),
             " does not add its gradient into a sum (adds_into_sum is false)");
}

void detail::throw_backward_twice(const char* node) {
  EMBER_FAIL("backward: trying to backward through the graph a second time (node ", node,
             "); its saved tensors were freed after the first backward. Pass "
             "retain_graph=true to the first backward if you need to call it twice.");
}

std::vector<Tensor> AccumulateGrad::apply(const Tensor& grad_output) {
  std::lock_guard<std::mutex> lock(mutex_);
  AutogradMeta& meta = *leaf_.impl().autograd;
  if (!meta.grad.defined()) {
    // Steal the incoming buffer when nothing else can see it; otherwise copy.
    bool sole = grad_output.impl_ptr().use_count() <= 2 && grad_output.storage().use_count() == 1 &&
                grad_output.is_contiguous() && !grad_output.requires_grad();
    meta.grad = sole ? grad_output.detach() : grad_output.detach().clone();
  } else {
    meta.grad.add_(grad_output);
  }
  for (auto& hook : meta.post_accumulate_hooks) hook(leaf_);
  return {};
}

void detail::throw_modified_in_place(const char* node, uint64_t saved, uint64_t now) {
  EMBER_FAIL(node,
             ": a tensor saved for backward was modified by an in-place operation "
             "(version ",
             saved, " when saved, ", now,
             " now); clone it before changing it in "
             "place");
}

SavedTensors::SavedTensors(std::initializer_list<Tensor> tensors) {
  EMBER_CHECK(tensors.size() <= kMax, "SavedTensors: a node saves at most ", kMax, " tensors, got ",
              tensors.size());
  for (const Tensor& t : tensors) {
    Entry& e = *new (slot(size_++)) Entry();
    if (t.defined()) {
      e.data = t.detach();
      e.version = t.version();
      e.leaf = t.is_leaf() && t.requires_grad();
    }
  }
}

std::vector<Node::SavedRef> SavedTensors::refs() const {
  std::vector<Node::SavedRef> out;
  for (size_t i = 0; i < size_; ++i)
    if (slot(i)->data.defined()) out.push_back({slot(i)->data.storage(), slot(i)->leaf});
  return out;
}

bool any_requires_grad(std::initializer_list<const Tensor*> inputs) {
  if (!t_grad_enabled) return false;
  for (const Tensor* t : inputs)
    if (t->defined() && t->requires_grad()) return true;
  return false;
}

Edge gradient_edge(const Tensor& t) {
  if (!t.defined() || !t.requires_grad()) return Edge{};
  AutogradMeta& meta = *t.impl().autograd;
  if (meta.grad_fn) return Edge{meta.grad_fn};
  std::lock_guard<std::mutex> lock(meta.mutex);
  std::shared_ptr<Node> acc = meta.grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t);
    meta.grad_accumulator = acc;
  }
  return Edge{std::move(acc)};
}

void detail::attach_node(Tensor& out, std::shared_ptr<Node> node, const Tensor* const* inputs,
                         size_t n) {
  if (is_anomaly_enabled()) [[unlikely]] {
    detail::check_forward_anomaly(out, node->name(), inputs, n);
  }
  node->next_edges.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const Tensor& in = *inputs[i];
    NextEdge& e = node->next_edges.emplace_back();
    e.node = gradient_edge(in).node;
    if (in.defined())
      e.input = InputMeta{in.sizes(), in.dtype(), in.device()};
    else
      e.input = InputMeta{{}, kFloat32, kCPU};
  }
  TensorImpl& impl = out.impl();
  if (!impl.autograd) impl.autograd = std::make_unique<AutogradMeta>();
  impl.autograd->requires_grad = true;
  impl.autograd->grad_fn = std::move(node);
}

namespace {

struct LaterFirst {
  bool operator()(const Node* a, const Node* b) const { return a->sequence_nr < b->sequence_nr; }
};

// The node whose backward runs on this thread and the engine's sums (for
// detail::backward_input_sum); null outside a node's backward and in anomaly mode.
thread_local Node* t_running_node = nullptr;
thread_local std::unordered_map<Node*, Tensor>* t_running_sums = nullptr;

// Callbacks queued during the backward pass running on this thread.
thread_local std::vector<std::function<void()>>* t_backward_callbacks = nullptr;

// True when `t` is a gradient the engine alone holds and may add into in place:
// no other handle, view or saved copy shares its storage, so the change is seen by
// no one else (PyTorch's InputBuffer steals a buffer on the like condition), and
// it is contiguous, so no two elements share memory (a gradient is often an
// expanded view, stride 0, of a smaller tensor).
bool engine_owns(const Tensor& t) {
  return t.impl_ptr().use_count() == 1 && t.storage().use_count() == 1 && !t.requires_grad() &&
         t.is_contiguous();
}

// Adds `g` into the sum kept for a node: in place when the engine alone holds the
// sum (no allocation; the same bits as add(sum, g)), else a new tensor.
void accumulate(Tensor& sum, Tensor&& g) {
  if (!sum.defined())
    sum = std::move(g);
  else if (sum.dtype() == g.dtype() && engine_owns(sum))
    sum.add_(g);
  else
    sum = add(sum, g);
}

void check_gradient(const Node& node, size_t i, const Tensor& g) {
  const InputMeta& m = node.next_edges[i].input;
  EMBER_CHECK(g.sizes() == m.sizes, "backward: ", node.name(), " returned a gradient of shape ",
              shape_str(g.sizes()), " for input ", i, " of shape ", shape_str(m.sizes));
  EMBER_CHECK(g.dtype() == m.dtype && g.device() == m.device, "backward: ", node.name(),
              " returned a ", g.dtype(), " gradient on ", g.device(), " for input ", i, " (",
              m.dtype, " on ", m.device, ")");
}

// The engine proper. When `captures` is given, gradients arriving at those nodes
// are stored there instead of running them (autograd::grad), and AccumulateGrad
// nodes are skipped.
void execute(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, bool retain_graph,
             std::unordered_map<Node*, Tensor>* captures) {
  EMBER_CHECK(roots.size() == grads.size(), "backward: ", roots.size(), " outputs but ",
              grads.size(), " gradients");
  std::unordered_map<Node*, Tensor> buffers;
  std::unordered_map<Node*, int> dependencies;
  std::vector<Node*> stack;
  std::unordered_set<Node*> seen;
  // Owns the roots' nodes: a root that is a leaf has an AccumulateGrad that
  // nothing else keeps alive.
  std::vector<std::shared_ptr<Node>> root_nodes;

  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& r = roots[i];
    EMBER_CHECK(r.defined() && r.requires_grad(), "backward: output ", i,
                " does not require grad and has no grad_fn");
    Edge e = gradient_edge(r);
    root_nodes.push_back(e.node);
    Tensor g = grads[i];
    if (!g.defined()) {
      EMBER_CHECK(r.numel() == 1,
                  "backward: grad can be implicitly created only for a "
                  "single-element output, this one has shape ",
                  shape_str(r.sizes()));
      g = ones_like(r.detach());
    }
    EMBER_CHECK(g.sizes() == r.sizes(), "backward: gradient of shape ", shape_str(g.sizes()),
                " given for an output of shape ", shape_str(r.sizes()));
    accumulate(buffers[e.node.get()], std::move(g));
    if (seen.insert(e.node.get()).second) stack.push_back(e.node.get());
  }
  // Count, for every reachable node, how many edges point at it (iteratively).
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    if (captures && captures->count(n)) continue;
    for (const Edge& e : n->next_edges) {
      if (!e.node) continue;
      ++dependencies[e.node.get()];
      if (seen.insert(e.node.get()).second) stack.push_back(e.node.get());
    }
  }

  std::priority_queue<Node*, std::vector<Node*>, LaterFirst> ready;
  for (const std::shared_ptr<Node>& root : root_nodes) {
    Node* n = root.get();
    if (dependencies[n] == 0) ready.push(n);
  }
  std::unordered_set<Node*> queued;
  NoGradGuard no_grad;
  std::vector<std::function<void()>> callbacks;
  struct CallbacksScope {
    std::vector<std::function<void()>>* previous;
    ~CallbacksScope() { t_backward_callbacks = previous; }
  } callbacks_scope{t_backward_callbacks};
  t_backward_callbacks = &callbacks;
  while (!ready.empty()) {
    Node* node = ready.top();
    ready.pop();
    if (!queued.insert(node).second) continue;
    Tensor g = std::move(buffers[node]);
    buffers.erase(node);
    if (captures) {
      auto it = captures->find(node);
      if (it != captures->end()) {
        it->second = g;
        continue;
      }
      if (dynamic_cast<AccumulateGrad*>(node)) continue;
    }
    // Backward allocations are named after the node and its forward's scope.
    // A node of one input may add its gradient into that input's sum itself
    // (Node::adds_into_sum); anomaly mode takes apply()'s path, which checks
    // every returned gradient.
    if (node->adds_into_sum() && node->next_edges.size() == 1 && node->next_edges[0].node &&
        !is_anomaly_enabled()) {
      Node* next = node->next_edges[0].node.get();
      if (g.defined()) {  // none arrived: nothing to add
        Tensor& sum = buffers[next];
        if (sum.defined() && !engine_owns(sum)) sum = sum.clone();
        AllocationScope scope(node->scope);
        AllocationTag tag(node->name());
        profiler::detail::SpanGuard span(node->name());
        node->add_into(g, sum);
      }
      g = Tensor();
      if (!retain_graph) node->release();
      if (--dependencies[next] == 0) ready.push(next);
      continue;
    }
    std::vector<Tensor> input_grads;
    {
      AllocationScope scope(node->scope);
      AllocationTag tag(node->name());
      profiler::detail::SpanGuard span(node->name());
      // The node may fold a gradient into its inputs' sums (backward_input_sum).
      struct Running {
        Node* node;
        std::unordered_map<Node*, Tensor>* sums;
        ~Running() {
          t_running_node = node;
          t_running_sums = sums;
        }
      } restore{t_running_node, t_running_sums};
      const bool offer = !is_anomaly_enabled();
      t_running_node = offer ? node : nullptr;
      t_running_sums = offer ? &buffers : nullptr;
      input_grads = node->apply(g);
    }
    g = Tensor();
    if (!retain_graph) node->release();
    if (dynamic_cast<AccumulateGrad*>(node)) continue;
    EMBER_CHECK(input_grads.size() == node->next_edges.size(), "backward: ", node->name(),
                " returned ", input_grads.size(), " gradients for ", node->next_edges.size(),
                " inputs");
    for (size_t i = 0; i < input_grads.size(); ++i) {
      Node* next = node->next_edges[i].node.get();
      if (!next) continue;
      if (input_grads[i].defined()) {
        check_gradient(*node, i, input_grads[i]);
        if (is_anomaly_enabled()) [[unlikely]]
          detail::check_backward_anomaly(*node, i, input_grads[i]);
        accumulate(buffers[next], std::move(input_grads[i]));
      }
      if (--dependencies[next] == 0) ready.push(next);
    }
  }
  for (size_t i = 0; i < callbacks.size(); ++i) {  // a callback may queue another
    std::function<void()> fn = std::move(callbacks[i]);
    fn();
  }
}

}  // namespace

Tensor* detail::backward_input_sum(size_t i) {
  Node* node = t_running_node;
  if (node == nullptr || t_running_sums == nullptr || i >= node->next_edges.size()) return nullptr;
  Node* next = node->next_edges[i].node.get();
  if (next == nullptr) return nullptr;
  return &(*t_running_sums)[next];
}

bool detail::engine_holds_alone(const Tensor& t) {
  return t.defined() && engine_owns(t);
}

void queue_backward_callback(std::function<void()> fn) {
  EMBER_CHECK(t_backward_callbacks != nullptr,
              "queue_backward_callback: no backward pass is running on this thread");
  t_backward_callbacks->push_back(std::move(fn));
}

void run_backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
                  bool retain_graph) {
  execute(roots, grads, retain_graph, nullptr);
}

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs, bool retain_graph) {
  std::unordered_map<Node*, Tensor> captures;
  std::vector<std::shared_ptr<Node>> targets;  // owned: an unused leaf's node has no other owner
  for (const Tensor& in : inputs) {
    EMBER_CHECK(in.defined() && in.requires_grad(), "grad: an input does not require grad");
    std::shared_ptr<Node> n = gradient_edge(in).node;
    captures.emplace(n.get(), Tensor());
    targets.push_back(std::move(n));
  }
  std::vector<Tensor> gos = grad_outputs;
  if (gos.empty()) gos.resize(outputs.size());
  execute(outputs, gos, retain_graph, &captures);
  std::vector<Tensor> result;
  for (size_t i = 0; i < inputs.size(); ++i) {
    Tensor g = captures[targets[i].get()];
    result.push_back(g.defined() ? g : zeros_like(inputs[i].detach()));
  }
  return result;
}

size_t count_graph_nodes(const Tensor& t) {
  if (!t.defined() || !t.impl().autograd || !t.impl().autograd->grad_fn) return 0;
  std::unordered_set<Node*> seen;
  std::vector<Node*> stack{t.impl().autograd->grad_fn.get()};
  seen.insert(stack.back());
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next_edges)
      if (e.node && seen.insert(e.node.get()).second) stack.push_back(e.node.get());
  }
  return seen.size();
}

}  // namespace ember

namespace ember {

GraphStats graph_stats(const Tensor& t, uint64_t since) {
  if (!t.defined() || !t.impl().autograd) return GraphStats{};
  return graph_stats(t.impl().autograd->grad_fn.get(), since);
}

GraphStats graph_stats(const Node* root, uint64_t since) {
  GraphStats st;
  if (root == nullptr) return st;
  std::unordered_set<const Node*> seen;
  std::unordered_set<const Storage*> storages;
  std::vector<const Node*> stack{root};
  seen.insert(stack.back());
  while (!stack.empty()) {
    const Node* n = stack.back();
    stack.pop_back();
    ++st.nodes;
    if (n->sequence_nr < since && !dynamic_cast<const AccumulateGrad*>(n)) ++st.nodes_before;
    for (const Node::SavedRef& ref : n->saved) {
      std::shared_ptr<Storage> s = ref.storage.lock();
      if (!s) continue;
      ++st.saved_tensors;
      if (!storages.insert(s.get()).second) continue;
      (ref.is_leaf ? st.saved_leaf_bytes : st.saved_activation_bytes) += s->nbytes();
    }
    for (const Edge& e : n->next_edges)
      if (e.node && seen.insert(e.node.get()).second) stack.push_back(e.node.get());
  }
  return st;
}

}  // namespace ember
