// Module: the base of every layer and model. Holds named parameters, buffers and child modules,
// as torch.nn.Module. Modules are plain classes held by std::shared_ptr (no Impl/holder split).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "tandem/core/tensor.hpp"
#include "tandem/nn/ordered_dict.hpp"

namespace tandem::serialize {
class OutputArchive;
class InputArchive;
}  // namespace tandem::serialize

namespace tandem::nn {

/// Parameters and buffers by dotted name ("layer1.0.conv1.weight"), in the order torch lists them.
using StateDict = OrderedDict<std::string, Tensor>;

class Module : public std::enable_shared_from_this<Module> {
 public:
  explicit Module(std::string type_name = "Module") : type_name_(std::move(type_name)) {}
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  /// The class name shown when printing ("Conv2d"); name() is libtorch's name for it.
  const std::string& type_name() const { return type_name_; }
  const std::string& name() const { return type_name_; }

  /// The single-input forward pass most layers have; Sequential chains them. Modules with
  /// another signature define their own `forward` and leave this one throwing.
  virtual Tensor forward(const Tensor& input);
  Tensor operator()(const Tensor& input) { return forward(input); }

  // --- registration (returns the registered handle) -----------------------------------------
  /// A trainable tensor; `requires_grad` is set on it. Names are unique within a module and
  /// contain no '.'. An undefined tensor registers an absent parameter (libtorch's way to say
  /// "no bias"): its name is taken, and parameters() and state_dict() leave it out.
  Tensor register_parameter(const std::string& name, Tensor tensor, bool requires_grad = true);
  /// State that is saved but not trained (batch-norm running statistics).
  Tensor register_buffer(const std::string& name, Tensor tensor);
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    add_child(name, module);
    return module;
  }
  /// Puts `module` in the place of the child registered as `name` (libtorch's replace_module).
  template <typename M>
  std::shared_ptr<M> replace_module(const std::string& name, std::shared_ptr<M> module) {
    replace_child(name, module);
    return module;
  }

  // --- traversal (registration order, depth first, parents first, as torch) ----------------
  // The named forms are OrderedDicts, as libtorch's: by key (`at("fc.weight")`), by position
  // (`[0]`), and entries with `first`/`second` and libtorch's `key()`/`value()`. A tensor or
  // module registered under two names (tied weights) is listed once, under its first name, as
  // torch's; state_dict() keeps both names.
  std::vector<Tensor> parameters(bool recurse = true) const;
  OrderedDict<std::string, Tensor> named_parameters(bool recurse = true) const;
  std::vector<Tensor> buffers(bool recurse = true) const;
  OrderedDict<std::string, Tensor> named_buffers(bool recurse = true) const;
  std::vector<std::shared_ptr<Module>> children() const;
  const OrderedDict<std::string, std::shared_ptr<Module>>& named_children() const {
    return children_;
  }
  /// This module (unless include_self is false) and every descendant (the module must be held
  /// by a shared_ptr).
  std::vector<std::shared_ptr<Module>> modules(bool include_self = true);
  /// The same by dotted name, this module first as "".
  OrderedDict<std::string, std::shared_ptr<Module>> named_modules();
  /// Calls `fn` on this module and every descendant, parents first (usable in constructors).
  void apply(const std::function<void(Module&)>& fn);
  /// libtorch's `m.as<nn::Linear>()`: this module as a T, or nullptr when it is not one (in
  /// `apply`'s initializers).
  template <typename T>
  T* as() noexcept {
    return dynamic_cast<T*>(this);
  }
  template <typename T>
  const T* as() const noexcept {
    return dynamic_cast<const T*>(this);
  }

  // --- modes and placement ------------------------------------------------------------------
  /// Training mode (batch statistics, dropout on) for this module and every descendant.
  virtual void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  /// Moves or converts every parameter and buffer in place: handles held by layers (and by an
  /// optimizer built afterwards) see the new data. Integer buffers keep their dtype.
  void to(Device device) { convert(device, std::nullopt); }
  void to(DType dtype) { convert(std::nullopt, dtype); }
  void to(Device device, DType dtype) { convert(device, dtype); }
  /// Lays every 4-d parameter and buffer (and its gradient) out in `format`, in place, as
  /// torch's `module.to(memory_format=...)`: with ChannelsLast, a channels-last convolution
  /// takes its weights as they lie instead of copying them each call. Call it before building
  /// the optimizer and DistributedDataParallel, whose buffers and gradient buckets follow the
  /// parameters' layout when they are made (they stay correct after, only slower).
  void to(MemoryFormat format);
  /// Drops every parameter's gradient (set_to_none, as torch >= 2.0), or zeroes it in place.
  void zero_grad(bool set_to_none = true);

  // --- state -------------------------------------------------------------------------------
  /// Every parameter and buffer by dotted name: for each module (parents first, in registration
  /// order) its parameters, then its buffers, as torch. The tensors share data with the module.
  StateDict state_dict() const;
  /// Copies values in. When `strict`, a key set or shape mismatch throws a ValueError listing
  /// every missing, unexpected and wrongly-shaped key, and nothing is copied.
  void load_state_dict(const StateDict& state, bool strict = true);
  /// libtorch's `module->save(archive)` and `load(archive)` (io/serialize.hpp): the state_dict
  /// into an archive, and back from one (every key must be there; other keys are left, so one
  /// archive can hold several modules and more; nothing is copied unless all fit).
  void save(serialize::OutputArchive& archive) const;
  void load(serialize::InputArchive& archive);

  /// A deep copy (libtorch's clone): a module of the same type with parameters, buffers and
  /// submodules of its own, holding this one's values (moved to `device` when given),
  /// requires_grad flags and training modes; gradients are not copied. The built-in layers and
  /// containers have it; a module of yours gets it by deriving from nn::Cloneable<Self> and
  /// registering everything in reset(), as in libtorch; any other module throws
  /// NotImplementedError.
  virtual std::shared_ptr<Module> clone(const std::optional<Device>& device = std::nullopt) const;

  /// One line per module, indented like torch's repr.
  virtual std::string extra_repr() const { return ""; }
  void pretty_print(std::ostream& os, int indent = 0) const;

 protected:
  void add_child(const std::string& name, std::shared_ptr<Module> module);
  /// Virtual so that a container holding its children in a list of its own (ModuleList) keeps
  /// that list in step.
  virtual void replace_child(const std::string& name, std::shared_ptr<Module> module);
  /// Unregisters the child `name` (it must be one).
  void remove_child(const std::string& name);
  /// clone()'s second half: copies `from`'s parameter and buffer values (to `device`), their
  /// requires_grad flags and every training mode into this module, a fresh one of the same
  /// type. Throws, changing nothing, unless the two have the same names and shapes.
  void copy_state_from(const Module& from, const std::optional<Device>& device);

 private:
  void convert(std::optional<Device> device, std::optional<DType> dtype);
  void check_new_name(const std::string& name) const;
  template <typename F>
  void visit(const std::string& prefix, bool recurse, const F& f) const;

  std::string type_name_;
  bool training_ = true;
  std::vector<std::pair<std::string, Tensor>> parameters_;
  std::vector<std::pair<std::string, Tensor>> buffers_;
  OrderedDict<std::string, std::shared_ptr<Module>> children_;
};

std::ostream& operator<<(std::ostream& os, const Module& module);

/// libtorch's Cloneable<Derived>, for a module of yours that clone() should copy: derive from
/// it (`struct Net : nn::Cloneable<Net>`), create and register the parameters, buffers and
/// submodules in reset(), and call reset() from the constructor. clone() copies the object as
/// the compiler copies it (its other members), calls reset() on the copy for tensors and
/// submodules of its own, and copies the values in.
template <typename Derived>
class Cloneable : public Module {
 public:
  explicit Cloneable(std::string type_name = "Module") : Module(std::move(type_name)) {}
  virtual void reset() = 0;
  std::shared_ptr<Module> clone(const std::optional<Device>& device = std::nullopt) const override {
    auto copy = std::make_shared<Derived>(static_cast<const Derived&>(*this));
    copy->reset();
    copy->copy_state_from(*this, device);
    return copy;
  }

 protected:
  /// The copy starts with nothing registered: its reset() registers.
  Cloneable(const Cloneable& other) : Module(other.type_name()) {}
};

// clang-format off
/// A built-in layer's clone(): a new T from `__VA_ARGS__` (its options), the values copied in.
#define TANDEM_MODULE_CLONE(T, ...)                                                  \
  std::shared_ptr<Module> clone(                                                     \
      const std::optional<Device>& device = std::nullopt) const override {           \
    auto copy = std::make_shared<T>(__VA_ARGS__);                                    \
    copy->copy_state_from(*this, device);                                            \
    return copy;                                                                     \
  }
// clang-format on

}  // namespace tandem::nn
