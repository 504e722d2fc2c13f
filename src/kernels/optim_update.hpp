// The optimizer updates of one element, written once for the CPU loops (src/cpu/optim.cpp) and
// the CUDA kernels (src/cuda/reduce.cu). Every intermediate is rounded to the parameter's dtype
// T where the unfused sequence of tensor ops (torch.optim's single-tensor path) rounds it, so
// the fused update gives that sequence's bits on the CPU; nvcc may contract a multiply and an
// add that the CPU rounds twice (results an ulp apart).
#pragma once

#include <math.h>

#include <cmath>

#include "kernels.hpp"

namespace tandem::kernels {

/// SGD's per-call constants in the parameter's dtype, computed once on the host (converted in
/// the loop, they kept the CPU's from vectorizing); `first` is the parameter's own.
template <typename T>
struct SgdConstants {
  T weight_decay, momentum, dampened, neg_lr;  // dampened: 1 - dampening
  bool decay, nesterov, first;
  explicit SgdConstants(const SgdArgs& a)
      : weight_decay(T(a.weight_decay)),
        momentum(T(a.momentum)),
        dampened(T(1.0 - a.dampening)),
        neg_lr(T(-a.lr)),
        decay(a.weight_decay != 0),
        nesterov(a.nesterov),
        first(a.first) {}
};

/// torch.optim.SGD on one element; `buf` is null without momentum.
template <typename T>
TANDEM_HD void sgd_update(T& p, T* buf, T g, const SgdConstants<T>& c) {
  T d = g;
  if (c.decay) d = d + c.weight_decay * p;
  if (buf) {
    T& b = *buf;
    b = c.first ? d : T(T(b * c.momentum) + c.dampened * d);
    d = c.nesterov ? T(d + c.momentum * b) : b;
  }
  p = p + c.neg_lr * d;
}

/// Adam's per-call constants in the parameter's dtype, computed once on the host: the
/// parameter's decay factor (1 - lr wd for AdamW, 1 for Adam), the moments' factors, sqrt of the
/// second bias correction and -lr / the first.
template <typename T>
struct AdamConstants {
  T weight_decay, decay, beta1, rest1, beta2, rest2, root_bias2, eps, step;  // rest: 1 - beta
  bool coupled_decay;  // Adam's weight decay (added to g)
  explicit AdamConstants(const AdamArgs& a)
      : weight_decay(T(a.weight_decay)),
        decay(T(a.decoupled ? 1.0 - a.lr * a.weight_decay : 1.0)),
        beta1(T(a.beta1)),
        rest1(T(1.0 - a.beta1)),
        beta2(T(a.beta2)),
        rest2(T(1.0 - a.beta2)),
        root_bias2(T(std::sqrt(a.bias_correction2))),
        eps(T(a.eps)),
        step(T(-a.lr / a.bias_correction1)),
        coupled_decay(!a.decoupled && a.weight_decay != 0) {}
};

/// torch.optim.Adam (weight decay added to the gradient) or AdamW (decoupled: the parameter
/// shrinks first) on one element, with bias-corrected moments; with `vmax` (AMSGrad), the
/// denominator takes the running maximum of v (NaN propagating, as torch.maximum).
template <typename T>
TANDEM_HD void adam_update(T& p, T& m, T& v, T* vmax, T g, const AdamConstants<T>& c) {
  if (c.coupled_decay) g = g + c.weight_decay * p;
  p = p * c.decay;
  m = T(m * c.beta1) + c.rest1 * g;
  v = T(v * c.beta2) + c.rest2 * T(g * g);
  if (vmax && !(*vmax >= v)) *vmax = v;
  const T denom = T(T(sqrt(vmax ? *vmax : v)) / c.root_bias2) + c.eps;
  p = p + c.step * T(m / denom);
}

/// RMSprop's per-call constants in the parameter's dtype.
template <typename T>
struct RmspropConstants {
  T weight_decay, alpha, rest, eps, momentum, neg_lr;  // rest: 1 - alpha
  bool decay;
  explicit RmspropConstants(const RmspropArgs& a)
      : weight_decay(T(a.weight_decay)),
        alpha(T(a.alpha)),
        rest(T(1.0 - a.alpha)),
        eps(T(a.eps)),
        momentum(T(a.momentum)),
        neg_lr(T(-a.lr)),
        decay(a.weight_decay != 0) {}
};

/// torch.optim.RMSprop on one element: `gavg` (centered) and `buf` (momentum) may be null.
template <typename T>
TANDEM_HD void rmsprop_update(T& p, T& sq, T* gavg, T* buf, T g, const RmspropConstants<T>& c) {
  T d = g;
  if (c.decay) d = d + c.weight_decay * p;
  sq = T(sq * c.alpha) + c.rest * T(d * d);
  T avg;
  if (gavg) {
    *gavg = T(*gavg * c.alpha) + c.rest * d;
    avg = T(sqrt(T(sq - T(*gavg * *gavg)))) + c.eps;
  } else {
    avg = T(sqrt(sq)) + c.eps;
  }
  if (buf) {
    *buf = T(*buf * c.momentum) + T(d / avg);
    p = p + c.neg_lr * *buf;
  } else {
    p = p + c.neg_lr * T(d / avg);
  }
}

/// Adagrad's per-call constants in the parameter's dtype (neg_lr: this step's, the parameter's).
template <typename T>
struct AdagradConstants {
  T weight_decay, eps, neg_lr;
  bool decay;
  AdagradConstants(const AdagradArgs& a, double lr)
      : weight_decay(T(a.weight_decay)),
        eps(T(a.eps)),
        neg_lr(T(-lr)),
        decay(a.weight_decay != 0) {}
};

/// clip_grad_norm's term of one element, |g|^p in f64 (p = 1 and 2 without pow, |g| for p =
/// infinity), and how terms join: a sum, or for p = infinity a maximum that keeps a NaN.
struct NormTerm {
  double p;
  bool max;
  explicit NormTerm(double norm_type) : p(norm_type), max(isinf(norm_type)) {}
  TANDEM_HD double operator()(double g) const {
    const double a = fabs(g);
    return max || p == 1 ? a : p == 2 ? a * a : pow(a, p);
  }
  TANDEM_HD double join(double acc, double t) const {
    if (!max) return acc + t;
    if (acc != acc) return acc;
    return t > acc || t != t ? t : acc;
  }
};

/// torch.optim.Adagrad on one element.
template <typename T>
TANDEM_HD void adagrad_update(T& p, T& sum, T g, const AdagradConstants<T>& c) {
  T d = g;
  if (c.decay) d = d + c.weight_decay * p;
  sum = sum + T(d * d);
  p = p + c.neg_lr * T(d / T(T(sqrt(sum)) + c.eps));
}

}  // namespace tandem::kernels
