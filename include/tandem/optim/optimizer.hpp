// Optimizers acting on fp32 (master) parameters, as torch.optim: SGD (momentum, dampening,
// Nesterov, weight decay) and AdamW, with parameter groups, state dicts and gradient clipping.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tandem/nn/module.hpp"

namespace tandem::optim {

/// Parameters sharing hyper-parameters; unset fields take the optimizer's defaults.
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
  /// A group as the optimizer holds it. `momentum` is SGD's momentum or AdamW's beta1 (what a
  /// one-cycle schedule cycles); `initial_lr` is the rate schedules start from.
  struct Group {
    std::vector<Tensor> params;
    double lr, weight_decay, momentum, initial_lr;
  };

  virtual ~Optimizer() = default;
  /// One update of every parameter that has a gradient.
  virtual void step() = 0;
  /// Drops (or zeroes) every parameter's gradient.
  void zero_grad(bool set_to_none = true);

  std::vector<Group>& groups() { return groups_; }
  const std::vector<Group>& groups() const { return groups_; }

  /// Hyper-parameters per group and the per-parameter state (momentum buffers, Adam moments,
  /// step counts) as tensors: "group.G.lr", "state.K.exp_avg", ... (K = parameter index across
  /// groups). load_state_dict checks the layout and every shape before changing anything.
  nn::StateDict state_dict() const;
  void load_state_dict(const nn::StateDict& state);

 protected:
  Optimizer(const char* name, std::vector<ParamGroup> groups, double lr, double weight_decay,
            double momentum);
  /// Per-parameter state by name, created on first use.
  std::map<std::string, Tensor>& state(size_t param_index) { return state_[param_index]; }

  const char* name_;
  std::vector<Group> groups_;

 private:
  std::vector<std::map<std::string, Tensor>> state_;
};

struct SGDOptions {
  double lr_ = 0.1, momentum_ = 0.0, dampening_ = 0.0, weight_decay_ = 0.0;
  bool nesterov_ = false;
  SGDOptions lr(double v) const { auto o = *this; o.lr_ = v; return o; }
  SGDOptions momentum(double v) const { auto o = *this; o.momentum_ = v; return o; }
  SGDOptions dampening(double v) const { auto o = *this; o.dampening_ = v; return o; }
  SGDOptions weight_decay(double v) const { auto o = *this; o.weight_decay_ = v; return o; }
  SGDOptions nesterov(bool v) const { auto o = *this; o.nesterov_ = v; return o; }
};

/// torch.optim.SGD: d = g + wd p; b = m b + (1 - dampening) d (b = d at the first step);
/// d = d + m b (Nesterov) or b; p -= lr d.
class SGD : public Optimizer {
 public:
  SGD(std::vector<ParamGroup> groups, SGDOptions options);
  void step() override;
  const SGDOptions options;
};

struct AdamWOptions {
  double lr_ = 1e-3, beta1_ = 0.9, beta2_ = 0.999, eps_ = 1e-8, weight_decay_ = 1e-2;
  AdamWOptions lr(double v) const { auto o = *this; o.lr_ = v; return o; }
  AdamWOptions betas(double b1, double b2) const {
    auto o = *this;
    o.beta1_ = b1;
    o.beta2_ = b2;
    return o;
  }
  AdamWOptions eps(double v) const { auto o = *this; o.eps_ = v; return o; }
  AdamWOptions weight_decay(double v) const { auto o = *this; o.weight_decay_ = v; return o; }
};

/// torch.optim.AdamW (Loshchilov & Hutter): decoupled weight decay p *= 1 - lr wd, then Adam
/// with bias correction.
class AdamW : public Optimizer {
 public:
  AdamW(std::vector<ParamGroup> groups, AdamWOptions options);
  void step() override;
  const AdamWOptions options;
};

/// Scales every gradient so that their global `norm_type` norm (2, or infinity) is at most
/// `max_norm`, as torch.nn.utils.clip_grad_norm_. Returns the norm before clipping.
double clip_grad_norm(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0);

}  // namespace tandem::optim
