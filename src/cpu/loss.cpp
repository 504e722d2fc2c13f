// CPU kernels of the classification losses: picking each row's target class and scattering its
// gradient back; the CTC loss's recursions, a sample per task (f32 a frame's states a vector at
// a time where the build has vector math).
#include <algorithm>
#include <vector>

#include "../kernels/ctc.hpp"
#include "kernels.hpp"
#include "loops.hpp"
#include "vec_math.hpp"

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

#if defined(__AVX2__) && defined(__FMA__)
// One sample's f32 rows, a frame's states kWidth at a time: its labels, the frame's log-probs of
// them, and the transitions that skip a blank, laid out per state; each row in a buffer with two
// -inf states on either side, so a state's neighbours two back (alpha) or on (beta) are plain
// loads. ctc.hpp's recursions with vec_math.hpp's exp and log (within 2 ulp of libm's); the
// largest of three terms is exp(0) = 1 exactly, as the scalar form takes it.
class CtcRows {
 public:
  explicit CtcRows(const ctc::Geometry& g) : g_(g) {}
  /// Lays out the next sample's states (the buffers keep their capacity from one to the next).
  void start(const int64_t* target, int64_t target_length) {
    states_ = 2 * target_length + 1;
    const int64_t width = (states_ + vec::kWidth - 1) / vec::kWidth * vec::kWidth;
    label_.resize(static_cast<size_t>(states_));
    for (int64_t s = 0; s < states_; ++s) label_[s] = ctc::label(target, s, g_.blank);
    back_.assign(static_cast<size_t>(width), 0);
    on_.assign(static_cast<size_t>(width), 0);
    for (int64_t s = 0; s < states_; ++s) {
      back_[s] = s >= 2 && label_[s - 2] != label_[s] ? -1 : 0;
      on_[s] = s + 2 < states_ && label_[s + 2] != label_[s] ? -1 : 0;
    }
    for (auto& r : rows_) r.assign(static_cast<size_t>(width + 4), -INFINITY);
    emit_.assign(static_cast<size_t>(width), 0.0f);
    share_.assign(static_cast<size_t>(width), 0.0f);
  }
  float* row(int64_t t) { return rows_[t % 2].data() + 2; }
  /// The frame's log-probs of each state's label.
  void emit(const float* frame) {
    for (int64_t s = 0; s < states_; ++s) emit_[s] = frame[label_[s] * g_.stride_c];
  }
  /// Row t from row t - 1 (alpha), or from row t + 1 (beta: `forward` false).
  void step(int64_t t, bool forward) {
    const float* other = row(t + 1);  // t - 1 and t + 1 share a buffer
    float* out = row(t);
    const int32_t* skips = forward ? back_.data() : on_.data();
    const int64_t one = forward ? -1 : 1;
    for (int64_t s = 0; s < states_; s += vec::kWidth) {
      vec::VI skip;
      std::memcpy(&skip, skips + s, sizeof skip);
      const vec::VF a = vec::load(other + s), b = vec::load(other + s + one),
                    c = vec::select(skip, vec::load(other + s + 2 * one), vec::splat(-INFINITY));
      const vec::VF r = log_sum3(a, b, c) + vec::load(emit_.data() + s);
      vec::store(out + s, r, std::min(vec::kWidth, states_ - s));  // the pads stay -inf
    }
  }
  /// Adds each state's share of the paths through frame t (alpha's row `alpha`, beta's row t)
  /// to its class's entry of `grad`.
  void add_shares(float* grad, const float* alpha, int64_t t, float nll) {
    const float* beta = row(t);
    for (int64_t s = 0; s < states_; s += vec::kWidth) {
      const int64_t n = std::min(vec::kWidth, states_ - s);
      const vec::VF p = vec::load(alpha + s, n) + vec::load(beta + s);
      vec::store(share_.data() + s, exp_or_zero(p + nll - vec::load(emit_.data() + s)));
    }
    for (int64_t s = 0; s < states_; ++s) grad[label_[s]] += share_[s];
  }

 private:
  // exp(x), 0 below e^-80 (and for -inf): the vector exp's results there are subnormal, and
  // each costs the CPU a microcode assist (the rows' -inf states made the vector code slower
  // than libm's, which returns 0 at once). Below f32's precision beside the largest term's 1.
  static vec::VF exp_or_zero(vec::VF x) {
    const vec::VI tiny = x < -80.0f;
    return vec::select(tiny, vec::splat(0.0f), vec::exp(vec::select(tiny, vec::splat(-80.0f), x)));
  }
  static vec::VF log_sum3(vec::VF a, vec::VF b, vec::VF c) {
    const vec::VF m = vec::select(a > b, a, b);
    const vec::VF mx = vec::select(c > m, c, m);
    const vec::VF sum = exp_or_zero(a - mx) + exp_or_zero(b - mx) + exp_or_zero(c - mx);
    // all -inf: -inf (NaN where any is); a NaN the max skipped comes through its exp
    return vec::select(mx == -INFINITY, a + b + c, mx + vec::log(sum));
  }
  const ctc::Geometry& g_;
  int64_t states_ = 0;
  std::vector<int64_t> label_;
  std::vector<int32_t> back_, on_;  // -1 where the state takes the skip from two back (on)
  std::vector<float> rows_[2], emit_, share_;
};
#endif

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
#if defined(__AVX2__) && defined(__FMA__)
      CtcRows rows(g);  // f32's, for each of the task's samples in turn
#endif
      for (int64_t i = lo; i < hi; ++i) {
        const int64_t frames = in_len[i], states = 2 * tg_len[i] + 1;
        const int64_t* target = ptr<const int64_t>(targets) + i * g.max_target;
        const T* emit = lp + i * g.stride_n;
        T* row = alpha + i * g.frames * g.states;
        if (frames > 0)
          for (int64_t s = 0; s < states; ++s)
            row[s] = ctc::alpha_first(emit, target, s, tg_len[i], g);
#if defined(__AVX2__) && defined(__FMA__)
        if constexpr (std::is_same_v<T, float>) {
          rows.start(target, tg_len[i]);
          std::copy(row, row + states, rows.row(0));
          for (int64_t t = 1; t < frames; ++t) {
            rows.emit(emit + t * g.stride_t);
            rows.step(t, true);
            row += g.states;
            std::copy(rows.row(t), rows.row(t) + states, row);
          }
          out[i] = ctc::loss(row, frames, tg_len[i]);
          continue;
        }
#endif
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
#if defined(__AVX2__) && defined(__FMA__)
      CtcRows rows(g);  // f32's, for each of the task's samples in turn
#endif
      std::vector<T> beta(static_cast<size_t>(2 * g.states));
      for (int64_t i = lo; i < hi; ++i) {
        const bool possible = in_len[i] > 0 && losses[i] != T(INFINITY);
        const int64_t frames = possible ? in_len[i] : 0, last = 2 * tg_len[i];
        for (int64_t t = frames; t < g.frames; ++t)
          std::fill_n(out + (t * g.n + i) * g.classes, g.classes, T(0));
        const int64_t* target = ptr<const int64_t>(targets) + i * g.max_target;
#if defined(__AVX2__) && defined(__FMA__)
        if constexpr (std::is_same_v<T, float>) {
          rows.start(target, tg_len[i]);
          for (int64_t t = frames - 1; t >= 0; --t) {
            const float* emit = lp + t * g.stride_t + i * g.stride_n;
            rows.emit(emit);
            if (t == frames - 1) {
              for (int64_t s = 0; s <= last; ++s)
                rows.row(t)[s] = ctc::beta_last(emit, target, s, last, g);
            } else {
              rows.step(t, false);
            }
            float* o = out + (t * g.n + i) * g.classes;
            std::fill_n(o, g.classes, 0.0f);
            rows.add_shares(o, alpha + (i * g.frames + t) * g.states, t, losses[i]);
            for (int64_t c = 0; c < g.classes; ++c) o[c] *= -gn[i];
          }
          continue;
        }
#endif
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
