#include "tandem/nn/module.hpp"

#include <sstream>
#include <typeinfo>
#include <unordered_set>

#include "tandem/autograd/grad_mode.hpp"
#include "tandem/core/error.hpp"

namespace tandem::nn {

namespace {

// Points `dst`'s impl at `src`'s data, so every handle on dst sees the new device/dtype.
void set_data(const Tensor& dst, const Tensor& src) {
  TensorImpl* d = dst.impl();
  TensorImpl* s = src.impl();
  d->storage = s->storage;
  d->shape = s->shape;
  d->strides = s->strides;
  d->offset = s->offset;
  d->dtype = s->dtype;
}

}  // namespace

Tensor Module::forward(const Tensor&) {
  TANDEM_THROW(NotImplementedError, type_name_,
               " has no single-tensor forward(); call its own forward overload");
}

void Module::check_new_name(const std::string& name) const {
  TANDEM_CHECK(!name.empty() && name.find('.') == std::string::npos, type_name_,
               ": invalid name '", name, "' (must be non-empty and contain no '.')");
  auto taken = [&](const auto& list) {
    for (const auto& entry : list)
      if (entry.first == name) return true;
    return false;
  };
  TANDEM_CHECK(!taken(parameters_) && !taken(buffers_) && !taken(children_), type_name_,
               ": name '", name, "' is already registered");
}

Tensor Module::register_parameter(const std::string& name, Tensor tensor, bool requires_grad) {
  check_new_name(name);
  // An undefined tensor is a parameter that is absent (libtorch's `bias` of a layer without
  // one): listed nowhere (parameters, state_dict), its name taken.
  if (requires_grad && tensor.defined()) tensor.set_requires_grad(true);
  parameters_.emplace_back(name, tensor);
  return tensor;
}

Tensor Module::register_buffer(const std::string& name, Tensor tensor) {
  check_new_name(name);  // undefined: absent, as a parameter
  buffers_.emplace_back(name, tensor);
  return tensor;
}

namespace {
// Whether `target` is m or lies below it (the tree holds no cycle yet, so the walk ends).
bool reaches(const Module& m, const Module* target) {
  if (&m == target) return true;
  for (const auto& child : m.children())
    if (reaches(*child, target)) return true;
  return false;
}
}  // namespace

void Module::add_child(const std::string& name, std::shared_ptr<Module> module) {
  check_new_name(name);
  TANDEM_CHECK(module != nullptr, type_name_, ": module '", name, "' is null");
  // A module below itself would make every walk (parameters, printing) endless.
  TANDEM_CHECK(!reaches(*module, this), type_name_, ": module '", name, "' (", module->type_name(),
               ") is this module or holds it, which would make a cycle");
  children_.emplace(name, std::move(module));
}

void Module::replace_child(const std::string& name, std::shared_ptr<Module> module) {
  TANDEM_CHECK_INDEX(children_.contains(name), type_name_, ": no submodule '", name,
                     "' to replace");
  TANDEM_CHECK(module != nullptr, type_name_, ": module '", name, "' is null");
  TANDEM_CHECK(!reaches(*module, this), type_name_, ": module '", name, "' (", module->type_name(),
               ") is this module or holds it, which would make a cycle");
  children_.insert_or_assign(name, std::move(module));
}

void Module::remove_child(const std::string& name) {
  TANDEM_CHECK_INDEX(children_.erase(name) == 1, type_name_, ": no submodule '", name, "'");
}

template <typename F>
void Module::visit(const std::string& prefix, bool recurse, const F& f) const {
  f(prefix, *this);
  if (!recurse) return;
  for (const auto& [name, child] : children_) child->visit(prefix + name + ".", true, f);
}

namespace {
// The entries of `list` not seen before (by tensor identity) into `out` under `prefix`: a tied
// tensor (one registered twice, or in a submodule registered twice) is listed once, under its
// first name, as torch's named_parameters (an optimizer then steps it once, clipping counts it
// once). state_dict keeps every name.
void add_unseen(const std::vector<std::pair<std::string, Tensor>>& list, const std::string& prefix,
                std::unordered_set<const TensorImpl*>& seen,
                OrderedDict<std::string, Tensor>& out) {
  for (const auto& [name, t] : list)
    if (t.defined() && seen.insert(t.impl()).second) out.emplace(prefix + name, t);
}
}  // namespace

OrderedDict<std::string, Tensor> Module::named_parameters(bool recurse) const {
  OrderedDict<std::string, Tensor> out;
  std::unordered_set<const TensorImpl*> seen;
  visit("", recurse, [&](const std::string& prefix, const Module& m) {
    add_unseen(m.parameters_, prefix, seen, out);
  });
  return out;
}

OrderedDict<std::string, Tensor> Module::named_buffers(bool recurse) const {
  OrderedDict<std::string, Tensor> out;
  std::unordered_set<const TensorImpl*> seen;
  visit("", recurse, [&](const std::string& prefix, const Module& m) {
    add_unseen(m.buffers_, prefix, seen, out);
  });
  return out;
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& entry : named_parameters(recurse)) out.push_back(entry.second);
  return out;
}

std::vector<Tensor> Module::buffers(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& entry : named_buffers(recurse)) out.push_back(entry.second);
  return out;
}

std::vector<std::shared_ptr<Module>> Module::children() const {
  std::vector<std::shared_ptr<Module>> out;
  for (const auto& entry : children_) out.push_back(entry.second);
  return out;
}

OrderedDict<std::string, std::shared_ptr<Module>> Module::named_modules() {
  OrderedDict<std::string, std::shared_ptr<Module>> out;
  std::unordered_set<const Module*> seen;  // a module registered twice is listed once, as torch's
  std::function<void(const std::string&, const std::shared_ptr<Module>&)> add =
      [&](const std::string& name, const std::shared_ptr<Module>& m) {
        if (!seen.insert(m.get()).second) return;
        out.emplace(name, m);
        for (const auto& [child_name, child] : m->children_)
          add(name.empty() ? child_name : name + "." + child_name, child);
      };
  add("", shared_from_this());
  return out;
}

std::vector<std::shared_ptr<Module>> Module::modules(bool include_self) {
  std::vector<std::shared_ptr<Module>> out;
  for (auto& entry : named_modules())
    if (include_self || entry.second.get() != this) out.push_back(entry.second);
  return out;
}

void Module::apply(const std::function<void(Module&)>& fn) {
  fn(*this);
  for (const auto& entry : children_) entry.second->apply(fn);
}

void Module::train(bool on) {
  training_ = on;
  for (const auto& entry : children_) entry.second->train(on);
}

// Moves/converts every parameter and buffer in place; integer buffers keep their dtype. A
// parameter's gradient follows it (device and dtype), as torch's Module.to converts it.
void Module::convert(std::optional<Device> device, std::optional<DType> dtype) {
  TANDEM_CHECK(!dtype || is_floating(*dtype), type_name_,
               ".to: a module converts to floating dtypes only (f32, f64, f16, bf16), got ", *dtype,
               "; its parameters must stay trainable");
  NoGradGuard no_grad;
  std::vector<Tensor> tensors = parameters();
  for (auto& b : buffers()) tensors.push_back(b);
  for (const Tensor& t : tensors) {
    Device d = device.value_or(t.device());
    DType type = dtype && is_floating(t.dtype()) ? *dtype : t.dtype();
    if (d == t.device() && type == t.dtype()) continue;
    Tensor grad = t.grad();
    set_data(t, t.to(d, type));  // dense, channels-last if t was
    t.impl()->grad.reset();
    if (grad.defined()) Tensor(t).set_grad(grad.to(d, type));
  }
}

namespace {
// t with `format`'s exact strides: a view of the same bytes where they already lie so (size-1
// dims make both layouts one: a 1x1 filter, one input channel), else a copy.
Tensor laid_out(const Tensor& t, MemoryFormat format) {
  if (!t.is_contiguous(format)) return t.contiguous(format);
  return make_tensor(t.storage(), t.shape(), strides_of(t.shape(), format), t.storage_offset(),
                     t.dtype());
}
}  // namespace

void Module::to(MemoryFormat format) {
  NoGradGuard no_grad;
  std::vector<Tensor> tensors = parameters();
  for (auto& b : buffers()) tensors.push_back(b);
  for (const Tensor& t : tensors) {
    if (t.dim() != 4) continue;
    set_data(t, laid_out(t, format));
    const Tensor grad = t.grad();
    if (grad.defined() && !grad.is_same(t.grad_buffer())) Tensor(t).set_grad(laid_out(grad, format));
  }
}

void Module::zero_grad(bool set_to_none) {
  for (auto& p : parameters()) {
    if (set_to_none) {
      p.set_grad(Tensor());
    } else if (p.grad().defined()) {
      p.grad().zero_();
    }
  }
}

StateDict Module::state_dict() const {
  StateDict out;
  visit("", true, [&](const std::string& prefix, const Module& m) {
    for (const auto* list : {&m.parameters_, &m.buffers_})
      for (const auto& [name, t] : *list)
        if (t.defined()) out.emplace(prefix + name, t.detach());
  });
  return out;
}

void Module::load_state_dict(const StateDict& state, bool strict) {
  StateDict own = state_dict();
  std::vector<std::string> missing, unexpected, wrong_shape;
  for (const auto& [name, t] : own) {
    auto it = state.find(name);
    if (it == state.end()) {
      missing.push_back(name);
    } else if (!it->second.defined()) {
      wrong_shape.push_back(name + ": expected " + shape_str(t.shape()) +
                            ", got an undefined tensor");
    } else if (it->second.shape() != t.shape()) {
      wrong_shape.push_back(name + ": expected " + shape_str(t.shape()) + ", got " +
                            shape_str(it->second.shape()));
    }
  }
  for (const auto& entry : state)
    if (!own.count(entry.first)) unexpected.push_back(entry.first);
  auto join = [](const std::vector<std::string>& names) {
    std::string s;
    for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
    return s;
  };
  // Wrong shapes are always an error (there is no way to copy them); key mismatches only when strict.
  if (!wrong_shape.empty() || (strict && (!missing.empty() || !unexpected.empty()))) {
    std::string msg = type_name_ + ".load_state_dict: state does not match the module";
    if (!missing.empty()) msg += "; missing keys: " + join(missing);
    if (!unexpected.empty()) msg += "; unexpected keys: " + join(unexpected);
    if (!wrong_shape.empty()) msg += "; wrong shapes: " + join(wrong_shape);
    TANDEM_THROW(ValueError, msg);
  }
  NoGradGuard no_grad;
  for (auto& [name, t] : own) {
    auto it = state.find(name);
    if (it != state.end()) t.copy_(it->second);
  }
}

std::shared_ptr<Module> Module::clone(const std::optional<Device>&) const {
  TANDEM_THROW(NotImplementedError, "clone: ", type_name_,
               " cannot be cloned; derive it from "
               "nn::Cloneable<",
               type_name_,
               "> and register its parameters, buffers and "
               "submodules in reset(), as in libtorch");
}

void Module::copy_state_from(const Module& from, const std::optional<Device>& device) {
  // Everything is checked before anything is copied.
  std::vector<std::pair<const Module*, Module*>> pairs;
  std::vector<const Module*> todo_from{&from};
  std::vector<Module*> todo_to{this};
  while (!todo_from.empty()) {
    const Module* a = todo_from.back();
    Module* b = todo_to.back();
    todo_from.pop_back();
    todo_to.pop_back();
    pairs.emplace_back(a, b);
    auto same = [](const auto& x, const auto& y) {
      bool ok = x.size() == y.size();
      for (size_t i = 0; ok && i < x.size(); ++i)
        ok = x[i].first == y[i].first && x[i].second.defined() == y[i].second.defined() &&
             (!x[i].second.defined() || x[i].second.shape() == y[i].second.shape());
      return ok;
    };
    TANDEM_CHECK(typeid(*a) == typeid(*b) && same(a->parameters_, b->parameters_) &&
                     same(a->buffers_, b->buffers_) && a->children_.keys() == b->children_.keys(),
                 "clone: the copy of ", a->type_name_,
                 " has other parameters, buffers or "
                 "submodules (or submodules of other types) than the original; does reset() "
                 "register all of them as the original has them now?");
    for (size_t i = 0; i < a->children_.size(); ++i) {
      todo_from.push_back(a->children_[i].second.get());
      todo_to.push_back(b->children_[i].second.get());
    }
  }
  NoGradGuard no_grad;
  auto copy = [&](const Tensor& src, const Tensor& dst) {
    if (!src.defined()) return;
    const Tensor value = device && *device != src.device() ? src.to(*device) : src.clone();
    set_data(dst, value);
    dst.impl()->grad.reset();
    if (src.requires_grad() != dst.requires_grad())
      Tensor(dst).set_requires_grad(src.requires_grad());
  };
  for (auto [a, b] : pairs) {
    for (size_t i = 0; i < a->parameters_.size(); ++i)
      copy(a->parameters_[i].second, b->parameters_[i].second);
    for (size_t i = 0; i < a->buffers_.size(); ++i)
      copy(a->buffers_[i].second, b->buffers_[i].second);
    b->training_ = a->training_;
  }
}

void Module::pretty_print(std::ostream& os, int indent) const {
  os << type_name_ << "(" << extra_repr();
  if (children_.empty()) {
    os << ")";
    return;
  }
  os << "\n";
  for (const auto& [name, child] : children_) {
    os << std::string(indent + 2, ' ') << "(" << name << "): ";
    child->pretty_print(os, indent + 2);
    os << "\n";
  }
  os << std::string(indent, ' ') << ")";
}

std::ostream& operator<<(std::ostream& os, const Module& module) {
  module.pretty_print(os);
  return os;
}

}  // namespace tandem::nn
