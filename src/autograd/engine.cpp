// The backward engine: dependency counts over the reachable graph, then a queue in topological
// order (no recursion, so chains of any length work), and an iterative node teardown.
#include <algorithm>
#include <atomic>
#include <deque>
#include <functional>
#include <utility>
#include <unordered_map>
#include <unordered_set>

#include "tandem/autograd/grad_mode.hpp"
#include "tandem/autograd/node.hpp"
#include "../kernels/kernels.hpp"

namespace tandem {

void Tensor::backward(const Tensor& gradient, std::optional<bool> retain_graph,
                      bool create_graph) const {
  autograd::run_backward({*this}, {gradient}, retain_graph.value_or(create_graph), create_graph);
}

namespace {
// Where a tensor's register_hook hooks live: on a leaf, or on a non-leaf's grad_fn.
GradHooks& hooks_of(const Tensor& t) {
  return t.is_leaf() ? t.impl()->grad_hooks : t.grad_fn()->hooks();
}
}  // namespace

unsigned Tensor::add_grad_hook(GradHook hook) const {
  TANDEM_CHECK(hook != nullptr, "register_hook: the hook is empty");
  TANDEM_CHECK(requires_grad(),
               "register_hook: this tensor does not require grad, so no gradient will reach it");
  GradHooks& hooks = hooks_of(*this);
  hooks.hooks.emplace_back(hooks.next_handle, std::move(hook));
  return hooks.next_handle++;
}

void Tensor::remove_hook(unsigned handle) const {
  GradHooks& hooks = hooks_of(*this);
  auto it = std::find_if(hooks.hooks.begin(), hooks.hooks.end(),
                         [&](const auto& entry) { return entry.first == handle; });
  TANDEM_CHECK(it != hooks.hooks.end(), "remove_hook: no hook with handle ", handle,
               " on this tensor");
  hooks.hooks.erase(it);
}

void Tensor::retain_grad() const {
  TANDEM_CHECK(requires_grad(),
               "retain_grad: this tensor does not require grad, so no gradient will reach it");
  if (is_leaf()) return;
  checked()->retains_grad = true;
  grad_fn()->retain_into(impl_);
}

namespace autograd {

namespace {
// Gradient arithmetic goes straight to the kernels: the engine sits below the ops. Results keep
// their operand's layout: a channels-last gradient summed or converted row-major would be read
// across strides by every kernel and copied back by its consumer (a residual block's input has
// two consumers, so on a channels-last network that was every block's input gradient).
// Under create_graph (grad mode on in the engine) each records itself, so gradients summed or
// converted here keep their history.
Tensor converted(const Tensor& t, DType dtype) {
  if (t.dtype() == dtype) return t;
  Tensor out = make_tensor(t.shape(), dtype, t.device(), t.suggest_memory_format());
  kernels::copy(out, t);
  const DType from = t.dtype();
  record("to_dtype", {t}, out, [from](const Tensor& g) -> std::vector<Tensor> {
    return {converted(g, from)};
  }, BackwardKind::differentiable);
  return out;
}
Tensor sum_of(const Tensor& a, const Tensor& b) {
  TANDEM_CHECK(a.shape() == b.shape(), "backward: gradients of shapes ", shape_str(a.shape()),
               " and ", shape_str(b.shape()), " for one tensor");
  Tensor out = make_tensor(a.shape(), a.dtype(), a.device(), a.suggest_memory_format());
  Tensor b_as_a = converted(b, a.dtype());
  kernels::binary(out, kernels::BinaryOp::add, {1.0}, a, b_as_a);
  record("add", {a, b_as_a}, out, [](const Tensor& g) -> std::vector<Tensor> { return {g, g}; },
         BackwardKind::differentiable);
  return out;
}
// A copy of `g` laid out as `like`, recording itself under create_graph.
Tensor copy_like(const Tensor& g, const Tensor& like) {
  Tensor out = make_tensor(like.shape(), like.dtype(), like.device(), like.suggest_memory_format());
  kernels::copy(out, g);
  const DType from = g.dtype();
  record("clone", {g}, out, [from](const Tensor& grad) -> std::vector<Tensor> {
    return {converted(grad, from)};
  }, BackwardKind::differentiable);
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
// The node whose closure the engine is running on this thread (saved_output re-attaches to it).
thread_local Node* t_running = nullptr;
// The pass running on this thread, and the last number given to one on any thread.
thread_local uint64_t t_pass = 0;
std::atomic<uint64_t> g_passes{0};
std::atomic<bool> g_anomaly{false};

// Anomaly mode: the first NaN among the gradients node `n` returned stops the pass, named.
void check_anomaly(Node& n, const std::vector<Tensor>& grads) {
  NoGradGuard no_grad;
  for (size_t i = 0; i < grads.size(); ++i) {
    const Tensor& g = grads[i];
    if (!g.defined() || !is_floating(g.dtype()) || !g.isnan().any().item<bool>()) continue;
    const auto& next = n.next();
    const std::string to = i < next.size() && next[i] ? next[i]->name() : "nothing";
    TANDEM_THROW(ValueError, "anomaly detection: the backward of '", n.name(),
                 "' returned NaN values in its output ", i, " (the gradient of its input ", i,
                 ", going to '", to, "'), shape ", shape_str(g.shape()));
  }
}

// `detached` again, its gradient going to `node` (an op's node or a leaf's accumulator).
Tensor with_history(const Tensor& detached, std::shared_ptr<Node> node) {
  if (!node || !grad_mode_enabled()) return detached;
  Tensor out = detached.detach();
  out.impl()->grad_fn = std::move(node);
  out.impl()->requires_grad = true;
  return out;
}
}  // namespace

uint64_t current_pass() { return t_pass; }

Tensor saved_output(const Tensor& detached) {
  return t_running ? with_history(detached, t_running->shared_from_this()) : detached;
}

Tensor saved_input(const Tensor& detached, size_t index) {
  if (!t_running || index >= t_running->next().size()) return detached;
  return with_history(detached, t_running->next()[index]);
}

void queue_callback(std::function<void()> callback) {
  TANDEM_CHECK(t_callbacks != nullptr,
               "queue_callback: only a backward pass in progress on this thread runs callbacks");
  t_callbacks->push_back(std::move(callback));
}

void Node::check_runnable() const {
  TANDEM_CHECK(!released_, "backward: trying to backward through the graph a second time (at ",
               name_, "); its saved tensors were freed after the first backward. Pass "
               "retain_graph = true to the first backward call to keep them");
  for (const auto& [storage, version] : saved_versions_)
    TANDEM_CHECK(storage.version() == version, "backward: a tensor that ", name_,
                 " saved for its gradient was changed in place after the forward pass: by an "
                 "in-place op (add_, relu_, +=, ...), copy_ or an optimizer step between forward "
                 "and backward. Its gradient would be wrong. Run the forward pass again after the "
                 "change, or change a clone() instead (its version was ",
                 version, " when ", name_, " ran, ", storage.version(), " now)");
}

void Node::save_version(const Tensor& t) {
  saved_versions_.emplace_back(t.storage(), t.storage().version());
}

void save_for_backward(const Tensor& output, std::initializer_list<Tensor> saved) {
  if (!output.defined() || !output.grad_fn()) return;
  for (const Tensor& t : saved)
    if (t.defined()) output.grad_fn()->save_version(t);
}

std::vector<Tensor> Node::apply(const Tensor& grad_output) {
  check_runnable();
  if (!grad_output.defined()) return std::vector<Tensor>(next_.size());
  if (kind_ == BackwardKind::once && grad_mode_enabled())
    TANDEM_THROW(NotImplementedError, "backward with create_graph: the backward of ", name_,
                 " is not differentiable here, so the gradients it gives could not be "
                 "differentiated again (every built-in op's is but sync_batch_norm's)");
  return fn_(grad_output);
}

Tensor Node::run_hooks(Tensor grad) {
  for (const auto& [handle, hook] : hooks().hooks) {
    Tensor replaced = hook(grad);
    if (!replaced.defined()) continue;
    TANDEM_CHECK(replaced.shape() == grad.shape() && replaced.dtype() == grad.dtype() &&
                     replaced.device() == grad.device(),
                 "backward: a register_hook hook returned a gradient of shape ",
                 shape_str(replaced.shape()), ", ", replaced.dtype(), " on ", replaced.device(),
                 " for one of shape ", shape_str(grad.shape()), ", ", grad.dtype(), " on ",
                 grad.device(), " (at ", name_, "); a hook may change the values only");
    grad = std::move(replaced);
  }
  if (auto tensor = retain_.lock()) {
    Tensor t(tensor);
    // A copy first, then sums out of place: .grad never aliases a tensor of the graph.
    tensor->grad =
        (tensor->grad ? sum_of(Tensor(tensor->grad), grad) : copy_like(grad, t)).impl_ptr();
  }
  return grad;
}

AccumulateGrad::AccumulateGrad(std::shared_ptr<TensorImpl> leaf)
    : Node("AccumulateGrad", nullptr), leaf_(std::move(leaf)) {}

std::vector<Tensor> AccumulateGrad::apply(const Tensor& grad_output) {
  if (!grad_output.defined()) return {};
  Tensor leaf(leaf_);
  TANDEM_CHECK(grad_output.shape() == leaf.shape(), "backward: gradient of shape ",
               shape_str(grad_output.shape()), " for a leaf of shape ", shape_str(leaf.shape()));
  Tensor acc;
  if (grad_mode_enabled()) {
    // create_graph: .grad keeps the history of its gradient (a recorded copy, so it never
    // aliases a tensor of the graph; later contributions are added out of place).
    TANDEM_CHECK(!leaf_->grad_buffer, "backward with create_graph: this leaf's gradient goes "
                 "into a buffer given in advance (data parallelism), which cannot hold history");
    acc = leaf_->grad ? sum_of(Tensor(leaf_->grad), grad_output) : copy_like(grad_output, leaf);
  } else if (leaf_->grad_buffer && leaf_->grad != leaf_->grad_buffer) {
    // A buffer given in advance, .grad cleared: the gradient is copied in.
    acc = Tensor(leaf_->grad_buffer);
    kernels::copy(acc, grad_output);
  } else if (leaf_->grad &&
             (leaf_->grad == leaf_->grad_buffer || (!Tensor(leaf_->grad).requires_grad() &&
                                                    !Tensor(leaf_->grad).has_internal_overlap()))) {
    // Added in place: into the buffer given in advance, or as torch's `variable_grad +=
    // new_grad` (a handle to .grad taken before this backward, an optimizer's or one zeroed in
    // place, sees the sum).
    acc = Tensor(leaf_->grad);
    TANDEM_CHECK(acc.shape() == grad_output.shape(), "backward: gradients of shapes ",
                 shape_str(acc.shape()), " and ", shape_str(grad_output.shape()),
                 " for one tensor");
    kernels::binary(acc, kernels::BinaryOp::add, {1.0}, acc, converted(grad_output, acc.dtype()));
  } else if (leaf_->grad) {  // with history (an earlier create_graph) or overlapping: a new sum
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

std::shared_ptr<Node> gradient_edge(const Tensor& t) {
  if (t.impl()->history_stale()) take_view_history(t);
  if (t.grad_fn()) return t.grad_fn();
  TensorImpl* impl = t.impl();
  auto acc = impl->grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t.impl_ptr());
    impl->grad_accumulator = acc;
  }
  return acc;
}

void set_history(const Tensor& t, std::shared_ptr<Node> node) {
  TensorImpl& impl = *t.impl();
  if (impl.retains_grad && impl.grad_fn) impl.grad_fn->retain_into({});
  impl.grad_fn = std::move(node);
  impl.requires_grad = impl.grad_fn != nullptr;
  if (impl.retains_grad && impl.grad_fn) impl.grad_fn->retain_into(t.impl_ptr());
}

namespace {

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

void record(const char* name, const std::vector<Tensor>& inputs, Tensor& output, BackwardFn fn,
            BackwardKind kind) {
  if (!needs_grad(inputs) || !is_floating(output.dtype())) return;
  auto node = std::make_shared<Node>(name, std::move(fn), kind);
  for (const auto& t : inputs)
    node->next().push_back(t.defined() && t.requires_grad() ? gradient_edge(t) : nullptr);
  output.impl()->grad_fn = std::move(node);
  output.impl()->requires_grad = true;
}

namespace {
// One backward pass. With `inputs` (autograd::grad), only the nodes from which an input's node
// can be reached run, the inputs' nodes themselves only when another input lies beyond them,
// and the gradient arriving at each input's node is returned instead of accumulated.
// With `accumulate` (autograd::backward's inputs), the gradients reaching `inputs` go into
// their .grad before the pass's callbacks run, as a leaf's accumulator would put them there.
std::vector<Tensor> execute(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
                            bool retain_graph, bool create_graph, const std::vector<Tensor>* inputs,
                            bool allow_unused, bool accumulate = false) {
  const char* op = inputs && !accumulate ? "grad" : "backward";  // errors name the caller
  TANDEM_CHECK(roots.size() == grads.size(), op, ": ", roots.size(), " tensors but ",
               grads.size(), " gradients");
  AutoGradMode grad_mode(create_graph);  // on exactly when the pass creates a graph
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
    Node* running;
    uint64_t pass;
    ~Restore() {
      t_callbacks = previous;
      t_running = running;
      t_pass = pass;
    }
  } restore{std::exchange(t_callbacks, &callbacks), t_running,
            std::exchange(t_pass, ++g_passes)};
  std::unordered_map<Node*, Tensor> buffer;  // gradient summed so far for each node
  std::vector<std::shared_ptr<Node>> root_nodes;
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& root = roots[i];
    TANDEM_CHECK(root.defined(), op, ": tensor ", i, " is undefined");
    TANDEM_CHECK(root.requires_grad(), op, ": tensor ", i,
                 " does not require grad and has no grad_fn");
    Tensor g = grads[i];
    if (!g.defined()) {
      TANDEM_CHECK(root.numel() == 1, op, ": a gradient can be implied only for scalar "
                   "outputs, got shape ", shape_str(root.shape()),
                   "; pass a gradient of that shape");
      g = make_tensor(root.shape(), root.dtype(), root.device());
      kernels::fill(g, 1.0);
    } else {
      TANDEM_CHECK(g.shape() == root.shape(), op, ": gradient has shape ",
                   shape_str(g.shape()), " but the tensor has shape ", shape_str(root.shape()));
      TANDEM_CHECK(g.device() == root.device(), op, ": gradient on ", g.device(),
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

  // autograd::grad: the inputs' nodes, and the nodes that lead to one (in reverse topological
  // order, a node after everything it points at).
  std::unordered_map<Node*, std::vector<size_t>> captures;  // node -> the inputs it belongs to
  std::unordered_set<Node*> leads_to_input;  // nodes with an input's node strictly below
  std::vector<Tensor> captured;
  std::vector<std::shared_ptr<Node>> input_nodes;  // kept alive: captures is keyed by address
  if (inputs) {
    captured.resize(inputs->size());
    for (size_t i = 0; i < inputs->size(); ++i) {
      const Tensor& t = (*inputs)[i];
      TANDEM_CHECK(t.defined(), op, ": input ", i, " is undefined");
      TANDEM_CHECK(t.requires_grad(), op, ": input ", i, " does not require grad");
      input_nodes.push_back(gradient_edge(t));
      captures[input_nodes.back().get()].push_back(i);
    }
    std::unordered_map<Node*, int> pending(deps);
    std::vector<Node*> order;
    std::vector<Node*> todo;
    for (auto& n : root_nodes)
      if (pending[n.get()] == 0 && std::find(todo.begin(), todo.end(), n.get()) == todo.end())
        todo.push_back(n.get());
    while (!todo.empty()) {
      Node* n = todo.back();
      todo.pop_back();
      order.push_back(n);
      for (auto& next : n->next())
        if (next && --pending[next.get()] == 0) todo.push_back(next.get());
    }
    for (auto it = order.rbegin(); it != order.rend(); ++it)
      for (auto& next : (*it)->next())
        if (next && (captures.count(next.get()) || leads_to_input.count(next.get()))) {
          leads_to_input.insert(*it);
          break;
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
    if (g.defined()) g = n->run_hooks(std::move(g));
    if (inputs) {
      if (auto it = captures.find(n); it != captures.end())
        for (size_t i : it->second) captured[i] = g;
      // Nothing below this node is asked for: it does not run (its leaves' .grad stay as
      // they are), and neither does anything only it leads to.
      if (!leads_to_input.count(n)) continue;
    }
    t_running = n;
    std::vector<Tensor> input_grads = n->apply(g);
    t_running = nullptr;
    if (g_anomaly.load(std::memory_order_relaxed)) check_anomaly(*n, input_grads);
    if (!retain_graph) n->release();
    auto& next = n->next();
    TANDEM_CHECK(input_grads.size() == next.size() || next.empty(), op, ": ", n->name(),
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
  if (accumulate) {
    for (size_t i = 0; i < captured.size(); ++i) {
      if (!captured[i].defined()) continue;
      Tensor t = (*inputs)[i];
      if (t.is_leaf()) {
        gradient_edge(t)->apply(captured[i]);  // hooks, a buffer given in advance, history
      } else if (!t.retains_grad()) {          // a retaining one got it from run_hooks already
        const Tensor old = t.grad();
        t.set_grad(old.defined() ? sum_of(old, captured[i]) : copy_like(captured[i], t));
      }
    }
  }
  for (size_t i = 0; i < callbacks.size(); ++i) {
    auto callback = std::move(callbacks[i]);  // a callback may queue more (and grow the vector)
    callback();
  }
  // An input no gradient reached (not in the graph, or every path to it gave none) is an
  // error unless allow_unused, as torch.autograd.grad.
  for (size_t i = 0; i < captured.size(); ++i)
    TANDEM_CHECK(allow_unused || captured[i].defined(), "grad: input ", i, " was not used to "
                 "compute the outputs (no gradient reached it); pass allow_unused = true to get "
                 "an undefined gradient for it");
  return captured;
}
}  // namespace

void run_backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
                  bool retain_graph, bool create_graph) {
  execute(roots, grads, retain_graph, create_graph, nullptr, false);
}

void backward(const std::vector<Tensor>& tensors, const std::vector<Tensor>& grad_tensors,
              std::optional<bool> retain_graph, bool create_graph,
              const std::vector<Tensor>& inputs) {
  TANDEM_CHECK(grad_tensors.empty() || grad_tensors.size() == tensors.size(),
               "backward: ", tensors.size(), " tensors but ", grad_tensors.size(), " grad_tensors");
  std::vector<Tensor> grads = grad_tensors;
  grads.resize(tensors.size());
  const bool retain = retain_graph.value_or(create_graph);
  // With inputs, only the part of the graph above them runs.
  execute(tensors, grads, retain, create_graph, inputs.empty() ? nullptr : &inputs,
          /*allow_unused=*/true, /*accumulate=*/true);
}

bool AnomalyMode::is_enabled() { return g_anomaly.load(); }
void AnomalyMode::set_enabled(bool enabled) { g_anomaly.store(enabled); }

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs,
                         std::optional<bool> retain_graph, bool create_graph,
                         bool allow_unused) {
  TANDEM_CHECK(grad_outputs.empty() || grad_outputs.size() == outputs.size(), "grad: ",
               outputs.size(), " outputs but ", grad_outputs.size(), " grad_outputs");
  std::vector<Tensor> grads = grad_outputs;
  grads.resize(outputs.size());
  return execute(outputs, grads, retain_graph.value_or(create_graph), create_graph, &inputs,
                 allow_unused);
}

}  // namespace autograd
}  // namespace tandem
