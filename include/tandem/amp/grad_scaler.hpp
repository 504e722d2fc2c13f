// amp::GradScaler: dynamic loss scaling for f16 training, as torch.cuda.amp.GradScaler. The loss
// is multiplied by the scale before backward so that small gradients survive f16; unscale
// divides the gradients back (after the allreduce, before clipping); step skips the update when
// any gradient is inf or NaN, and update halves the scale then, or doubles it after
// growth_interval clean steps. bf16 has f32's range and needs no scaler.
#pragma once

#include <functional>
#include <vector>

#include "tandem/core/arg.hpp"
#include "tandem/nn/module.hpp"
#include "tandem/optim/optimizer.hpp"

namespace tandem::amp {

struct GradScalerOptions {
  TANDEM_ARG(double, init_scale) = 65536.0;  // 2^16
  TANDEM_ARG(double, growth_factor) = 2.0;
  TANDEM_ARG(double, backoff_factor) = 0.5;
  TANDEM_ARG(int64_t, growth_interval) = 2000;
  /// Off: scale() and unscale() do nothing, step() always steps (one code path for f32 and f16).
  TANDEM_ARG(bool, enabled) = true;
};

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});

  /// loss * scale (differentiable), in f32 (f64 for an f64 loss), as torch's f32 scale tensor
  /// makes it: an f16 loss of 2 scaled by 65536 is 131072, not f16's inf.
  Tensor scale(const Tensor& loss) const;
  /// Divides every gradient of `optimizer` by the scale in place and notes whether any is inf or
  /// NaN. At most once per optimizer between updates (a second call throws).
  void unscale(optim::Optimizer& optimizer);
  /// Unscales if not done yet, then steps the optimizer unless one of its gradients was inf or
  /// NaN on any rank (each optimizer decides for itself, as torch's: an inf in one optimizer's
  /// gradients does not skip another's step). Returns whether it stepped: skip the
  /// learning-rate schedule's step when it did not.
  /// At most once per optimizer between updates (a second call throws, as torch's).
  bool step(optim::Optimizer& optimizer);
  /// Ends the iteration: the scale backs off when any optimizer found an inf or NaN, grows after
  /// growth_interval clean iterations in a row. Needs an unscale() or step() since the last update
  /// (torch's "no inf checks were recorded").
  void update();
  /// Ends the iteration with the scale set to `new_scale` (> 0, finite), as torch's
  /// update(new_scale); the growth count is kept.
  void update(double new_scale);

  /// The scale; 1 for a disabled scaler, as torch's.
  double get_scale() const { return options_.enabled_ ? scale_ : 1.0; }
  bool is_enabled() const { return options_.enabled_; }
  /// Clean steps since the scale last changed.
  int64_t growth_tracker() const { return growth_tracker_; }

  /// For data parallelism: `any(found)` must return true on every rank when `found` is true on
  /// any (parallel::any_rank gives one). Without it, each rank decides alone (enough when the
  /// gradients are already allreduced, which carries an inf to every rank).
  void set_sync(std::function<bool(bool)> any) { any_ = std::move(any); }

  /// "scale", "growth_tracker" and the options, for training checkpoints.
  nn::StateDict state_dict() const;
  void load_state_dict(const nn::StateDict& state);

 private:
  GradScalerOptions options_;
  double scale_;
  int64_t growth_tracker_ = 0;
  struct Unscaled {  // an optimizer unscaled this iteration: whether it found inf or NaN, stepped
    const optim::Optimizer* optimizer;
    bool found_inf = false;
    bool stepped = false;
  };
  std::vector<Unscaled> unscaled_;
  std::function<bool(bool)> any_;

  std::vector<Unscaled>::iterator find_unscaled(const optim::Optimizer* optimizer);
};

}  // namespace tandem::amp
