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

/// a + alpha * b, as the add functor computes it.
template <typename T>
TANDEM_HD T axpy(T a, double alpha, T b) {
  return alpha == 1.0 ? a + b : a + T(alpha) * b;
}

/// torch.optim.SGD on one element; `buf` is null without momentum.
template <typename T>
TANDEM_HD void sgd_update(T& p, T* buf, T g, const SgdArgs& a) {
  T d = g;
  if (a.weight_decay != 0) d = axpy(d, a.weight_decay, p);
  if (buf) {
    T& b = *buf;
    b = a.first ? d : axpy(T(b * T(a.momentum)), 1.0 - a.dampening, d);
    d = a.nesterov ? axpy(d, a.momentum, b) : b;
  }
  p = axpy(p, -a.lr, d);
}

/// Adam's per-call constants, computed once on the host: the parameter's decay factor
/// (1 - lr wd for AdamW, 1 for Adam), sqrt of the second bias correction, -lr / the first.
template <typename T>
struct AdamConstants {
  T decay, root_bias2;
  double step;
  explicit AdamConstants(const AdamArgs& a)
      : decay(T(a.decoupled ? 1.0 - a.lr * a.weight_decay : 1.0)),
        root_bias2(T(std::sqrt(a.bias_correction2))),
        step(-a.lr / a.bias_correction1) {}
};

/// torch.optim.Adam (weight decay added to the gradient) or AdamW (decoupled: the parameter
/// shrinks first) on one element, with bias-corrected moments; with `vmax` (AMSGrad), the
/// denominator takes the running maximum of v (NaN propagating, as torch.maximum).
template <typename T>
TANDEM_HD void adam_update(T& p, T& m, T& v, T* vmax, T g, const AdamArgs& a,
                           const AdamConstants<T>& c) {
  if (!a.decoupled && a.weight_decay != 0) g = axpy(g, a.weight_decay, p);
  p = p * c.decay;
  m = axpy(T(m * T(a.beta1)), 1.0 - a.beta1, g);
  v = axpy(T(v * T(a.beta2)), 1.0 - a.beta2, T(g * g));
  if (vmax && !(*vmax >= v)) *vmax = v;
  const T denom = T(T(sqrt(vmax ? *vmax : v)) / c.root_bias2) + T(a.eps);
  p = axpy(p, c.step, T(m / denom));
}

}  // namespace tandem::kernels
