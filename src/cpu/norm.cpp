// CPU batch norm over (N, C, S) tensors, parallel over planes in memory order; each channel's
// sums run in a fixed order with double accumulators (per plane, then planes in sample order). The
// forward may add a residual and apply relu in the same pass, and the backward then takes relu's
// mask from the output. Layer norm over (rows, features), a row at a time.
#include <cmath>

#include "../kernels/norm_update.hpp"
#include "extreme.hpp"
#include "kernels.hpp"
#include "loops.hpp"
#include "tandem/kernels/functors.hpp"
#include "vec_math.hpp"

namespace tandem::kernels::cpu {
inline namespace TANDEM_CPU_NAMESPACE {
namespace {

struct Dims {
  int64_t n, c, s;
};
Dims dims_of(const Tensor& t) { return {t.size(0), t.size(1), t.size(2)}; }

// Channel c's total of per-plane values: its planes added in sample order (so the thread count
// never changes it).
double channel_total(const double* per_plane, const Dims& d, int64_t c) {
  double total = 0;
  for (int64_t n = 0; n < d.n; ++n) total += per_plane[n * d.c + c];
  return total;
}

template <typename T>
T param_or(const Tensor& t, int64_t c, T fallback) {
  return t.defined() ? ptr<const T>(t)[c] : fallback;
}

// Per-plane sums in kLanes independent accumulators (a loop the compiler vectorizes), folded
// into a double in a fixed order: fast, and still independent of the thread count because each
// plane is summed by one task and a channel's planes are added in sample order.
constexpr int64_t kLanes = 16;

template <typename T, typename F>
double lane_sum(int64_t s, F&& term) {
  T acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= s; i += kLanes)
    for (int64_t l = 0; l < kLanes; ++l) acc[l] += term(i + l);
  for (int64_t l = 0; i < s; ++i, ++l) acc[l] += term(i);
  double total = 0;
  for (int64_t l = 0; l < kLanes; ++l) total += acc[l];
  return total;
}

// Two lane sums in one pass over the data.
template <typename T, typename F, typename G>
std::pair<double, double> lane_sum2(int64_t s, F&& f, G&& g) {
  T a[kLanes] = {}, b[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= s; i += kLanes)
    for (int64_t l = 0; l < kLanes; ++l) {
      a[l] += f(i + l);
      b[l] += g(i + l);
    }
  for (int64_t l = 0; i < s; ++i, ++l) {
    a[l] += f(i);
    b[l] += g(i);
  }
  double ta = 0, tb = 0;
  for (int64_t l = 0; l < kLanes; ++l) ta += a[l], tb += b[l];
  return {ta, tb};
}

}  // namespace

// The kernels below read activations of S (f32, f64, or f16/bf16 as they are, widened element by
// element) and compute in T = acc_type<S>, the type of the statistics and parameters.

void batch_norm_stats(const Tensor& mean, const Tensor& var, const Tensor& in) {
  dispatch_dtype<DTypeSet::floating>(in.dtype(), "batch_norm (cpu)", [&](auto s) {
    using S = decltype(s);
    using T = acc_type<S>;
    Dims d = dims_of(in);
    const S* x = ptr<const S>(in);
    const double count = static_cast<double>(d.n * d.s);
    double* part = scratch<double, 0>(d.n * d.c).data();  // per plane
    for_each_plane(d.n * d.c, d.s, [&](int64_t plane) {
      const S* xp = x + plane * d.s;
      part[plane] = lane_sum<T>(d.s, [&](int64_t i) { return widen_one(xp[i]); });
    });
    std::vector<double> mu(d.c);
    for (int64_t c = 0; c < d.c; ++c) mu[c] = channel_total(part, d, c) / count;
    for_each_plane(d.n * d.c, d.s, [&](int64_t plane) {
      const S* xp = x + plane * d.s;
      const T mu_c = static_cast<T>(mu[plane % d.c]);
      part[plane] = lane_sum<T>(d.s, [&](int64_t i) {
        T v = widen_one(xp[i]) - mu_c;
        return v * v;
      });
    });
    for (int64_t c = 0; c < d.c; ++c) {
      ptr<T>(mean)[c] = static_cast<T>(mu[c]);
      ptr<T>(var)[c] = static_cast<T>(channel_total(part, d, c) / count);
    }
  });
}

void batch_norm_update(const Tensor& invstd, const Tensor& running_mean, const Tensor& running_var,
                       const Tensor& mean, const Tensor& var, const BatchNormUpdate& u) {
  dispatch_dtype<DTypeSet::wide>(var.dtype(), "batch_norm (cpu)", [&](auto p) {
    using P = decltype(p);
    P* rm = u.running ? ptr<P>(running_mean) : nullptr;
    P* rv = u.running ? ptr<P>(running_var) : nullptr;
    for (int64_t c = 0; c < var.numel(); ++c)
      batch_norm_update_one(ptr<P>(invstd), rm, rv, ptr<const P>(mean), ptr<const P>(var), u, c);
  });
  if (u.batches_tracked) ++*u.batches_tracked;
}

void batch_norm_forward(const Tensor& out, const Tensor& in, const Tensor& mean,
                        const Tensor& invstd, const Tensor& weight, const Tensor& bias,
                        const Tensor& residual, bool relu) {
  dispatch_dtype<DTypeSet::floating>(in.dtype(), "batch_norm (cpu)", [&](auto s) {
    using S = decltype(s);
    using T = acc_type<S>;
    Dims d = dims_of(in);
    const S* x = ptr<const S>(in);
    const S* r = residual.defined() ? ptr<const S>(residual) : nullptr;
    S* y = ptr<S>(out);
    // One loop per (residual, relu) pair, each vectorized on its own. The sum is rounded as the
    // separate ops round it: bn = x * scale + shift, then bn + residual, then relu.
    // Parameters read through raw pointers: small maps (2x2) have a plane every 4 elements.
    const T* is = ptr<const T>(invstd);
    const T* mu = ptr<const T>(mean);
    const T* w = weight.defined() ? ptr<const T>(weight) : nullptr;
    const T* b = bias.defined() ? ptr<const T>(bias) : nullptr;
    auto planes = [&](auto with_residual, auto with_relu, int64_t lo, int64_t hi) {
      for (int64_t plane = lo; plane < hi; ++plane) {
        const int64_t c = plane % d.c;
        const T scale = is[c] * (w ? w[c] : T(1));
        const T shift = (b ? b[c] : T(0)) - mu[c] * scale;
        const S* xp = x + plane * d.s;
        S* yp = y + plane * d.s;
        for (int64_t i = 0; i < d.s; ++i) {
          T v = widen_one(xp[i]) * scale + shift;
          if constexpr (decltype(with_residual)::value) v = v + widen_one(r[plane * d.s + i]);
          if constexpr (decltype(with_relu)::value) v = Relu{}(v);
          yp[i] = narrow_one<S>(v);
        }
      }
    };
    using yes = std::true_type;
    using no = std::false_type;
    parallel_for(0, d.n * d.c, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(d.s, 1)),
                 [&](int64_t lo, int64_t hi) {
                   if (r && relu) planes(yes{}, yes{}, lo, hi);
                   else if (r) planes(yes{}, no{}, lo, hi);
                   else if (relu) planes(no{}, yes{}, lo, hi);
                   else planes(no{}, no{}, lo, hi);
                 });
  });
}

void batch_norm_backward(const Tensor& grad_in, const Tensor& grad_weight,
                         const Tensor& grad_bias, const Tensor& grad_residual,
                         const Tensor& grad_out, const Tensor& in, const Tensor& out,
                         const Tensor& mean, const Tensor& invstd, const Tensor& weight,
                         bool training, const BatchNormSync* sync) {
  dispatch_dtype<DTypeSet::floating>(in.dtype(), "batch_norm_backward (cpu)", [&](auto s) {
    using S = decltype(s);
    using T = acc_type<S>;
    Dims d = dims_of(in);
    const S* x = ptr<const S>(in);
    const S* dy = ptr<const S>(grad_out);
    const S* y = out.defined() ? ptr<const S>(out) : nullptr;  // relu: its mask
    S* dr = grad_residual.defined() ? ptr<S>(grad_residual) : nullptr;
    const double count = sync ? sync->count.item<double>() : static_cast<double>(d.n * d.s);
    // Two passes over the planes in memory order: the sums (and the residual's gradient), then,
    // with every channel's sums known (synchronized: the group's, allreduced in `sums` between
    // the passes), the input gradient.
    Tensor sums = sync ? make_tensor({2, d.c}, mean.dtype(), in.device()) : Tensor();
    const T* mean_p = ptr<const T>(mean);
    const T* invstd_p = ptr<const T>(invstd);
    auto run = [&](auto with_relu) {
      constexpr bool kRelu = decltype(with_relu)::value;
      // The gradient reaching the batch norm's output: dy, through relu where out > 0 only
      // (NaN outputs pass none, as relu's own backward).
      // Both loads unconditional: a select the compiler vectorizes (a load under the condition
      // would not be).
      auto dz = [&](int64_t j) {
        const T g = widen_one(dy[j]);
        if constexpr (kRelu) {
          const T out_j = widen_one(y[j]);
          return out_j > T(0) ? g : T(0);
        } else {
          return g;
        }
      };
      double* part_dy = scratch<double, 0>(d.n * d.c).data();  // per plane
      double* part_dy_xmu = scratch<double, 1>(d.n * d.c).data();
      for_each_plane(d.n * d.c, d.s, [&](int64_t plane) {
        const int64_t o = plane * d.s;
        const T mu = mean_p[plane % d.c];
        auto [a, b] = lane_sum2<T>(
            d.s, [&](int64_t i) { return dz(o + i); },
            [&](int64_t i) { return dz(o + i) * (widen_one(x[o + i]) - mu); });
        part_dy[plane] = a;
        part_dy_xmu[plane] = b;
        if (dr)  // the residual's gradient is dz itself
          for (int64_t i = 0; i < d.s; ++i) dr[o + i] = narrow_one<S>(dz(o + i));
      });
      std::vector<double> sum_dy(d.c), sum_dy_xmu(d.c);
      for (int64_t c = 0; c < d.c; ++c) {
        sum_dy[c] = channel_total(part_dy, d, c);
        sum_dy_xmu[c] = channel_total(part_dy_xmu, d, c);
        if (grad_weight.defined())
          ptr<T>(grad_weight)[c] = static_cast<T>(sum_dy_xmu[c] * invstd_p[c]);
        if (grad_bias.defined()) ptr<T>(grad_bias)[c] = static_cast<T>(sum_dy[c]);
        if (sync) {
          ptr<T>(sums)[c] = static_cast<T>(sum_dy[c]);
          ptr<T>(sums)[d.c + c] = static_cast<T>(sum_dy_xmu[c]);
        }
      }
      if (sync) {  // the group's sums
        sync->allreduce(sums);
        for (int64_t c = 0; c < d.c; ++c) {
          sum_dy[c] = ptr<const T>(sums)[c];
          sum_dy_xmu[c] = ptr<const T>(sums)[d.c + c];
        }
      }
      if (!grad_in.defined()) return;
      // Training: dx = w * is * (dy - mean(dy) - xhat * mean(dy * xhat)); eval: dx = w * is * dy.
      std::vector<T> k(d.c), mean_dy(d.c), slope(d.c);
      for (int64_t c = 0; c < d.c; ++c) {
        const T is = invstd_p[c];
        const double w = param_or<T>(weight, c, T(1));
        k[c] = static_cast<T>(w * is);
        mean_dy[c] = static_cast<T>(training ? sum_dy[c] / count : 0.0);
        // xhat * mean(dy * xhat) = (x - mu) * is * mean(dy * xhat)
        slope[c] = static_cast<T>(training ? is * (sum_dy_xmu[c] * is) / count : 0.0);
      }
      S* dx = ptr<S>(grad_in);
      for_each_plane(d.n * d.c, d.s, [&](int64_t plane) {
        const int64_t o = plane * d.s, c = plane % d.c;
        const T mu = mean_p[c], k_c = k[c], mean_dy_c = mean_dy[c], slope_c = slope[c];
        for (int64_t i = 0; i < d.s; ++i)
          dx[o + i] =
              narrow_one<S>(k_c * (dz(o + i) - mean_dy_c - (widen_one(x[o + i]) - mu) * slope_c));
      });
    };
    if (y)
      run(std::true_type{});
    else
      run(std::false_type{});
  });
}

// Layer norm: each row normalized by one task while it sits in the cache (the statistics in
// two passes over it, then the output); the weight and bias gradients, sums over rows, are
// summed per chunk of rows (chunks the shape alone decides) and the chunks added in order.
void layer_norm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& in,
                        const Tensor& weight, const Tensor& bias, double eps) {
  dispatch_dtype<DTypeSet::floating>(in.dtype(), "layer_norm (cpu)", [&](auto s) {
    using S = decltype(s);
    using T = acc_type<S>;
    const int64_t rows = in.size(0), f = in.size(1);
    std::vector<T> ones(weight.defined() ? 0 : f, T(1)), zeros(bias.defined() ? 0 : f, T(0));
    const T* w = weight.defined() ? ptr<const T>(weight) : ones.data();
    const T* b = bias.defined() ? ptr<const T>(bias) : zeros.data();
    const S* x = ptr<const S>(in);
    S* y = ptr<S>(out);
    T* mean_p = ptr<T>(mean);
    T* rstd_p = ptr<T>(rstd);
    for_each_plane(rows, f, [&](int64_t r) {
      const S* xr = x + r * f;
      const T mu = static_cast<T>(lane_sum<T>(f, [&](int64_t i) { return widen_one(xr[i]); }) / f);
      const double var = lane_sum<T>(f,
                                     [&](int64_t i) {
                                       const T v = widen_one(xr[i]) - mu;
                                       return v * v;
                                     }) /
                         f;
      const T rs = static_cast<T>(1.0 / std::sqrt(var + eps));
      mean_p[r] = mu;
      rstd_p[r] = rs;
      S* yr = y + r * f;
      for (int64_t i = 0; i < f; ++i)
        yr[i] = narrow_one<S>((widen_one(xr[i]) - mu) * rs * w[i] + b[i]);
    });
  });
}

void layer_norm_backward(const Tensor& grad_in, const Tensor& grad_weight, const Tensor& grad_bias,
                         const Tensor& grad_out, const Tensor& in, const Tensor& mean,
                         const Tensor& rstd, const Tensor& weight) {
  dispatch_dtype<DTypeSet::floating>(in.dtype(), "layer_norm_backward (cpu)", [&](auto s) {
    using S = decltype(s);
    using T = acc_type<S>;
    const int64_t rows = in.size(0), f = in.size(1);
    if (rows == 0 || f == 0) return;
    std::vector<T> ones(weight.defined() ? 0 : f, T(1));
    const T* w = weight.defined() ? ptr<const T>(weight) : ones.data();
    const S* x = ptr<const S>(in);
    const S* dy = ptr<const S>(grad_out);
    const T* mean_p = ptr<const T>(mean);
    const T* rstd_p = ptr<const T>(rstd);
    S* dx = grad_in.defined() ? ptr<S>(grad_in) : nullptr;
    const bool sums = grad_weight.defined() || grad_bias.defined();
    // Per chunk of rows: the sums of dy * xhat (the weight's gradient) and of dy (the bias's).
    const int64_t chunk = std::max<int64_t>(1, kElementwiseGrain / f);
    const int64_t chunks = (rows + chunk - 1) / chunk;
    std::vector<T> part(sums ? chunks * 2 * f : 0, T(0));
    parallel_for(0, chunks, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t k = lo; k < hi; ++k) {
        T* part_w = sums ? part.data() + k * 2 * f : nullptr;
        T* part_b = sums ? part_w + f : nullptr;
        for (int64_t r = k * chunk; r < std::min(rows, (k + 1) * chunk); ++r) {
          const S* xr = x + r * f;
          const S* gr = dy + r * f;
          const T mu = mean_p[r], rs = rstd_p[r];
          if (dx) {
            // dx = rs * (g * w - mean(g * w) - xhat * mean(g * w * xhat))
            auto [a, c] = lane_sum2<T>(
                f, [&](int64_t i) { return widen_one(gr[i]) * w[i]; },
                [&](int64_t i) { return widen_one(gr[i]) * w[i] * (widen_one(xr[i]) - mu); });
            const T mean_gw = static_cast<T>(a / f);
            const T slope = static_cast<T>(c * rs * rs / f);
            S* dxr = dx + r * f;
            for (int64_t i = 0; i < f; ++i)
              dxr[i] = narrow_one<S>(
                  rs * (widen_one(gr[i]) * w[i] - mean_gw - (widen_one(xr[i]) - mu) * slope));
          }
          if (sums)
            for (int64_t i = 0; i < f; ++i) {
              const T g = widen_one(gr[i]);
              part_w[i] += g * ((widen_one(xr[i]) - mu) * rs);
              part_b[i] += g;
            }
        }
      }
    });
    if (!sums) return;
    T* gw = grad_weight.defined() ? ptr<T>(grad_weight) : nullptr;
    T* gb = grad_bias.defined() ? ptr<T>(grad_bias) : nullptr;
    std::vector<double> tw(f, 0.0), tb(f, 0.0);
    for (int64_t k = 0; k < chunks; ++k)
      for (int64_t i = 0; i < f; ++i) {
        tw[i] += part[k * 2 * f + i];
        tb[i] += part[k * 2 * f + f + i];
      }
    for (int64_t i = 0; i < f; ++i) {
      if (gw) gw[i] = static_cast<T>(tw[i]);
      if (gb) gb[i] = static_cast<T>(tb[i]);
    }
  });
}

// Softmax a row at a time, the row in the cache: its max, the shifted exps (vectorized f32 exp
// where the ISA has it), their sum, the scaling; the backward's one dot product, then the row.
template <typename T>
void exp_row(T* y, int64_t n) {  // y = exp(y)
  if constexpr (vec::kUnary<Exp, T>) {
    vec::unary(Exp{}, y, y, n);
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = std::exp(y[i]);
  }
}

void softmax_rows(const Tensor& out, const Tensor& in, bool log) {
  dispatch_dtype<DTypeSet::wide>(in.dtype(), "softmax (cpu)", [&](auto s) {
    using T = decltype(s);
    const int64_t cols = in.size(-1), rows = cols > 0 ? in.numel() / cols : 0;
    const T* x = ptr<const T>(in);
    T* y = ptr<T>(out);
    for_each_plane(rows, cols, [&](int64_t r) {
      const T* xr = x + r * cols;
      T* yr = y + r * cols;
      // The max, a NaN winning, from vectors of compares (extreme.hpp): the lanes of scalar
      // compares this had did not vectorize, and softmax's forward took 1.5x PyTorch's.
      T m = xr[extreme_position<true>(xr, cols)];
      if (std::isinf(m) && m < 0) m = 0;  // a row of -inf: exp(-inf - 0) = 0, as PyTorch's
      // The shifted exps and their sum; log_softmax then writes x - m - log(sum) over them.
      for (int64_t i = 0; i < cols; ++i) yr[i] = xr[i] - m;
      exp_row(yr, cols);
      const double total = lane_sum<T>(cols, [&](int64_t i) { return yr[i]; });
      if (log) {
        const T lse = static_cast<T>(std::log(total));
        for (int64_t i = 0; i < cols; ++i) yr[i] = (xr[i] - m) - lse;
      } else {
        const T inv = static_cast<T>(1.0 / total);
        for (int64_t i = 0; i < cols; ++i) yr[i] *= inv;
      }
    });
  });
}

void softmax_rows_backward(const Tensor& grad_in, const Tensor& grad_out, const Tensor& out,
                           bool log) {
  dispatch_dtype<DTypeSet::wide>(out.dtype(), "softmax_backward (cpu)", [&](auto s) {
    using T = decltype(s);
    const int64_t cols = out.size(-1), rows = cols > 0 ? out.numel() / cols : 0;
    const T* g = ptr<const T>(grad_out);
    const T* y = ptr<const T>(out);
    T* dx = ptr<T>(grad_in);
    for_each_plane(rows, cols, [&](int64_t r) {
      const T* gr = g + r * cols;
      const T* yr = y + r * cols;
      T* dr = dx + r * cols;
      if (log) {  // dx = g - exp(y) * sum(g)
        const T total = static_cast<T>(lane_sum<T>(cols, [&](int64_t i) { return gr[i]; }));
        for (int64_t i = 0; i < cols; ++i) dr[i] = yr[i];
        exp_row(dr, cols);
        for (int64_t i = 0; i < cols; ++i) dr[i] = gr[i] - dr[i] * total;
      } else {  // dx = y * (g - sum(g * y))
        const T dot = static_cast<T>(lane_sum<T>(cols, [&](int64_t i) { return gr[i] * yr[i]; }));
        for (int64_t i = 0; i < cols; ++i) dr[i] = yr[i] * (gr[i] - dot);
      }
    });
  });
}

// The registered entries: f16/bf16 activations in row-major order with f32 statistics and
// parameters (autocast's batch norm) reach the kernels above as they are; anything else
// through f32 row-major copies.
void batch_norm_stats_entry(const Tensor& mean, const Tensor& var, const Tensor& in,
                            const BatchNormStatsUpdate* update) {
  if (reads_narrow({&in}, {&mean, &var}))
    batch_norm_stats(mean, var, in);
  else
    through_f32_row_major<&batch_norm_stats, 0b11>(mean, var, in);
  if (update)
    batch_norm_update(update->invstd, update->running_mean, update->running_var, mean, var,
                      update->u);
}

void batch_norm_forward_entry(const Tensor& out, const Tensor& in, const Tensor& mean,
                              const Tensor& invstd, const Tensor& weight, const Tensor& bias,
                              const Tensor& residual, bool relu) {
  if (reads_narrow({&in, &out, &residual}, {&mean, &invstd, &weight, &bias}))
    return batch_norm_forward(out, in, mean, invstd, weight, bias, residual, relu);
  through_f32_row_major<&batch_norm_forward, 0b1>(out, in, mean, invstd, weight, bias, residual,
                                                  relu);
}

void batch_norm_backward_entry(const Tensor& grad_in, const Tensor& grad_weight,
                               const Tensor& grad_bias, const Tensor& grad_residual,
                               const Tensor& grad_out, const Tensor& in, const Tensor& out,
                               const Tensor& mean, const Tensor& invstd, const Tensor& weight,
                               bool training, const BatchNormSync* sync) {
  if (reads_narrow({&in, &grad_in, &grad_residual, &grad_out, &out},
                   {&grad_weight, &grad_bias, &mean, &invstd, &weight}))
    return batch_norm_backward(grad_in, grad_weight, grad_bias, grad_residual, grad_out, in, out,
                               mean, invstd, weight, training, sync);
  through_f32_row_major<&batch_norm_backward, 0b1111>(grad_in, grad_weight, grad_bias,
                                                      grad_residual, grad_out, in, out, mean,
                                                      invstd, weight, training, sync);
}

TANDEM_REGISTER_CPU(batch_norm_stats, batch_norm_stats_entry);
TANDEM_REGISTER_CPU(batch_norm_update, batch_norm_update);
TANDEM_REGISTER_CPU(batch_norm_forward, batch_norm_forward_entry);
TANDEM_REGISTER_CPU(batch_norm_backward, batch_norm_backward_entry);
TANDEM_REGISTER_CPU(layer_norm_forward, layer_norm_forward);
TANDEM_REGISTER_CPU(layer_norm_backward, layer_norm_backward);
TANDEM_REGISTER_CPU(softmax_rows, softmax_rows);
TANDEM_REGISTER_CPU(softmax_rows_backward, softmax_rows_backward);

}  // namespace TANDEM_CPU_NAMESPACE
}  // namespace tandem::kernels::cpu
