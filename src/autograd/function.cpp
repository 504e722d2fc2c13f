// Custom autograd functions: the node that runs a class's backward, the context, IValue.
#include "tandem/autograd/function.hpp"

#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>

#include "../kernels/kernels.hpp"

namespace tandem {

namespace {
template <typename T>
const T& as(const std::variant<std::monostate, bool, int64_t, double, std::string, Tensor,
                               std::vector<int64_t>, std::vector<double>>& v,
            const char* want, const IValue& self) {
  const T* p = std::get_if<T>(&v);
  TANDEM_CHECK(p != nullptr, "IValue: to", want, "() on a value that holds ", self.tagKind());
  return *p;
}
}  // namespace

bool IValue::toBool() const { return as<bool>(v_, "Bool", *this); }
int64_t IValue::toInt() const { return as<int64_t>(v_, "Int", *this); }
double IValue::toDouble() const { return as<double>(v_, "Double", *this); }
const std::string& IValue::toStringRef() const { return as<std::string>(v_, "StringRef", *this); }
Tensor IValue::toTensor() const { return as<Tensor>(v_, "Tensor", *this); }
std::vector<int64_t> IValue::toIntVector() const {
  return as<std::vector<int64_t>>(v_, "IntVector", *this);
}
std::vector<double> IValue::toDoubleVector() const {
  return as<std::vector<double>>(v_, "DoubleVector", *this);
}
const char* IValue::tagKind() const {
  static const char* const kinds[] = {"None",   "bool",  "int",   "double",
                                      "string", "Tensor", "int[]", "double[]"};
  return kinds[v_.index()];
}

namespace autograd {

void AutogradContext::save_for_backward(variable_list to_save) { to_save_ = std::move(to_save); }

variable_list AutogradContext::get_saved_variables() const {
  TANDEM_CHECK(!released_, "get_saved_variables: the saved tensors were freed by the first "
               "backward pass; pass retain_graph = true to it to keep them");
  variable_list out;
  out.reserve(saved_.size());
  for (const Saved& s : saved_) {
    // An output comes back with its own history under create_graph, so a gradient computed
    // from it is differentiated through this function.
    auto fn = node_.lock();
    std::shared_ptr<Node> node =
        s.output >= 0 && fn && grad_mode_enabled() ? fn->output_node(s.output) : nullptr;
    if (node) {
      Tensor t = s.tensor.detach();
      t.impl()->grad_fn = std::move(node);
      t.impl()->requires_grad = true;
      out.push_back(std::move(t));
    } else {
      out.push_back(s.tensor);
    }
  }
  return out;
}

void AutogradContext::mark_dirty(const variable_list& inputs) {
  for (const Tensor& t : inputs) dirty_.push_back(t.impl());
}

void AutogradContext::mark_non_differentiable(const variable_list& outputs) {
  for (const Tensor& t : outputs) non_differentiable_.push_back(t.impl());
}

bool AutogradContext::needs_input_grad(size_t index) const {
  TANDEM_CHECK_INDEX(index < needs_input_grad_.size(), "needs_input_grad: index ", index,
                     " but forward has ", needs_input_grad_.size(), " tensor arguments");
  return needs_input_grad_[index];
}

namespace detail {

std::string demangled(const char* name) {
  int status = 0;
  char* readable = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  std::string out = status == 0 && readable ? readable : name;
  std::free(readable);
  return out;
}

namespace {
// The grad_fn of one output of a function with several: hands the output's gradient to the
// function's node, which runs once all of them arrived (the engine counts the edges).
class OutputNode : public Node {
 public:
  OutputNode(const std::string& name, const std::shared_ptr<FunctionNode>& fn, size_t index)
      : Node(name, nullptr, BackwardKind::differentiable), fn_(fn.get()), index_(index) {
    next_.push_back(fn);
  }
  std::vector<Tensor> apply(const Tensor& grad_output) override {
    fn_->receive(index_, grad_output);
    return {Tensor()};
  }
  void release() override {}

 private:
  FunctionNode* fn_;  // next_[0] keeps it alive
  size_t index_;
};

bool contains(const std::vector<const TensorImpl*>& list, const Tensor& t) {
  return std::find(list.begin(), list.end(), t.impl()) != list.end();
}
}  // namespace

FunctionNode::FunctionNode(std::string name, BackwardCall backward)
    : Node(std::move(name), nullptr, BackwardKind::differentiable), backward_(backward) {}

void FunctionNode::prepare(const variable_list& inputs, std::vector<bool> is_tensor) {
  is_tensor_ = std::move(is_tensor);
  const bool recording = needs_grad(inputs);
  for (const Tensor& t : inputs) {
    const bool needs = recording && t.defined() && t.requires_grad();
    ctx_.needs_input_grad_.push_back(needs);
    next_.push_back(needs ? gradient_edge(t) : nullptr);
    input_shapes_.push_back(t.defined() ? t.shape() : Shape{});
    input_dtypes_.push_back(t.defined() ? t.dtype() : DType::f32);
  }
}

variable_list FunctionNode::finish(const variable_list& inputs, variable_list outputs) {
  const bool recording = std::any_of(next_.begin(), next_.end(), [](auto& n) { return n; });
  std::vector<size_t> differentiable;
  for (const TensorImpl* dirty : ctx_.dirty_) {
    auto is = [dirty](const Tensor& t) { return t.impl() == dirty; };
    TANDEM_CHECK(std::any_of(inputs.begin(), inputs.end(), is), name_,
                 ": mark_dirty names a tensor that is not an input");
    TANDEM_CHECK(std::any_of(outputs.begin(), outputs.end(), is), name_,
                 ": an input marked dirty must be returned as an output");
    const Tensor& t = *std::find_if(inputs.begin(), inputs.end(), is);
    TANDEM_CHECK(!grad_mode_enabled() || !t.requires_grad(), name_, ": an input that requires "
                 "grad was modified in place (mark_dirty); modify a copy of it (clone()) instead");
  }
  for (size_t k = 0; k < outputs.size(); ++k) {
    Tensor& out = outputs[k];
    if (!out.defined()) continue;
    const bool differentiable_output = recording && is_floating(out.dtype()) &&
                                       !contains(ctx_.non_differentiable_, out);
    const bool is_input = std::any_of(inputs.begin(), inputs.end(),
                                      [&](const Tensor& t) { return t.is_same(out); });
    // An input handed back as it is: a new handle, the input untouched.
    if (is_input && !contains(ctx_.dirty_, out)) out = out.detach();
    if (differentiable_output) differentiable.push_back(k);
  }
  outputs_.clear();
  for (const Tensor& out : outputs)
    outputs_.push_back(out.defined() ? OutputMeta{out.shape(), out.dtype(), out.device()}
                                     : OutputMeta{{}, DType::f32, Device(DeviceType::cpu)});
  received_.assign(outputs.size(), {0, Tensor()});
  ctx_.output_nodes_.resize(outputs.size());
  ctx_.node_ = std::static_pointer_cast<FunctionNode>(shared_from_this());
  for (size_t k : differentiable) {
    outputs[k].impl()->grad_fn = output_node(k);
    outputs[k].impl()->requires_grad = true;
  }
  for (const Tensor& t : ctx_.to_save_) {
    int output = -1;
    for (size_t k = 0; k < outputs.size() && t.defined(); ++k)
      if (outputs[k].is_same(t)) output = static_cast<int>(k);
    ctx_.saved_.push_back({output >= 0 ? t.detach() : t, output});
    if (t.defined()) save_version(t);
  }
  ctx_.to_save_.clear();
  return outputs;
}

void FunctionNode::receive(size_t output, const Tensor& grad) {
  received_[output] = {current_pass(), grad};
}

std::shared_ptr<Node> FunctionNode::output_node(size_t k) {
  if (outputs_.size() == 1) return shared_from_this();
  std::shared_ptr<Node> node = ctx_.output_nodes_[k].lock();
  if (!node) {  // made for the output in finish(), or again when that output is gone
    node = std::make_shared<OutputNode>(
        name_, std::static_pointer_cast<FunctionNode>(shared_from_this()), k);
    ctx_.output_nodes_[k] = node;
  }
  return node;
}

std::vector<Tensor> FunctionNode::apply(const Tensor& grad_output) {
  check_runnable();
  variable_list grads;
  if (outputs_.size() == 1) {
    grads.push_back(grad_output);
  } else {
    // This pass's gradients only: a pass that failed part-way may have left others here.
    for (auto& [pass, grad] : received_) grads.push_back(pass == current_pass() ? grad : Tensor());
    received_.assign(outputs_.size(), {0, Tensor()});
  }
  for (size_t k = 0; k < grads.size(); ++k) {
    if (grads[k].defined() || !ctx_.materialize_grads_) continue;
    const OutputMeta& m = outputs_[k];
    grads[k] = make_tensor(m.shape, m.dtype, m.device);
    kernels::fill(grads[k], 0.0);
  }
  variable_list result = backward_(&ctx_, std::move(grads));
  const size_t n_args = is_tensor_.size();
  // Undefined gradients past the last argument (forward's defaulted parameters) are dropped.
  while (result.size() > n_args && !result.back().defined()) result.pop_back();
  TANDEM_CHECK(result.size() == n_args, "backward: function ", name_,
               " returned an incorrect number of gradients (expected ", n_args, ", got ",
               result.size(), ")");
  std::vector<Tensor> input_grads;
  for (size_t a = 0; a < n_args; ++a) {
    if (!is_tensor_[a]) {
      TANDEM_CHECK(!result[a].defined(), "backward: function ", name_, " returned a defined "
                   "gradient at position ", a, ", but argument ", a, " of forward is not a tensor");
      continue;
    }
    const size_t i = input_grads.size();
    Tensor g = std::move(result[a]);
    if (g.defined() && next_[i]) {
      TANDEM_CHECK(g.shape() == input_shapes_[i], "backward: function ", name_,
                   " returned a gradient of shape ", shape_str(g.shape()), " for argument ", a,
                   " of shape ", shape_str(input_shapes_[i]));
      TANDEM_CHECK(g.dtype() == input_dtypes_[i], "backward: function ", name_,
                   " returned a gradient of dtype ", g.dtype(), " for argument ", a,
                   " of dtype ", input_dtypes_[i]);
    }
    input_grads.push_back(std::move(g));
  }
  return input_grads;
}

void FunctionNode::release() {
  Node::release();
  ctx_.saved_.clear();
  ctx_.released_ = true;
}

}  // namespace detail
}  // namespace autograd
}  // namespace tandem
