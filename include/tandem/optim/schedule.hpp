// Learning-rate schedules, as torch.optim.lr_scheduler. Each step's rate comes from the group's
// rate now (torch's "chainable" form), so two schedules on one optimizer compose, and a rate set by
// hand carries on, as in torch. `LRScheduler` is libtorch's base: a user's schedule overrides
// get_lrs(), reading get_current_lrs() and step_count_. Call step() after each optimizer step.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "tandem/core/arg.hpp"
#include "tandem/optim/optimizer.hpp"

namespace tandem::optim {

/// libtorch's LRScheduler: step() sets every group's rate to get_lrs(), then counts the step.
class LRScheduler {
 public:
  explicit LRScheduler(Optimizer& optimizer);
  virtual ~LRScheduler() = default;
  void step();
  /// Steps taken (torch's last_epoch).
  int64_t last_step() const { return step_count_; }
  const Optimizer& optimizer() const { return optimizer_; }
  Optimizer& optimizer() { return optimizer_; }
  /// The rates this schedule set last (each group's rate at construction before it set any), as
  /// torch's get_last_lr(): a schedule stepped after it may have changed them since.
  const std::vector<double>& get_last_lr() const { return last_lr_; }
  const std::vector<double>& last_lr() const { return last_lr_; }
  /// {"last_step"}. Loading restores the count, not the rates: those are the optimizer's state.
  virtual nn::StateDict state_dict() const;
  virtual void load_state_dict(const nn::StateDict& state);

 protected:
  /// The rates of the step being taken; step_count_ counts the steps before it (libtorch's).
  virtual std::vector<double> get_lrs() = 0;
  std::vector<double> get_current_lrs() const;
  void set_optimizer_lrs(const std::vector<double>& lrs);

  Optimizer& optimizer_;
  int64_t step_count_ = 0;

 private:
  std::vector<double> last_lr_;
};

class SequentialLR;

/// The schedules of torch.optim.lr_scheduler: rate(g, t, lr) is torch's get_lr() for group g at
/// step t (t = 0 at construction), from the group's rate now; where torch has a closed form of t
/// alone (_get_closed_form_lr), SequentialLR restarts a schedule at its milestone from it.
class Schedule : public LRScheduler {
 protected:
  explicit Schedule(Optimizer& optimizer) : LRScheduler(optimizer) {}
  virtual double rate(size_t g, int64_t t, double lr) const = 0;
  virtual std::optional<double> closed_form(size_t, int64_t) const { return std::nullopt; }
  /// The momentum (SGD's; Adam's beta1) of group g at step t, for the schedules that cycle it.
  virtual std::optional<double> momentum(size_t, int64_t) const { return std::nullopt; }
  /// torch's initial step (t = 0), the last line of each constructor, once its checks passed:
  /// the first schedule on a group fixes its base rate (torch's setdefault of "initial_lr").
  void initial_step();
  double base_lr(size_t g) const { return base_lrs_[g]; }
  std::vector<double> base_lrs_;

 private:
  friend class SequentialLR;
  std::vector<double> get_lrs() final;
  /// The rates of step t, from closed_form where `closed` and it has one; sets the momenta.
  std::vector<double> rates_at(int64_t t, bool closed);
  /// Back to step 0: torch's step(0) at a SequentialLR milestone (closed), or its initial step
  /// again from the rates now.
  void restart(bool closed);
};

/// torch's LambdaLR: base * lambda(t), one lambda for every group or one per group.
class LambdaLR : public Schedule {
 public:
  using Lambda = std::function<double(int64_t)>;
  LambdaLR(Optimizer& optimizer, Lambda lambda);
  LambdaLR(Optimizer& optimizer, std::vector<Lambda> lambdas);

 private:
  double rate(size_t g, int64_t t, double lr) const override;
  std::vector<Lambda> lambdas_;
};

/// torch's MultiplicativeLR: each step multiplies the rate by lambda(t).
class MultiplicativeLR : public Schedule {
 public:
  using Lambda = std::function<double(int64_t)>;
  MultiplicativeLR(Optimizer& optimizer, Lambda lambda);
  MultiplicativeLR(Optimizer& optimizer, std::vector<Lambda> lambdas);

 private:
  double rate(size_t g, int64_t t, double lr) const override;
  std::vector<Lambda> lambdas_;
};

/// torch's StepLR: times gamma every step_size steps (libtorch's own StepLR decays one step later).
class StepLR : public Schedule {
 public:
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);
  const int64_t step_size;
  const double gamma;

 private:
  double rate(size_t g, int64_t t, double lr) const override;
  std::optional<double> closed_form(size_t g, int64_t t) const override;
};

/// torch's MultiStepLR: times gamma at each milestone (in any order; one given twice counts twice).
class MultiStepLR : public Schedule {
 public:
  MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones, double gamma = 0.1);
  const std::vector<int64_t> milestones;  // sorted
  const double gamma;

 private:
  double rate(size_t g, int64_t t, double lr) const override;
  std::optional<double> closed_form(size_t g, int64_t t) const override;
};

/// torch's ConstantLR: factor times the rate until step total_iters.
class ConstantLR : public Schedule {
 public:
  explicit ConstantLR(Optimizer& optimizer, double factor = 1.0 / 3, int64_t total_iters = 5);
  const double factor;
  const int64_t total_iters;

 private:
  double rate(size_t g, int64_t t, double lr) const override;
  std::optional<double> closed_form(size_t g, int64_t t) const override;
};

/// torch's LinearLR: the factor goes from start_factor to end_factor over total_iters, then stays.
class LinearLR : public Schedule {
 public:
  explicit LinearLR(Optimizer& optimizer, double start_factor = 1.0 / 3, double end_factor = 1.0,
                    int64_t total_iters = 5);
  const double start_factor, end_factor;
  const int64_t total_iters;

 private:
  double rate(size_t g, int64_t t, double lr) const override;
  std::optional<double> closed_form(size_t g, int64_t t) const override;
};

/// LinearLR with the step count first: LinearWarmup(opt, 5, 0.1) warms up over 5 steps from 0.1x.
class LinearWarmup : public LinearLR {
 public:
  LinearWarmup(Optimizer& optimizer, int64_t total_steps, double start_factor = 1.0 / 3,
               double end_factor = 1.0)
      : LinearLR(optimizer, start_factor, end_factor, total_steps) {}
};

/// torch's ExponentialLR: times gamma every step.
class ExponentialLR : public Schedule {
 public:
  ExponentialLR(Optimizer& optimizer, double gamma);
  const double gamma;

 private:
  double rate(size_t g, int64_t t, double lr) const override;
  std::optional<double> closed_form(size_t g, int64_t t) const override;
};

/// torch's PolynomialLR: base (1 - t / total_iters)^power, then 0.
class PolynomialLR : public Schedule {
 public:
  explicit PolynomialLR(Optimizer& optimizer, int64_t total_iters = 5, double power = 1.0);
  const int64_t total_iters;
  const double power;

 private:
  double rate(size_t g, int64_t t, double lr) const override;
  std::optional<double> closed_form(size_t g, int64_t t) const override;
};

/// torch's CosineAnnealingLR: eta_min + (base - eta_min) (1 + cos(pi t / t_max)) / 2.
class CosineAnnealingLR : public Schedule {
 public:
  CosineAnnealingLR(Optimizer& optimizer, int64_t t_max, double eta_min = 0.0);
  const int64_t t_max;
  const double eta_min;

 private:
  double rate(size_t g, int64_t t, double lr) const override;
  std::optional<double> closed_form(size_t g, int64_t t) const override;
};
using CosineAnnealing = CosineAnnealingLR;

/// torch's CosineAnnealingWarmRestarts (SGDR): cosine annealing over T_0 steps, restarting with
/// each period T_mult times the last.
class CosineAnnealingWarmRestarts : public Schedule {
 public:
  CosineAnnealingWarmRestarts(Optimizer& optimizer, int64_t T_0, int64_t T_mult = 1,
                              double eta_min = 0.0);
  const int64_t T_0, T_mult;
  const double eta_min;

 private:
  double rate(size_t g, int64_t t, double lr) const override;
};

enum class CyclicMode { triangular, triangular2, exp_range };

struct CyclicLROptions {
  CyclicLROptions(double base_lr, double max_lr) : base_lr_(base_lr), max_lr_(max_lr) {}
  TANDEM_ARG(double, base_lr);
  TANDEM_ARG(double, max_lr);
  TANDEM_ARG(int64_t, step_size_up) = 2000;
  /// 0: step_size_up.
  TANDEM_ARG(int64_t, step_size_down) = 0;
  TANDEM_ARG(CyclicMode, mode) = CyclicMode::triangular;
  TANDEM_ARG(double, gamma) = 1.0;
  /// Replaces the mode's scaling: of the cycle's number, or of the step with scale_by_cycle false.
  TANDEM_ARG(std::function<double(double)>, scale_fn);
  TANDEM_ARG(bool, scale_by_cycle) = true;
  TANDEM_ARG(bool, cycle_momentum) = true;
  TANDEM_ARG(double, base_momentum) = 0.8;
  TANDEM_ARG(double, max_momentum) = 0.9;
};

/// torch's CyclicLR (Smith 2017): the rate cycles between base_lr and max_lr, the momentum the
/// opposite way; construction sets every group's rate to base_lr.
class CyclicLR : public Schedule {
 public:
  CyclicLR(Optimizer& optimizer, CyclicLROptions options);
  const CyclicLROptions options;

 private:
  double rate(size_t g, int64_t t, double lr) const override;
  std::optional<double> momentum(size_t g, int64_t t) const override;
  /// (scale factor within the cycle, the mode's scaling) at step t.
  std::pair<double, double> position(int64_t t) const;
  double total_size_, step_ratio_;
};

enum class AnnealStrategy { cos, linear };

struct OneCycleOptions {
  TANDEM_ARG(double, pct_start) = 0.3;
  TANDEM_ARG(AnnealStrategy, anneal_strategy) = AnnealStrategy::cos;
  TANDEM_ARG(double, div_factor) = 25.0;
  TANDEM_ARG(double, final_div_factor) = 1e4;
  /// Up, down to the initial rate, then down to the minimum, as fast.ai's schedule.
  TANDEM_ARG(bool, three_phase) = false;
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

/// torch's OneCycleLR (Smith & Topin 2017): the rate rises from max_lr / div_factor to max_lr
/// over pct_start of the steps, then falls to initial / final_div_factor; momentum moves the
/// opposite way. Stepping past total_steps throws.
class OneCycleLR : public Schedule {
 public:
  OneCycleLR(Optimizer& optimizer, double max_lr, int64_t total_steps,
             OneCycleOptions options = {});
  const double max_lr;
  const int64_t total_steps;
  const OneCycleOptions options;

 private:
  double rate(size_t g, int64_t t, double lr) const override;
  std::optional<double> momentum(size_t g, int64_t t) const override;
  struct Phase {
    double end_step, start_lr, end_lr, start_momentum, end_momentum;
  };
  /// The phase step t is in, and how far through it.
  std::pair<const Phase*, double> phase(int64_t t) const;
  double anneal(double start, double end, double pct) const;
  std::vector<Phase> phases_;
};

/// torch's SequentialLR: schedules[0] until milestones[0], then schedules[1] restarted from step 0,
/// and so on (e.g. LinearWarmup then CosineAnnealingLR). Construction sets the rates back to the
/// groups' initial rates and restarts the first.
class SequentialLR : public LRScheduler {
 public:
  SequentialLR(Optimizer& optimizer, std::vector<std::shared_ptr<Schedule>> schedules,
               std::vector<int64_t> milestones);
  SequentialLR(Optimizer& optimizer, std::shared_ptr<Schedule> first,
               std::shared_ptr<Schedule> second, int64_t milestone);
  /// {"last_step", "0.last_step", "1.last_step", ...}.
  nn::StateDict state_dict() const override;
  void load_state_dict(const nn::StateDict& state) override;

 private:
  std::vector<double> get_lrs() override;  // steps the schedule of this step
  std::vector<std::shared_ptr<Schedule>> schedules_;
  std::vector<int64_t> milestones_;
};

/// torch's ChainedScheduler: each step steps every schedule in order, so their factors multiply.
class ChainedScheduler : public LRScheduler {
 public:
  explicit ChainedScheduler(std::vector<std::shared_ptr<LRScheduler>> schedules);
  nn::StateDict state_dict() const override;
  void load_state_dict(const nn::StateDict& state) override;

 private:
  std::vector<double> get_lrs() override;  // steps every schedule
  std::vector<std::shared_ptr<LRScheduler>> schedules_;
};

/// libtorch's ReduceLROnPlateauScheduler (torch's ReduceLROnPlateau): step(metric) after each
/// evaluation; when the metric has not improved by `threshold` for more than `patience` steps, the
/// rates are multiplied by `factor` (not below min_lr), then `cooldown` steps pass before counting
/// again.
class ReduceLROnPlateauScheduler {
 public:
  enum SchedulerMode { min, max };
  enum ThresholdMode { rel, abs };
  /// min_lr: none (0), one for every group, or one per group.
  explicit ReduceLROnPlateauScheduler(Optimizer& optimizer, SchedulerMode mode = min,
                                      double factor = 0.1, int patience = 10,
                                      double threshold = 1e-4, ThresholdMode threshold_mode = rel,
                                      int cooldown = 0, const std::vector<double>& min_lr = {},
                                      double eps = 1e-8, bool verbose = false);
  virtual ~ReduceLROnPlateauScheduler() = default;
  void step(double metric);
  const std::vector<double>& get_last_lr() const { return last_lr_; }
  /// {"last_step", "best", "num_bad_epochs", "cooldown_counter"}.
  nn::StateDict state_dict() const;
  void load_state_dict(const nn::StateDict& state);

 private:
  bool is_better(double metric) const;
  Optimizer& optimizer_;
  SchedulerMode mode_;
  double factor_;
  int patience_;
  double threshold_;
  ThresholdMode threshold_mode_;
  int cooldown_;
  std::vector<double> min_lrs_;
  double eps_;
  double best_;
  bool verbose_;
  int64_t last_step_ = 0, num_bad_epochs_ = 0, cooldown_counter_ = 0;
  std::vector<double> last_lr_;
};
using ReduceLROnPlateau = ReduceLROnPlateauScheduler;

}  // namespace tandem::optim
