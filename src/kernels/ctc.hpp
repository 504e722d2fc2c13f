// The CTC loss's recursions (Graves et al. 2006), written once for every backend (TANDEM_HD: g++
// and nvcc alike). A sample's extended labels are blank, l1, blank, l2, ..., blank: 2S + 1 states
// for a target of S labels. alpha_t(s) is the log-probability of the paths through frame t that
// end in state s, beta_t(s) that of the paths from state s at frame t to the end; each frame's
// row comes from the previous (next) frame's row, state by state, so a backend runs a sample's
// states in any order (the CPU in a loop, a GPU block over its threads) and frames in turn.
#pragma once

#include <math.h>

#include <cstdint>

#include "kernels.hpp"
#include "tandem/core/macros.hpp"

namespace tandem::kernels::ctc {

/// One call's shapes: log_probs (frames, n, classes) read at its strides; targets (n,
/// max_target) row-major; the forward variables (n, frames, states) with states = 2 max_target
/// + 1.
struct Geometry {
  int64_t frames, n, classes, max_target, states;
  int64_t stride_t, stride_n, stride_c;
  int64_t blank;
};

inline Geometry geometry(const Tensor& log_probs, const Tensor& targets, int64_t blank) {
  return {log_probs.size(0),   log_probs.size(1),       log_probs.size(2),
          targets.size(1),     2 * targets.size(1) + 1, log_probs.stride(0),
          log_probs.stride(1), log_probs.stride(2),     blank};
}

/// The label of extended state s: the blank at even s, the target's (s / 2)-th label at odd s.
TANDEM_HD int64_t label(const int64_t* target, int64_t s, int64_t blank) {
  return s % 2 == 0 ? blank : target[s / 2];
}

/// log(exp a + exp b + exp c); -inf when all three are. The largest term's share is 1: two
/// exponentials (log1p would be more exact near 0, at twice log's time, for a sum the largest
/// term dominates anyway).
template <typename T>
TANDEM_HD T log_sum3(T a, T b, T c) {
  if (b > a) {
    const T t = a;
    a = b, b = t;
  }
  if (c > a) {
    const T t = a;
    a = c, c = t;
  }
  if (a == -T(INFINITY)) return a + b + c;  // -inf, or NaN where b or c is (NaN is never the max)
  return a + log(T(1) + exp(b - a) + exp(c - a));
}

/// log(exp a + exp b); -inf when both are.
template <typename T>
TANDEM_HD T log_sum2(T a, T b) {
  if (b > a) {
    const T t = a;
    a = b, b = t;
  }
  return a == -T(INFINITY) ? a + b : a + log(T(1) + exp(b - a));
}

/// alpha_0(s) (frame 0): a path starts in the first blank or the first label.
template <typename T>
TANDEM_HD T alpha_first(const T* emit0, const int64_t* target, int64_t s, int64_t target_length,
                        const Geometry& g) {
  if (s == 0) return emit0[g.blank * g.stride_c];
  if (s == 1 && target_length > 0) return emit0[target[0] * g.stride_c];
  return -T(INFINITY);
}

/// alpha_t(s) from the previous frame's row `prev`; `emit` is frame t's log_probs (at n). A
/// state is reached from itself, the state before, and from two back where that skips a blank
/// between two different labels (torch's rule, by position: a target may hold the blank's
/// class).
template <typename T>
TANDEM_HD T alpha_next(const T* prev, const T* emit, const int64_t* target, int64_t s,
                       const Geometry& g) {
  const int64_t l = label(target, s, g.blank);
  const T one_back = s > 0 ? prev[s - 1] : -T(INFINITY);
  const T two_back = s > 1 && label(target, s - 2, g.blank) != l ? prev[s - 2] : -T(INFINITY);
  return log_sum3(prev[s], one_back, two_back) + emit[l * g.stride_c];
}

/// beta_{last}(s) (the sample's last frame): a path ends in the last blank or the last label;
/// `last` = 2 target_length is the last state.
template <typename T>
TANDEM_HD T beta_last(const T* emit, const int64_t* target, int64_t s, int64_t last,
                      const Geometry& g) {
  if (s == last || (s == last - 1 && last > 0)) return emit[label(target, s, g.blank) * g.stride_c];
  return -T(INFINITY);
}

/// beta_t(s) from the next frame's row `next`, the mirror of alpha_next.
template <typename T>
TANDEM_HD T beta_next(const T* next, const T* emit, const int64_t* target, int64_t s, int64_t last,
                      const Geometry& g) {
  const int64_t l = label(target, s, g.blank);
  const T one_on = s < last ? next[s + 1] : -T(INFINITY);
  const T two_on = s + 2 <= last && label(target, s + 2, g.blank) != l ? next[s + 2] : -T(INFINITY);
  return log_sum3(next[s], one_on, two_on) + emit[l * g.stride_c];
}

/// The loss of a sample whose last frame's forward row is `last_row`: minus the log of the
/// paths ending in the last blank or the last label. An empty input costs 0 for an empty
/// target and is infinite for any other.
template <typename T>
TANDEM_HD T loss(const T* last_row, int64_t input_length, int64_t target_length) {
  if (input_length == 0) return target_length == 0 ? T(0) : T(INFINITY);
  const int64_t last = 2 * target_length;
  return -(last == 0 ? last_row[0] : log_sum2(last_row[last], last_row[last - 1]));
}

/// The share of the target's probability whose paths pass state s at frame t, from alpha_t(s)
/// and beta_t(s) (which hold the state's log_prob twice): exp(alpha + beta + nll - log_prob), 0
/// where no path passes. d nll / d log_probs[t, n, c] is minus the sum of the shares of c's
/// states (torch's kernel adds exp(log_probs), what log_softmax's backward cancels; this is the
/// loss's own derivative).
template <typename T>
TANDEM_HD T occupancy(T alpha, T beta, T nll, T log_prob) {
  const T paths = alpha + beta;
  return paths == -T(INFINITY) ? T(0) : exp(paths + nll - log_prob);
}

}  // namespace tandem::kernels::ctc
