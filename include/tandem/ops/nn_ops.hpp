// The neural-network functional API: convolution, normalization, pooling, dropout, softmax and
// losses, as torch.nn.functional.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "tandem/core/generator.hpp"
#include "tandem/core/tensor.hpp"

namespace tandem {

/// A (height, width) pair; a single number means both.
struct Int2 {
  int64_t h, w;
  Int2(int64_t v) : h(v), w(v) {}  // NOLINT(google-explicit-constructor)
  Int2(int64_t h_, int64_t w_) : h(h_), w(w_) {}
};

/// A (depth, height, width) triple; a single number means all three.
struct Int3 {
  int64_t d, h, w;
  Int3(int64_t v) : d(v), h(v), w(v) {}  // NOLINT(google-explicit-constructor)
  Int3(int64_t d_, int64_t h_, int64_t w_) : d(d_), h(h_), w(w_) {}
};

/// A window's sizes in D spatial dims (libtorch's ExpandingArray<D>): a number for one dim,
/// Int2 or Int3 for two or three.
template <size_t D>
using IntN = std::conditional_t<D == 1, int64_t, std::conditional_t<D == 2, Int2, Int3>>;

/// The sizes in order (depth, height, width), and back.
inline std::vector<int64_t> int_list(int64_t v) { return {v}; }
inline std::vector<int64_t> int_list(Int2 v) { return {v.h, v.w}; }
inline std::vector<int64_t> int_list(Int3 v) { return {v.d, v.h, v.w}; }
template <size_t D>
IntN<D> int_n(const std::vector<int64_t>& v) {
  if constexpr (D == 1)
    return v.at(0);
  else if constexpr (D == 2)
    return Int2(v.at(0), v.at(1));
  else
    return Int3(v.at(0), v.at(1), v.at(2));
}

/// libtorch's torch::kValid and torch::kSame, a convolution's padding given by name: none, or
/// as much as keeps each output size the input's (stride 1 only; dilation (k - 1) in all, an odd
/// element after the input, as torch).
enum class ConvPadding { valid, same };
inline constexpr ConvPadding kValid = ConvPadding::valid;
inline constexpr ConvPadding kSame = ConvPadding::same;

/// input (N, C_in, H, W), weight (C_out, C_in / groups, kH, kW), bias (C_out) or undefined.
Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(),
              Int2 stride = 1, Int2 padding = 0, Int2 dilation = 1, int64_t groups = 1);

/// 1-D convolution, as torch.nn.functional.conv1d: input (N, C_in, L) or unbatched (C_in, L),
/// weight (C_out, C_in / groups, k), bias (C_out) or undefined; conv2d over a height of 1.
Tensor conv1d(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(),
              int64_t stride = 1, int64_t padding = 0, int64_t dilation = 1, int64_t groups = 1);

/// 3-D convolution, as torch.nn.functional.conv3d: input (N, C_in, D, H, W) or unbatched
/// (C_in, D, H, W), weight (C_out, C_in / groups, kD, kH, kW), bias (C_out) or undefined. One
/// conv2d over the depth taps stacked as channels, each output depth a sample (so every device
/// and dtype conv2d takes, autocast and double backward included).
Tensor conv3d(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(),
              Int3 stride = 1, Int3 padding = 0, Int3 dilation = 1, int64_t groups = 1);

/// The transposed convolution (the input gradient of conv2d): input (N, C_in, H, W), weight
/// (C_in, C_out / groups, kH, kW), bias (C_out); the output is (N, C_out, (H - 1) stride -
/// 2 padding + dilation (kH - 1) + output_padding + 1, ...). libtorch's argument order.
Tensor conv_transpose2d(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(),
                        Int2 stride = 1, Int2 padding = 0, Int2 output_padding = 0,
                        int64_t groups = 1, Int2 dilation = 1);
/// The same over a length: input (N, C_in, L) or unbatched (C_in, L), weight (C_in, C_out /
/// groups, k); conv_transpose2d over a height of 1.
Tensor conv_transpose1d(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(),
                        int64_t stride = 1, int64_t padding = 0, int64_t output_padding = 0,
                        int64_t groups = 1, int64_t dilation = 1);
/// And over a volume: input (N, C_in, D, H, W) or unbatched, weight (C_in, C_out / groups, kD,
/// kH, kW). One conv_transpose2d per depth tap over every input depth plane, the results placed
/// at their output depths and summed (every device and dtype conv_transpose2d takes).
Tensor conv_transpose3d(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(),
                        Int3 stride = 1, Int3 padding = 0, Int3 output_padding = 0,
                        int64_t groups = 1, Int3 dilation = 1);
/// Batch normalization over (N, H, W) per channel of an (N, C, ...) input. In training it
/// normalizes with the batch statistics and, when running_mean/var are given, updates them in
/// place: running = (1 - momentum) * running + momentum * batch (unbiased variance). In
/// evaluation it uses the running statistics. weight/bias may be undefined.
Tensor batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight, const Tensor& bias, bool training, double momentum = 0.1,
                  double eps = 1e-5);
/// libtorch's torch::batch_norm, whose order differs: weight and bias before the running
/// statistics, and a last flag (cudnn_enabled; the backend chooses here).
inline Tensor batch_norm(const Tensor& input, const Tensor& weight, const Tensor& bias,
                         const Tensor& running_mean, const Tensor& running_var, bool training,
                         double momentum, double eps, bool /*cudnn_enabled*/) {
  return batch_norm(input, running_mean, running_var, weight, bias, training, momentum, eps);
}
/// relu(batch_norm(input, ...) + residual) as one op; without a residual,
/// relu(batch_norm(input, ...)). The same values and gradients as the separate ops, bit for bit,
/// in fewer passes over memory and without their intermediate tensors (the ResNet blocks use it).
/// The residual must have the input's shape and dtype.
Tensor batch_norm_relu(const Tensor& input, const Tensor& running_mean, const Tensor& running_var,
                       const Tensor& weight, const Tensor& bias, bool training,
                       double momentum = 0.1, double eps = 1e-5,
                       const Tensor& residual = Tensor());

/// Layer normalization over the trailing dims `normalized_shape` of the input: each slice
/// normalized to mean 0 and (biased) variance 1, then * weight + bias (both of
/// normalized_shape, or undefined), as torch.nn.functional.layer_norm. Computed in f32 for
/// f16/bf16 inputs (the result rounded once to the input's dtype), each row's statistics and
/// affine part in one kernel; differentiable twice.
Tensor layer_norm(const Tensor& input, const Shape& normalized_shape,
                  const Tensor& weight = Tensor(), const Tensor& bias = Tensor(),
                  double eps = 1e-5);
/// Group normalization of (N, C, ...): the C channels in num_groups groups, each group of each
/// sample normalized over its channels and positions, then * weight + bias per channel (C), as
/// torch.nn.functional.group_norm.
Tensor group_norm(const Tensor& input, int64_t num_groups, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);

/// Sums a tensor in place over a group of ranks (what synchronized batch norm needs of a
/// communicator; parallel::convert_sync_batchnorm provides one).
using StatsAllreduce = std::function<void(const Tensor&)>;
/// Training-mode batch norm whose statistics span every rank of a group (SyncBatchNorm): per
/// channel, the count, sum and sum of squares are summed over the ranks (in f64) by
/// `allreduce_sum`, and backward sums the gradient's two per-channel reductions the same way (in
/// the statistics' dtype: f32, or f64 for an f64 input), so
/// that N ranks of batch B compute what one rank of batch N x B would. Then + residual and relu
/// when asked, as batch_norm_relu. Input (N, C, ...); running statistics updated as batch_norm's.
Tensor sync_batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var,
                       const Tensor& weight, const Tensor& bias, double momentum, double eps,
                       const Tensor& residual, bool relu, const StatsAllreduce& allreduce_sum);

/// ceil_mode: output sizes rounded up (the last window may hang past the input), as torch's.
Tensor max_pool2d(const Tensor& input, Int2 kernel_size, Int2 stride = 0, Int2 padding = 0,
                  Int2 dilation = 1, bool ceil_mode = false);
/// max_pool2d and where each maximum lies, as torch's max_pool2d_with_indices: (values,
/// indices), the indices i64 into each H x W plane of the input (ih * W + iw), laid out as the
/// values.
std::tuple<Tensor, Tensor> max_pool2d_with_indices(const Tensor& input, Int2 kernel_size,
                                                   Int2 stride = 0, Int2 padding = 0,
                                                   Int2 dilation = 1, bool ceil_mode = false);
/// Each window's sum divided by divisor_override where given, else by its taps in the padded
/// input (count_include_pad, torch's default) or in the input alone; ceil_mode as max_pool2d's.
Tensor avg_pool2d(const Tensor& input, Int2 kernel_size, Int2 stride = 0, Int2 padding = 0,
                  bool ceil_mode = false, bool count_include_pad = true,
                  std::optional<int64_t> divisor_override = std::nullopt);
Tensor adaptive_avg_pool2d(const Tensor& input, Int2 output_size);
/// The max of each of torch's adaptive windows ([floor(i H / H'), ceil((i + 1) H / H')) by
/// [...W...]) of (N, C, H, W) or (C, H, W), and where it lies (an index into each H x W plane,
/// i64; the first maximum in row-major order). Returns (values, indices), as ATen's.
std::tuple<Tensor, Tensor> adaptive_max_pool2d(const Tensor& input, Int2 output_size);
/// The same over (N, C, L) or (C, L); indices along L.
std::tuple<Tensor, Tensor> adaptive_max_pool1d(const Tensor& input, int64_t output_size);

/// The 1-D pools, as torch's, of (N, C, L) or (C, L): the 2-D pools over a height of 1.
Tensor max_pool1d(const Tensor& input, int64_t kernel_size, int64_t stride = 0, int64_t padding = 0,
                  int64_t dilation = 1, bool ceil_mode = false);
/// The indices along L.
std::tuple<Tensor, Tensor> max_pool1d_with_indices(const Tensor& input, int64_t kernel_size,
                                                   int64_t stride = 0, int64_t padding = 0,
                                                   int64_t dilation = 1, bool ceil_mode = false);
Tensor avg_pool1d(const Tensor& input, int64_t kernel_size, int64_t stride = 0, int64_t padding = 0,
                  bool ceil_mode = false, bool count_include_pad = true);
Tensor adaptive_avg_pool1d(const Tensor& input, int64_t output_size);

/// The 3-D pools, as torch's, of (N, C, D, H, W) or (C, D, H, W): a window is a box, so each is
/// the 2-D pool over (H, W) and then over D (a window's max, sum and divisor all factor so).
Tensor max_pool3d(const Tensor& input, Int3 kernel_size, Int3 stride = 0, Int3 padding = 0,
                  Int3 dilation = 1, bool ceil_mode = false);
/// The indices into each D x H x W volume (id * H * W + ih * W + iw).
std::tuple<Tensor, Tensor> max_pool3d_with_indices(const Tensor& input, Int3 kernel_size,
                                                   Int3 stride = 0, Int3 padding = 0,
                                                   Int3 dilation = 1, bool ceil_mode = false);

/// The max pools' partial inverse, as torch's max_unpool1d/2d/3d: a zero tensor of output_size
/// per plane (L, H x W or D x H x W), each input value written where its index says (indices of
/// the input's shape, i64, as the *_with_indices pools give them; one outside the plane is an
/// IndexError, on a GPU at the next check point). (N, C, ...) or unbatched (C, ...).
Tensor max_unpool1d(const Tensor& input, const Tensor& indices, int64_t output_size);
Tensor max_unpool2d(const Tensor& input, const Tensor& indices, Int2 output_size);
Tensor max_unpool3d(const Tensor& input, const Tensor& indices, Int3 output_size);
/// ATen's form: stride and padding are only checked (the indices say where each value goes).
Tensor max_unpool3d(const Tensor& input, const Tensor& indices, Int3 output_size, Int3 stride,
                    Int3 padding);
Tensor avg_pool3d(const Tensor& input, Int3 kernel_size, Int3 stride = 0, Int3 padding = 0,
                  bool ceil_mode = false, bool count_include_pad = true,
                  std::optional<int64_t> divisor_override = std::nullopt);
Tensor adaptive_avg_pool3d(const Tensor& input, Int3 output_size);

/// torch.nn.functional.interpolate on (N, C, L), (N, C, H, W) or (N, C, D, H, W): to `size` (one
/// entry per spatial dim, or one for all, as Python's int size), or to floor(in * scale_factor)
/// per dim (one factor serves all). Modes: "nearest" and "nearest-exact" (any spatial rank;
/// floating or u8), "linear" (3-d), "bilinear" and "bicubic" (4-d), "trilinear" (5-d), "area"
/// (adaptive average pooling). align_corners: the interpolating modes only, false by default.
/// Source positions as PyTorch's: with a scale factor and no recompute_scale_factor, the scale is
/// 1 / scale_factor, else in / out. antialias (bilinear and bicubic): when downsampling, the
/// filter widens with the scale so every input element counts, as torch's (bicubic then uses
/// A = -0.5, as PIL). Separable, one spatial dim at a time, built of index_select and
/// elementwise ops: differentiable, every device.
Tensor interpolate(const Tensor& input, const std::optional<Shape>& size,
                   const std::optional<std::vector<double>>& scale_factor,
                   const std::string& mode = "nearest", std::optional<bool> align_corners = {},
                   std::optional<bool> recompute_scale_factor = {}, bool antialias = false);
/// libtorch's mode names: `F::InterpolateFuncOptions().mode(torch::kBilinear)`. (kLinear, the
/// mode and the initializers' nonlinearity both, as libtorch's one enum.)
inline constexpr const char* kNearest = "nearest";
inline constexpr const char* kNearestExact = "nearest-exact";
inline constexpr const char* kLinear = "linear";
inline constexpr const char* kBilinear = "bilinear";
inline constexpr const char* kBicubic = "bicubic";
inline constexpr const char* kTrilinear = "trilinear";
inline constexpr const char* kArea = "area";

/// What grid_sample reads outside the input: zeros, the nearest edge (border), or the input
/// reflected at its edges (libtorch's torch::kZeros, kBorder, kReflection).
enum class GridPadding { zeros, border, reflection };
inline constexpr GridPadding kBorder = GridPadding::border;
inline constexpr GridPadding kReflection = GridPadding::reflection;
/// torch.nn.functional.grid_sample: the input ((N, C, H, W) or (N, C, D, H, W)) sampled at the
/// grid's normalized positions ((N, H', W', 2) as x, y, or (N, D', H', W', 3) as x, y, z; -1 and
/// 1 the outer edges of the corner pixels, or their centres with align_corners), by "bilinear"
/// (trilinear in 3-d), "nearest" (half to even) or "bicubic" (4-d; Keys' A = -0.75 over 4 x 4
/// taps, each tap padded) interpolation. Differentiable in the input and the grid, as torch's.
Tensor grid_sample(const Tensor& input, const Tensor& grid, const std::string& mode = "bilinear",
                   GridPadding padding = GridPadding::zeros,
                   std::optional<bool> align_corners = std::nullopt);
/// torch.nn.functional.affine_grid: the grid of `size` ((N, C, H, W) or (N, C, D, H, W)) that
/// theta ((N, 2, 3) or (N, 3, 4)) maps the output's normalized positions to.
Tensor affine_grid(const Tensor& theta, const Shape& size, bool align_corners = false);

/// Zeroes elements with probability p and scales the rest by 1 / (1 - p) when training.
Tensor dropout(const Tensor& input, double p = 0.5, bool training = true,
               Generator* gen = nullptr);

/// Zeroes whole channels (each (n, c) slice of an (N, C, ...) input) with probability p and
/// scales the rest by 1 / (1 - p) when training, as torch's dropout2d (feature dropout).
Tensor dropout2d(const Tensor& input, double p = 0.5, bool training = true,
                 Generator* gen = nullptr);
/// dropout2d's whole-channel dropout for (N, C, D, H, W) or (C, D, H, W) inputs, as torch's.
Tensor dropout3d(const Tensor& input, double p = 0.5, bool training = true,
                 Generator* gen = nullptr);
/// The rows of weight (num_embeddings, embedding_dim) that `indices` (i64 or i32, any shape)
/// name: indices' shape + (embedding_dim). Row padding_idx gets no gradient (-1, or any
/// negative: none, as torch::embedding; nn::Embedding and F::embedding count a negative one from
/// the end, as torch.nn). With scale_grad_by_freq each row's gradient is divided by how often
/// the indices name it; sparse gradients are refused. libtorch's argument order (weight first).
Tensor embedding(const Tensor& weight, const Tensor& indices, int64_t padding_idx = -1,
                 bool scale_grad_by_freq = false, bool sparse = false);
/// Scales each row of weight that indices name whose norm_type-norm exceeds max_norm by
/// max_norm / (norm + 1e-7), in place and unrecorded, as torch::embedding_renorm_ (what
/// max_norm of Embedding and F::embedding does before the lookup).
Tensor& embedding_renorm_(Tensor& weight, const Tensor& indices, double max_norm, double norm_type);
/// input where input > 0, negative_slope * input elsewhere.
Tensor leaky_relu(const Tensor& input, double negative_slope = 0.01);
/// The activations of torch.nn, in its formulas: silu (x sigmoid(x)), elu (scale * (x for
/// x > 0, else alpha (exp(x) - 1))), selu (elu with SELU's constants), softplus (log(1 +
/// exp(beta x)) / beta, x itself where beta x > threshold), mish (x tanh(softplus(x))),
/// hardswish, hardsigmoid, log_sigmoid, hardtanh (clamp with torch's gradient: 0 at the bounds),
/// relu6 (hardtanh(0, 6)), softsign (x / (1 + |x|)) and prelu (x for x > 0, else weight * x;
/// weight holds one number or one per channel, dim 1).
Tensor silu(const Tensor& input);
Tensor elu(const Tensor& input, double alpha = 1.0, double scale = 1.0);
Tensor selu(const Tensor& input);
Tensor softplus(const Tensor& input, double beta = 1.0, double threshold = 20.0);
Tensor mish(const Tensor& input);
Tensor hardswish(const Tensor& input);
Tensor hardsigmoid(const Tensor& input);
Tensor log_sigmoid(const Tensor& input);
Tensor hardtanh(const Tensor& input, double min_val = -1.0, double max_val = 1.0);
Tensor relu6(const Tensor& input);
Tensor softsign(const Tensor& input);
Tensor prelu(const Tensor& input, const Tensor& weight);
/// log(x / (1 - x)), with x clamped to [eps, 1 - eps] first when eps is given (the gradient 0
/// outside), as torch.logit.
Tensor logit(const Tensor& input, std::optional<double> eps = std::nullopt);
/// The gated linear unit: the first half of dim times the sigmoid of the second half.
Tensor glu(const Tensor& input, int64_t dim = -1);
/// More of torch.nn's activations, in its formulas: celu (x for x > 0, else alpha (exp(x /
/// alpha) - 1)), softshrink (x moved lambd toward 0, 0 within lambd of it), hardshrink (x where
/// |x| > lambd, else 0), tanhshrink (x - tanh(x)), threshold (x where x > threshold, else
/// value) and softmin (softmax of -x).
Tensor celu(const Tensor& input, double alpha = 1.0);
Tensor softshrink(const Tensor& input, double lambd = 0.5);
Tensor hardshrink(const Tensor& input, double lambd = 0.5);
Tensor tanhshrink(const Tensor& input);
Tensor threshold(const Tensor& input, double threshold, double value);
Tensor softmin(const Tensor& input, int64_t dim);
/// x1 (*, in1) W (out, in1, in2) x2 (*, in2) + b (out) -> (*, out), as
/// torch.nn.functional.bilinear.
Tensor bilinear(const Tensor& input1, const Tensor& input2, const Tensor& weight,
                const Tensor& bias = Tensor());
/// (N, C, *) with its channels in `groups` groups, the groups' members interleaved.
Tensor channel_shuffle(const Tensor& input, int64_t groups);
/// Every kernel window of a (N, C, H, W) or (C, H, W) map as a column: (N, C kh kw, L), L the
/// number of windows (torch.nn.functional.unfold). col2im is its adjoint (fold): the columns
/// summed back into a map of output_size, where windows overlap.
Tensor im2col(const Tensor& input, Int2 kernel_size, Int2 dilation = 1, Int2 padding = 0,
              Int2 stride = 1);
Tensor col2im(const Tensor& input, Int2 output_size, Int2 kernel_size, Int2 dilation = 1,
              Int2 padding = 0, Int2 stride = 1);
/// Integer class indices (any shape) as one-hot i64 vectors in a new last dim of num_classes
/// (-1: the largest index + 1); an index outside [0, num_classes) is refused.
Tensor one_hot(const Tensor& indices, int64_t num_classes = -1);
/// input / max(||input||_p along dim, eps), as torch.nn.functional.normalize.
Tensor normalize(const Tensor& input, double p = 2.0, int64_t dim = 1, double eps = 1e-12);
Tensor softmax(const Tensor& input, int64_t dim);
Tensor log_softmax(const Tensor& input, int64_t dim);
/// libtorch's forms with a dtype (the input converted to it first; none: as it is).
inline Tensor softmax(const Tensor& input, int64_t dim, std::optional<DType> dtype) {
  return softmax(dtype ? input.to(*dtype) : input, dim);
}
inline Tensor log_softmax(const Tensor& input, int64_t dim, std::optional<DType> dtype) {
  return log_softmax(dtype ? input.to(*dtype) : input, dim);
}
/// Computed in `dtype` (the input converted first).
inline Tensor softmax(const Tensor& input, int64_t dim, DType dtype) {
  return softmax(input.to(dtype), dim);
}
inline Tensor log_softmax(const Tensor& input, int64_t dim, DType dtype) {
  return log_softmax(input.to(dtype), dim);
}

/// How a loss reduces over elements. `Reduction::Sum` etc. are libtorch's spellings.
enum class Reduction { none, mean, sum, None = none, Mean = mean, Sum = sum };

struct CrossEntropyOptions {
  Reduction reduction = Reduction::mean;
  int64_t ignore_index = -100;
  double label_smoothing = 0.0;
  /// Per-class weights (C), as nll_loss's: the mean divides by the targets' summed weights.
  Tensor weight;
};
/// input (N, C) or (N, C, d1, ...) logits, target (N) or (N, d1, ...) class indices (i64); or
/// one unbatched sample, input (C) and a 0-dim target. A floating target holds class
/// probabilities instead, in input's shape (soft labels, mixup), as torch's.
Tensor cross_entropy(const Tensor& input, const Tensor& target, CrossEntropyOptions options = {});

/// input log-probabilities (N, C), (N, C, d1, ...) or (C), target class indices, and optional
/// per-class weights (C) in libtorch's argument order: each target's loss is scaled by its
/// class's weight and the mean divides by the summed weights of the targets not ignored, as
/// torch.
Tensor nll_loss(const Tensor& input, const Tensor& target, const Tensor& weight = Tensor(),
                Reduction reduction = Reduction::mean, int64_t ignore_index = -100);
/// Without weights: nll_loss(input, target, Reduction::sum). A template, so that libtorch's
/// `nll_loss(x, t, {})` (no weight) is never read as Reduction::none.
template <typename R, typename = std::enable_if_t<std::is_same_v<R, Reduction>>>
Tensor nll_loss(const Tensor& input, const Tensor& target, R reduction,
                int64_t ignore_index = -100) {
  return nll_loss(input, target, Tensor(), reduction, ignore_index);
}
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean);
Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean);
/// 0.5 d^2 / beta where d = |input - target| < beta, d - 0.5 beta elsewhere (l1 for beta 0).
Tensor smooth_l1_loss(const Tensor& input, const Tensor& target,
                      Reduction reduction = Reduction::mean, double beta = 1.0);
/// 0.5 d^2 where d = |input - target| < delta, delta (d - 0.5 delta) elsewhere (delta > 0).
Tensor huber_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean,
                  double delta = 1.0);
/// kl_div's reductions: Reduction's, and batchmean (the sum over the batch size, the one that
/// is the divergence's value: `torch::kBatchMean`).
struct BatchMean {};
inline constexpr BatchMean kBatchMean{};
struct KLDivReduction {
  KLDivReduction(Reduction r = Reduction::mean) : reduction(r) {}  // NOLINT
  KLDivReduction(BatchMean) : batchmean(true) {}                   // NOLINT
  Reduction reduction = Reduction::mean;
  bool batchmean = false;
};
/// The Kullback-Leibler divergence of target from input, pointwise target (log(target) -
/// input): input holds log-probabilities, target probabilities (log-probabilities when
/// log_target); 0 where target is 0.
Tensor kl_div(const Tensor& input, const Tensor& target, KLDivReduction reduction = {},
              bool log_target = false);
/// x1 . x2 / max(||x1|| ||x2||, eps) along dim (broadcast), as torch's.
Tensor cosine_similarity(const Tensor& x1, const Tensor& x2, int64_t dim = 1, double eps = 1e-8);
/// ||x1 - x2 + eps||_p along the last dim.
Tensor pairwise_distance(const Tensor& x1, const Tensor& x2, double p = 2.0, double eps = 1e-6,
                         bool keepdim = false);
/// -weight (target log(input) + (1 - target) log(1 - input)), each log clamped at -100 as
/// torch's; input probabilities in [0, 1] (checked: one read of the data on the host).
Tensor binary_cross_entropy(const Tensor& input, const Tensor& target,
                            const Tensor& weight = Tensor(),
                            Reduction reduction = Reduction::mean);
/// binary_cross_entropy(sigmoid(input), target) computed stably from logits; pos_weight (per
/// class, broadcast along the last dim) scales the positive term, as torch.
Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target,
                                        const Tensor& weight = Tensor(),
                                        const Tensor& pos_weight = Tensor(),
                                        Reduction reduction = Reduction::mean);
/// max(0, -target (x1 - x2) + margin); target holds 1 or -1.
Tensor margin_ranking_loss(const Tensor& x1, const Tensor& x2, const Tensor& target,
                           double margin = 0.0, Reduction reduction = Reduction::mean);
/// max(d(anchor, positive) - d(anchor, negative) + margin, 0) with d the pairwise p-distance;
/// swap: d(anchor, negative) is the smaller of it and d(positive, negative).
Tensor triplet_margin_loss(const Tensor& anchor, const Tensor& positive, const Tensor& negative,
                           double margin = 1.0, double p = 2.0, double eps = 1e-6,
                           bool swap = false, Reduction reduction = Reduction::mean);
/// 1 - cos(x1, x2) where target is 1, max(0, cos(x1, x2) - margin) where it is -1 (cosines along
/// dim 1, or the only dim).
Tensor cosine_embedding_loss(const Tensor& x1, const Tensor& x2, const Tensor& target,
                             double margin = 0.0, Reduction reduction = Reduction::mean);
/// x where target is 1, max(0, margin - x) where it is -1.
Tensor hinge_embedding_loss(const Tensor& input, const Tensor& target, double margin = 1.0,
                            Reduction reduction = Reduction::mean);
/// log(1 + exp(-target x)), target 1 or -1.
Tensor soft_margin_loss(const Tensor& input, const Tensor& target,
                        Reduction reduction = Reduction::mean);
/// -(target log sigmoid(x) + (1 - target) log sigmoid(-x)), times weight (per class, broadcast),
/// averaged over the classes (the last dim), then reduced over the samples.
Tensor multilabel_soft_margin_loss(const Tensor& input, const Tensor& target,
                                   const Tensor& weight = Tensor(),
                                   Reduction reduction = Reduction::mean);
/// The multi-label hinge loss of (N, C), (C) or 0-dim scores and a target of their shape holding
/// each sample's class indices, ended by the first -1: per sample, the sum over its target classes
/// j (one given twice counts twice) and the classes i not among them of max(0, 1 - x[j] + x[i]),
/// divided by C, as torch's. A target index below -1 or from C up is refused (an IndexError).
Tensor multilabel_margin_loss(const Tensor& input, const Tensor& target,
                              Reduction reduction = Reduction::mean);
/// The connectionist temporal classification loss, as torch's ctc_loss: the negative log of
/// the probability, summed over every alignment of the input's frames to the target (a label
/// or `blank` per frame; repeats merged, blanks dropped), of each sample's target.
/// log_probs (T, N, C), f32 or f64 (log_softmax's output), or (T, C) unbatched; targets (N, S)
/// padded, or the samples' targets one after another (1-d); one input length (at most T) and
/// one target length per sample. A target no alignment fits (an input too short for it) costs
/// inf, or 0 with zero_infinity; mean divides each loss by its target length, then averages.
/// Composed of ops (the alpha recursion in log space, a step per frame): every device, and
/// gradients by autograd. The lengths are read to the host, as torch's.
Tensor ctc_loss(const Tensor& log_probs, const Tensor& targets,
                const std::vector<int64_t>& input_lengths,
                const std::vector<int64_t>& target_lengths, int64_t blank = 0,
                Reduction reduction = Reduction::mean, bool zero_infinity = false);
Tensor ctc_loss(const Tensor& log_probs, const Tensor& targets, const Tensor& input_lengths,
                const Tensor& target_lengths, int64_t blank = 0,
                Reduction reduction = Reduction::mean, bool zero_infinity = false);
/// The negative log-likelihood of target under Normal(input, var): 0.5 (log(var) + (input -
/// target)^2 / var) (+ 0.5 log(2 pi) when full). var is the input's shape, or it with the last
/// dim 1 or gone (one variance for the last dim); it is clamped at eps, the gradient passing
/// the clamp unchanged, as torch's.
Tensor gaussian_nll_loss(const Tensor& input, const Tensor& target, const Tensor& var,
                         bool full = false, double eps = 1e-6,
                         Reduction reduction = Reduction::mean);
/// The negative log-likelihood of target under Poisson(rate): exp(input) - target input when
/// log_input, else input - target log(input + eps); full adds Stirling's term for target > 1.
Tensor poisson_nll_loss(const Tensor& input, const Tensor& target, bool log_input = true,
                        bool full = false, double eps = 1e-8,
                        Reduction reduction = Reduction::mean);
/// The multi-class hinge loss of (N, C) or (C) scores and class indices: per sample, the sum
/// over the other classes j of max(0, margin - x[y] + x[j])^p (p 1 or 2), times weight[y] where
/// given, divided by C.
Tensor multi_margin_loss(const Tensor& input, const Tensor& target, int64_t p = 1,
                         double margin = 1.0, const Tensor& weight = Tensor(),
                         Reduction reduction = Reduction::mean);
/// Each element over (k + alpha / size * the sum of the squares of `size` neighbouring channels,
/// zeros past the ends)^beta, of (N, C, ...) with at least one dim after C: torch's formula, an
/// average pool over the channels.
Tensor local_response_norm(const Tensor& input, int64_t size, double alpha = 1e-4,
                           double beta = 0.75, double k = 1.0);

enum class EmbeddingBagMode { sum, mean, max };
/// The sum, mean or max of the weight's rows in each bag: `input` (B, N) is B bags of N indices
/// (no offsets), or a 1-d list of indices cut into bags at `offsets` (starting with 0; with
/// include_last_offset the last offset ends the last bag). per_sample_weights (input's shape,
/// mode sum only) scale each row. Entries equal to padding_idx are left out of their bag (and of
/// its count); an empty bag gives zeros. (B, embedding_dim).
Tensor embedding_bag(const Tensor& weight, const Tensor& input, const Tensor& offsets = Tensor(),
                     EmbeddingBagMode mode = EmbeddingBagMode::mean,
                     const Tensor& per_sample_weights = Tensor(), bool include_last_offset = false,
                     std::optional<int64_t> padding_idx = std::nullopt);

}  // namespace tandem
