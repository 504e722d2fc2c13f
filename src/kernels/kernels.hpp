// Every kernel family, declared once and device-neutral: ops call these stubs, and each backend
// (src/cpu/, src/cuda/) registers its entries. Kernels trust their caller: the op layer checked
// shapes, dtypes and devices; inputs come broadcast to the output's shape (stride 0 where
// expanded); outputs are allocated on the inputs' device. f16/bf16 tensors reach the kernels as
// they are: kernels load them, compute in f32 and store them narrow.
#pragma once

#include <cstdint>
#include <functional>

#include "dispatch.hpp"
#include "tandem/kernels/functors.hpp"

namespace tandem::kernels {

// --- elementwise ---------------------------------------------------------------------------
/// out = op(in); any strides. out has in's dtype, bool for logical_not.
extern Stub<void (*)(const Tensor& out, UnaryOp op, const OpArgs& args, const Tensor& in)> unary;
/// out = op(a, b); a and b share a dtype; out has it too, bool for comparisons.
extern Stub<void (*)(const Tensor& out, BinaryOp op, const OpArgs& args, const Tensor& a,
                     const Tensor& b)>
    binary;
/// out = cond ? a : b
extern Stub<void (*)(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b)>
    where;
/// dst = src converted to dst's dtype; any strides, any two dtypes, one device.
extern Stub<void (*)(const Tensor& dst, const Tensor& src)> copy;
extern Stub<void (*)(const Tensor& dst, double value)> fill;
/// out[i] = start + i * step (computed in f64), out contiguous.
extern Stub<void (*)(const Tensor& out, double start, double step)> arange;

// --- random: element i of a contiguous `out` draws from Philox word (seed, offset, i) ------
extern Stub<void (*)(const Tensor& out, uint64_t seed, uint64_t offset)> uniform;  // [0, 1)
extern Stub<void (*)(const Tensor& out, uint64_t seed, uint64_t offset)> normal;
extern Stub<void (*)(const Tensor& out, int64_t low, int64_t high, uint64_t seed,
                     uint64_t offset)>
    randint;

// --- reductions: in is contiguous (rows, cols); one result per row -------------------------
enum class ReduceOp { sum, max, min, argmax, argmin };
/// out: in's dtype (max, min; sum of floats), i64 (argmax, argmin, sum of integers).
extern Stub<void (*)(const Tensor& out, ReduceOp op, const Tensor& in, int64_t rows,
                     int64_t cols)>
    reduce_rows;
/// out (cols) = the sums of in's columns, in contiguous (rows, cols): a reduction over leading
/// dims without transposing them last. CPU only (the op takes reduce_rows elsewhere).
extern Stub<void (*)(const Tensor& out, const Tensor& in, int64_t rows, int64_t cols)> sum_columns;

// --- scans and sorts along rows: in is contiguous (rows, cols), cols >= 1 --------------------
enum class ScanOp { sum, prod };
/// out (rows, cols), contiguous, in's dtype: each row's running sums (products), from the row's
/// end when `reverse`; `exclusive` leaves each element out of its own result (the first is 0,
/// or 1). Floats accumulate as reduce_rows's sums do.
extern Stub<void (*)(const Tensor& out, const Tensor& in, int64_t rows, int64_t cols, ScanOp op,
                     bool reverse, bool exclusive)>
    scan_rows;
/// indices (rows, k), i64 contiguous: the positions of each row's k smallest elements in
/// ascending order (largest, descending, when `descending`). Equal elements keep the order of
/// their positions (a stable sort, the same answer on every device); NaN sorts above every
/// number, as in torch.sort.
extern Stub<void (*)(const Tensor& indices, const Tensor& in, int64_t rows, int64_t cols, int64_t k,
                     bool descending)>
    sort_rows;

// --- GEMM ------------------------------------------------------------------------------------
/// out (B, M, N) = a (B, M, K) @ b (B, K, N); any strides; a, b, out share a dtype.
extern Stub<void (*)(const Tensor& out, const Tensor& a, const Tensor& b)> bmm;

// --- convolution ------------------------------------------------------------------------------
struct Conv2dParams {
  int64_t stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, groups;
};
/// out (N, Co, Ho, Wo) = conv(in (N, Ci, H, W), weight (Co, Ci/g, kh, kw)) + bias. in, out and
/// their gradients lie dense in one layout (channels-last or row-major); weight and its gradient
/// in one layout too, which may be the other one.
extern Stub<void (*)(const Tensor& out, const Tensor& in, const Tensor& weight,
                     const Tensor& bias, const Conv2dParams& p)>
    conv2d_forward;
/// Any of grad_in, grad_weight, grad_bias may be undefined (not wanted); in has at least one
/// sample (the op answers an empty batch itself).
extern Stub<void (*)(const Tensor& grad_out, const Tensor& in, const Tensor& weight,
                     const Tensor& grad_in, const Tensor& grad_weight, const Tensor& grad_bias,
                     const Conv2dParams& p)>
    conv2d_backward;

// --- batch norm: (N, C, S) row-major, or all of a call's (N, C, S) tensors channels innermost
// ((N, S, C) in memory: a channels-last input's view); statistics and parameters in f32/f64 --
/// What batch norm derives per channel from its statistics, in f64 rounded once on every device:
/// invstd = 1 / sqrt(var + eps) and, when `running` (training), running_mean and running_var
/// moved `momentum` of the way to mean and to var unbiased (var x count / (count - 1)). One
/// launch for what was seven tensor ops (a GPU's ResNet-50 step made 371 launches of it).
/// SyncBatchNorm's count is the group's, read where it lies (`group_count`, an f64 scalar on the
/// statistics' device, or null for `count`); a count of 1 or less leaves the running statistics
/// as they were (the op reports it), where they would become infinite or NaN.
struct BatchNormUpdate {
  double eps = 0, momentum = 0, count = 0;
  bool running = false;
  const double* group_count = nullptr;
  /// A module's num_batches_tracked (an i64 scalar on the statistics' device), + 1 in the same
  /// launch; null: none.
  int64_t* batches_tracked = nullptr;
};
/// invstd, mean, var, running_mean and running_var: (C), contiguous, the statistics' dtype (f32
/// or f64); the running ones are read and written only when u.running.
extern Stub<void (*)(const Tensor& invstd, const Tensor& running_mean, const Tensor& running_var,
                     const Tensor& mean, const Tensor& var, const BatchNormUpdate& u)>
    batch_norm_update;
/// batch_norm_update's tensors and arguments, for batch_norm_stats to apply.
struct BatchNormStatsUpdate {
  Tensor invstd, running_mean, running_var;
  BatchNormUpdate u;
};
/// Per-channel batch mean and biased variance of in (N, C, S); with `update` (a batch norm's own
/// statistics; a group's are allreduced first), batch_norm_update's work on them too, which a
/// GPU does in the statistics' launch (a launch fewer per layer and step).
extern Stub<void (*)(const Tensor& mean, const Tensor& var, const Tensor& in,
                     const BatchNormStatsUpdate* update)>
    batch_norm_stats;
/// out = (in - mean) * invstd * weight + bias [+ residual], then relu when `relu`; weight, bias
/// and residual may be undefined. Rounded as the separate ops would be.
extern Stub<void (*)(const Tensor& out, const Tensor& in, const Tensor& mean,
                     const Tensor& invstd, const Tensor& weight, const Tensor& bias,
                     const Tensor& residual, bool relu)>
    batch_norm_forward;
/// SyncBatchNorm's backward: the per-channel sums of the gradient, a (2, C) tensor of sum(dz) and
/// sum(dz * (x - mean)) in the statistics' dtype on the input's device, go through `allreduce`
/// (in place, over every rank of the group; every rank calls it, an empty batch too) between the
/// kernel's two halves, and grad_in divides by `count`, the group's values per channel: an f64
/// tensor of one element on the input's device (allreduced too, so a GPU kernel reads it where it
/// lies and the host never waits for it). grad_weight and grad_bias stay this rank's sums (DDP
/// averages them as any gradient).
struct BatchNormSync {
  std::function<void(const Tensor&)> allreduce;
  Tensor count;
};
/// training: gradients through the batch statistics; otherwise they are constants. `out`
/// defined: the forward applied relu and out is its result, whose mask (out > 0) the gradient
/// passes first; grad_residual (may be undefined) receives that masked gradient. `sync` (may be
/// null; training only): the statistics were the group's.
extern Stub<void (*)(const Tensor& grad_in, const Tensor& grad_weight, const Tensor& grad_bias,
                     const Tensor& grad_residual, const Tensor& grad_out, const Tensor& in,
                     const Tensor& out, const Tensor& mean, const Tensor& invstd,
                     const Tensor& weight, bool training, const BatchNormSync* sync)>
    batch_norm_backward;

// --- layer norm: in (rows, features) row-major, f32/f64 or f16/bf16 as they are; mean, rstd,
// weight, bias and their gradients in the compute dtype (f32, or f64 for f64) ---------------
/// out = (in - mean) * rstd * weight + bias over each row, with the row's mean and
/// rstd = 1 / sqrt(biased variance + eps) written to mean and rstd (rows); weight and bias
/// (features) may be undefined.
extern Stub<void (*)(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& in,
                     const Tensor& weight, const Tensor& bias, double eps)>
    layer_norm_forward;
/// Any of grad_in, grad_weight, grad_bias may be undefined (not wanted); weight may be
/// undefined (ones). The sums over rows run in an order the shape alone decides.
extern Stub<void (*)(const Tensor& grad_in, const Tensor& grad_weight, const Tensor& grad_bias,
                     const Tensor& grad_out, const Tensor& in, const Tensor& mean,
                     const Tensor& rstd, const Tensor& weight)>
    layer_norm_backward;

// --- softmax over the rows of a contiguous (rows, cols) f32/f64 tensor -----------------------
/// out = softmax(in) along each row, or log_softmax where `log`.
extern Stub<void (*)(const Tensor& out, const Tensor& in, bool log)> softmax_rows;
/// grad_in from grad_out and the forward's out: out * (g - sum(g * out)) for softmax,
/// g - exp(out) * sum(g) for log_softmax.
extern Stub<void (*)(const Tensor& grad_in, const Tensor& grad_out, const Tensor& out, bool log)>
    softmax_rows_backward;

// --- pooling: (N, C, H, W) tensors, all of a call's row-major or all channels-last (the
// layout the first argument's suggest_memory_format() names); indices are plane-local ih * W + iw,
// laid out as the output -----------------------------------------------------------------------
struct Pool2dParams {
  int64_t kh, kw, stride_h, stride_w, pad_h, pad_w, dil_h, dil_w;
  /// Average pooling's divisor, as torch's: divisor_override where it is not 0, else the
  /// window's taps inside the padded input (count_include_pad) or inside the input itself.
  bool count_include_pad;
  int64_t divisor_override;
};
extern Stub<void (*)(const Tensor& out, const Tensor& indices, const Tensor& in,
                     const Pool2dParams& p)>
    max_pool2d_forward;
/// grad_in gets each output's gradient at the input its index names. The window geometry lets
/// a backend gather (each input sums the outputs whose window covers it) instead of scatter.
extern Stub<void (*)(const Tensor& grad_in, const Tensor& grad_out, const Tensor& indices,
                     const Pool2dParams& p)>
    max_pool2d_backward;
extern Stub<void (*)(const Tensor& out, const Tensor& in, const Pool2dParams& p)>
    avg_pool2d_forward;
extern Stub<void (*)(const Tensor& grad_in, const Tensor& grad_out, const Pool2dParams& p)>
    avg_pool2d_backward;
extern Stub<void (*)(const Tensor& out, const Tensor& in)> adaptive_avg_pool2d_forward;
extern Stub<void (*)(const Tensor& grad_in, const Tensor& grad_out)>
    adaptive_avg_pool2d_backward;

// --- losses: x (rows, classes) contiguous, target (rows) i64 contiguous ----------------------
/// out[i] = x[i, target[i]], 0 where target[i] == ignore_index. Throws IndexError naming `op`
/// for a target outside [0, classes).
extern Stub<void (*)(const Tensor& out, const Tensor& x, const Tensor& target,
                     int64_t ignore_index, const char* op)>
    pick_classes;
/// grad_x = 0, then grad_x[i, target[i]] = grad[i] where target[i] != ignore_index.
extern Stub<void (*)(const Tensor& grad_x, const Tensor& grad, const Tensor& target,
                     int64_t ignore_index)>
    pick_classes_backward;

// --- CTC loss (the math: ctc.hpp): log_probs (T, N, C) f32/f64 at any strides; targets (N, S)
// i64 row-major, S >= 1, each row's labels in [0, C) up to its length (the op checked them);
// input_lengths and target_lengths (N) i64 on log_probs' device, within T and S ------------------
/// nll (N) = -log p(target | log_probs) per sample (inf where no alignment fits); log_alpha
/// (N, T, 2S + 1) row-major keeps the forward variables for the backward.
extern Stub<void (*)(const Tensor& nll, const Tensor& log_alpha, const Tensor& log_probs,
                     const Tensor& targets, const Tensor& input_lengths,
                     const Tensor& target_lengths, int64_t blank)>
    ctc_loss_forward;
/// grad (T, N, C) row-major = grad_nll[n] * d nll[n] / d log_probs[t, n, c]; 0 past a sample's
/// input length and for a sample whose nll is infinite.
extern Stub<void (*)(const Tensor& grad, const Tensor& grad_nll, const Tensor& log_probs,
                     const Tensor& targets, const Tensor& input_lengths,
                     const Tensor& target_lengths, const Tensor& nll, const Tensor& log_alpha,
                     int64_t blank)>
    ctc_loss_backward;

// --- indexing along one dim: out, in and src are dense (outer, n, inner) blocks, `dim` their
// middle dim (named in messages only); index is i64 (outer, n_index, inner) with any strides
// (stride 0 where expanded: index_select's one list serves every o and i) ------------------------
/// When an index outside its bounds throws IndexError naming the op. `now`: before anything is
/// written, so an in-place op's bad index changes nothing (on CUDA the host waits for a check
/// kernel). `deferred`, for an output no one else holds yet: on CUDA the check kernel's verdict
/// is read at the next cuda::check_deferred() (before an optimizer step, at the next host read),
/// so the host does not wait mid-step, and meanwhile a bad index reads zeros and writes nothing.
/// The CPU checks now either way.
enum class BoundsCheck { now, deferred };
/// out[o, j, i] = in[o, index[o, j, i], i]; any dtype; an index outside [0, n_in) throws.
extern Stub<void (*)(const Tensor& out, const Tensor& in, const Tensor& index, int64_t dim,
                     const char* op, BoundsCheck when)>
    gather;
/// out[o, index[o, j, i], i] += src[o, j, i] when `accumulate` (duplicates add up; every dtype
/// but bool), else = src[o, j, i] (one of the duplicates wins); bounds [0, n_out), checked as
/// gather's.
extern Stub<void (*)(const Tensor& out, const Tensor& src, const Tensor& index, bool accumulate,
                     int64_t dim, const char* op, BoundsCheck when)>
    scatter;

// --- optimizer updates: one pass over each parameter, any strides -------------------------------
struct SgdArgs {
  double lr, weight_decay, momentum, dampening;
  bool nesterov;
  bool first;  // the momentum buffer is created at this step (it becomes d)
};
/// torch.optim.SGD for one parameter; momentum_buffer is undefined when momentum is 0.
extern Stub<void (*)(const Tensor& param, const Tensor& momentum_buffer, const Tensor& grad,
                     const SgdArgs& args)>
    sgd_step;
/// One parameter of sgd_steps: its buffer (undefined without momentum) and gradient, and whether
/// the buffer is created at this step (SgdArgs::first, for this parameter).
struct SgdEntry {
  Tensor param, buffer, grad;
  bool first;
};
/// sgd_step for many parameters of key's device, `args` for all but `first`. On a GPU a step's
/// hundreds of small updates cost a launch each: there the dense ones (parameter, buffer and
/// gradient laid out alike) go in few launches, as PyTorch's foreach path; the CPU's loop.
extern Stub<void (*)(const Tensor& key, const std::vector<SgdEntry>& entries, const SgdArgs& args)>
    sgd_steps;
struct AdamArgs {
  double lr, weight_decay, beta1, beta2, eps, bias_correction1, bias_correction2;
  bool decoupled;  // AdamW's weight decay (the parameter shrinks), else Adam's (added to g)
};
/// torch.optim.Adam or AdamW for one parameter (bias-corrected moments); with max_exp_avg_sq
/// defined, AMSGrad (the denominator from the running maximum of exp_avg_sq).
extern Stub<void (*)(const Tensor& param, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                     const Tensor& max_exp_avg_sq, const Tensor& grad, const AdamArgs& args)>
    adam_step;
/// One parameter of adam_steps: its moments (max_exp_avg_sq undefined without AMSGrad),
/// gradient and bias corrections (each parameter counts its own steps).
struct AdamEntry {
  Tensor param, exp_avg, exp_avg_sq, max_exp_avg_sq, grad;
  double bias_correction1, bias_correction2;
  /// `shared` with this parameter's bias corrections.
  AdamArgs args(AdamArgs shared) const {
    shared.bias_correction1 = bias_correction1;
    shared.bias_correction2 = bias_correction2;
    return shared;
  }
};
/// adam_step for many parameters of key's device, `args` for all but the bias corrections: on a
/// GPU the dense ones go in few launches, as sgd_steps; the CPU's loop.
extern Stub<void (*)(const Tensor& key, const std::vector<AdamEntry>& entries,
                     const AdamArgs& args)>
    adam_steps;
struct RmspropArgs {
  double lr, weight_decay, alpha, eps, momentum;
  bool centered;
};
/// One parameter of rmsprop_steps: its state (grad_avg undefined unless centered,
/// momentum_buffer undefined without momentum) and gradient.
struct RmspropEntry {
  Tensor param, square_avg, grad_avg, momentum_buffer, grad;
};
/// torch.optim.RMSprop for many f32/f64 parameters of key's device, any strides: on a GPU the
/// dense ones go in few launches, as sgd_steps; the CPU's loop.
extern Stub<void (*)(const Tensor& key, const std::vector<RmspropEntry>& entries,
                     const RmspropArgs& args)>
    rmsprop_steps;
struct AdagradArgs {
  double weight_decay, eps;
};
/// One parameter of adagrad_steps: its sum of squares, gradient and this step's rate (each
/// parameter counts its own steps: lr / (1 + (step - 1) lr_decay)).
struct AdagradEntry {
  Tensor param, sum, grad;
  double lr;
};
/// torch.optim.Adagrad for many f32/f64 parameters of key's device, as rmsprop_steps.
extern Stub<void (*)(const Tensor& key, const std::vector<AdagradEntry>& entries,
                     const AdagradArgs& args)>
    adagrad_steps;
/// `tensors` split by device, devices in order of first appearance, each list in the given order:
/// the stubs that take many tensors (the *_steps, scale_grads, grad_norm_terms) take one device's.
std::vector<std::vector<Tensor>> by_device(const std::vector<Tensor>& tensors);
/// Scales the gradients of key's device, any dtypes and strides, in place: grad *= factor
/// (rounded as mul_ rounds it), and found_inf (an f32 scalar, never read; undefined: none) set to
/// 1 when an element of a result is inf or NaN. Never cleared here: one flag collects every
/// gradient of a device, and the host reads it once (one wait for the device per unscale, not one
/// per gradient). GradScaler's unscale (factor 1 / scale) and clip_grad_norm's clipping (no
/// flag). On a GPU the dense gradients go in few launches, as sgd_steps; the CPU's loop.
extern Stub<void (*)(const Tensor& key, const std::vector<Tensor>& grads, double factor,
                     const Tensor& found_inf)>
    scale_grads;
/// clip_grad_norm's terms, one per gradient, in f64 on out's device: out[i] = the sum of |g|^p
/// over every element of grads[i] (p = norm_type; a view's repeated elements too), or max |g| for
/// p = infinity (NaN where one is NaN). Each term's order of summation depends on the shapes
/// only. On a GPU the gradients go in few launches (chunk tables, as scale_grads); the CPU's loop.
extern Stub<void (*)(const Tensor& out, const std::vector<Tensor>& grads, double norm_type)>
    grad_norm_terms;

// --- data augmentation -------------------------------------------------------------------------
/// out (B, C, H, W) f32: each u8 sample of in (B, C, H, W) scaled to [0, 1], shifted by
/// (dy, dx) = (params[b][0], params[b][1]) with zeros outside (out[y][x] = in[y + dy][x + dx]),
/// mirrored left-right when params[b][2] != 0, then (x - mean[c]) * inv_std[c]: what
/// data::RandomCrop, RandomHorizontalFlip and Normalize do on the host, rounded the same. All
/// contiguous; params (B, 3) i32, mean and inv_std (C) f32.
extern Stub<void (*)(const Tensor& out, const Tensor& in, const Tensor& params, const Tensor& mean,
                     const Tensor& inv_std)>
    crop_flip_normalize;

}  // namespace tandem::kernels
