// Optimizers acting on fp32 (master) parameters, as torch.optim: SGD (momentum, dampening,
// Nesterov, weight decay), Adam and AdamW, with parameter groups, state dicts and gradient clipping.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "tandem/core/arg.hpp"
#include "tandem/nn/module.hpp"

namespace tandem::optim {

/// The hyper-parameters of one parameter group, as libtorch's OptimizerOptions: each optimizer's
/// options (SGDOptions, AdamOptions, AdamWOptions) derive from it, a group holds its own copy, and
/// user code changes a group's rate through `static_cast<SGDOptions&>(group.options()).lr(x)` or
/// `group.options().set_lr(x)`. The weight decay and momentum accessors are tandem's: they let
/// schedules and weight_decay_groups work on any optimizer.
class OptimizerOptions {
 public:
  virtual ~OptimizerOptions() = default;
  virtual std::unique_ptr<OptimizerOptions> clone() const = 0;
  virtual double get_lr() const = 0;
  virtual void set_lr(double lr) = 0;
  virtual double get_weight_decay() const = 0;
  virtual void set_weight_decay(double weight_decay) = 0;
  /// SGD's momentum or Adam's beta1: what a one-cycle schedule cycles.
  virtual double get_momentum() const = 0;
  virtual void set_momentum(double momentum) = 0;
  /// Whether there is one to cycle (Adagrad has none).
  virtual bool has_momentum() const { return true; }

 protected:
  OptimizerOptions() = default;
  OptimizerOptions(const OptimizerOptions&) = default;
  OptimizerOptions& operator=(const OptimizerOptions&) = default;
};

/// clone() and the rate and weight-decay accessors of Derived, from its lr_ and weight_decay_
/// fields, as libtorch's OptimizerCloneableOptions.
template <typename Derived>
class OptimizerCloneableOptions : public OptimizerOptions {
 public:
  std::unique_ptr<OptimizerOptions> clone() const override {
    return std::make_unique<Derived>(self());
  }
  double get_lr() const override { return self().lr_; }
  void set_lr(double lr) override { self().lr_ = lr; }
  double get_weight_decay() const override { return self().weight_decay_; }
  void set_weight_decay(double weight_decay) override { self().weight_decay_ = weight_decay; }

 private:
  const Derived& self() const { return static_cast<const Derived&>(*this); }
  Derived& self() { return static_cast<Derived&>(*this); }
};

/// Parameters and the options they are updated with, as libtorch's OptimizerParamGroup. A group
/// made without options takes the optimizer's defaults when the optimizer adopts it.
class OptimizerParamGroup {
 public:
  OptimizerParamGroup(std::vector<Tensor> params)  // NOLINT(google-explicit-constructor)
      : params_(std::move(params)) {}
  OptimizerParamGroup(std::vector<Tensor> params, std::unique_ptr<OptimizerOptions> options)
      : params_(std::move(params)), options_(std::move(options)) {}
  OptimizerParamGroup(const OptimizerParamGroup& other);
  OptimizerParamGroup& operator=(const OptimizerParamGroup& other);
  OptimizerParamGroup(OptimizerParamGroup&&) noexcept = default;
  OptimizerParamGroup& operator=(OptimizerParamGroup&&) noexcept = default;

  std::vector<Tensor>& params() { return params_; }
  const std::vector<Tensor>& params() const { return params_; }
  bool has_options() const { return options_ != nullptr; }
  /// Throws where the group has none (a group the optimizer holds always has them).
  OptimizerOptions& options();
  const OptimizerOptions& options() const;
  void set_options(std::unique_ptr<OptimizerOptions> options) { options_ = std::move(options); }

  /// The rate schedules start from (torch's group "initial_lr"): the group's rate when the first
  /// schedule was built on it, or what a one-cycle schedule set; until then its current rate.
  double initial_lr() const { return initial_lr_ ? *initial_lr_ : options().get_lr(); }
  bool has_initial_lr() const { return initial_lr_.has_value(); }
  void set_initial_lr(double lr) { initial_lr_ = lr; }

 private:
  std::vector<Tensor> params_;
  std::unique_ptr<OptimizerOptions> options_;
  std::optional<double> initial_lr_;
};

/// Parameters whose rate or weight decay differ from the optimizer's defaults, the rest of their
/// options being the defaults (tandem's shorter form of an OptimizerParamGroup).
struct ParamGroup {
  std::vector<Tensor> params;
  std::optional<double> lr, weight_decay;
  ParamGroup(std::vector<Tensor> p) : params(std::move(p)) {}  // NOLINT(google-explicit-constructor)
  ParamGroup(std::vector<Tensor> p, std::optional<double> lr_, std::optional<double> wd)
      : params(std::move(p)), lr(lr_), weight_decay(wd) {}
};

/// Two groups: parameters of 2 or more dims (conv and linear weights) with `weight_decay`, and
/// the rest (biases, batch-norm gamma and beta) without, the usual recipe for ResNets.
std::vector<ParamGroup> weight_decay_groups(const nn::Module& module, double weight_decay);

class Optimizer {
 public:
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;
  virtual ~Optimizer() = default;
  /// One update of every parameter that has a gradient.
  virtual void step() = 0;
  /// Drops (or zeroes) every parameter's gradient.
  void zero_grad(bool set_to_none = true);
  /// "SGD", "Adam", ...: what its errors begin with.
  const char* name() const { return name_; }

  /// The groups, each with its own options, as libtorch's param_groups().
  std::vector<OptimizerParamGroup>& param_groups() { return groups_; }
  const std::vector<OptimizerParamGroup>& param_groups() const { return groups_; }
  /// Adds a group (with the defaults where it has no options) after checking its options and
  /// that none of its parameters is in another group; its state starts empty.
  void add_param_group(const OptimizerParamGroup& group);
  /// The options groups without their own take.
  OptimizerOptions& defaults() { return *defaults_; }
  const OptimizerOptions& defaults() const { return *defaults_; }

  /// Hyper-parameters per group and the per-parameter state (momentum buffers, Adam moments,
  /// step counts) as tensors: "group.G.lr", "state.K.exp_avg", ... (K = parameter index across
  /// groups), and an optimizer's other state as "extra.*" (L-BFGS's history). load_state_dict
  /// checks the layout and every shape before changing anything.
  nn::StateDict state_dict() const;
  void load_state_dict(const nn::StateDict& state);
  /// libtorch's `optimizer.save(archive)` / `load(archive)`: the state_dict into an archive of
  /// its own (nest it under a key to keep it beside a module's), and back.
  void save(serialize::OutputArchive& archive) const;
  void load(serialize::InputArchive& archive);

 protected:
  Optimizer(const char* name, std::unique_ptr<OptimizerOptions> defaults);
  /// Adopts the constructor's groups (after the derived class can check their options).
  void add_param_groups(std::vector<OptimizerParamGroup> groups);
  void add_param_groups(std::vector<ParamGroup> groups);
  /// Refuses options of another optimizer or out of range (each optimizer's own rules).
  virtual void check_options(const OptimizerOptions& options) const = 0;
  /// What every step() does first: runs the GPU's deferred input checks, and refuses (before
  /// anything changes) a gradient or a state tensor whose dtype, device or shape is not its
  /// parameter's.
  void check_step();
  /// Per-parameter state by name, created on first use.
  std::map<std::string, Tensor>& state(size_t param_index) { return state_[param_index]; }
  /// State beside the per-parameter kind (L-BFGS's curvature history), under "extra." keys of
  /// state_dict(). read_extra_state checks every such key of `state` and returns what then
  /// adopts them, so that a refused dict changes nothing; the default has none, and refuses any.
  virtual void write_extra_state(nn::StateDict& out) const;
  virtual std::function<void()> read_extra_state(const nn::StateDict& state);

  const char* name_;
  std::unique_ptr<OptimizerOptions> defaults_;
  std::vector<OptimizerParamGroup> groups_;

 private:
  std::vector<std::map<std::string, Tensor>> state_;
};

/// SGD's hyper-parameters; the rate comes first, as libtorch's SGDOptions(lr).
struct SGDOptions : OptimizerCloneableOptions<SGDOptions> {
  SGDOptions(double lr = 0.1) : lr_(lr) {}  // NOLINT(google-explicit-constructor)
  TANDEM_ARG(double, lr);
  TANDEM_ARG(double, momentum) = 0.0;
  TANDEM_ARG(double, dampening) = 0.0;
  TANDEM_ARG(double, weight_decay) = 0.0;
  TANDEM_ARG(bool, nesterov) = false;
  double get_momentum() const override { return momentum_; }
  void set_momentum(double momentum) override { momentum_ = momentum; }
};

/// torch.optim.SGD: d = g + wd p; b = m b + (1 - dampening) d (b = d at the first step);
/// d = d + m b (Nesterov) or b; p -= lr d. Each group with its own SGDOptions.
class SGD : public Optimizer {
 public:
  SGD(std::vector<OptimizerParamGroup> groups, SGDOptions defaults);
  SGD(std::vector<ParamGroup> groups, SGDOptions defaults);
  /// One group of every parameter: `SGD(model->parameters(), SGDOptions(0.1).momentum(0.9))`.
  SGD(std::vector<Tensor> params, SGDOptions defaults);
  void step() override;

 private:
  void check_options(const OptimizerOptions& options) const override;
};

/// The betas of AdamOptions and AdamWOptions (Derived: the struct they return), set in both
/// forms, betas(0.9, 0.999) and libtorch's betas({0.9, 0.999}); beta1 is their momentum.
template <typename Derived>
struct AdamBetas : OptimizerCloneableOptions<Derived> {
  double beta1_ = 0.9, beta2_ = 0.999;
  Derived& betas(double beta1, double beta2) & {
    beta1_ = beta1;
    beta2_ = beta2;
    return static_cast<Derived&>(*this);
  }
  Derived betas(double beta1, double beta2) && { return std::move(betas(beta1, beta2)); }
  Derived& betas(const std::tuple<double, double>& b) & {
    return betas(std::get<0>(b), std::get<1>(b));
  }
  Derived betas(const std::tuple<double, double>& b) && {
    return std::move(betas(std::get<0>(b), std::get<1>(b)));
  }
  std::tuple<double, double> betas() const { return {beta1_, beta2_}; }
  double get_momentum() const override { return beta1_; }
  void set_momentum(double momentum) override { beta1_ = momentum; }
};

/// Adam's hyper-parameters; the rate comes first, as libtorch's AdamOptions(lr).
struct AdamOptions : AdamBetas<AdamOptions> {
  AdamOptions(double lr = 1e-3) : lr_(lr) {}  // NOLINT(google-explicit-constructor)
  TANDEM_ARG(double, lr);
  TANDEM_ARG(double, eps) = 1e-8;
  TANDEM_ARG(double, weight_decay) = 0.0;
  TANDEM_ARG(bool, amsgrad) = false;
};

/// AdamW's hyper-parameters; the rate comes first, as libtorch's AdamWOptions(lr).
struct AdamWOptions : AdamBetas<AdamWOptions> {
  AdamWOptions(double lr = 1e-3) : lr_(lr) {}  // NOLINT(google-explicit-constructor)
  TANDEM_ARG(double, lr);
  TANDEM_ARG(double, eps) = 1e-8;
  TANDEM_ARG(double, weight_decay) = 1e-2;
  TANDEM_ARG(bool, amsgrad) = false;
};

/// torch.optim.Adam: weight decay as an L2 term added to the gradient (g + wd p), then the
/// bias-corrected moments; AMSGrad keeps the running maximum of the second moment (state
/// "max_exp_avg_sq", as torch's). Each group with its own AdamOptions.
class Adam : public Optimizer {
 public:
  Adam(std::vector<OptimizerParamGroup> groups, AdamOptions defaults);
  Adam(std::vector<ParamGroup> groups, AdamOptions defaults);
  Adam(std::vector<Tensor> params, AdamOptions defaults = {});
  void step() override;

 private:
  void check_options(const OptimizerOptions& options) const override;
};

/// torch.optim.AdamW (Loshchilov & Hutter): decoupled weight decay p *= 1 - lr wd, then Adam
/// with bias correction. Each group with its own AdamWOptions.
class AdamW : public Optimizer {
 public:
  AdamW(std::vector<OptimizerParamGroup> groups, AdamWOptions defaults);
  AdamW(std::vector<ParamGroup> groups, AdamWOptions defaults);
  AdamW(std::vector<Tensor> params, AdamWOptions defaults = {});
  void step() override;

 private:
  void check_options(const OptimizerOptions& options) const override;
};

/// RMSprop's hyper-parameters, as libtorch's RMSpropOptions(lr).
struct RMSpropOptions : OptimizerCloneableOptions<RMSpropOptions> {
  RMSpropOptions(double lr = 1e-2) : lr_(lr) {}  // NOLINT(google-explicit-constructor)
  TANDEM_ARG(double, lr);
  TANDEM_ARG(double, alpha) = 0.99;
  TANDEM_ARG(double, eps) = 1e-8;
  TANDEM_ARG(double, weight_decay) = 0.0;
  TANDEM_ARG(double, momentum) = 0.0;
  TANDEM_ARG(bool, centered) = false;
  double get_momentum() const override { return momentum_; }
  void set_momentum(double momentum) override { momentum_ = momentum; }
};

/// torch.optim.RMSprop: d = g + wd p; v = alpha v + (1 - alpha) d^2 (state "square_avg");
/// centered: m = alpha m + (1 - alpha) d ("grad_avg") and v - m^2 in v's place; with momentum,
/// b = momentum b + d / (sqrt(v) + eps) and p -= lr b, else p -= lr d / (sqrt(v) + eps).
class RMSprop : public Optimizer {
 public:
  RMSprop(std::vector<OptimizerParamGroup> groups, RMSpropOptions defaults);
  RMSprop(std::vector<ParamGroup> groups, RMSpropOptions defaults);
  RMSprop(std::vector<Tensor> params, RMSpropOptions defaults = {});
  void step() override;

 private:
  void check_options(const OptimizerOptions& options) const override;
};

/// Adagrad's hyper-parameters, as libtorch's AdagradOptions(lr). It has no momentum: a
/// one-cycle schedule that cycles momentum refuses it.
struct AdagradOptions : OptimizerCloneableOptions<AdagradOptions> {
  AdagradOptions(double lr = 1e-2) : lr_(lr) {}  // NOLINT(google-explicit-constructor)
  TANDEM_ARG(double, lr);
  TANDEM_ARG(double, lr_decay) = 0.0;
  TANDEM_ARG(double, weight_decay) = 0.0;
  TANDEM_ARG(double, initial_accumulator_value) = 0.0;
  TANDEM_ARG(double, eps) = 1e-10;
  double get_momentum() const override { return 0.0; }
  void set_momentum(double momentum) override;
  bool has_momentum() const override { return false; }
};

/// torch.optim.Adagrad: d = g + wd p; s += d^2 (state "sum", from initial_accumulator_value);
/// p -= lr / (1 + (step - 1) lr_decay) d / (sqrt(s) + eps).
class Adagrad : public Optimizer {
 public:
  Adagrad(std::vector<OptimizerParamGroup> groups, AdagradOptions defaults);
  Adagrad(std::vector<ParamGroup> groups, AdagradOptions defaults);
  Adagrad(std::vector<Tensor> params, AdagradOptions defaults = {});
  void step() override;

 private:
  void check_options(const OptimizerOptions& options) const override;
};

/// Scales every gradient so that their global `norm_type` norm (any p > 0, or infinity) is at
/// most `max_norm`, as torch.nn.utils.clip_grad_norm_: by max_norm / (norm + 1e-6) where that is
/// below 1, or is NaN (a NaN norm makes every gradient NaN, as torch's). Returns the norm before
/// clipping; with error_if_nonfinite a NaN or infinite norm is an error and nothing is scaled.
double clip_grad_norm(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0,
                      bool error_if_nonfinite = false);

/// Clamps every gradient's elements to [-clip_value, clip_value] in place, as
/// torch.nn.utils.clip_grad_value_.
void clip_grad_value(const std::vector<Tensor>& params, double clip_value);

}  // namespace tandem::optim

namespace tandem::nn::utils {
/// libtorch's name for optim::clip_grad_norm.
inline double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm,
                              double norm_type = 2.0, bool error_if_nonfinite = false) {
  return optim::clip_grad_norm(params, max_norm, norm_type, error_if_nonfinite);
}
/// libtorch's name for optim::clip_grad_value.
inline void clip_grad_value_(const std::vector<Tensor>& params, double clip_value) {
  optim::clip_grad_value(params, clip_value);
}
}  // namespace tandem::nn::utils
