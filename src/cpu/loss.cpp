// CPU kernels of the classification losses: picking each row's target class and scattering its
// gradient back; the CTC loss's recursions, a sample per task.
#include <vector>

#include "../kernels/ctc.hpp"
#include "kernels.hpp"
#include "loops.hpp"

namespace tandem::kernels::cpu {
inline namespace TANDEM_CPU_NAMESPACE {
namespace {

void pick_classes(const Tensor& out, const Tensor& x, const Tensor& target, int64_t ignore_index,
                  const char* op) {
  const int64_t rows = x.size(0), classes = x.size(1);
  const int64_t* t = ptr<const int64_t>(target);
  for (int64_t i = 0; i < rows; ++i)
    TANDEM_CHECK_INDEX(t[i] == ignore_index || (t[i] >= 0 && t[i] < classes), op, ": target ",
                       t[i], " is out of bounds for ", classes, " classes (at position ", i, ")");
  dispatch_dtype<DTypeSet::floating>(x.dtype(), "pick_classes (cpu)", [&](auto tag) {
    using T = decltype(tag);
    const T* px = ptr<const T>(x);
    T* po = ptr<T>(out);
    parallel_for(0, rows, kElementwiseGrain, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) po[i] = t[i] == ignore_index ? T(0) : px[i * classes + t[i]];
    });
  });
}

void pick_classes_backward(const Tensor& grad_x, const Tensor& grad, const Tensor& target,
                           int64_t ignore_index) {
  const int64_t rows = grad_x.size(0), classes = grad_x.size(1);
  const int64_t* t = ptr<const int64_t>(target);
  dispatch_dtype<DTypeSet::floating>(grad_x.dtype(), "pick_classes_backward (cpu)", [&](auto tag) {
    using T = decltype(tag);
    T* pg = ptr<T>(grad_x);
    const T* pgo = ptr<const T>(grad);
    parallel_for(0, rows, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(classes, 1)),
                 [&](int64_t lo, int64_t hi) {
                   std::fill(pg + lo * classes, pg + hi * classes, T(0));
                   for (int64_t i = lo; i < hi; ++i)
                     if (t[i] != ignore_index) pg[i * classes + t[i]] = pgo[i];
                 });
  });
}

// Each sample's frames in turn, its states in a loop per frame (ctc.hpp).
void ctc_loss_forward(const Tensor& nll, const Tensor& log_alpha, const Tensor& log_probs,
                      const Tensor& targets, const Tensor& input_lengths,
                      const Tensor& target_lengths, int64_t blank) {
  const ctc::Geometry g = ctc::geometry(log_probs, targets, blank);
  const int64_t *in_len = ptr<const int64_t>(input_lengths),
                *tg_len = ptr<const int64_t>(target_lengths);
  dispatch_dtype<DTypeSet::wide>(log_probs.dtype(), "ctc_loss_forward (cpu)", [&](auto tag) {
    using T = decltype(tag);
    const T* lp = ptr<const T>(log_probs);
    T *out = ptr<T>(nll), *alpha = ptr<T>(log_alpha);
    parallel_for(0, g.n, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        const int64_t frames = in_len[i], states = 2 * tg_len[i] + 1;
        const int64_t* target = ptr<const int64_t>(targets) + i * g.max_target;
        const T* emit = lp + i * g.stride_n;
        T* row = alpha + i * g.frames * g.states;
        if (frames > 0)
          for (int64_t s = 0; s < states; ++s)
            row[s] = ctc::alpha_first(emit, target, s, tg_len[i], g);
        for (int64_t t = 1; t < frames; ++t, row += g.states)
          for (int64_t s = 0; s < states; ++s)
            row[g.states + s] = ctc::alpha_next(row, emit + t * g.stride_t, target, s, g);
        out[i] = ctc::loss(row, frames, tg_len[i]);
      }
    });
  });
}

// Per sample, from its last frame back: beta's row (two rows, in turn), then each state's share
// of the paths through the frame, taken off its class's gradient.
void ctc_loss_backward(const Tensor& grad, const Tensor& grad_nll, const Tensor& log_probs,
                       const Tensor& targets, const Tensor& input_lengths,
                       const Tensor& target_lengths, const Tensor& nll, const Tensor& log_alpha,
                       int64_t blank) {
  const ctc::Geometry g = ctc::geometry(log_probs, targets, blank);
  const int64_t *in_len = ptr<const int64_t>(input_lengths),
                *tg_len = ptr<const int64_t>(target_lengths);
  dispatch_dtype<DTypeSet::wide>(log_probs.dtype(), "ctc_loss_backward (cpu)", [&](auto tag) {
    using T = decltype(tag);
    const T *lp = ptr<const T>(log_probs), *gn = ptr<const T>(grad_nll),
            *losses = ptr<const T>(nll), *alpha = ptr<const T>(log_alpha);
    T* out = ptr<T>(grad);
    parallel_for(0, g.n, 1, [&](int64_t lo, int64_t hi) {
      std::vector<T> beta(static_cast<size_t>(2 * g.states));
      for (int64_t i = lo; i < hi; ++i) {
        const bool possible = in_len[i] > 0 && losses[i] != T(INFINITY);
        const int64_t frames = possible ? in_len[i] : 0, last = 2 * tg_len[i];
        for (int64_t t = frames; t < g.frames; ++t)
          std::fill_n(out + (t * g.n + i) * g.classes, g.classes, T(0));
        const int64_t* target = ptr<const int64_t>(targets) + i * g.max_target;
        for (int64_t t = frames - 1; t >= 0; --t) {
          const T* emit = lp + t * g.stride_t + i * g.stride_n;
          T* row = beta.data() + (t % 2) * g.states;
          const T* next = beta.data() + (1 - t % 2) * g.states;
          for (int64_t s = 0; s <= last; ++s)
            row[s] = t == frames - 1 ? ctc::beta_last(emit, target, s, last, g)
                                     : ctc::beta_next(next, emit, target, s, last, g);
          const T* a = alpha + (i * g.frames + t) * g.states;
          T* o = out + (t * g.n + i) * g.classes;
          std::fill_n(o, g.classes, T(0));
          for (int64_t s = 0; s <= last; ++s) {
            const int64_t c = ctc::label(target, s, blank);
            o[c] += ctc::occupancy(a[s], row[s], losses[i], emit[c * g.stride_c]);
          }
          for (int64_t c = 0; c < g.classes; ++c) o[c] *= -gn[i];  // as the GPU's sums
        }
      }
    });
  });
}

}  // namespace

TANDEM_REGISTER_CPU(pick_classes, pick_classes);
TANDEM_REGISTER_CPU(pick_classes_backward, pick_classes_backward);
TANDEM_REGISTER_CPU(ctc_loss_forward, ctc_loss_forward);
TANDEM_REGISTER_CPU(ctc_loss_backward, ctc_loss_backward);

}  // namespace TANDEM_CPU_NAMESPACE
}  // namespace tandem::kernels::cpu
