// The connectionist temporal classification loss (Graves et al. 2006), as torch's ctc_loss: the
// op checks and lays out the targets on the host; the kernels (kernels/ctc.hpp) run the forward
// recursion, and the backward one for the gradient.
#include <algorithm>
#include <numeric>
#include <vector>

#include "common.hpp"

namespace tandem {
using namespace ops_detail;

Tensor ctc_loss(const Tensor& log_probs, const Tensor& targets,
                const std::vector<int64_t>& input_lengths,
                const std::vector<int64_t>& target_lengths, int64_t blank, Reduction reduction,
                bool zero_infinity) {
  const char* op = "ctc_loss";
  check_defined(log_probs, op, "log_probs");
  check_defined(targets, op, "targets");
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
  // The targets as (N, S) rows on the host (read from a GPU as the lengths are): padded rows as
  // given, or one after another (1-d); past each length the kernels read nothing.
  const int64_t longest =
      n == 0 ? 0 : *std::max_element(target_lengths.begin(), target_lengths.end());
  const int64_t width = std::max<int64_t>(longest, 1);
  const std::vector<int64_t> given =
      targets.detach().to(kCPU).to(DType::i64).contiguous().to_vector<int64_t>();
  std::vector<int64_t> rows(static_cast<size_t>(n * width), 0), offsets(static_cast<size_t>(n));
  if (targets.dim() == 2) {  // padded rows (one, unbatched)
    TANDEM_CHECK(targets.size(0) == n && targets.size(1) >= longest, op,
                 ": expected padded targets (", n, ", ", longest, " or more), got ",
                 shape_str(targets.shape()));
    for (int64_t i = 0; i < n; ++i) offsets[static_cast<size_t>(i)] = i * targets.size(1);
  } else {
    TANDEM_CHECK(targets.dim() == 1, op, ": expected targets (N, S) or concatenated (sum of ",
                 "the target lengths), got ", shape_str(targets.shape()));
    const int64_t total = std::accumulate(target_lengths.begin(), target_lengths.end(), int64_t{0});
    TANDEM_CHECK(targets.numel() == total, op, ": expected ", total,
                 " targets, the sum of the target lengths, got ", targets.numel());
    for (int64_t i = 0, offset = 0; i < n; offset += target_lengths[i++])
      offsets[static_cast<size_t>(i)] = offset;
  }
  for (int64_t i = 0; i < n; ++i)
    for (int64_t s = 0; s < target_lengths[i]; ++s) {
      const int64_t c = given[static_cast<size_t>(offsets[static_cast<size_t>(i)] + s)];
      TANDEM_CHECK_INDEX(c >= 0 && c < classes, op, ": target ", c, " of sample ", i, " (position ",
                         s, ") is out of bounds for ", classes, " classes");
      rows[static_cast<size_t>(i * width + s)] = c;
    }
  const Tensor lp_data = lp.detach();
  const Tensor target_rows = from_vector(rows, {n, width}).to(device);
  const Tensor in_lengths = from_vector(input_lengths, {n}).to(device);
  const Tensor tg_lengths = from_vector(target_lengths, {n}).to(device);
  Tensor nll = make_tensor({n}, lp.dtype(), device);
  const Tensor log_alpha = make_tensor({n, frames, 2 * width + 1}, lp.dtype(), device);
  kernels::ctc_loss_forward(nll, log_alpha, lp_data, target_rows, in_lengths, tg_lengths, blank);
  autograd::record(op, {log_probs}, nll,
                   [lp_data, target_rows, in_lengths, tg_lengths, losses = nll.detach(), log_alpha,
                    blank, shape = log_probs.shape()](const Tensor& g) -> std::vector<Tensor> {
                     Tensor grad = make_tensor(lp_data.shape(), lp_data.dtype(), lp_data.device());
                     kernels::ctc_loss_backward(grad, g.contiguous(), lp_data, target_rows,
                                                in_lengths, tg_lengths, losses, log_alpha, blank);
                     return {grad.reshape(shape)};
                   });
  autograd::save_for_backward(nll, {log_probs, nll});  // the closure reads the losses too
  if (zero_infinity) nll = where(isinf(nll), 0.0, nll);
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
