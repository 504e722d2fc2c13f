// L-BFGS, as torch.optim.LBFGS and libtorch's torch::optim::LBFGS: a quasi-Newton method that
// calls a closure (loss and backward) as often as its iterations and line search need.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "tandem/optim/optimizer.hpp"

namespace tandem::optim {

/// L-BFGS's hyper-parameters, as libtorch's LBFGSOptions(lr). max_eval defaults to
/// max_iter * 5 / 4; line_search_fn is none (a fixed step of lr) or "strong_wolfe".
struct LBFGSOptions : OptimizerCloneableOptions<LBFGSOptions> {
  LBFGSOptions(double lr = 1.0) : lr_(lr) {}  // NOLINT(google-explicit-constructor)
  TANDEM_ARG(double, lr);
  TANDEM_ARG(int64_t, max_iter) = 20;
  TANDEM_ARG(std::optional<int64_t>, max_eval) = std::nullopt;
  TANDEM_ARG(double, tolerance_grad) = 1e-7;
  TANDEM_ARG(double, tolerance_change) = 1e-9;
  TANDEM_ARG(int64_t, history_size) = 100;
  TANDEM_ARG(std::optional<std::string>, line_search_fn) = std::nullopt;
  /// L-BFGS has neither; the accessors every optimizer's options have read 0 (check_options
  /// refuses a weight decay set through them).
  double weight_decay_ = 0.0;
  double get_momentum() const override { return 0.0; }
  void set_momentum(double) override {}
  bool has_momentum() const override { return false; }
};

/// torch.optim.LBFGS, step for step (minFunc's algorithm): one group, parameters on one device
/// and of one dtype. `step(closure)` runs up to max_iter iterations and returns the loss of the
/// closure's first call; the closure zeroes the gradients, computes the loss, calls backward and
/// returns the loss (it runs with grad mode on). state_dict() holds the curvature history and
/// the counts, as torch's state does ("extra.n_iter", "extra.old_dirs.0", "extra.ro", ...): an
/// LBFGS that loads it goes on as the one that wrote it would have.
class LBFGS : public Optimizer {
 public:
  using LossClosure = std::function<Tensor()>;
  explicit LBFGS(std::vector<Tensor> params, LBFGSOptions defaults = {});
  Tensor step(const LossClosure& closure);
  /// Refused: L-BFGS evaluates the loss itself, through a closure.
  void step() override;

 private:
  void check_options(const OptimizerOptions& options) const override;
  void write_extra_state(nn::StateDict& out) const override;
  std::function<void()> read_extra_state(const nn::StateDict& state) override;
  const std::vector<Tensor>& params() const { return groups_.front().params(); }
  Tensor flat_grad() const;
  void add_to_params(double step, const Tensor& direction);
  /// Loss and flat gradient at params + t d, the parameters left at `x`.
  std::pair<double, Tensor> evaluate_at(const LossClosure& closure, const std::vector<Tensor>& x,
                                        double t, const Tensor& d);
  struct LineSearch;

  // torch's state: iterations and evaluations so far, the last direction and step, the
  // curvature pairs (y, s) with 1 / y.s, the initial Hessian scale, the previous gradient/loss.
  int64_t func_evals_ = 0, n_iter_ = 0;
  Tensor d_, prev_flat_grad_;
  double t_ = 0, h_diag_ = 1, prev_loss_ = 0;
  std::deque<Tensor> old_dirs_, old_stps_;
  std::deque<double> ro_;
};

}  // namespace tandem::optim
