// Graph nodes: a backward closure plus edges to the nodes of its inputs, and the function every
// op uses to record itself.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tandem/core/tensor.hpp"

namespace tandem::autograd {

/// Maps the gradient of an op's output to the gradients of its inputs (one per input; an
/// undefined Tensor where an input gets none).
using BackwardFn = std::function<std::vector<Tensor>(const Tensor& grad_output)>;

/// Whether a node's backward closure can itself be differentiated: it computes its gradients
/// with differentiable ops from the op's inputs (or from its output through saved_output), so
/// with create_graph the gradients it returns carry history. A `once` node refuses to run
/// under create_graph instead of returning gradients whose own gradients would be wrong.
enum class BackwardKind { once, differentiable };

class Node : public std::enable_shared_from_this<Node> {
 public:
  Node(std::string name, BackwardFn fn, BackwardKind kind = BackwardKind::once)
      : name_(std::move(name)), fn_(std::move(fn)), kind_(kind) {}
  virtual ~Node();  // iterative: freeing a 10,000-node chain must not recurse

  const std::string& name() const { return name_; }
  /// Where each input's gradient goes (nullptr for inputs that do not require grad).
  std::vector<std::shared_ptr<Node>>& next() { return next_; }

  /// Runs the backward closure. Throws if the graph was already freed by a backward pass.
  virtual std::vector<Tensor> apply(const Tensor& grad_output);
  /// The register_hook hooks of the tensor this node made, and that tensor if it retains its
  /// gradient (weak: the tensor holds this node).
  virtual GradHooks& hooks() { return hooks_; }
  void retain_into(std::weak_ptr<TensorImpl> tensor) { retain_ = std::move(tensor); }
  /// The gradient arriving here after the hooks, kept in the retaining tensor's .grad too (last,
  /// as PyTorch 2's). The engine calls it before apply; autograd::grad captures its result.
  Tensor run_hooks(Tensor grad);
  /// Notes `t`'s storage version (save_for_backward).
  void save_version(const Tensor& t);
  /// Drops the closure and what it saved (after a backward pass without retain_graph).
  virtual void release() {
    fn_ = nullptr;
    saved_versions_.clear();
    released_ = true;
  }

 protected:
  /// Throws the "backward through the graph a second time" error once release() ran, and the
  /// "changed in place" error where a saved tensor's version moved.
  void check_runnable() const;

  std::string name_;
  BackwardFn fn_;
  std::vector<std::shared_ptr<Node>> next_;
  BackwardKind kind_;
  bool released_ = false;
  GradHooks hooks_;
  std::weak_ptr<TensorImpl> retain_;
  std::vector<std::pair<Storage, uint32_t>> saved_versions_;
};

/// The node at a leaf: adds the incoming gradient into the leaf's .grad, then calls the leaf's
/// gradient-ready hooks. The engine runs it once per backward, after all contributions arrived.
class AccumulateGrad : public Node {
 public:
  explicit AccumulateGrad(std::shared_ptr<TensorImpl> leaf);
  std::vector<Tensor> apply(const Tensor& grad_output) override;
  GradHooks& hooks() override { return leaf_->grad_hooks; }
  void release() override {}  // the leaf outlives any one backward pass

 private:
  std::shared_ptr<TensorImpl> leaf_;
};

/// True when grad mode is on and any input requires grad.
bool needs_grad(const std::vector<Tensor>& inputs);

/// Records an op: `output` gets a node named `name` whose closure maps its gradient to the
/// gradients of `inputs`. Does nothing when no input requires grad or grad mode is off.
void record(const char* name, const std::vector<Tensor>& inputs, Tensor& output, BackwardFn fn,
            BackwardKind kind = BackwardKind::once);

/// Marks the tensors whose values the backward of the op that made `output` reads (inputs it
/// kept, or the output itself): each one's storage version is noted, and the node refuses to
/// run if one changed by then (an in-place op under NoGradGuard, copy_, an optimizer step
/// between forward and backward), where its gradient would be silently wrong, as PyTorch's
/// "modified by an inplace operation" check. Nothing to do where `output` has no grad_fn.
void save_for_backward(const Tensor& output, std::initializer_list<Tensor> saved);

/// Where a tensor's gradient goes: its grad_fn, or (a leaf that requires grad) the node that
/// accumulates its .grad, made on first use. A view whose history is stale (its base took a new
/// one through an in-place op since) takes a new history from its base first (take_view_history).
std::shared_ptr<Node> gradient_edge(const Tensor& t);

/// Gives a view its history from its base's present one (TensorImpl::view_base): a node that
/// maps the view's gradient into the base's shape (torch's AsStridedBackward), or none where
/// the base requires no grad. Written with ops, so it can be differentiated again: the ops
/// layer defines it (src/ops/view_history.cpp); gradient_edge calls it.
void take_view_history(const Tensor& view);

/// Makes `node` the history of `t` (a result of an op, or a tensor an in-place op rewrote):
/// retain_grad moves with it, as torch's .grad then is the gradient of the new value.
void set_history(const Tensor& t, std::shared_ptr<Node> node);

/// An op's output kept by its own backward closure: the closure holds `out.detach()` (holding
/// `out` would be a reference cycle: out -> node -> closure -> out). Inside that closure, under
/// create_graph, saved_output(y) is y again with the history of the node now running, so the
/// gradient computed from it is differentiated through the op (tanh's 1 - y^2, say); otherwise
/// it is `y` as given.
Tensor saved_output(const Tensor& detached);
/// The same for an input the closure keeps detached (a kernel's contiguous copy, say): under
/// create_graph, `detached` with the history of the running node's input `index` (the edge
/// its gradient goes to), so a gradient computed from it is differentiated into that input.
Tensor saved_input(const Tensor& detached, size_t index);

/// Queues `callback` to run on this thread once the backward pass now running has processed
/// its whole graph, before `backward()` returns (PyTorch's Engine::queue_callback). Callbacks
/// run in the order queued; one queued by a callback runs too. Only inside a backward pass (a
/// gradient-ready hook, a node's closure): elsewhere it throws. If the pass fails, its queued
/// callbacks are dropped. Data parallelism waits for its last allreduce here.
void queue_callback(std::function<void()> callback);

/// The backward pass running on this thread, as a number no other pass had (0 outside one): a
/// node that keeps gradients between calls (a custom function's several outputs) tells its own
/// pass's from those a failed pass left behind.
uint64_t current_pass();

/// Runs backward from `roots` with `grads` (one per root). See Tensor::backward.
void run_backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
                  bool retain_graph, bool create_graph = false);

/// The gradients of `outputs` with respect to `inputs`, returned instead of accumulated into
/// .grad (torch.autograd.grad): only the part of the graph between them runs, no leaf's .grad
/// or gradient-ready hook is touched. `grad_outputs` as backward's `gradient` (one per output,
/// or none for scalar outputs); retain_graph defaults to create_graph; with create_graph the
/// returned gradients carry history, for gradient penalties and second derivatives. An input
/// the outputs do not depend on is an error unless allow_unused (it then gets an undefined
/// tensor).
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs = {},
                         std::optional<bool> retain_graph = std::nullopt,
                         bool create_graph = false, bool allow_unused = false);

/// libtorch's torch::autograd::backward: backward from several `tensors` at once (one gradient
/// each, or none for scalars), accumulating into .grad as Tensor::backward does. With `inputs`,
/// only those tensors' .grad receive gradients (leaves or not; the rest of the graph's leaves
/// are left as they are), as torch.autograd.backward(..., inputs=...).
void backward(const std::vector<Tensor>& tensors, const std::vector<Tensor>& grad_tensors = {},
              std::optional<bool> retain_graph = std::nullopt, bool create_graph = false,
              const std::vector<Tensor>& inputs = {});

/// Anomaly detection (libtorch's AnomalyMode): while enabled, the engine checks every gradient a
/// node returns and throws, naming the node, the output and the op that would have received it,
/// at the first NaN, instead of letting it spread into every parameter. Each check reads the
/// gradient on the host (a wait per node on a GPU): a debugging mode. Process-wide, as
/// libtorch's.
struct AnomalyMode {
  static bool is_enabled();
  static void set_enabled(bool enabled);
};

/// Enables anomaly detection for a scope (libtorch's DetectAnomalyGuard).
class DetectAnomalyGuard {
 public:
  DetectAnomalyGuard() : previous_(AnomalyMode::is_enabled()) { AnomalyMode::set_enabled(true); }
  ~DetectAnomalyGuard() { AnomalyMode::set_enabled(previous_); }
  DetectAnomalyGuard(const DetectAnomalyGuard&) = delete;
  DetectAnomalyGuard& operator=(const DetectAnomalyGuard&) = delete;

 private:
  bool previous_;
};

}  // namespace tandem::autograd
