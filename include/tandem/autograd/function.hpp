// Custom autograd functions, as libtorch's torch::autograd::Function<T>: a class with static
// forward(AutogradContext*, args...) and backward(AutogradContext*, variable_list), used through
// T::apply(args...). Forward runs without recording; its outputs get one node whose backward is
// the class's. The context carries what forward saves for backward.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "tandem/autograd/grad_mode.hpp"
#include "tandem/autograd/node.hpp"
#include "tandem/core/tensor.hpp"

namespace tandem {

/// A value a custom function keeps for its backward in `ctx->saved_data` (libtorch's IValue,
/// with the kinds a context holds in practice): none, bool, integer, double, string, tensor,
/// lists of integers or doubles. The to*() readers throw when the kind differs.
class IValue {
 public:
  IValue() = default;
  IValue(bool v) : v_(v) {}  // NOLINT(google-explicit-constructor)
  template <typename T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>,
                                         int> = 0>
  IValue(T v) : v_(static_cast<int64_t>(v)) {}  // NOLINT(google-explicit-constructor)
  template <typename T, std::enable_if_t<std::is_floating_point_v<T>, int> = 0>
  IValue(T v) : v_(static_cast<double>(v)) {}  // NOLINT(google-explicit-constructor)
  IValue(const char* v) : v_(std::string(v)) {}  // NOLINT(google-explicit-constructor)
  IValue(std::string v) : v_(std::move(v)) {}  // NOLINT(google-explicit-constructor)
  IValue(Tensor v) : v_(std::move(v)) {}  // NOLINT(google-explicit-constructor)
  IValue(std::vector<int64_t> v) : v_(std::move(v)) {}  // NOLINT(google-explicit-constructor)
  IValue(std::vector<double> v) : v_(std::move(v)) {}  // NOLINT(google-explicit-constructor)

  bool isNone() const { return v_.index() == 0; }
  bool isBool() const { return std::holds_alternative<bool>(v_); }
  bool isInt() const { return std::holds_alternative<int64_t>(v_); }
  bool isDouble() const { return std::holds_alternative<double>(v_); }
  bool isString() const { return std::holds_alternative<std::string>(v_); }
  bool isTensor() const { return std::holds_alternative<Tensor>(v_); }
  bool isIntList() const { return std::holds_alternative<std::vector<int64_t>>(v_); }
  bool isDoubleList() const { return std::holds_alternative<std::vector<double>>(v_); }

  bool toBool() const;
  int64_t toInt() const;
  double toDouble() const;
  const std::string& toStringRef() const;
  Tensor toTensor() const;
  std::vector<int64_t> toIntVector() const;
  std::vector<double> toDoubleVector() const;
  /// "None", "bool", "int", "double", "string", "Tensor", "int[]" or "double[]".
  const char* tagKind() const;

 private:
  std::variant<std::monostate, bool, int64_t, double, std::string, Tensor, std::vector<int64_t>,
               std::vector<double>>
      v_;
};

namespace autograd {

using variable_list = std::vector<Tensor>;
/// libtorch's older name for a tensor in autograd code.
using Variable = Tensor;
using tensor_list = std::vector<Tensor>;

namespace detail {
class FunctionNode;
}

/// What a custom function's forward hands its backward.
class AutogradContext {
 public:
  /// Anything else backward needs: `ctx->saved_data["constant"] = 2.5;`, read back with
  /// `ctx->saved_data["constant"].toDouble()`.
  std::unordered_map<std::string, IValue> saved_data;

  /// Tensors backward needs (inputs or outputs of forward; undefined ones are kept as such).
  /// An output is kept without a reference cycle and comes back with its history when backward
  /// creates a graph.
  void save_for_backward(variable_list to_save);
  /// The tensors saved, in order. Throws after the graph was freed by a backward pass.
  variable_list get_saved_variables() const;
  /// Inputs forward modified in place and returns: they keep their identity and take this
  /// function's history. Only tensors without history may be: a leaf that requires grad is
  /// refused, as is a tensor with a grad_fn (there are no version counters here, so a tensor
  /// some op saved for its backward could not be told apart from its modified self).
  void mark_dirty(const variable_list& inputs);
  /// Outputs that get no gradient (indices, masks): they do not require grad.
  void mark_non_differentiable(const variable_list& outputs);
  /// Whether backward receives zeros (the default) or undefined tensors for the outputs that
  /// got no gradient.
  void set_materialize_grads(bool value) { materialize_grads_ = value; }
  /// Whether the index-th tensor argument of forward requires a gradient.
  bool needs_input_grad(size_t index) const;

 private:
  friend class detail::FunctionNode;
  struct Saved {
    Tensor tensor;     // detached when it is an output
    int output = -1;   // which output it is, or -1
  };
  variable_list to_save_;
  std::vector<Saved> saved_;
  std::vector<const TensorImpl*> dirty_, non_differentiable_;
  std::vector<bool> needs_input_grad_;
  std::vector<std::weak_ptr<Node>> output_nodes_;  // the node of each output's history
  std::weak_ptr<detail::FunctionNode> node_;        // the function's own node
  bool materialize_grads_ = true;
  bool released_ = false;
};

namespace detail {

using BackwardCall = variable_list (*)(AutogradContext*, variable_list);

/// The node of a custom function. Its outputs' gradients reach it together: with one output
/// the output's grad_fn is this node; with several, each output's grad_fn is a small node
/// that hands its gradient over (OutputNode in function.cpp) and points here.
class FunctionNode : public Node {
 public:
  FunctionNode(std::string name, BackwardCall backward);
  AutogradContext& context() { return ctx_; }
  /// Before forward: notes which arguments are tensors (is_tensor, one per argument) and
  /// which of those need a gradient.
  void prepare(const variable_list& inputs, std::vector<bool> is_tensor);
  /// After forward: gives the outputs this node's history (when an input requires grad and
  /// grad mode is on), resolves what the context saved. Returns the outputs to hand back.
  variable_list finish(const variable_list& inputs, variable_list outputs);
  std::vector<Tensor> apply(const Tensor& grad_output) override;
  void release() override;
  void receive(size_t output, const Tensor& grad);  // from an OutputNode
  /// The node of output k's history: its own OutputNode (made anew if the output was dropped).
  std::shared_ptr<Node> output_node(size_t k);

 private:
  struct OutputMeta {
    Shape shape;
    DType dtype;
    Device device;
  };
  AutogradContext ctx_;
  BackwardCall backward_;
  std::vector<bool> is_tensor_;  // per argument of forward
  std::vector<Shape> input_shapes_;
  std::vector<DType> input_dtypes_;
  std::vector<OutputMeta> outputs_;
  // Several outputs: each one's gradient until apply, and the pass it came in.
  std::vector<std::pair<uint64_t, Tensor>> received_;
};

std::string demangled(const char* name);

inline void collect(variable_list& inputs, std::vector<bool>& is_tensor, const Tensor& t) {
  inputs.push_back(t);
  is_tensor.push_back(true);
}
/// A list of tensors is that many tensor arguments, as libtorch's TensorList: backward returns
/// one gradient for each.
inline void collect(variable_list& inputs, std::vector<bool>& is_tensor,
                    const std::vector<Tensor>& list) {
  for (const Tensor& t : list) collect(inputs, is_tensor, t);
}
template <typename T>
void collect(variable_list&, std::vector<bool>& is_tensor, const T&) {
  is_tensor.push_back(false);
}

}  // namespace detail

/// The base of a custom autograd function:
///
///   struct MulConstant : autograd::Function<MulConstant> {
///     static Tensor forward(AutogradContext* ctx, Tensor x, double c) {
///       ctx->saved_data["c"] = c;
///       return x * c;
///     }
///     static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
///       return {grad_outputs[0] * ctx->saved_data["c"].toDouble(), Tensor()};
///     }
///   };
///   Tensor y = MulConstant::apply(x, 5.5);
///
/// forward returns a Tensor or a variable_list and runs with grad mode off. backward gets one
/// gradient per output and returns one per argument of forward, a list of tensors counting as
/// that many arguments (undefined for arguments that are not tensors or need none; trailing
/// undefined ones may be left out); each defined one has its input's shape and dtype. With create_graph, backward runs with grad mode on, so a
/// backward written with differentiable ops can be differentiated again.
template <class T>
struct Function {
  template <typename... Args>
  static auto apply(Args&&... args) {
    auto node = std::make_shared<detail::FunctionNode>(
        detail::demangled(typeid(T).name()),
        [](AutogradContext* ctx, variable_list grads) -> variable_list {
          return T::backward(ctx, std::move(grads));
        });
    variable_list inputs;
    std::vector<bool> is_tensor;
    (detail::collect(inputs, is_tensor, args), ...);
    node->prepare(inputs, std::move(is_tensor));
    using Output = decltype(T::forward(&node->context(), std::forward<Args>(args)...));
    static_assert(std::is_same_v<Output, Tensor> || std::is_same_v<Output, variable_list>,
                  "autograd::Function: forward returns a Tensor or a variable_list");
    Output out;
    {
      NoGradGuard no_grad;
      out = T::forward(&node->context(), std::forward<Args>(args)...);
    }
    if constexpr (std::is_same_v<Output, Tensor>) {
      return node->finish(inputs, {out})[0];
    } else {
      return node->finish(inputs, std::move(out));
    }
  }
};

}  // namespace autograd
}  // namespace tandem
