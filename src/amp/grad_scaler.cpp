#include "tandem/amp/grad_scaler.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "../kernels/kernels.hpp"
#include "tandem/autograd/grad_mode.hpp"
#include "tandem/cuda/runtime.hpp"
#include "tandem/ops/creation.hpp"
#include "tandem/ops/shape_ops.hpp"

namespace tandem::amp {

GradScaler::GradScaler(GradScalerOptions options) : options_(options), scale_(options.init_scale_) {
  TANDEM_CHECK_T(ValueError, options.init_scale_ > 0 && std::isfinite(options.init_scale_),
                 "GradScaler: init_scale must be positive and finite, got ", options.init_scale_);
  TANDEM_CHECK_T(ValueError, options.growth_factor_ > 1.0 && std::isfinite(options.growth_factor_),
                 "GradScaler: growth_factor must be finite and > 1, got ", options.growth_factor_);
  TANDEM_CHECK_T(ValueError, options.backoff_factor_ > 0.0 && options.backoff_factor_ < 1.0,
                 "GradScaler: backoff_factor must be in (0, 1), got ", options.backoff_factor_);
  TANDEM_CHECK_T(ValueError, options.growth_interval_ >= 1,
                 "GradScaler: growth_interval must be >= 1, got ", options.growth_interval_);
}

Tensor GradScaler::scale(const Tensor& loss) const {
  if (!options_.enabled_) return loss;
  return loss.to(loss.dtype() == DType::f64 ? DType::f64 : DType::f32) * scale_;
}

void GradScaler::unscale(optim::Optimizer& optimizer) {
  if (!options_.enabled_) return;
  TANDEM_CHECK(find_unscaled(&optimizer) == unscaled_.end(),
               "GradScaler.unscale: already called for this optimizer since the last update()");
  NoGradGuard no_grad;
  cuda::check_deferred();  // a bad input's error before any gradient changes
  // Every gradient checked before any is unscaled: a refused one leaves all of them as they
  // were, and the optimizer not marked unscaled (step() would otherwise take the rest scaled).
  // Each memory location once: an expanded gradient (set by hand) would be unscaled once per
  // repeated element otherwise.
  std::vector<Tensor> grads;
  for (const auto& group : optimizer.param_groups())
    for (const Tensor& p : group.params()) {
      const Tensor g = p.grad();
      if (!g.defined()) continue;
      TANDEM_CHECK(is_floating(g.dtype()), "GradScaler.unscale: gradients are floating point, got ",
                   g.dtype(), " for a parameter of ", p.dtype());
      grads.push_back(unexpand(g));
      kernels::scale_grads.at(grads.back(), "GradScaler.unscale");
    }
  unscaled_.push_back({&optimizer});
  // One found-inf flag per device the gradients lie on, read once at the end: on a GPU the host
  // waits once per unscale, not once per gradient.
  std::vector<Tensor> flags;
  for (const auto& on_device : kernels::by_device(grads)) {
    flags.push_back(zeros({}, TensorOptions(DType::f32).device(on_device.front().device())));
    kernels::scale_grads(on_device.front(), on_device, 1.0 / scale_, flags.back());
  }
  for (const Tensor& flag : flags)
    if (flag.item<float>() != 0.0f) unscaled_.back().found_inf = true;
}

std::vector<GradScaler::Unscaled>::iterator GradScaler::find_unscaled(
    const optim::Optimizer* optimizer) {
  return std::find_if(unscaled_.begin(), unscaled_.end(),
                      [&](const Unscaled& u) { return u.optimizer == optimizer; });
}

bool GradScaler::step(optim::Optimizer& optimizer) {
  if (!options_.enabled_) {
    optimizer.step();
    return true;
  }
  auto unscaled = find_unscaled(&optimizer);
  TANDEM_CHECK(unscaled == unscaled_.end() || !unscaled->stepped,
               "GradScaler.step: already called for this optimizer since the last update()");
  if (unscaled == unscaled_.end()) {
    unscale(optimizer);
    unscaled = unscaled_.end() - 1;  // the record unscale() added
  }
  if (any_) unscaled->found_inf = any_(unscaled->found_inf);
  unscaled->stepped = true;
  if (unscaled->found_inf) return false;
  optimizer.step();
  return true;
}

void GradScaler::update() {
  if (!options_.enabled_) return;
  TANDEM_CHECK(!unscaled_.empty(),
               "GradScaler.update: no inf checks were recorded since the last update(); call "
               "step() (or unscale()) first");
  const bool found_inf = std::any_of(unscaled_.begin(), unscaled_.end(),
                                     [](const Unscaled& u) { return u.found_inf; });
  if (found_inf) {
    scale_ *= options_.backoff_factor_;
    growth_tracker_ = 0;
  } else if (++growth_tracker_ >= options_.growth_interval_) {
    // Never past f32's range: an infinite scale makes every gradient inf, so every later
    // step would be skipped and the backoff could not bring it back.
    if (scale_ * options_.growth_factor_ <= std::numeric_limits<float>::max())
      scale_ *= options_.growth_factor_;
    growth_tracker_ = 0;
  }
  unscaled_.clear();
}

void GradScaler::update(double new_scale) {
  if (!options_.enabled_) return;
  TANDEM_CHECK(std::isfinite(new_scale) && new_scale > 0,
               "GradScaler.update: the new scale must be positive and finite, got ", new_scale);
  scale_ = new_scale;
  unscaled_.clear();
}

nn::StateDict GradScaler::state_dict() const {
  const TensorOptions f64 = TensorOptions(DType::f64).device(kCPU);
  nn::StateDict out;
  out["scale"] = scalar_tensor(scale_, f64);
  out["growth_tracker"] = scalar_tensor(static_cast<double>(growth_tracker_),
                                        TensorOptions(DType::i64).device(kCPU));
  out["growth_factor"] = scalar_tensor(options_.growth_factor_, f64);
  out["backoff_factor"] = scalar_tensor(options_.backoff_factor_, f64);
  out["growth_interval"] = scalar_tensor(static_cast<double>(options_.growth_interval_),
                                         TensorOptions(DType::i64).device(kCPU));
  return out;
}

void GradScaler::load_state_dict(const nn::StateDict& state) {
  auto value = [&](const char* key) {
    auto it = state.find(key);
    TANDEM_CHECK_T(ValueError, it != state.end() && it->second.numel() == 1,
                   "GradScaler.load_state_dict: missing or malformed '", key, "'");
    return it->second.item<double>();
  };
  const double scale = value("scale"), tracker = value("growth_tracker");
  const double growth = value("growth_factor"), backoff = value("backoff_factor");
  const double interval = value("growth_interval");
  // Counts are whole numbers an int64 holds (1e300 or inf converted to INT64_MIN).
  auto count = [](double v, double lo) { return v >= lo && fits_int64(v) && v == std::trunc(v); };
  TANDEM_CHECK_T(ValueError,
                 scale > 0 && std::isfinite(scale) && count(tracker, 0) && growth > 1 &&
                     std::isfinite(growth) && backoff > 0 && backoff < 1 && count(interval, 1),
                 "GradScaler.load_state_dict: values out of range (scale ", scale,
                 ", growth_tracker ", tracker, ", growth_factor ", growth, ", backoff_factor ",
                 backoff, ", growth_interval ", interval, ")");
  scale_ = scale;
  growth_tracker_ = static_cast<int64_t>(tracker);
  options_.growth_factor_ = growth;
  options_.backoff_factor_ = backoff;
  options_.growth_interval_ = static_cast<int64_t>(interval);
}

}  // namespace tandem::amp
