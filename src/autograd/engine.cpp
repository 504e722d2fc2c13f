// The backward engine: dependency counts over the reachable graph, then a queue in topological
// order (no recursion, so chains of any length work), and an iterative node teardown.
#include <deque>
#include <functional>
#include <utility>
#include <unordered_map>
#include <unordered_set>

#include "tandem/autograd/grad_mode.hpp"
#include "tandem/autograd/node.hpp"
#include "../kernels/kernels.hpp"

namespace tandem {

void Tensor::backward(const Tensor& gradient, bool retain_graph) const {
  autograd::run_backward({*this}, {gradient}, retain_graph);
}

namespace autograd {

namespace {
// Gradient arithmetic goes straight to the kernels: the engine sits below the ops. Results keep
// their operand's layout: a channels-last gradient summed or converted row-major would be read
// across strides by every kernel and copied back by its consumer (a residual block's input has
// two consumers, so on a channels-last network that was every block's input gradient).
Tensor converted(const Tensor& t, DType dtype) {
  if (t.dtype() == dtype) return t;
  Tensor out = make_tensor(t.shape(), dtype, t.device(), t.suggest_memory_format());
  kernels::copy(out, t);
  return out;
}
Tensor sum_of(const Tensor& a, const Tensor& b) {
  TANDEM_CHECK(a.shape() == b.shape(), "backward: gradients of shapes ", shape_str(a.shape()),
               " and ", shape_str(b.shape()), " for one tensor");
  Tensor out = make_tensor(a.shape(), a.dtype(), a.device(), a.suggest_memory_format());
  kernels::binary(out, kernels::BinaryOp::add, {1.0}, a, converted(b, a.dtype()));
  return out;
}
// Whether `g` (held by the engine alone) could be `leaf`'s .grad as it is: no other tensor or
// view shares it, it has the leaf's dtype and device, and it fills its whole buffer densely in
// the leaf's layout.
bool sole_dense_owner(const Tensor& g, const Tensor& leaf) {
  return g.impl_ptr().use_count() == 1 && g.storage().use_count() == 1 && !g.grad_fn() &&
         !g.requires_grad() && g.dtype() == leaf.dtype() && g.device() == leaf.device() &&
         g.storage_offset() == 0 &&
         g.storage().nbytes() == static_cast<size_t>(g.numel() * g.element_size()) &&
         g.is_contiguous(leaf.suggest_memory_format());
}
// The callbacks of the backward pass running on this thread (null outside one).
thread_local std::vector<std::function<void()>>* t_callbacks = nullptr;
}  // namespace

void queue_callback(std::function<void()> callback) {
  TANDEM_CHECK(t_callbacks != nullptr,
               "queue_callback: only a backward pass in progress on this thread runs callbacks");
  t_callbacks->push_back(std::move(callback));
}

std::vector<Tensor> Node::apply(const Tensor& grad_output) {
  TANDEM_CHECK(!released_, "backward: trying to backward through the graph a second time (at ",
               name_, "); its saved tensors were freed after the first backward. Pass "
               "retain_graph = true to the first backward call to keep them");
  if (!grad_output.defined()) return std::vector<Tensor>(next_.size());
  return fn_(grad_output);
}

AccumulateGrad::AccumulateGrad(std::shared_ptr<TensorImpl> leaf)
    : Node("AccumulateGrad", nullptr), leaf_(std::move(leaf)) {}

std::vector<Tensor> AccumulateGrad::apply(const Tensor& grad_output) {
  if (!grad_output.defined()) return {};
  Tensor leaf(leaf_);
  TANDEM_CHECK(grad_output.shape() == leaf.shape(), "backward: gradient of shape ",
               shape_str(grad_output.shape()), " for a leaf of shape ", shape_str(leaf.shape()));
  Tensor acc;
  if (leaf_->grad_buffer) {
    // A buffer given in advance: the first gradient is copied in, later ones added in place.
    acc = Tensor(leaf_->grad_buffer);
    if (leaf_->grad == leaf_->grad_buffer) {
      kernels::binary(acc, kernels::BinaryOp::add, {1.0}, acc, converted(grad_output, acc.dtype()));
    } else {
      kernels::copy(acc, grad_output);
    }
  } else if (leaf_->grad) {
    acc = sum_of(Tensor(leaf_->grad), grad_output);
  } else if (sole_dense_owner(grad_output, leaf)) {
    // Nothing else holds this gradient or its memory: .grad takes it over (no copy), as torch's
    // AccumulateGrad steals one.
    acc = grad_output;
  } else {
    // A fresh tensor: .grad never aliases a tensor of the graph. It is laid out as its leaf
    // (a channels-last weight gets a channels-last gradient, as torch's layout contract).
    acc = make_tensor(leaf.shape(), leaf.dtype(), leaf.device(), leaf.suggest_memory_format());
    kernels::copy(acc, grad_output);
  }
  leaf_->grad = acc.impl_ptr();
  for (const auto& hook : leaf_->ready_hooks) hook(acc);
  return {};
}

bool needs_grad(const std::vector<Tensor>& inputs) {
  if (!grad_mode_enabled()) return false;
  for (const auto& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

namespace {
std::shared_ptr<Node> gradient_edge(const Tensor& t) {
  if (t.grad_fn()) return t.grad_fn();
  TensorImpl* impl = t.impl();
  auto acc = impl->grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t.impl_ptr());
    impl->grad_accumulator = acc;
  }
  return acc;
}

// Destroying a long chain of nodes would recurse node -> closure -> saved tensor -> node...;
// nested destructors hand their members to the outermost one, which frees them in a loop.
thread_local int t_teardown_depth = 0;
thread_local std::vector<std::pair<BackwardFn, std::vector<std::shared_ptr<Node>>>> t_pending;
}  // namespace

Node::~Node() {
  if (t_teardown_depth > 0) {
    t_pending.emplace_back(std::move(fn_), std::move(next_));
    return;
  }
  ++t_teardown_depth;
  {
    auto fn = std::move(fn_);
    auto next = std::move(next_);
  }
  while (!t_pending.empty()) {
    auto item = std::move(t_pending.back());
    t_pending.pop_back();
  }
  --t_teardown_depth;
}

void record(const char* name, const std::vector<Tensor>& inputs, Tensor& output, BackwardFn fn) {
  if (!needs_grad(inputs) || !is_floating(output.dtype())) return;
  auto node = std::make_shared<Node>(name, std::move(fn));
  for (const auto& t : inputs)
    node->next().push_back(t.defined() && t.requires_grad() ? gradient_edge(t) : nullptr);
  output.impl()->grad_fn = std::move(node);
  output.impl()->requires_grad = true;
}

void run_backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
                  bool retain_graph) {
  TANDEM_CHECK(roots.size() == grads.size(), "backward: ", roots.size(), " tensors but ",
               grads.size(), " gradients");
  NoGradGuard no_grad;
  // Backward runs in the dtypes forward chose: autocast does not apply to gradient ops.
  struct AutocastOff {
    ExecutionContext& context = current_context();
    AutocastState saved = context.autocast();
    AutocastOff() { context.set_autocast(AutocastState{}); }
    ~AutocastOff() { context.set_autocast(saved); }
  } autocast_off;
  // A nested backward (from a node's closure) gets callbacks of its own.
  std::vector<std::function<void()>> callbacks;
  struct Restore {
    std::vector<std::function<void()>>* previous;
    ~Restore() { t_callbacks = previous; }
  } restore{std::exchange(t_callbacks, &callbacks)};
  std::unordered_map<Node*, Tensor> buffer;  // gradient summed so far for each node
  std::vector<std::shared_ptr<Node>> root_nodes;
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& root = roots[i];
    TANDEM_CHECK(root.defined(), "backward: tensor ", i, " is undefined");
    TANDEM_CHECK(root.requires_grad(), "backward: tensor ", i,
                 " does not require grad and has no grad_fn");
    Tensor g = grads[i];
    if (!g.defined()) {
      TANDEM_CHECK(root.numel() == 1, "backward: a gradient can be implied only for scalar "
                   "outputs, got shape ", shape_str(root.shape()),
                   "; pass a gradient of that shape");
      g = make_tensor(root.shape(), root.dtype(), root.device());
      kernels::fill(g, 1.0);
    } else {
      TANDEM_CHECK(g.shape() == root.shape(), "backward: gradient has shape ",
                   shape_str(g.shape()), " but the tensor has shape ", shape_str(root.shape()));
      TANDEM_CHECK(g.device() == root.device(), "backward: gradient on ", g.device(),
                   " for a tensor on ", root.device());
    }
    auto node = gradient_edge(root);
    auto& slot = buffer[node.get()];
    slot = slot.defined() ? sum_of(slot, g) : g;
    root_nodes.push_back(node);
  }

  // Count, for each reachable node, the edges that point at it.
  std::unordered_map<Node*, int> deps;
  std::vector<std::shared_ptr<Node>> all(root_nodes);
  std::unordered_set<Node*> seen;
  std::vector<Node*> stack;
  for (auto& n : root_nodes)
    if (seen.insert(n.get()).second) stack.push_back(n.get());
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (auto& next : n->next()) {
      if (!next) continue;
      ++deps[next.get()];
      if (seen.insert(next.get()).second) {
        stack.push_back(next.get());
        all.push_back(next);
      }
    }
  }

  std::deque<Node*> ready;
  std::unordered_set<Node*> queued;
  for (auto& n : root_nodes)
    if (deps[n.get()] == 0 && queued.insert(n.get()).second) ready.push_back(n.get());
  while (!ready.empty()) {
    Node* n = ready.front();
    ready.pop_front();
    Tensor g;
    if (auto it = buffer.find(n); it != buffer.end()) {
      g = std::move(it->second);
      buffer.erase(it);
    }
    std::vector<Tensor> input_grads = n->apply(g);
    if (!retain_graph) n->release();
    auto& next = n->next();
    TANDEM_CHECK(input_grads.size() == next.size() || next.empty(), "backward: ", n->name(),
                 " returned ", input_grads.size(), " gradients for ", next.size(), " inputs");
    for (size_t i = 0; i < next.size(); ++i) {
      Node* m = next[i].get();
      if (!m) continue;
      if (input_grads[i].defined()) {
        auto& slot = buffer[m];
        slot = slot.defined() ? sum_of(slot, input_grads[i]) : std::move(input_grads[i]);
      }
      if (--deps[m] == 0) ready.push_back(m);
    }
  }
  for (size_t i = 0; i < callbacks.size(); ++i) {
    auto callback = std::move(callbacks[i]);  // a callback may queue more (and grow the vector)
    callback();
  }
}

}  // namespace autograd
}  // namespace tandem
