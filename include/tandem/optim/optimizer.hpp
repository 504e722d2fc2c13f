// Optimizers acting on fp32 (master) parameters, as torch.optim: SGD (momentum, dampening,
// Nesterov, weight decay), Adam and AdamW, with parameter groups, state dicts and gradient clipping.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "tandem/core/arg.hpp"
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

/// SGD's hyper-parameters; the rate comes first, as libtorch's SGDOptions(lr).
struct SGDOptions {
  SGDOptions(double lr = 0.1) : lr_(lr) {}  // NOLINT(google-explicit-constructor)
  TANDEM_ARG(double, lr);
  TANDEM_ARG(double, momentum) = 0.0;
  TANDEM_ARG(double, dampening) = 0.0;
  TANDEM_ARG(double, weight_decay) = 0.0;
  TANDEM_ARG(bool, nesterov) = false;
};

/// torch.optim.SGD: d = g + wd p; b = m b + (1 - dampening) d (b = d at the first step);
/// d = d + m b (Nesterov) or b; p -= lr d.
class SGD : public Optimizer {
 public:
  SGD(std::vector<ParamGroup> groups, SGDOptions options);
  /// One group of every parameter: `SGD(model->parameters(), SGDOptions(0.1).momentum(0.9))`.
  SGD(std::vector<Tensor> params, SGDOptions options);
  void step() override;
  const SGDOptions options;
};

/// The betas setters of AdamOptions and AdamWOptions (Derived: the struct they return), in both
/// forms: betas(0.9, 0.999) and libtorch's betas({0.9, 0.999}).
template <typename Derived>
struct AdamBetas {
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

/// What Adam and AdamW share: the moments, their bias correction, AMSGrad's running maximum of
/// the second moment (state "max_exp_avg_sq", as torch's), one fused update per parameter. The
/// two differ only in how weight decay enters.
class AdamBase : public Optimizer {
 public:
  void step() override;

 protected:
  AdamBase(const char* name, std::vector<ParamGroup> groups, double lr, double weight_decay,
           double beta1, double beta2, double eps, bool amsgrad, bool decoupled);

 private:
  double beta2_, eps_;
  bool amsgrad_, decoupled_;
};

/// torch.optim.Adam: weight decay as an L2 term added to the gradient (g + wd p), then the
/// bias-corrected moments.
class Adam : public AdamBase {
 public:
  Adam(std::vector<ParamGroup> groups, AdamOptions options);
  Adam(std::vector<Tensor> params, AdamOptions options = {});
  const AdamOptions options;
};

/// torch.optim.AdamW (Loshchilov & Hutter): decoupled weight decay p *= 1 - lr wd, then Adam
/// with bias correction.
class AdamW : public AdamBase {
 public:
  AdamW(std::vector<ParamGroup> groups, AdamWOptions options);
  AdamW(std::vector<Tensor> params, AdamWOptions options = {});
  const AdamWOptions options;
};

/// Scales every gradient so that their global `norm_type` norm (2, or infinity) is at most
/// `max_norm`, as torch.nn.utils.clip_grad_norm_. Returns the norm before clipping.
double clip_grad_norm(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0);

/// Clamps every gradient's elements to [-clip_value, clip_value] in place, as
/// torch.nn.utils.clip_grad_value_.
void clip_grad_value(const std::vector<Tensor>& params, double clip_value);

}  // namespace tandem::optim

namespace tandem::nn::utils {
/// libtorch's name for optim::clip_grad_norm.
inline double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm,
                              double norm_type = 2.0) {
  return optim::clip_grad_norm(params, max_norm, norm_type);
}
/// libtorch's name for optim::clip_grad_value.
inline void clip_grad_value_(const std::vector<Tensor>& params, double clip_value) {
  optim::clip_grad_value(params, clip_value);
}
}  // namespace tandem::nn::utils
