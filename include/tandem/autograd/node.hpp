// Graph nodes: a backward closure plus edges to the nodes of its inputs, and the function every
// op uses to record itself.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tandem/core/tensor.hpp"

namespace tandem::autograd {

/// Maps the gradient of an op's output to the gradients of its inputs (one per input; an
/// undefined Tensor where an input gets none).
using BackwardFn = std::function<std::vector<Tensor>(const Tensor& grad_output)>;

class Node {
 public:
  Node(std::string name, BackwardFn fn) : name_(std::move(name)), fn_(std::move(fn)) {}
  virtual ~Node();  // iterative: freeing a 10,000-node chain must not recurse

  const std::string& name() const { return name_; }
  /// Where each input's gradient goes (nullptr for inputs that do not require grad).
  std::vector<std::shared_ptr<Node>>& next() { return next_; }

  /// Runs the backward closure. Throws if the graph was already freed by a backward pass.
  virtual std::vector<Tensor> apply(const Tensor& grad_output);
  /// Drops the closure and what it saved (after a backward pass without retain_graph).
  virtual void release() {
    fn_ = nullptr;
    released_ = true;
  }

 protected:
  std::string name_;
  BackwardFn fn_;
  std::vector<std::shared_ptr<Node>> next_;
  bool released_ = false;
};

/// The node at a leaf: adds the incoming gradient into the leaf's .grad, then calls the leaf's
/// gradient-ready hooks. The engine runs it once per backward, after all contributions arrived.
class AccumulateGrad : public Node {
 public:
  explicit AccumulateGrad(std::shared_ptr<TensorImpl> leaf);
  std::vector<Tensor> apply(const Tensor& grad_output) override;
  void release() override {}  // the leaf outlives any one backward pass

 private:
  std::shared_ptr<TensorImpl> leaf_;
};

/// True when grad mode is on and any input requires grad.
bool needs_grad(const std::vector<Tensor>& inputs);

/// Records an op: `output` gets a node named `name` whose closure maps its gradient to the
/// gradients of `inputs`. Does nothing when no input requires grad or grad mode is off.
void record(const char* name, const std::vector<Tensor>& inputs, Tensor& output, BackwardFn fn);

/// Queues `callback` to run on this thread once the backward pass now running has processed
/// its whole graph, before `backward()` returns (PyTorch's Engine::queue_callback). Callbacks
/// run in the order queued; one queued by a callback runs too. Only inside a backward pass (a
/// gradient-ready hook, a node's closure): elsewhere it throws. If the pass fails, its queued
/// callbacks are dropped. Data parallelism waits for its last allreduce here.
void queue_callback(std::function<void()> callback);

/// Runs backward from `roots` with `grads` (one per root). See Tensor::backward.
void run_backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
                  bool retain_graph);

}  // namespace tandem::autograd
