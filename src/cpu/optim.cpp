// CPU optimizer updates: each parameter's whole update in one pass over its elements. Every
// intermediate is rounded to the parameter's dtype where the unfused sequence of tensor ops
// rounded it, so the fused update gives the same bits as that sequence.
#include <atomic>
#include <cmath>
#include <type_traits>

#include "../kernels/optim_update.hpp"
#include "kernels.hpp"
#include "loops.hpp"

namespace tandem::kernels::cpu {
inline namespace TANDEM_CPU_NAMESPACE {
namespace {

template <typename T>
void sgd_typed(const Tensor& param, const Tensor& buffer, const Tensor& grad, const SgdArgs& args) {
  T* p = ptr<T>(param);
  const T* g = ptr<const T>(grad);
  const bool has_buffer = buffer.defined();
  T* b = has_buffer ? ptr<T>(buffer) : p;  // unused without momentum
  const Shape& zero_strides = has_buffer ? buffer.strides() : param.strides();
  const SgdConstants<T> constants(args);
  for_each_run<3>(
      param.shape(), {param.strides(), zero_strides, grad.strides()},
      [&](const std::array<int64_t, 3>& off, int64_t n, const std::array<int64_t, 3>& st) {
        const SgdConstants<T> c = constants;  // a local: its tests leave the loops
        T* pr = p + off[0];
        T* br = b + off[1];
        const T* gr = g + off[2];
        if (st[0] == 1 && st[1] == 1 && st[2] == 1) {  // dense: loops that vectorize
          if (has_buffer)
            for (int64_t i = 0; i < n; ++i) sgd_update(pr[i], &br[i], gr[i], c);
          else
            for (int64_t i = 0; i < n; ++i) sgd_update(pr[i], static_cast<T*>(nullptr), gr[i], c);
          return;
        }
        for (int64_t i = 0; i < n; ++i)
          sgd_update(pr[i * st[0]], has_buffer ? &br[i * st[1]] : nullptr, gr[i * st[2]], c);
      });
}

// f16/bf16 parameters (torch's CPU optimizers step them too): the update in f32 on widened
// copies, each result rounded once into its tensor's dtype (the state keeps the parameter's).
Tensor widened(const Tensor& t) { return t.defined() ? contiguous_as(t, DType::f32) : Tensor(); }
void narrow_back(const Tensor& t, const Tensor& wide) {
  if (t.defined()) copy(t, wide);
}

void sgd_step(const Tensor& param, const Tensor& momentum_buffer, const Tensor& grad,
              const SgdArgs& args) {
  if (is_reduced_float(param.dtype())) {
    const Tensor p = widened(param), b = widened(momentum_buffer);
    sgd_step(p, b, widened(grad), args);
    narrow_back(param, p);
    narrow_back(momentum_buffer, b);
    return;
  }
  dispatch_dtype<DTypeSet::wide>(param.dtype(), "sgd_step (cpu)", [&](auto t) {
    sgd_typed<decltype(t)>(param, momentum_buffer, grad, args);
  });
}

void sgd_steps(const Tensor&, const std::vector<SgdEntry>& entries, const SgdArgs& args) {
  for (const SgdEntry& e : entries) {
    SgdArgs a = args;
    a.first = e.first;
    sgd_step(e.param, e.buffer, e.grad, a);
  }
}

template <typename T>
void adam_typed(const Tensor& param, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                const Tensor& max_exp_avg_sq, const Tensor& grad, const AdamArgs& args) {
  T* p = ptr<T>(param);
  T* m = ptr<T>(exp_avg);
  T* v = ptr<T>(exp_avg_sq);
  T* vmax = max_exp_avg_sq.defined() ? ptr<T>(max_exp_avg_sq) : nullptr;
  const T* g = ptr<const T>(grad);
  const AdamConstants<T> constants(args);
  // Without AMSGrad the fifth operand's offsets are exp_avg_sq's, never used.
  for_each_run<5>(
      param.shape(),
      {param.strides(), exp_avg.strides(), exp_avg_sq.strides(),
       (vmax ? max_exp_avg_sq : exp_avg_sq).strides(), grad.strides()},
      [&](const std::array<int64_t, 5>& off, int64_t n, const std::array<int64_t, 5>& st) {
        const AdamConstants<T> c = constants;  // a local: its tests leave the loops
        T* pr = p + off[0];
        T* mr = m + off[1];
        T* vr = v + off[2];
        T* xr = vmax ? vmax + off[3] : nullptr;
        const T* gr = g + off[4];
        if (st == std::array<int64_t, 5>{1, 1, 1, 1, 1}) {  // dense: loops that vectorize
          if (xr)
            for (int64_t i = 0; i < n; ++i) adam_update(pr[i], mr[i], vr[i], &xr[i], gr[i], c);
          else
            for (int64_t i = 0; i < n; ++i)
              adam_update(pr[i], mr[i], vr[i], static_cast<T*>(nullptr), gr[i], c);
          return;
        }
        for (int64_t i = 0; i < n; ++i)
          adam_update(pr[i * st[0]], mr[i * st[1]], vr[i * st[2]], xr ? xr + i * st[3] : nullptr,
                      gr[i * st[4]], c);
      });
}

void adam_step(const Tensor& param, const Tensor& exp_avg, const Tensor& exp_avg_sq,
               const Tensor& max_exp_avg_sq, const Tensor& grad, const AdamArgs& args) {
  if (is_reduced_float(param.dtype())) {
    const Tensor p = widened(param), m = widened(exp_avg), v = widened(exp_avg_sq),
                 vmax = widened(max_exp_avg_sq);
    adam_step(p, m, v, vmax, widened(grad), args);
    narrow_back(param, p);
    narrow_back(exp_avg, m);
    narrow_back(exp_avg_sq, v);
    narrow_back(max_exp_avg_sq, vmax);
    return;
  }
  dispatch_dtype<DTypeSet::wide>(param.dtype(), "adam_step (cpu)", [&](auto t) {
    adam_typed<decltype(t)>(param, exp_avg, exp_avg_sq, max_exp_avg_sq, grad, args);
  });
}

void adam_steps(const Tensor&, const std::vector<AdamEntry>& entries, const AdamArgs& args) {
  for (const AdamEntry& e : entries)
    adam_step(e.param, e.exp_avg, e.exp_avg_sq, e.max_exp_avg_sq, e.grad, e.args(args));
}

template <typename T>
void rmsprop_typed(const RmspropEntry& e, const RmspropArgs& args) {
  T* p = ptr<T>(e.param);
  T* sq = ptr<T>(e.square_avg);
  T* ga = e.grad_avg.defined() ? ptr<T>(e.grad_avg) : nullptr;
  T* bu = e.momentum_buffer.defined() ? ptr<T>(e.momentum_buffer) : nullptr;
  const T* g = ptr<const T>(e.grad);
  const RmspropConstants<T> constants(args);
  // An operand that is absent takes square_avg's offsets, never used.
  for_each_run<5>(
      e.param.shape(),
      {e.param.strides(), e.square_avg.strides(), (ga ? e.grad_avg : e.square_avg).strides(),
       (bu ? e.momentum_buffer : e.square_avg).strides(), e.grad.strides()},
      [&](const std::array<int64_t, 5>& off, int64_t n, const std::array<int64_t, 5>& st) {
        const RmspropConstants<T> c = constants;
        T* pr = p + off[0];
        T* sr = sq + off[1];
        T* gar = ga ? ga + off[2] : nullptr;
        T* br = bu ? bu + off[3] : nullptr;
        const T* gr = g + off[4];
        if (st == std::array<int64_t, 5>{1, 1, 1, 1, 1}) {  // dense: loops that vectorize
          auto dense = [&](auto centered, auto momentum) {
            for (int64_t i = 0; i < n; ++i)
              rmsprop_update(pr[i], sr[i], decltype(centered)::value ? gar + i : nullptr,
                             decltype(momentum)::value ? br + i : nullptr, gr[i], c);
          };
          using yes = std::true_type;
          using no = std::false_type;
          if (gar && br)
            dense(yes{}, yes{});
          else if (gar)
            dense(yes{}, no{});
          else if (br)
            dense(no{}, yes{});
          else
            dense(no{}, no{});
          return;
        }
        for (int64_t i = 0; i < n; ++i)
          rmsprop_update(pr[i * st[0]], sr[i * st[1]], gar ? gar + i * st[2] : nullptr,
                         br ? br + i * st[3] : nullptr, gr[i * st[4]], c);
      });
}

void rmsprop_steps(const Tensor&, const std::vector<RmspropEntry>& entries,
                   const RmspropArgs& args) {
  for (const RmspropEntry& e : entries)
    dispatch_dtype<DTypeSet::wide>(e.param.dtype(), "rmsprop_steps (cpu)",
                                   [&](auto t) { rmsprop_typed<decltype(t)>(e, args); });
}

template <typename T>
void adagrad_typed(const AdagradEntry& e, const AdagradArgs& args) {
  T* p = ptr<T>(e.param);
  T* sum = ptr<T>(e.sum);
  const T* g = ptr<const T>(e.grad);
  const AdagradConstants<T> constants(args, e.lr);
  for_each_run<3>(
      e.param.shape(), {e.param.strides(), e.sum.strides(), e.grad.strides()},
      [&](const std::array<int64_t, 3>& off, int64_t n, const std::array<int64_t, 3>& st) {
        const AdagradConstants<T> c = constants;
        T* pr = p + off[0];
        T* sr = sum + off[1];
        const T* gr = g + off[2];
        if (st[0] == 1 && st[1] == 1 && st[2] == 1) {  // dense: a loop that vectorizes
          for (int64_t i = 0; i < n; ++i) adagrad_update(pr[i], sr[i], gr[i], c);
          return;
        }
        for (int64_t i = 0; i < n; ++i)
          adagrad_update(pr[i * st[0]], sr[i * st[1]], gr[i * st[2]], c);
      });
}

void adagrad_steps(const Tensor&, const std::vector<AdagradEntry>& entries,
                   const AdagradArgs& args) {
  for (const AdagradEntry& e : entries)
    dispatch_dtype<DTypeSet::wide>(e.param.dtype(), "adagrad_steps (cpu)",
                                   [&](auto t) { adagrad_typed<decltype(t)>(e, args); });
}

void scale_grad(const Tensor& grad, const Tensor& found_inf, double factor) {
  std::atomic<bool> nonfinite{false};  // for_each_run's runs go to several threads
  dispatch_dtype<DTypeSet::floating>(grad.dtype(), "scale_grads (cpu)", [&](auto t) {
    using T = decltype(t);
    using C = std::conditional_t<std::is_same_v<T, double>, double, float>;  // as MulScalar
    const C by = static_cast<C>(factor);
    T* g = ptr<T>(grad);
    for_each_run<1>(grad.shape(), {grad.strides()},
                    [&](const std::array<int64_t, 1>& off, int64_t n,
                        const std::array<int64_t, 1>& st) {
                      bool finite = true;
                      for (int64_t i = 0; i < n; ++i) {
                        T& gi = g[off[0] + i * st[0]];
                        gi = static_cast<T>(static_cast<C>(gi) * by);
                        finite &= std::isfinite(static_cast<C>(gi));
                      }
                      if (!finite) nonfinite.store(true, std::memory_order_relaxed);
                    });
  });
  if (nonfinite.load() && found_inf.defined()) *ptr<float>(found_inf) = 1.0f;
}

void scale_grads(const Tensor&, const std::vector<Tensor>& grads, double factor,
                 const Tensor& found_inf) {
  for (const Tensor& g : grads) scale_grad(g, found_inf, factor);
}

// Each term in 8 lanes over the gradient's memory where it is dense (in any dims' order: every
// element once), else over a contiguous copy (every element of the view, repeated ones too);
// then the lanes in order.
void grad_norm_terms(const Tensor& out, const std::vector<Tensor>& grads, double norm_type) {
  const NormTerm term(norm_type);
  for (size_t i = 0; i < grads.size(); ++i) {
    const Tensor& given = grads[i];
    const Tensor g =
        given.is_contiguous(given.suggest_memory_format()) ? given : given.contiguous();
    dispatch_dtype<DTypeSet::floating>(g.dtype(), "clip_grad_norm (cpu)", [&](auto t) {
      using T = decltype(t);
      const T* p = ptr<const T>(g);
      const int64_t n = g.numel();
      constexpr int kLanes = 8;
      double lanes[kLanes] = {};
      int64_t j = 0;
      for (; j + kLanes <= n; j += kLanes)
        for (int l = 0; l < kLanes; ++l)
          lanes[l] = term.join(lanes[l], term(static_cast<double>(p[j + l])));
      for (; j < n; ++j) lanes[0] = term.join(lanes[0], term(static_cast<double>(p[j])));
      double total = 0;
      for (double v : lanes) total = term.join(total, v);
      ptr<double>(out)[i] = total;
    });
  }
}

}  // namespace

TANDEM_REGISTER_CPU(sgd_step, sgd_step);
TANDEM_REGISTER_CPU(sgd_steps, sgd_steps);
TANDEM_REGISTER_CPU(adam_steps, adam_steps);
TANDEM_REGISTER_CPU(adam_step, adam_step);
TANDEM_REGISTER_CPU(rmsprop_steps, rmsprop_steps);
TANDEM_REGISTER_CPU(adagrad_steps, adagrad_steps);
TANDEM_REGISTER_CPU(scale_grads, scale_grads);
TANDEM_REGISTER_CPU(grad_norm_terms, grad_norm_terms);

}  // namespace TANDEM_CPU_NAMESPACE
}  // namespace tandem::kernels::cpu
