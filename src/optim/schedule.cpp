// The schedules' arithmetic follows torch 1.13's lr_scheduler.py operation for operation (this file
// is compiled without FMA contraction), so a schedule's rates equal torch's to the bit.
#include "tandem/optim/schedule.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include "tandem/core/error.hpp"
#include "tandem/ops/creation.hpp"

namespace tandem::optim {

namespace {
constexpr double kPi = 3.14159265358979323846;

double as_double(int64_t v) { return static_cast<double>(v); }

Tensor f64_scalar(double v) { return scalar_tensor(v, TensorOptions(DType::f64).device(kCPU)); }
Tensor i64_scalar(int64_t v) {
  return scalar_tensor(static_cast<double>(v), TensorOptions(DType::i64).device(kCPU));
}

// The one-element entry `key` of a schedule's state dict, or a clear error naming `who`.
const Tensor& entry(const nn::StateDict& state, const std::string& key, const char* who) {
  auto it = state.find(key);
  TANDEM_CHECK(it != state.end() && it->second.defined() && it->second.numel() == 1, who,
               ".load_state_dict: expected a one-element '", key, "' entry");
  return it->second;
}

int64_t step_entry(const nn::StateDict& state, const std::string& key, const char* who) {
  const int64_t v = entry(state, key, who).item<int64_t>();
  TANDEM_CHECK(v >= 0, who, ".load_state_dict: '", key, "' must be >= 0, got ", v);
  return v;
}

// A schedule of schedules' state: its own count, then each one's entries under "<index>.".
template <typename S>
nn::StateDict save_wrapped(nn::StateDict out, const std::vector<std::shared_ptr<S>>& schedules) {
  for (size_t i = 0; i < schedules.size(); ++i)
    for (const auto& [key, value] : schedules[i]->state_dict())
      out[std::to_string(i) + "." + key] = value;
  return out;
}

// Loads what save_wrapped saved, all or nothing: a schedule that refuses its part puts back the
// ones loaded before it.
template <typename S>
void load_wrapped(const nn::StateDict& state, const std::vector<std::shared_ptr<S>>& schedules,
                  int64_t& step_count, const char* who) {
  const int64_t steps = step_entry(state, "last_step", who);
  std::vector<nn::StateDict> parts(schedules.size()), saved;
  for (const auto& [key, value] : state) {
    if (key == "last_step") continue;
    const size_t dot = key.find('.');
    size_t i = 0;
    TANDEM_CHECK(dot != std::string::npos && std::sscanf(key.c_str(), "%zu", &i) == 1 &&
                     i < schedules.size() && std::to_string(i) == key.substr(0, dot),
                 who, ".load_state_dict: unexpected entry '", key, "'");
    parts[i][key.substr(dot + 1)] = value;
  }
  for (const auto& s : schedules) saved.push_back(s->state_dict());
  try {
    for (size_t i = 0; i < schedules.size(); ++i) schedules[i]->load_state_dict(parts[i]);
  } catch (...) {
    for (size_t i = 0; i < schedules.size(); ++i) schedules[i]->load_state_dict(saved[i]);
    throw;
  }
  step_count = steps;
}
}  // namespace

// --- LRScheduler ---

LRScheduler::LRScheduler(Optimizer& optimizer)
    : optimizer_(optimizer), last_lr_(get_current_lrs()) {}

void LRScheduler::step() {
  set_optimizer_lrs(get_lrs());
  ++step_count_;
}

std::vector<double> LRScheduler::get_current_lrs() const {
  std::vector<double> out;
  for (const auto& g : optimizer_.param_groups()) out.push_back(g.options().get_lr());
  return out;
}

void LRScheduler::set_optimizer_lrs(const std::vector<double>& lrs) {
  auto& groups = optimizer_.param_groups();
  TANDEM_CHECK(lrs.size() == groups.size(), "LRScheduler: ", lrs.size(), " rates for ",
               groups.size(), " parameter groups");
  for (size_t g = 0; g < groups.size(); ++g) groups[g].options().set_lr(lrs[g]);
  last_lr_ = lrs;
}

nn::StateDict LRScheduler::state_dict() const { return {{"last_step", i64_scalar(step_count_)}}; }

void LRScheduler::load_state_dict(const nn::StateDict& state) {
  TANDEM_CHECK(state.size() == 1,
               "LRScheduler.load_state_dict: expected one 'last_step' entry, got ", state.size(),
               " entries");
  step_count_ = step_entry(state, "last_step", "LRScheduler");
}

// --- Schedule ---

void Schedule::initial_step() {
  auto& groups = optimizer_.param_groups();
  for (auto& group : groups)
    if (!group.has_initial_lr()) group.set_initial_lr(group.options().get_lr());
  if (base_lrs_.empty())  // CyclicLR sets its own
    for (const auto& group : groups) base_lrs_.push_back(group.initial_lr());
  set_optimizer_lrs(rates_at(0, false));
}

std::vector<double> Schedule::get_lrs() { return rates_at(step_count_ + 1, false); }

std::vector<double> Schedule::rates_at(int64_t t, bool closed) {
  auto& groups = optimizer_.param_groups();
  std::vector<double> lrs;
  for (size_t g = 0; g < groups.size(); ++g) {
    std::optional<double> c = closed ? closed_form(g, t) : std::nullopt;
    lrs.push_back(c ? *c : rate(g, t, groups[g].options().get_lr()));
    if (auto m = momentum(g, t)) groups[g].options().set_momentum(*m);
  }
  return lrs;
}

void Schedule::restart(bool closed) {
  set_optimizer_lrs(rates_at(0, closed));
  step_count_ = 0;
}

// --- The schedules ---

namespace {
template <typename Lambda>
std::vector<Lambda> per_group(const Optimizer& optimizer, std::vector<Lambda> lambdas,
                              const char* who) {
  const size_t groups = optimizer.param_groups().size();
  TANDEM_CHECK(lambdas.size() == groups, who, ": expected ", groups,
               " lambdas (one per group), got ", lambdas.size());
  for (const auto& f : lambdas) TANDEM_CHECK(static_cast<bool>(f), who, ": a lambda is empty");
  return lambdas;
}
}  // namespace

LambdaLR::LambdaLR(Optimizer& optimizer, Lambda lambda)
    : LambdaLR(optimizer, std::vector<Lambda>(optimizer.param_groups().size(), std::move(lambda))) {
}
LambdaLR::LambdaLR(Optimizer& optimizer, std::vector<Lambda> lambdas)
    : Schedule(optimizer), lambdas_(per_group(optimizer, std::move(lambdas), "LambdaLR")) {
  initial_step();
}
double LambdaLR::rate(size_t g, int64_t t, double) const { return base_lr(g) * lambdas_[g](t); }

MultiplicativeLR::MultiplicativeLR(Optimizer& optimizer, Lambda lambda)
    : MultiplicativeLR(optimizer,
                       std::vector<Lambda>(optimizer.param_groups().size(), std::move(lambda))) {}
MultiplicativeLR::MultiplicativeLR(Optimizer& optimizer, std::vector<Lambda> lambdas)
    : Schedule(optimizer), lambdas_(per_group(optimizer, std::move(lambdas), "MultiplicativeLR")) {
  initial_step();
}
double MultiplicativeLR::rate(size_t g, int64_t t, double lr) const {
  return t > 0 ? lr * lambdas_[g](t) : lr;
}

StepLR::StepLR(Optimizer& optimizer, int64_t step_size_, double gamma_)
    : Schedule(optimizer), step_size(step_size_), gamma(gamma_) {
  TANDEM_CHECK(step_size > 0, "StepLR: step_size must be positive, got ", step_size);
  initial_step();
}
double StepLR::rate(size_t, int64_t t, double lr) const {
  return t == 0 || t % step_size != 0 ? lr : lr * gamma;
}
std::optional<double> StepLR::closed_form(size_t g, int64_t t) const {
  return base_lr(g) * std::pow(gamma, as_double(t / step_size));
}

namespace {
std::vector<int64_t> sorted(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}
}  // namespace

MultiStepLR::MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones_, double gamma_)
    : Schedule(optimizer), milestones(sorted(std::move(milestones_))), gamma(gamma_) {
  initial_step();
}
double MultiStepLR::rate(size_t, int64_t t, double lr) const {
  auto [lo, hi] = std::equal_range(milestones.begin(), milestones.end(), t);
  return lo == hi ? lr : lr * std::pow(gamma, as_double(hi - lo));
}
std::optional<double> MultiStepLR::closed_form(size_t g, int64_t t) const {
  auto passed = std::upper_bound(milestones.begin(), milestones.end(), t) - milestones.begin();
  return base_lr(g) * std::pow(gamma, as_double(passed));
}

ConstantLR::ConstantLR(Optimizer& optimizer, double factor_, int64_t total_iters_)
    : Schedule(optimizer), factor(factor_), total_iters(total_iters_) {
  TANDEM_CHECK(factor >= 0 && factor <= 1 && total_iters >= 0,
               "ConstantLR: need factor in [0, 1] and total_iters >= 0, got ", factor, " and ",
               total_iters);
  initial_step();
}
double ConstantLR::rate(size_t, int64_t t, double lr) const {
  if (t == 0) return lr * factor;
  return t != total_iters ? lr : lr * (1.0 / factor);
}
std::optional<double> ConstantLR::closed_form(size_t g, int64_t t) const {
  return base_lr(g) * (factor + as_double(t >= total_iters) * (1 - factor));
}

LinearLR::LinearLR(Optimizer& optimizer, double start, double end, int64_t total)
    : Schedule(optimizer), start_factor(start), end_factor(end), total_iters(total) {
  TANDEM_CHECK(total > 0 && start > 0 && start <= 1 && end >= 0 && end <= 1,
               "LinearLR: need total_iters > 0, start_factor in (0, 1], end_factor in [0, 1]; "
               "got ",
               total, ", ", start, ", ", end);
  initial_step();
}
double LinearLR::rate(size_t, int64_t t, double lr) const {
  if (t == 0) return lr * start_factor;
  if (t > total_iters) return lr;
  return lr * (1. + (end_factor - start_factor) / (as_double(total_iters) * start_factor +
                                                   as_double(t - 1) * (end_factor - start_factor)));
}
std::optional<double> LinearLR::closed_form(size_t g, int64_t t) const {
  return base_lr(g) *
         (start_factor + (end_factor - start_factor) * as_double(std::min(total_iters, t)) /
                             as_double(total_iters));
}

ExponentialLR::ExponentialLR(Optimizer& optimizer, double gamma_)
    : Schedule(optimizer), gamma(gamma_) {
  initial_step();
}
double ExponentialLR::rate(size_t, int64_t t, double lr) const { return t == 0 ? lr : lr * gamma; }
std::optional<double> ExponentialLR::closed_form(size_t g, int64_t t) const {
  return base_lr(g) * std::pow(gamma, as_double(t));
}

PolynomialLR::PolynomialLR(Optimizer& optimizer, int64_t total_iters_, double power_)
    : Schedule(optimizer), total_iters(total_iters_), power(power_) {
  TANDEM_CHECK(total_iters > 0, "PolynomialLR: total_iters must be positive, got ", total_iters);
  initial_step();
}
double PolynomialLR::rate(size_t, int64_t t, double lr) const {
  if (t == 0 || t > total_iters) return lr;
  const double n = as_double(total_iters);
  const double decay = std::pow((1.0 - as_double(t) / n) / (1.0 - as_double(t - 1) / n), power);
  return lr * decay;
}
std::optional<double> PolynomialLR::closed_form(size_t g, int64_t t) const {
  return base_lr(g) *
         std::pow(1.0 - as_double(std::min(total_iters, t)) / as_double(total_iters), power);
}

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, int64_t t_max_, double eta_min_)
    : Schedule(optimizer), t_max(t_max_), eta_min(eta_min_) {
  TANDEM_CHECK(t_max > 0 && eta_min >= 0,
               "CosineAnnealingLR: need t_max > 0 and eta_min >= 0, got ", t_max, ", ", eta_min);
  initial_step();
}
double CosineAnnealingLR::rate(size_t g, int64_t t, double lr) const {
  const double T = as_double(t_max);
  if (t == 0) return lr;
  if ((t - 1 - t_max) % (2 * t_max) == 0)  // the trough of a period: step back up
    return lr + (base_lr(g) - eta_min) * (1 - std::cos(kPi / T)) / 2;
  return (1 + std::cos(kPi * as_double(t) / T)) / (1 + std::cos(kPi * as_double(t - 1) / T)) *
             (lr - eta_min) +
         eta_min;
}
std::optional<double> CosineAnnealingLR::closed_form(size_t g, int64_t t) const {
  return eta_min +
         (base_lr(g) - eta_min) * (1 + std::cos(kPi * as_double(t) / as_double(t_max))) / 2;
}

CosineAnnealingWarmRestarts::CosineAnnealingWarmRestarts(Optimizer& optimizer, int64_t T_0_,
                                                         int64_t T_mult_, double eta_min_)
    : Schedule(optimizer), T_0(T_0_), T_mult(T_mult_), eta_min(eta_min_) {
  TANDEM_CHECK(T_0 > 0 && T_mult >= 1,
               "CosineAnnealingWarmRestarts: need T_0 > 0 and T_mult >= 1, "
               "got ",
               T_0, " and ", T_mult);
  initial_step();
}
double CosineAnnealingWarmRestarts::rate(size_t g, int64_t t, double) const {
  // torch's T_cur and T_i after t steps, in integers: each period T_mult times the last.
  int64_t t_cur = t, t_i = T_0;
  while (t_cur >= t_i) {
    t_cur -= t_i;
    t_i *= T_mult;
  }
  return eta_min +
         (base_lr(g) - eta_min) * (1 + std::cos(kPi * as_double(t_cur) / as_double(t_i))) / 2;
}

CyclicLR::CyclicLR(Optimizer& optimizer, CyclicLROptions o) : Schedule(optimizer), options(o) {
  const int64_t down = o.step_size_down_ > 0 ? o.step_size_down_ : o.step_size_up_;
  TANDEM_CHECK(o.step_size_up_ > 0 && o.step_size_down_ >= 0 && o.base_lr_ >= 0 && o.max_lr_ >= 0,
               "CyclicLR: need step sizes > 0 and rates >= 0, got step_size_up ", o.step_size_up_,
               ", step_size_down ", o.step_size_down_, ", base_lr ", o.base_lr_, ", max_lr ",
               o.max_lr_);
  if (o.cycle_momentum_)
    for (const auto& g : optimizer_.param_groups())
      TANDEM_CHECK(g.options().has_momentum(), "CyclicLR: ", optimizer_.name(),
                   " has no momentum to cycle; construct the schedule with cycle_momentum(false)");
  total_size_ = as_double(o.step_size_up_) + as_double(down);
  step_ratio_ = as_double(o.step_size_up_) / total_size_;
  for (auto& g : optimizer_.param_groups()) {
    g.options().set_lr(o.base_lr_);
    if (o.cycle_momentum_) g.options().set_momentum(o.base_momentum_);
    base_lrs_.push_back(o.base_lr_);
  }
  initial_step();
}
std::pair<double, double> CyclicLR::position(int64_t t) const {
  const double cycle = std::floor(1 + as_double(t) / total_size_);
  const double x = 1. + as_double(t) / total_size_ - cycle;
  const double scale_factor = x <= step_ratio_ ? x / step_ratio_ : (x - 1) / (step_ratio_ - 1);
  const auto& o = options;
  double scale = 1.0;
  if (o.scale_fn_)
    scale = o.scale_fn_(o.scale_by_cycle_ ? cycle : as_double(t));
  else if (o.mode_ == CyclicMode::triangular2)
    scale = 1 / std::pow(2., cycle - 1);
  else if (o.mode_ == CyclicMode::exp_range)
    scale = std::pow(o.gamma_, as_double(t));
  return {scale_factor, scale};
}
double CyclicLR::rate(size_t g, int64_t t, double) const {
  auto [scale_factor, scale] = position(t);
  const double base_height = (options.max_lr_ - base_lr(g)) * scale_factor;
  return base_lr(g) + base_height * scale;
}
std::optional<double> CyclicLR::momentum(size_t, int64_t t) const {
  if (!options.cycle_momentum_) return std::nullopt;
  auto [scale_factor, scale] = position(t);
  const double base_height = (options.max_momentum_ - options.base_momentum_) * scale_factor;
  return options.max_momentum_ - base_height * scale;
}

OneCycleLR::OneCycleLR(Optimizer& optimizer, double max_lr_, int64_t total, OneCycleOptions o)
    : Schedule(optimizer), max_lr(max_lr_), total_steps(total), options(o) {
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
  const double initial = max_lr / o.div_factor_, min_lr = initial / o.final_div_factor_;
  const double up_end = o.pct_start_ * as_double(total) - 1, last = as_double(total) - 1;
  const double hi = o.max_momentum_, lo = o.base_momentum_;
  if (o.three_phase_)
    phases_ = {{up_end, initial, max_lr, hi, lo},
               {2 * o.pct_start_ * as_double(total) - 2, max_lr, initial, lo, hi},
               {last, initial, min_lr, hi, hi}};
  else
    phases_ = {{up_end, initial, max_lr, hi, lo}, {last, max_lr, min_lr, lo, hi}};
  for (auto& g : optimizer_.param_groups()) g.set_initial_lr(initial);
  initial_step();
}

std::pair<const OneCycleLR::Phase*, double> OneCycleLR::phase(int64_t t) const {
  TANDEM_CHECK(t <= total_steps, "OneCycleLR: stepped ", t, " times, but total_steps is ",
               total_steps);
  double start = 0;
  for (size_t i = 0; i < phases_.size(); ++i) {
    const Phase& p = phases_[i];
    if (as_double(t) <= p.end_step || i + 1 == phases_.size())
      // A warm-up of one step (pct_start x total_steps == 1) ends at step 0, which is its start
      // (PyTorch divides by zero there).
      return {&p, p.end_step > start ? (as_double(t) - start) / (p.end_step - start) : 0.0};
    start = p.end_step;
  }
  return {nullptr, 0.0};  // not reached: the last phase takes every t
}

double OneCycleLR::anneal(double start, double end, double pct) const {
  if (options.anneal_strategy_ == AnnealStrategy::linear) return (end - start) * pct + start;
  return end + (start - end) / 2.0 * (std::cos(kPi * pct) + 1);
}

double OneCycleLR::rate(size_t, int64_t t, double) const {
  auto [p, pct] = phase(t);
  return anneal(p->start_lr, p->end_lr, pct);
}

std::optional<double> OneCycleLR::momentum(size_t, int64_t t) const {
  if (!options.cycle_momentum_) return std::nullopt;
  auto [p, pct] = phase(t);
  return anneal(p->start_momentum, p->end_momentum, pct);
}

// --- Schedules of schedules ---

SequentialLR::SequentialLR(Optimizer& optimizer, std::vector<std::shared_ptr<Schedule>> schedules,
                           std::vector<int64_t> milestones)
    : LRScheduler(optimizer), schedules_(std::move(schedules)), milestones_(std::move(milestones)) {
  TANDEM_CHECK(!schedules_.empty() && milestones_.size() + 1 == schedules_.size(),
               "SequentialLR: expected one milestone fewer than schedules, got ", schedules_.size(),
               " schedules and ", milestones_.size(), " milestones");
  for (const auto& s : schedules_) {
    TANDEM_CHECK(s != nullptr, "SequentialLR: a schedule is null");
    // Each schedule's rates come from its optimizer's initial rates, as torch's.
    TANDEM_CHECK(&s->optimizer() == &optimizer,
                 "SequentialLR: every schedule must belong to its optimizer (one was made for "
                 "another)");
  }
  TANDEM_CHECK(std::is_sorted(milestones_.begin(), milestones_.end()) &&
                   (milestones_.empty() || milestones_.front() >= 0),
               "SequentialLR: milestones must be >= 0 and in increasing order");
  for (auto& g : optimizer_.param_groups()) g.options().set_lr(g.initial_lr());
  // torch undoes the other schedules' initial steps and repeats the first's from the initial
  // rates; the others restart at their milestones.
  schedules_.front()->restart(false);
  set_optimizer_lrs(get_current_lrs());
}

SequentialLR::SequentialLR(Optimizer& optimizer, std::shared_ptr<Schedule> first,
                           std::shared_ptr<Schedule> second, int64_t milestone)
    : SequentialLR(optimizer, {std::move(first), std::move(second)}, {milestone}) {}

std::vector<double> SequentialLR::get_lrs() {
  const int64_t t = step_count_ + 1;
  const size_t i =
      std::upper_bound(milestones_.begin(), milestones_.end(), t) - milestones_.begin();
  if (i > 0 && milestones_[i - 1] == t)
    schedules_[i]->restart(true);
  else
    schedules_[i]->step();
  return get_current_lrs();
}

nn::StateDict SequentialLR::state_dict() const {
  return save_wrapped(LRScheduler::state_dict(), schedules_);
}

void SequentialLR::load_state_dict(const nn::StateDict& state) {
  load_wrapped(state, schedules_, step_count_, "SequentialLR");
}

ChainedScheduler::ChainedScheduler(std::vector<std::shared_ptr<LRScheduler>> schedules)
    : LRScheduler([&]() -> Optimizer& {
        TANDEM_CHECK(!schedules.empty() && schedules.front() != nullptr,
                     "ChainedScheduler: needs at least one schedule");
        return schedules.front()->optimizer();
      }()),
      schedules_(std::move(schedules)) {
  for (const auto& s : schedules_)
    TANDEM_CHECK(s != nullptr && &s->optimizer() == &optimizer_,
                 "ChainedScheduler: every schedule must belong to the same optimizer");
}

std::vector<double> ChainedScheduler::get_lrs() {
  for (auto& s : schedules_) s->step();
  return get_current_lrs();
}

nn::StateDict ChainedScheduler::state_dict() const {
  return save_wrapped(LRScheduler::state_dict(), schedules_);
}

void ChainedScheduler::load_state_dict(const nn::StateDict& state) {
  load_wrapped(state, schedules_, step_count_, "ChainedScheduler");
}

// --- ReduceLROnPlateauScheduler ---

ReduceLROnPlateauScheduler::ReduceLROnPlateauScheduler(Optimizer& optimizer, SchedulerMode mode,
                                                       double factor, int patience,
                                                       double threshold,
                                                       ThresholdMode threshold_mode, int cooldown,
                                                       const std::vector<double>& min_lr,
                                                       double eps, bool verbose)
    : optimizer_(optimizer),
      mode_(mode),
      factor_(factor),
      patience_(patience),
      threshold_(threshold),
      threshold_mode_(threshold_mode),
      cooldown_(cooldown),
      eps_(eps),
      best_(mode == min ? std::numeric_limits<double>::infinity()
                        : -std::numeric_limits<double>::infinity()),
      verbose_(verbose) {
  const size_t groups = optimizer.param_groups().size();
  TANDEM_CHECK(factor < 1.0 && factor >= 0, "ReduceLROnPlateau: factor must be in [0, 1), got ",
               factor);
  TANDEM_CHECK(patience >= 0 && cooldown >= 0,
               "ReduceLROnPlateau: patience and cooldown must be >= 0, got ", patience, " and ",
               cooldown);
  TANDEM_CHECK(min_lr.size() <= 1 || min_lr.size() == groups, "ReduceLROnPlateau: expected ",
               groups, " min_lr values (one per group), got ", min_lr.size());
  min_lrs_ = min_lr.size() == groups
                 ? min_lr
                 : std::vector<double>(groups, min_lr.empty() ? 0.0 : min_lr[0]);
  for (const auto& g : optimizer.param_groups()) last_lr_.push_back(g.options().get_lr());
}

bool ReduceLROnPlateauScheduler::is_better(double a) const {
  if (mode_ == min && threshold_mode_ == rel) return a < best_ * (1. - threshold_);
  if (mode_ == min) return a < best_ - threshold_;
  if (threshold_mode_ == rel) return a > best_ * (threshold_ + 1.);
  return a > best_ + threshold_;
}

void ReduceLROnPlateauScheduler::step(double metric) {
  ++last_step_;
  if (is_better(metric)) {
    best_ = metric;
    num_bad_epochs_ = 0;
  } else {
    ++num_bad_epochs_;
  }
  if (cooldown_counter_ > 0) {
    --cooldown_counter_;
    num_bad_epochs_ = 0;  // bad steps in cooldown do not count
  }
  if (num_bad_epochs_ > patience_) {
    auto& groups = optimizer_.param_groups();
    for (size_t g = 0; g < groups.size(); ++g) {
      const double old_lr = groups[g].options().get_lr();
      const double new_lr = std::max(old_lr * factor_, min_lrs_[g]);
      if (old_lr - new_lr > eps_) {
        groups[g].options().set_lr(new_lr);
        if (verbose_)
          std::printf("Epoch %5lld: reducing learning rate of group %zu to %.4e.\n",
                      static_cast<long long>(last_step_), g, new_lr);
      }
    }
    cooldown_counter_ = cooldown_;
    num_bad_epochs_ = 0;
  }
  last_lr_.clear();
  for (const auto& g : optimizer_.param_groups()) last_lr_.push_back(g.options().get_lr());
}

nn::StateDict ReduceLROnPlateauScheduler::state_dict() const {
  return {{"last_step", i64_scalar(last_step_)},
          {"best", f64_scalar(best_)},
          {"num_bad_epochs", i64_scalar(num_bad_epochs_)},
          {"cooldown_counter", i64_scalar(cooldown_counter_)}};
}

void ReduceLROnPlateauScheduler::load_state_dict(const nn::StateDict& state) {
  constexpr const char* who = "ReduceLROnPlateau";
  TANDEM_CHECK(state.size() == 4, who, ".load_state_dict: expected 4 entries, got ", state.size());
  const int64_t last = step_entry(state, "last_step", who);
  const double best = entry(state, "best", who).item<double>();
  const int64_t bad = step_entry(state, "num_bad_epochs", who);
  const int64_t cool = step_entry(state, "cooldown_counter", who);
  last_step_ = last, best_ = best, num_bad_epochs_ = bad, cooldown_counter_ = cool;
}

}  // namespace tandem::optim
