// Learning-rate schedules, as torch.optim.lr_scheduler, in closed form: the rate at step t is a
// function of t alone, so a schedule's whole state is its step count. Construction sets the
// step-0 rates; call step() after each optimizer step.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "tandem/core/arg.hpp"
#include "tandem/optim/optimizer.hpp"

namespace tandem::optim {

class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  /// Advances one step and sets every group's rate (and momentum, for one-cycle).
  void step();
  int64_t last_step() const { return last_step_; }
  /// The optimizer whose rates it sets.
  const Optimizer& optimizer() const { return optimizer_; }
  /// The rates the last step() (or construction) set, one per group.
  std::vector<double> last_lr() const;
  std::vector<double> get_last_lr() const { return last_lr(); }  // libtorch's name
  /// {"last_step"}; loading sets the rates for that step.
  nn::StateDict state_dict() const;
  void load_state_dict(const nn::StateDict& state);

  /// Rate of group `g` at step t (base_lr(g) is the group's initial_lr).
  virtual double lr_at(size_t g, int64_t t) const = 0;
  /// Momentum (SGD) or beta1 (AdamW) of group `g` at step t, for schedules that cycle it.
  virtual std::optional<double> momentum_at(size_t, int64_t) const { return std::nullopt; }

 protected:
  explicit LRScheduler(Optimizer& optimizer);
  /// Sets the rates for last_step_ (derived constructors call it once they are ready).
  void apply();
  double base_lr(size_t g) const { return optimizer_.param_groups()[g].initial_lr(); }

  Optimizer& optimizer_;
  int64_t last_step_ = 0;
};

/// torch's LinearLR: factor goes from start_factor to end_factor over total_steps, then stays.
class LinearWarmup : public LRScheduler {
 public:
  LinearWarmup(Optimizer& optimizer, int64_t total_steps, double start_factor = 1.0 / 3,
               double end_factor = 1.0);
  double lr_at(size_t g, int64_t t) const override;
  const int64_t total_steps;
  const double start_factor, end_factor;
};

/// torch's CosineAnnealingLR: eta_min + (base - eta_min) (1 + cos(pi t / t_max)) / 2.
class CosineAnnealing : public LRScheduler {
 public:
  CosineAnnealing(Optimizer& optimizer, int64_t t_max, double eta_min = 0.0);
  double lr_at(size_t g, int64_t t) const override;
  const int64_t t_max;
  const double eta_min;
};

/// torch's StepLR: base * gamma^(t / step_size).
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);
  double lr_at(size_t g, int64_t t) const override;
  const int64_t step_size;
  const double gamma;
};

/// torch's MultiStepLR: base * gamma^(number of milestones <= t).
class MultiStepLR : public LRScheduler {
 public:
  MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones, double gamma = 0.1);
  double lr_at(size_t g, int64_t t) const override;
  const std::vector<int64_t> milestones;
  const double gamma;
};

/// torch's SequentialLR: `first` until step `milestone`, then `second` counting from 0 there
/// (e.g. LinearWarmup then CosineAnnealing).
class SequentialLR : public LRScheduler {
 public:
  SequentialLR(Optimizer& optimizer, std::shared_ptr<LRScheduler> first,
               std::shared_ptr<LRScheduler> second, int64_t milestone);
  double lr_at(size_t g, int64_t t) const override;
  std::optional<double> momentum_at(size_t g, int64_t t) const override;

 private:
  std::shared_ptr<LRScheduler> first_, second_;
  int64_t milestone_;
};

struct OneCycleOptions {
  TANDEM_ARG(double, pct_start) = 0.3;
  TANDEM_ARG(double, div_factor) = 25.0;
  TANDEM_ARG(double, final_div_factor) = 1e4;
  TANDEM_ARG(bool, cycle_momentum) = true;
  TANDEM_ARG(double, base_momentum) = 0.85;
  TANDEM_ARG(double, max_momentum) = 0.95;
  /// Both ends of the momentum cycle at once.
  OneCycleOptions& momentum_range(double base, double max) & {
    base_momentum_ = base;
    max_momentum_ = max;
    return *this;
  }
  OneCycleOptions momentum_range(double base, double max) && {
    return std::move(momentum_range(base, max));
  }
};

/// torch's OneCycleLR (Smith & Topin 2017), two phases with cosine annealing: the rate rises from
/// max_lr / div_factor to max_lr over pct_start of the steps, then falls to
/// initial / final_div_factor; momentum moves the opposite way. Stepping past total_steps throws.
class OneCycleLR : public LRScheduler {
 public:
  OneCycleLR(Optimizer& optimizer, double max_lr, int64_t total_steps, OneCycleOptions options = {});
  double lr_at(size_t g, int64_t t) const override;
  std::optional<double> momentum_at(size_t g, int64_t t) const override;
  const double max_lr;
  const int64_t total_steps;
  const OneCycleOptions options;

 private:
  // (phase-relative position, phase index) for step t.
  std::pair<double, int> phase(int64_t t) const;
};

}  // namespace tandem::optim
