#include "tandem/optim/lbfgs.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "tandem/autograd/grad_mode.hpp"
#include "tandem/core/error.hpp"
#include "tandem/ops/creation.hpp"
#include "tandem/ops/shape_ops.hpp"

namespace tandem::optim {

namespace {
double dot(const Tensor& a, const Tensor& b) { return a.dot(b).item<double>(); }
double abs_max(const Tensor& t) { return t.abs().max().item<double>(); }

// The minimum of the cubic through (x1, f1) and (x2, f2) with slopes g1 and g2, clamped to
// `bounds` (by default the interval between the points); their middle where it has none.
double cubic_interpolate(double x1, double f1, double g1, double x2, double f2, double g2,
                         std::optional<std::pair<double, double>> bounds = std::nullopt) {
  const auto [lo, hi] = bounds ? *bounds : std::pair{std::min(x1, x2), std::max(x1, x2)};
  const double d1 = g1 + g2 - 3 * (f1 - f2) / (x1 - x2);
  const double d2_square = d1 * d1 - g1 * g2;
  if (d2_square < 0) return (lo + hi) / 2;
  const double d2 = std::sqrt(d2_square);
  const double min_pos = x1 <= x2 ? x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2))
                                  : x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2));
  return std::min(std::max(min_pos, lo), hi);
}
}  // namespace

LBFGS::LBFGS(std::vector<Tensor> params, LBFGSOptions defaults)
    : Optimizer("LBFGS", defaults.clone()) {
  add_param_groups(std::vector<OptimizerParamGroup>{OptimizerParamGroup(std::move(params))});
  const auto& p = this->params();
  TANDEM_CHECK(!p.empty(), name_, ": no parameters given");
  for (const Tensor& t : p)
    TANDEM_CHECK(t.device() == p.front().device() && t.dtype() == p.front().dtype(), name_,
                 ": every parameter must have the first one's device and dtype (",
                 p.front().device(), ", ", p.front().dtype(), "), got ", t.device(), ", ",
                 t.dtype());
}

void LBFGS::check_options(const OptimizerOptions& options) const {
  const auto* o = dynamic_cast<const LBFGSOptions*>(&options);
  TANDEM_CHECK(o != nullptr, name_, ": a parameter group's options must be LBFGSOptions");
  TANDEM_CHECK(groups_.empty(), name_, ": L-BFGS takes one parameter group, as torch's");
  TANDEM_CHECK(o->max_iter_ > 0 && o->history_size_ > 0 && o->max_eval_.value_or(1) > 0, name_,
               ": max_iter, max_eval and history_size must be positive");
  TANDEM_CHECK(!o->line_search_fn_ || *o->line_search_fn_ == "strong_wolfe", name_,
               ": line_search_fn must be \"strong_wolfe\" or none, got \"", *o->line_search_fn_,
               "\"");
  TANDEM_CHECK(o->weight_decay_ == 0, name_, ": L-BFGS has no weight decay");
}

// torch's state under its names: the counts and scalars as host values, the flat direction,
// previous gradient and curvature pairs as the parameters' dtype and device. Written only once
// they exist (an LBFGS that never stepped has no direction).
void LBFGS::write_extra_state(nn::StateDict& out) const {
  const TensorOptions f64 = TensorOptions(DType::f64).device(kCPU);
  const TensorOptions i64 = TensorOptions(DType::i64).device(kCPU);
  out["extra.func_evals"] = scalar_tensor(static_cast<double>(func_evals_), i64);
  out["extra.n_iter"] = scalar_tensor(static_cast<double>(n_iter_), i64);
  out["extra.t"] = scalar_tensor(t_, f64);
  out["extra.H_diag"] = scalar_tensor(h_diag_, f64);
  out["extra.prev_loss"] = scalar_tensor(prev_loss_, f64);
  if (d_.defined()) out["extra.d"] = d_;
  if (prev_flat_grad_.defined()) out["extra.prev_flat_grad"] = prev_flat_grad_;
  for (size_t i = 0; i < old_dirs_.size(); ++i) {
    out["extra.old_dirs." + std::to_string(i)] = old_dirs_[i];
    out["extra.old_stps." + std::to_string(i)] = old_stps_[i];
  }
  if (!ro_.empty())
    out["extra.ro"] = from_vector(std::vector<double>(ro_.begin(), ro_.end())).to(f64);
}

// A dict without any (written before the history was kept) starts the history anew.
std::function<void()> LBFGS::read_extra_state(const nn::StateDict& state) {
  std::vector<std::string> given;
  size_t pairs = 0;
  for (const auto& entry : state) {
    if (entry.first.rfind("extra.", 0) != 0) continue;
    given.push_back(entry.first);
    if (entry.first.rfind("extra.old_dirs.", 0) == 0) ++pairs;
  }
  if (given.empty())
    return [this] {
      func_evals_ = n_iter_ = 0;
      d_ = prev_flat_grad_ = Tensor();
      t_ = prev_loss_ = 0;
      h_diag_ = 1;
      old_dirs_.clear();
      old_stps_.clear();
      ro_.clear();
    };
  std::vector<std::string> known = {"extra.func_evals",     "extra.n_iter",    "extra.t",
                                    "extra.H_diag",         "extra.prev_loss", "extra.d",
                                    "extra.prev_flat_grad", "extra.ro"};
  for (size_t i = 0; i < pairs; ++i) {
    known.push_back("extra.old_dirs." + std::to_string(i));
    known.push_back("extra.old_stps." + std::to_string(i));
  }
  for (const std::string& key : given)
    TANDEM_CHECK(std::find(known.begin(), known.end(), key) != known.end(), name_,
                 ".load_state_dict: unexpected key '", key, "'");
  const auto& o = static_cast<const LBFGSOptions&>(groups_.front().options());
  TANDEM_CHECK(pairs <= static_cast<size_t>(o.history_size_), name_, ".load_state_dict: ", pairs,
               " curvature pairs in the state, more than history_size ", o.history_size_);
  auto find = [&](const std::string& key) -> const Tensor* {
    auto it = state.find(key);
    return it == state.end() ? nullptr : &it->second;
  };
  auto scalar = [&](const std::string& key) {
    const Tensor* t = find(key);
    TANDEM_CHECK(t && t->numel() == 1, name_, ".load_state_dict: missing or non-scalar entry '",
                 key, "'");
    return t->item<double>();
  };
  auto count = [&](const std::string& key) {
    const double v = scalar(key);
    TANDEM_CHECK(v >= 0 && v == std::floor(v), name_, ".load_state_dict: '", key,
                 "' must be a count, got ", v);
    return static_cast<int64_t>(v);
  };
  int64_t numel = 0;
  for (const Tensor& p : params()) numel += p.numel();
  const TensorOptions flat_options = params().front().options();
  // A flat state tensor: one number per parameter element, copied as the parameters' dtype.
  auto flat = [&](const std::string& key, bool required) {
    const Tensor* t = find(key);
    TANDEM_CHECK(t || !required, name_, ".load_state_dict: missing entry '", key, "'");
    if (!t) return Tensor();
    TANDEM_CHECK(t->dim() == 1 && t->numel() == numel && is_floating(t->dtype()), name_,
                 ".load_state_dict: '", key, "' must be a floating vector of ", numel,
                 " numbers (the parameters' count), got ", t->dtype(), " ", shape_str(t->shape()));
    Tensor own = zeros({numel}, flat_options);
    own.copy_(*t);
    return own;
  };
  const int64_t func_evals = count("extra.func_evals"), n_iter = count("extra.n_iter");
  const double t = scalar("extra.t"), h_diag = scalar("extra.H_diag"),
               prev_loss = scalar("extra.prev_loss");
  const Tensor d = flat("extra.d", n_iter > 0),
               prev_flat_grad = flat("extra.prev_flat_grad", n_iter > 0);
  std::deque<Tensor> dirs, stps;
  for (size_t i = 0; i < pairs; ++i) {
    dirs.push_back(flat("extra.old_dirs." + std::to_string(i), true));
    stps.push_back(flat("extra.old_stps." + std::to_string(i), true));
  }
  std::deque<double> ro;
  if (pairs > 0) {
    const Tensor* r = find("extra.ro");
    TANDEM_CHECK(r && r->dim() == 1 && r->numel() == static_cast<int64_t>(pairs), name_,
                 ".load_state_dict: 'extra.ro' must hold one number per curvature pair (", pairs,
                 ")");
    for (double v : r->to(DType::f64).to(kCPU).to_vector<double>()) ro.push_back(v);
  } else {
    TANDEM_CHECK(!find("extra.ro"), name_, ".load_state_dict: 'extra.ro' without curvature pairs");
  }
  return [=]() mutable {
    func_evals_ = func_evals;
    n_iter_ = n_iter;
    t_ = t;
    h_diag_ = h_diag;
    prev_loss_ = prev_loss;
    d_ = d;
    prev_flat_grad_ = prev_flat_grad;
    old_dirs_ = std::move(dirs);
    old_stps_ = std::move(stps);
    ro_ = std::move(ro);
  };
}

void LBFGS::step() {
  TANDEM_THROW(ValueError, name_,
               ": step() needs a closure that computes the loss and calls "
               "backward: step([&] { optimizer.zero_grad(); auto loss = ...; loss.backward(); "
               "return loss; })");
}

Tensor LBFGS::flat_grad() const {
  std::vector<Tensor> views;
  for (const Tensor& p : params()) {
    const Tensor g = p.grad();
    views.push_back(g.defined() ? g.reshape({-1}) : zeros({p.numel()}, p.options()));
  }
  return cat(views);
}

void LBFGS::add_to_params(double step, const Tensor& direction) {
  int64_t offset = 0;
  for (const Tensor& p : params()) {
    Tensor(p).add_(direction.narrow(0, offset, p.numel()).view(p.shape()), step);
    offset += p.numel();
  }
}

std::pair<double, Tensor> LBFGS::evaluate_at(const LossClosure& closure,
                                             const std::vector<Tensor>& x, double t,
                                             const Tensor& d) {
  auto restore = [&] {
    for (size_t i = 0; i < x.size(); ++i) Tensor(params()[i]).copy_(x[i]);
  };
  add_to_params(t, d);
  double loss;
  Tensor g;
  try {
    AutoGradMode grad_on(true);
    loss = closure().item<double>();
    g = flat_grad();
  } catch (...) {
    restore();  // a failing closure leaves the parameters where the line search found them
    throw;
  }
  restore();
  return {loss, g};
}

// torch's _strong_wolfe (minFunc's lswolfe): a step t along d that satisfies the strong Wolfe
// conditions, by bracketing and then zooming with cubic interpolation.
struct LBFGS::LineSearch {
  double f, t;
  Tensor g;
  int64_t evals;

  static LineSearch run(LBFGS& opt, const LossClosure& closure, const std::vector<Tensor>& x,
                        double t, const Tensor& d, double f, const Tensor& g, double gtd,
                        double tolerance_change = 1e-9, double c1 = 1e-4, double c2 = 0.9,
                        int64_t max_ls = 25) {
    const double d_norm = abs_max(d);
    auto [f_new, g_new] = opt.evaluate_at(closure, x, t, d);
    int64_t evals = 1;
    double gtd_new = dot(g_new, d);
    double t_prev = 0, f_prev = f, gtd_prev = gtd;
    Tensor g_prev = g;
    bool done = false;
    int64_t ls_iter = 0;
    std::vector<double> bracket, bracket_f, bracket_gtd;
    std::vector<Tensor> bracket_g;
    auto set_bracket = [&](std::vector<double> b, std::vector<double> bf, std::vector<Tensor> bg,
                           std::vector<double> bgtd) {
      bracket = std::move(b);
      bracket_f = std::move(bf);
      bracket_g = std::move(bg);
      bracket_gtd = std::move(bgtd);
    };
    while (ls_iter < max_ls) {
      if (f_new > f + c1 * t * gtd || (ls_iter > 1 && f_new >= f_prev)) {
        set_bracket({t_prev, t}, {f_prev, f_new}, {g_prev, g_new}, {gtd_prev, gtd_new});
        break;
      }
      if (std::abs(gtd_new) <= -c2 * gtd) {
        set_bracket({t}, {f_new}, {g_new}, {});
        done = true;
        break;
      }
      if (gtd_new >= 0) {
        set_bracket({t_prev, t}, {f_prev, f_new}, {g_prev, g_new}, {gtd_prev, gtd_new});
        break;
      }
      const double min_step = t + 0.01 * (t - t_prev), max_step = t * 10, tmp = t;
      t = cubic_interpolate(t_prev, f_prev, gtd_prev, t, f_new, gtd_new,
                            std::pair{min_step, max_step});
      t_prev = tmp;
      f_prev = f_new;
      g_prev = g_new;
      gtd_prev = gtd_new;
      std::tie(f_new, g_new) = opt.evaluate_at(closure, x, t, d);
      ++evals;
      gtd_new = dot(g_new, d);
      ++ls_iter;
    }
    if (ls_iter == max_ls) set_bracket({0, t}, {f, f_new}, {g, g_new}, {gtd, gtd_new});

    // Zoom: shrink the bracket until a point satisfies the conditions.
    bool insufficient_progress = false;
    size_t low = bracket_f.front() <= bracket_f.back() ? 0 : 1, high = 1 - low;
    while (!done && ls_iter < max_ls) {
      if (std::abs(bracket[1] - bracket[0]) * d_norm < tolerance_change) break;
      t = cubic_interpolate(bracket[0], bracket_f[0], bracket_gtd[0], bracket[1], bracket_f[1],
                            bracket_gtd[1]);
      // Too close to an end of the bracket (twice, or outside it): 0.1 of its length inside.
      const double b_max = std::max(bracket[0], bracket[1]),
                   b_min = std::min(bracket[0], bracket[1]);
      const double eps = 0.1 * (b_max - b_min);
      if (std::min(b_max - t, t - b_min) < eps) {
        if (insufficient_progress || t >= b_max || t <= b_min) {
          t = std::abs(t - b_max) < std::abs(t - b_min) ? b_max - eps : b_min + eps;
          insufficient_progress = false;
        } else {
          insufficient_progress = true;
        }
      } else {
        insufficient_progress = false;
      }
      std::tie(f_new, g_new) = opt.evaluate_at(closure, x, t, d);
      ++evals;
      gtd_new = dot(g_new, d);
      ++ls_iter;
      if (f_new > f + c1 * t * gtd || f_new >= bracket_f[low]) {
        bracket[high] = t;
        bracket_f[high] = f_new;
        bracket_g[high] = g_new;
        bracket_gtd[high] = gtd_new;
        low = bracket_f[0] <= bracket_f[1] ? 0 : 1;
        high = 1 - low;
      } else {
        if (std::abs(gtd_new) <= -c2 * gtd) {
          done = true;
        } else if (gtd_new * (bracket[high] - bracket[low]) >= 0) {
          bracket[high] = bracket[low];
          bracket_f[high] = bracket_f[low];
          bracket_g[high] = bracket_g[low];
          bracket_gtd[high] = bracket_gtd[low];
        }
        bracket[low] = t;
        bracket_f[low] = f_new;
        bracket_g[low] = g_new;
        bracket_gtd[low] = gtd_new;
      }
    }
    return {bracket_f[low], bracket[low], bracket_g[low], evals};
  }
};

Tensor LBFGS::step(const LossClosure& closure) {
  TANDEM_CHECK(static_cast<bool>(closure), name_, ": step needs a closure");
  NoGradGuard no_grad;
  const auto& o = static_cast<const LBFGSOptions&>(groups_.front().options());
  const double lr = o.lr_, tolerance_grad = o.tolerance_grad_,
               tolerance_change = o.tolerance_change_;
  const int64_t max_iter = o.max_iter_, max_eval = o.max_eval_.value_or(o.max_iter_ * 5 / 4);
  const auto history_size = static_cast<size_t>(o.history_size_);

  Tensor orig_loss;
  {
    AutoGradMode grad_on(true);
    orig_loss = closure();
  }
  TANDEM_CHECK(orig_loss.defined() && orig_loss.numel() == 1, name_,
               ": the closure must return the loss, one number");
  check_step();
  double loss = orig_loss.item<double>();
  int64_t current_evals = 1;
  ++func_evals_;
  Tensor g = flat_grad();
  if (abs_max(g) <= tolerance_grad) return orig_loss;

  for (int64_t n_iter = 1; n_iter <= max_iter; ++n_iter) {
    ++n_iter_;
    // The direction: steepest descent at first, then the two-loop recursion over the history.
    if (n_iter_ == 1) {
      d_ = g.neg();
      old_dirs_.clear();
      old_stps_.clear();
      ro_.clear();
      h_diag_ = 1;
    } else {
      const Tensor y = g.sub(prev_flat_grad_), s = d_.mul(t_);
      const double ys = dot(y, s);
      if (ys > 1e-10) {
        if (old_dirs_.size() == history_size) {
          old_dirs_.pop_front();
          old_stps_.pop_front();
          ro_.pop_front();
        }
        old_dirs_.push_back(y);
        old_stps_.push_back(s);
        ro_.push_back(1.0 / ys);
        h_diag_ = ys / dot(y, y);
      }
      const size_t num_old = old_dirs_.size();
      std::vector<double> al(num_old);
      Tensor q = g.neg();
      for (size_t i = num_old; i-- > 0;) {
        al[i] = dot(old_stps_[i], q) * ro_[i];
        q.add_(old_dirs_[i], -al[i]);
      }
      d_ = q.mul(h_diag_);
      for (size_t i = 0; i < num_old; ++i) {
        const double be_i = dot(old_dirs_[i], d_) * ro_[i];
        d_.add_(old_stps_[i], al[i] - be_i);
      }
    }
    prev_flat_grad_ = g.clone();
    prev_loss_ = loss;

    // The step length: lr, and at the very first iteration at most 1 / |g|_1 of it.
    t_ = n_iter_ == 1 ? std::min(1.0, 1.0 / g.abs().sum().item<double>()) * lr : lr;
    const double gtd = dot(g, d_);
    if (gtd > -tolerance_change) break;  // no descent left along d

    int64_t ls_evals = 0;
    bool optimal = false;
    if (o.line_search_fn_) {
      std::vector<Tensor> x;
      for (const Tensor& p : params()) x.push_back(p.clone());
      // torch's step calls the line search with its default tolerance, not the group's.
      const LineSearch ls = LineSearch::run(*this, closure, x, t_, d_, loss, g, gtd);
      loss = ls.f;
      g = ls.g;
      t_ = ls.t;
      ls_evals = ls.evals;
      add_to_params(t_, d_);
      optimal = abs_max(g) <= tolerance_grad;
    } else {
      add_to_params(t_, d_);
      if (n_iter != max_iter) {  // the last iteration's loss would go unused
        {
          AutoGradMode grad_on(true);
          loss = closure().item<double>();
        }
        g = flat_grad();
        optimal = abs_max(g) <= tolerance_grad;
        ls_evals = 1;
      }
    }
    current_evals += ls_evals;
    func_evals_ += ls_evals;

    if (n_iter == max_iter || current_evals >= max_eval || optimal) break;
    if (abs_max(d_.mul(t_)) <= tolerance_change) break;         // no progress in x
    if (std::abs(loss - prev_loss_) < tolerance_change) break;  // nor in the loss
  }
  return orig_loss;
}

}  // namespace tandem::optim
