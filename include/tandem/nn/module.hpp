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

namespace tandem::nn {

/// Parameters and buffers by dotted name ("layer1.0.conv1.weight"), in the order torch lists them.
using StateDict = OrderedDict<std::string, Tensor>;

class Module : public std::enable_shared_from_this<Module> {
 public:
  explicit Module(std::string type_name = "Module") : type_name_(std::move(type_name)) {}
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  /// The class name shown when printing ("Conv2d").
  const std::string& type_name() const { return type_name_; }

  /// The single-input forward pass most layers have; Sequential chains them. Modules with
  /// another signature define their own `forward` and leave this one throwing.
  virtual Tensor forward(const Tensor& input);
  Tensor operator()(const Tensor& input) { return forward(input); }

  // --- registration (returns the registered handle) -----------------------------------------
  /// A trainable tensor; `requires_grad` is set on it. Names are unique within a module and
  /// contain no '.'.
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
  // (`[0]`), and entries with `first`/`second` and libtorch's `key()`/`value()`.
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

  /// One line per module, indented like torch's repr.
  virtual std::string extra_repr() const { return ""; }
  void pretty_print(std::ostream& os, int indent = 0) const;

 protected:
  void add_child(const std::string& name, std::shared_ptr<Module> module);
  void replace_child(const std::string& name, std::shared_ptr<Module> module);
  /// Unregisters the child `name` (it must be one).
  void remove_child(const std::string& name);

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

}  // namespace tandem::nn
