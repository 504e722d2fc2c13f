#include "tandem/optim/schedule.hpp"

#include <algorithm>
#include <cmath>

#include "tandem/core/error.hpp"
#include "tandem/ops/creation.hpp"

namespace tandem::optim {

namespace {
constexpr double kPi = 3.14159265358979323846;
// Cosine interpolation from `start` (pct 0) to `end` (pct 1).
double cosine(double start, double end, double pct) {
  return end + (start - end) / 2.0 * (std::cos(kPi * pct) + 1.0);
}
}  // namespace

LRScheduler::LRScheduler(Optimizer& optimizer) : optimizer_(optimizer) {}

void LRScheduler::apply() {
  auto& groups = optimizer_.param_groups();
  // The first schedule on a group fixes the rate it starts from, as torch's setdefault of
  // "initial_lr": a rate set by hand before it counts, a later schedule keeps the first's. Here,
  // not in the constructor: a schedule its derived constructor refused changes nothing.
  for (auto& group : groups)
    if (!group.has_initial_lr()) group.set_initial_lr(group.options().get_lr());
  for (size_t g = 0; g < groups.size(); ++g) {
    groups[g].options().set_lr(lr_at(g, last_step_));
    if (auto m = momentum_at(g, last_step_)) groups[g].options().set_momentum(*m);
  }
}

void LRScheduler::step() {
  ++last_step_;
  apply();
}

std::vector<double> LRScheduler::last_lr() const {
  std::vector<double> out;
  for (const auto& g : optimizer_.param_groups()) out.push_back(g.options().get_lr());
  return out;
}

nn::StateDict LRScheduler::state_dict() const {
  return {{"last_step", scalar_tensor(static_cast<double>(last_step_), TensorOptions(DType::i64).device(kCPU))}};
}

void LRScheduler::load_state_dict(const nn::StateDict& state) {
  auto it = state.find("last_step");
  TANDEM_CHECK(state.size() == 1 && it != state.end() && it->second.numel() == 1 &&
                   it->second.item<int64_t>() >= 0,
               "LRScheduler.load_state_dict: expected one non-negative 'last_step' entry");
  last_step_ = it->second.item<int64_t>();
  apply();
}

LinearWarmup::LinearWarmup(Optimizer& optimizer, int64_t total, double start, double end)
    : LRScheduler(optimizer), total_steps(total), start_factor(start), end_factor(end) {
  TANDEM_CHECK(total > 0 && start > 0 && start <= 1 && end >= 0 && end <= 1,
               "LinearWarmup: need total_steps > 0, start_factor in (0, 1], end_factor in [0, 1]; "
               "got ", total, ", ", start, ", ", end);
  apply();
}
double LinearWarmup::lr_at(size_t g, int64_t t) const {
  double frac = static_cast<double>(std::min(t, total_steps)) / static_cast<double>(total_steps);
  return base_lr(g) * (start_factor + (end_factor - start_factor) * frac);
}

CosineAnnealing::CosineAnnealing(Optimizer& optimizer, int64_t t_max_, double eta_min_)
    : LRScheduler(optimizer), t_max(t_max_), eta_min(eta_min_) {
  TANDEM_CHECK(t_max > 0 && eta_min >= 0, "CosineAnnealing: need t_max > 0 and eta_min >= 0, got ",
               t_max, ", ", eta_min);
  apply();
}
double CosineAnnealing::lr_at(size_t g, int64_t t) const {
  return cosine(base_lr(g), eta_min, static_cast<double>(t) / static_cast<double>(t_max));
}

StepLR::StepLR(Optimizer& optimizer, int64_t step_size_, double gamma_)
    : LRScheduler(optimizer), step_size(step_size_), gamma(gamma_) {
  TANDEM_CHECK(step_size > 0, "StepLR: step_size must be positive, got ", step_size);
  apply();
}
double StepLR::lr_at(size_t g, int64_t t) const {
  return base_lr(g) * std::pow(gamma, static_cast<double>(t / step_size));
}

namespace {
std::vector<int64_t> sorted(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}
}  // namespace

// Milestones in any order, as torch's (which counts them per step).
MultiStepLR::MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones_, double gamma_)
    : LRScheduler(optimizer), milestones(sorted(std::move(milestones_))), gamma(gamma_) {
  apply();
}
double MultiStepLR::lr_at(size_t g, int64_t t) const {
  auto passed = std::upper_bound(milestones.begin(), milestones.end(), t) - milestones.begin();
  return base_lr(g) * std::pow(gamma, static_cast<double>(passed));
}

SequentialLR::SequentialLR(Optimizer& optimizer, std::shared_ptr<LRScheduler> first,
                           std::shared_ptr<LRScheduler> second, int64_t milestone)
    : LRScheduler(optimizer), first_(std::move(first)), second_(std::move(second)),
      milestone_(milestone) {
  TANDEM_CHECK(first_ && second_ && milestone_ >= 0,
               "SequentialLR: need two schedules and a milestone >= 0");
  // Each schedule's rates come from its optimizer's initial rates, as torch's.
  TANDEM_CHECK(&first_->optimizer() == &optimizer && &second_->optimizer() == &optimizer,
               "SequentialLR: both schedules must belong to its optimizer (one was made for "
               "another)");
  apply();
}
double SequentialLR::lr_at(size_t g, int64_t t) const {
  return t < milestone_ ? first_->lr_at(g, t) : second_->lr_at(g, t - milestone_);
}
std::optional<double> SequentialLR::momentum_at(size_t g, int64_t t) const {
  return t < milestone_ ? first_->momentum_at(g, t) : second_->momentum_at(g, t - milestone_);
}

OneCycleLR::OneCycleLR(Optimizer& optimizer, double max_lr_, int64_t total, OneCycleOptions o)
    : LRScheduler(optimizer), max_lr(max_lr_), total_steps(total), options(o) {
  TANDEM_CHECK(total > 1 && max_lr > 0 && o.pct_start_ > 0 && o.pct_start_ < 1 &&
                   o.div_factor_ > 0 && o.final_div_factor_ > 0,
               "OneCycleLR: need total_steps > 1, max_lr > 0, pct_start in (0, 1) and positive "
               "div factors; got total_steps ", total, ", max_lr ", max_lr, ", pct_start ",
               o.pct_start_);
  // An optimizer without momentum (Adagrad) is refused before any rate is changed.
  if (o.cycle_momentum_)
    for (const auto& g : optimizer_.param_groups())
      TANDEM_CHECK(g.options().has_momentum(), "OneCycleLR: ", optimizer_.name(),
                   " has no momentum to cycle; construct the schedule with cycle_momentum(false)");
  for (auto& g : optimizer_.param_groups()) g.set_initial_lr(max_lr / o.div_factor_);
  apply();
}

std::pair<double, int> OneCycleLR::phase(int64_t t) const {
  TANDEM_CHECK(t <= total_steps, "OneCycleLR: stepped ", t, " times, but total_steps is ",
               total_steps);
  const double end1 = options.pct_start_ * static_cast<double>(total_steps) - 1.0;
  const double end2 = static_cast<double>(total_steps) - 1.0;
  // A warm-up shorter than one step (pct_start x total_steps == 1) starts the cycle at t = 0
  // (PyTorch divides by zero there).
  if (static_cast<double>(t) <= end1) return {end1 > 0 ? static_cast<double>(t) / end1 : 0.0, 0};
  return {(static_cast<double>(t) - end1) / (end2 - end1), 1};
}

double OneCycleLR::lr_at(size_t, int64_t t) const {
  auto [pct, index] = phase(t);
  const double initial = max_lr / options.div_factor_;
  const double min_lr = initial / options.final_div_factor_;
  return index == 0 ? cosine(initial, max_lr, pct) : cosine(max_lr, min_lr, pct);
}

std::optional<double> OneCycleLR::momentum_at(size_t, int64_t t) const {
  if (!options.cycle_momentum_) return std::nullopt;
  auto [pct, index] = phase(t);
  return index == 0 ? cosine(options.max_momentum_, options.base_momentum_, pct)
                    : cosine(options.base_momentum_, options.max_momentum_, pct);
}

}  // namespace tandem::optim
