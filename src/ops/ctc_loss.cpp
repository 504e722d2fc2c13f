// The connectionist temporal classification loss (Graves et al. 2006), as torch's ctc_loss:
// the forward (alpha) recursion in log space, one step of ops per input frame, so it runs on
// every device and autograd gives its gradient.
#include <algorithm>
#include <limits>
#include <numeric>
#include <vector>

#include "common.hpp"

namespace tandem {
using namespace ops_detail;

namespace {

// Log 0 for the states no path reaches: finite, so that logsumexp's backward passes them a
// gradient of exp(kLogZero - x) = 0, where -inf would give 0 * exp(-inf + inf) = NaN. Sums of a
// frame's log-probabilities never come near it, so a loss past half of it is a sample no
// alignment fits (an input too short for its target): infinite, as torch's.
constexpr double kLogZero = -1e30;

// A (rows, cols) bool tensor on `device` from a host predicate of (row, col).
template <typename F>
Tensor host_mask(int64_t rows, int64_t cols, Device device, F&& f) {
  std::vector<uint8_t> v(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) v[static_cast<size_t>(r * cols + c)] = f(r, c) ? 1 : 0;
  return from_vector(v, {rows, cols}).to(DType::boolean).to(device);
}

}  // namespace

Tensor ctc_loss(const Tensor& log_probs, const Tensor& targets,
                const std::vector<int64_t>& input_lengths,
                const std::vector<int64_t>& target_lengths, int64_t blank, Reduction reduction,
                bool zero_infinity) {
  const char* op = "ctc_loss";
  check_defined(log_probs, op, "log_probs");
  check_defined(targets, op, "targets");
  check_inputs({log_probs, targets}, op);
  TANDEM_CHECK(log_probs.dtype() == DType::f32 || log_probs.dtype() == DType::f64, op,
               ": expected f32 or f64 log-probabilities, got ", log_probs.dtype());
  TANDEM_CHECK(log_probs.dim() == 3 || log_probs.dim() == 2, op,
               ": expected log_probs (T, N, C), or (T, C) unbatched, got ",
               shape_str(log_probs.shape()));
  TANDEM_CHECK(!targets.is_floating_point() && targets.dtype() != DType::boolean, op,
               ": expected integer class indices as targets, got ", targets.dtype());
  const bool batched = log_probs.dim() == 3;
  const Tensor lp = batched ? log_probs : log_probs.unsqueeze(1);  // (T, N, C)
  const int64_t frames = lp.size(0), n = lp.size(1), classes = lp.size(2);
  const Device device = lp.device();
  TANDEM_CHECK(frames > 0, op, ": expected log_probs of one frame or more, got ",
               shape_str(log_probs.shape()));
  TANDEM_CHECK(blank >= 0 && blank < classes, op, ": blank must be in [0, ", classes, "), got ",
               blank);
  TANDEM_CHECK(static_cast<int64_t>(input_lengths.size()) == n &&
                   static_cast<int64_t>(target_lengths.size()) == n,
               op, ": expected ", n, " input and target lengths, one per sample, got ",
               input_lengths.size(), " and ", target_lengths.size());
  for (int64_t i = 0; i < n; ++i) {
    TANDEM_CHECK(input_lengths[i] >= 0 && input_lengths[i] <= frames, op, ": input length ",
                 input_lengths[i], " of sample ", i, " is not in [0, ", frames, "]");
    TANDEM_CHECK(target_lengths[i] >= 0, op, ": target length ", target_lengths[i], " of sample ",
                 i, " is negative");
  }
  // The targets as (N, S) rows: padded rows as given, or one after another (1-d).
  const int64_t longest =
      n == 0 ? 0 : *std::max_element(target_lengths.begin(), target_lengths.end());
  Tensor rows;
  if (batched && targets.dim() == 2) {
    TANDEM_CHECK(targets.size(0) == n && targets.size(1) >= longest, op,
                 ": expected padded targets (", n, ", ", longest, " or more), got ",
                 shape_str(targets.shape()));
    rows = targets.to(DType::i64);
  } else {
    TANDEM_CHECK(targets.dim() == 1, op, ": expected targets (N, S) or concatenated (sum of ",
                 "the target lengths), got ", shape_str(targets.shape()));
    const int64_t total = std::accumulate(target_lengths.begin(), target_lengths.end(), int64_t{0});
    TANDEM_CHECK(batched ? targets.numel() == total : targets.numel() >= total, op, ": expected ",
                 total, " targets, the sum of the target lengths, got ", targets.numel());
    // Row i's s-th target is element offset_i + s (element 0 past its length: replaced below).
    std::vector<int64_t> index(static_cast<size_t>(n * longest), 0);
    for (int64_t i = 0, offset = 0; i < n; offset += target_lengths[i++])
      for (int64_t s = 0; s < target_lengths[i]; ++s)
        index[static_cast<size_t>(i * longest + s)] = offset + s;
    rows = total == 0 ? zeros({n, longest}, TensorOptions(DType::i64).device(device))
                      : index_select(targets.to(DType::i64), 0,
                                     from_vector(index, {n * longest}).to(device))
                            .reshape({n, longest});
  }
  // Past each target's length: blanks (torch reads no further, so padding may be anything).
  rows = where(
      host_mask(n, longest, device, [&](int64_t i, int64_t s) { return s < target_lengths[i]; }),
      rows.narrow(1, 0, longest), static_cast<double>(blank));
  // The extended labels: blank, l1, blank, l2, ..., blank (L = 2S + 1 states).
  const int64_t states = 2 * longest + 1;
  const TensorOptions i64 = TensorOptions(DType::i64).device(device);
  const Tensor blanks = full({n, longest}, static_cast<double>(blank), i64);
  const Tensor labels =
      cat({stack({blanks, rows}, 2).reshape({n, 2 * longest}), full({n, 1}, blank, i64)}, 1);
  // x's states moved k later, the first k filled from `fill` (N, 2 or more).
  auto later = [&](const Tensor& x, int64_t k, const Tensor& fill) {
    k = std::min(k, states);
    return cat({fill.narrow(1, 0, k), x.narrow(1, 0, states - k)}, 1);
  };
  const Tensor log_zero = full({n, 2}, kLogZero, lp.options());
  // A label may follow the label two states back (skipping the blank) where the two differ
  // (torch's rule: by position, so a target holding the blank label may skip too).
  const Tensor before = later(labels, 2, full({n, 2}, blank, i64));
  const Tensor skips = logical_and(
      host_mask(n, states, device, [](int64_t, int64_t s) { return s % 2 == 1 && s >= 3; }),
      ne(labels, before));
  // Each frame's log-probability of each state's label (gather checks the classes): (T, N, L).
  const Tensor emit = gather(lp, 2, labels.unsqueeze(0).expand({frames, n, states}));
  const int64_t last_frame =
      n == 0 ? 0 : *std::max_element(input_lengths.begin(), input_lengths.end());
  // (N, L): the log of the paths' probability through frame t ending in each state.
  Tensor alpha = where(
      host_mask(n, states, device,
                [&](int64_t i, int64_t s) { return s == 0 || (s == 1 && target_lengths[i] > 0); }),
      emit.select(0, 0), kLogZero);
  // Which samples' inputs still run at each frame; every one's before the shortest ends.
  const int64_t shortest =
      n == 0 ? 0 : *std::min_element(input_lengths.begin(), input_lengths.end());
  const Tensor running = host_mask(std::max<int64_t>(last_frame, 1), n, device,
                                   [&](int64_t t, int64_t i) { return t < input_lengths[i]; });
  for (int64_t t = 1; t < last_frame; ++t) {
    const Tensor stay = alpha, one_back = later(alpha, 1, log_zero),
                 two_back = where(skips, later(alpha, 2, log_zero), kLogZero);
    const Tensor next = add(logsumexp(stack({stay, one_back, two_back}, 0), 0), emit.select(0, t));
    alpha = t < shortest ? next : where(running.select(0, t).unsqueeze(1), next, alpha);
  }
  // A path ends in the last blank or the last label.
  std::vector<int64_t> ends;
  for (int64_t i = 0; i < n; ++i) {
    ends.push_back(2 * target_lengths[i]);
    ends.push_back(std::max<int64_t>(2 * target_lengths[i] - 1, 0));
  }
  const Tensor at_ends = gather(alpha, 1, from_vector(ends, {n, 2}).to(device));
  const Tensor label_end = host_mask(
      n, 2, device, [&](int64_t i, int64_t k) { return k == 0 || target_lengths[i] > 0; });
  Tensor nll = neg(logsumexp(where(label_end, at_ends, kLogZero), 1));
  // An empty input: probability 1 of an empty target, 0 of any other.
  const Tensor no_frames = host_mask(n, 1, device, [&](int64_t i, int64_t) {
                             return input_lengths[i] == 0;
                           }).reshape({n});
  const Tensor empty_target = host_mask(n, 1, device, [&](int64_t i, int64_t) {
                                return target_lengths[i] == 0;
                              }).reshape({n});
  const double inf = std::numeric_limits<double>::infinity();
  nll = where(no_frames, where(empty_target, zeros_like(nll), full_like(nll, inf)), nll);
  nll = where(ge(nll, -kLogZero / 2), zero_infinity ? 0.0 : inf, nll);
  if (!batched) nll = nll.reshape({});
  if (reduction == Reduction::mean) {
    std::vector<double> lengths;
    for (int64_t l : target_lengths)
      lengths.push_back(static_cast<double>(std::max<int64_t>(l, 1)));
    return mean(div(nll, from_vector(lengths, nll.shape()).to(lp.dtype()).to(device)));
  }
  return reduction == Reduction::sum ? sum(nll) : nll;
}

Tensor ctc_loss(const Tensor& log_probs, const Tensor& targets, const Tensor& input_lengths,
                const Tensor& target_lengths, int64_t blank, Reduction reduction,
                bool zero_infinity) {
  const char* op = "ctc_loss";
  check_defined(input_lengths, op, "input_lengths");
  check_defined(target_lengths, op, "target_lengths");
  // Read to the host, as torch reads them.
  auto lengths = [&](const Tensor& t, const char* name) {
    TANDEM_CHECK(!t.is_floating_point() && t.dtype() != DType::boolean && t.dim() <= 1, op,
                 ": expected ", name, " as integers, one per sample, got ", t.dtype(), " ",
                 shape_str(t.shape()));
    return t.detach().to(kCPU).to(DType::i64).contiguous().to_vector<int64_t>();
  };
  return ctc_loss(log_probs, targets, lengths(input_lengths, "input_lengths"),
                  lengths(target_lengths, "target_lengths"), blank, reduction, zero_infinity);
}

}  // namespace tandem
