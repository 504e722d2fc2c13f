// torch::nn::functional under libtorch's names: with `namespace F = torch::nn::functional;`,
// F::relu(x), F::max_pool2d(x, F::MaxPool2dFuncOptions(2)), F::dropout(x,
// F::DropoutFuncOptions().p(0.5).training(is_training())), F::cross_entropy(x, t,
// F::CrossEntropyFuncOptions().reduction(torch::kSum)). Each options form forwards to the op of
// the same name (ops/*.hpp), which the ops' own tests check; the plain forms are those ops.
#pragma once

#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "tandem/core/arg.hpp"
#include "tandem/nn/layers.hpp"  // LeakyReLUOptions and SoftmaxOptions serve both
#include "tandem/ops.hpp"

namespace tandem {
/// libtorch's reduction names (`torch::kSum`), as used in the functional options.
inline constexpr Reduction kNone = Reduction::none;
inline constexpr Reduction kMean = Reduction::mean;
inline constexpr Reduction kSum = Reduction::sum;
/// EmbeddingBag's third mode (kSum and kMean are the reduction names above).
inline constexpr EmbeddingBagMode kMax = EmbeddingBagMode::max;
}  // namespace tandem

namespace tandem::nn::functional {

using tandem::adaptive_avg_pool1d;
using tandem::adaptive_avg_pool2d;
using tandem::adaptive_avg_pool3d;
using tandem::avg_pool1d;
using tandem::avg_pool2d;
using tandem::avg_pool3d;
using tandem::batch_norm;
using tandem::binary_cross_entropy;
using tandem::binary_cross_entropy_with_logits;
using tandem::cosine_similarity;
using tandem::cross_entropy;
using tandem::dropout;
using tandem::dropout2d;
using tandem::dropout3d;
using tandem::gelu;
using tandem::huber_loss;
using tandem::kl_div;
using tandem::l1_loss;
using tandem::leaky_relu;
using tandem::linear;
using tandem::log_softmax;
using tandem::max_pool1d;
using tandem::max_pool2d;
using tandem::max_pool3d;
using tandem::mse_loss;
using tandem::nll_loss;
using tandem::pad;
using tandem::pairwise_distance;
using tandem::relu;
using tandem::sigmoid;
using tandem::smooth_l1_loss;
using tandem::softmax;
using tandem::tanh;

// --- activations ---------------------------------------------------------------------------

using ReLUFuncOptions = ReLUOptions;
inline Tensor relu(const Tensor& input, const ReLUFuncOptions&) { return tandem::relu(input); }

using LeakyReLUFuncOptions = LeakyReLUOptions;
inline Tensor leaky_relu(const Tensor& input, const LeakyReLUFuncOptions& o) {
  return tandem::leaky_relu(input, o.negative_slope());
}

struct GELUFuncOptions {
  TANDEM_ARG(std::string, approximate) = "none";
};
inline Tensor gelu(const Tensor& input, const GELUFuncOptions& o) {
  return tandem::gelu(input, o.approximate());
}

using tandem::hardsigmoid;
using tandem::hardswish;
using tandem::mish;
using tandem::prelu;
using tandem::silu;
using tandem::softsign;
inline Tensor logsigmoid(const Tensor& input) { return tandem::log_sigmoid(input); }

using ELUFuncOptions = ELUOptions;
inline Tensor elu(const Tensor& input, const ELUFuncOptions& o = {}) {
  return tandem::elu(input, o.alpha());
}
using SELUFuncOptions = SELUOptions;
inline Tensor selu(const Tensor& input, const SELUFuncOptions& = {}) { return tandem::selu(input); }
using SoftplusFuncOptions = SoftplusOptions;
inline Tensor softplus(const Tensor& input, const SoftplusFuncOptions& o = {}) {
  return tandem::softplus(input, o.beta(), o.threshold());
}
using HardtanhFuncOptions = HardtanhOptions;
inline Tensor hardtanh(const Tensor& input, const HardtanhFuncOptions& o = {}) {
  return tandem::hardtanh(input, o.min_val(), o.max_val());
}
using ReLU6FuncOptions = ReLU6Options;
inline Tensor relu6(const Tensor& input, const ReLU6FuncOptions& = {}) {
  return tandem::relu6(input);
}

using tandem::one_hot;
struct NormalizeFuncOptions {
  TANDEM_ARG(double, p) = 2.0;
  TANDEM_ARG(int64_t, dim) = 1;
  TANDEM_ARG(double, eps) = 1e-12;
};
inline Tensor normalize(const Tensor& input, const NormalizeFuncOptions& o = {}) {
  return tandem::normalize(input, o.p(), o.dim(), o.eps());
}

using SoftmaxFuncOptions = SoftmaxOptions;
using LogSoftmaxFuncOptions = SoftmaxOptions;
inline Tensor softmax(const Tensor& input, const SoftmaxFuncOptions& o) {
  return tandem::softmax(input, o.dim(), o.dtype());
}
inline Tensor log_softmax(const Tensor& input, const LogSoftmaxFuncOptions& o) {
  return tandem::log_softmax(input, o.dim(), o.dtype());
}

// --- convolution, pooling, normalization, dropout, padding ---------------------------------

namespace detail {
/// convNd in D spatial dims, its padding given by numbers or by name (kSame, kValid) and filled
/// by `mode`; `op` names it in errors.
template <size_t D>
Tensor conv(const char* op, const Tensor& input, const Tensor& weight, const Tensor& bias,
            IntN<D> stride, IntN<D> padding, std::optional<ConvPadding> kind, PadMode mode,
            IntN<D> dilation, int64_t groups) {
  auto [x, pad] = nn::detail::conv_padding(op, input, weight, int_list(stride), int_list(dilation),
                                           int_list(padding), kind, mode);
  if constexpr (D == 1)
    return tandem::conv1d(x, weight, bias, stride, pad[0], dilation, groups);
  else if constexpr (D == 2)
    return tandem::conv2d(x, weight, bias, stride, int_n<2>(pad), dilation, groups);
  else
    return tandem::conv3d(x, weight, bias, stride, int_n<3>(pad), dilation, groups);
}

/// conv_transposeNd in D spatial dims.
template <size_t D>
Tensor conv_transpose(const Tensor& input, const Tensor& weight, const Tensor& bias, IntN<D> stride,
                      IntN<D> padding, IntN<D> output_padding, int64_t groups, IntN<D> dilation) {
  if constexpr (D == 1)
    return tandem::conv_transpose1d(input, weight, bias, stride, padding, output_padding, groups,
                                    dilation);
  else if constexpr (D == 2)
    return tandem::conv_transpose2d(input, weight, bias, stride, padding, output_padding, groups,
                                    dilation);
  else
    return tandem::conv_transpose3d(input, weight, bias, stride, padding, output_padding, groups,
                                    dilation);
}
}  // namespace detail

/// libtorch's ConvFuncOptions<D>: F::conv2d(x, w, F::Conv2dFuncOptions().stride(2).padding(1)).
template <size_t D>
struct ConvFuncOptions {
  TANDEM_ARG(Tensor, bias);
  TANDEM_ARG(IntN<D>, stride) = 1;
  TANDEM_CONV_PADDING(IntN<D>) = 0;
  TANDEM_ARG(IntN<D>, dilation) = 1;
  TANDEM_ARG(int64_t, groups) = 1;
};
using Conv1dFuncOptions = ConvFuncOptions<1>;
using Conv2dFuncOptions = ConvFuncOptions<2>;
using Conv3dFuncOptions = ConvFuncOptions<3>;

/// libtorch's ConvTransposeFuncOptions<D> (groups before dilation, as torch's arguments).
template <size_t D>
struct ConvTransposeFuncOptions {
  TANDEM_ARG(Tensor, bias);
  TANDEM_ARG(IntN<D>, stride) = 1;
  TANDEM_ARG(IntN<D>, padding) = 0;
  TANDEM_ARG(IntN<D>, output_padding) = 0;
  TANDEM_ARG(int64_t, groups) = 1;
  TANDEM_ARG(IntN<D>, dilation) = 1;
};
using ConvTranspose1dFuncOptions = ConvTransposeFuncOptions<1>;
using ConvTranspose2dFuncOptions = ConvTransposeFuncOptions<2>;
using ConvTranspose3dFuncOptions = ConvTransposeFuncOptions<3>;

inline Tensor conv1d(const Tensor& input, const Tensor& weight, const Conv1dFuncOptions& o = {}) {
  return detail::conv<1>("conv1d", input, weight, o.bias(), o.stride(), o.padding(),
                         o.padding_kind(), PadMode::constant, o.dilation(), o.groups());
}
inline Tensor conv2d(const Tensor& input, const Tensor& weight, const Conv2dFuncOptions& o = {}) {
  return detail::conv<2>("conv2d", input, weight, o.bias(), o.stride(), o.padding(),
                         o.padding_kind(), PadMode::constant, o.dilation(), o.groups());
}
inline Tensor conv3d(const Tensor& input, const Tensor& weight, const Conv3dFuncOptions& o = {}) {
  return detail::conv<3>("conv3d", input, weight, o.bias(), o.stride(), o.padding(),
                         o.padding_kind(), PadMode::constant, o.dilation(), o.groups());
}
inline Tensor conv_transpose1d(const Tensor& input, const Tensor& weight,
                               const ConvTranspose1dFuncOptions& o = {}) {
  return detail::conv_transpose<1>(input, weight, o.bias(), o.stride(), o.padding(),
                                   o.output_padding(), o.groups(), o.dilation());
}
inline Tensor conv_transpose2d(const Tensor& input, const Tensor& weight,
                               const ConvTranspose2dFuncOptions& o = {}) {
  return detail::conv_transpose<2>(input, weight, o.bias(), o.stride(), o.padding(),
                                   o.output_padding(), o.groups(), o.dilation());
}
inline Tensor conv_transpose3d(const Tensor& input, const Tensor& weight,
                               const ConvTranspose3dFuncOptions& o = {}) {
  return detail::conv_transpose<3>(input, weight, o.bias(), o.stride(), o.padding(),
                                   o.output_padding(), o.groups(), o.dilation());
}

/// The layers' options, as libtorch's (stride 0 means the kernel size, as torch's default).
using AdaptiveAvgPool1dFuncOptions = AdaptiveAvgPool1dOptions;
using MaxPool1dFuncOptions = MaxPool1dOptions;
using AvgPool1dFuncOptions = AvgPool1dOptions;
inline Tensor max_pool1d(const Tensor& input, const MaxPool1dFuncOptions& o) {
  return tandem::max_pool1d(input, o.kernel_size(), o.stride(), o.padding(), o.dilation(),
                            o.ceil_mode());
}
inline Tensor avg_pool1d(const Tensor& input, const AvgPool1dFuncOptions& o) {
  TANDEM_CHECK(!o.divisor_override(),
               "avg_pool1d: torch's 1-d average pool has no divisor_override");
  return tandem::avg_pool1d(input, o.kernel_size(), o.stride(), o.padding(), o.ceil_mode(),
                            o.count_include_pad());
}
using AdaptiveAvgPool2dFuncOptions = AdaptiveAvgPool2dOptions;
using AdaptiveMaxPool1dFuncOptions = AdaptiveMaxPool1dOptions;
using AdaptiveMaxPool2dFuncOptions = AdaptiveMaxPool2dOptions;
/// The values only, as libtorch's F::adaptive_max_pool2d; the _with_indices forms give both.
inline Tensor adaptive_max_pool1d(const Tensor& input, const AdaptiveMaxPool1dFuncOptions& o) {
  return std::get<0>(tandem::adaptive_max_pool1d(input, o));
}
inline Tensor adaptive_max_pool2d(const Tensor& input, const AdaptiveMaxPool2dFuncOptions& o) {
  return std::get<0>(tandem::adaptive_max_pool2d(input, o));
}
inline std::tuple<Tensor, Tensor> adaptive_max_pool1d_with_indices(
    const Tensor& input, const AdaptiveMaxPool1dFuncOptions& o) {
  return tandem::adaptive_max_pool1d(input, o);
}
inline std::tuple<Tensor, Tensor> adaptive_max_pool2d_with_indices(
    const Tensor& input, const AdaptiveMaxPool2dFuncOptions& o) {
  return tandem::adaptive_max_pool2d(input, o);
}
using AdaptiveAvgPool3dFuncOptions = AdaptiveAvgPool3dOptions;
using MaxPool2dFuncOptions = MaxPool2dOptions;
using MaxPool3dFuncOptions = MaxPool3dOptions;
using AvgPool2dFuncOptions = AvgPool2dOptions;
using AvgPool3dFuncOptions = AvgPool3dOptions;
inline Tensor max_pool2d(const Tensor& input, const MaxPool2dFuncOptions& o) {
  return tandem::max_pool2d(input, o.kernel_size(), o.stride(), o.padding(), o.dilation(),
                            o.ceil_mode());
}
inline Tensor max_pool3d(const Tensor& input, const MaxPool3dFuncOptions& o) {
  return tandem::max_pool3d(input, o.kernel_size(), o.stride(), o.padding(), o.dilation(),
                            o.ceil_mode());
}
/// (values, indices), as libtorch's F::max_pool2d_with_indices: the indices into each plane, as
/// max_unpool takes them.
inline std::tuple<Tensor, Tensor> max_pool1d_with_indices(const Tensor& input,
                                                          const MaxPool1dFuncOptions& o) {
  return tandem::max_pool1d_with_indices(input, o.kernel_size(), o.stride(), o.padding(),
                                         o.dilation(), o.ceil_mode());
}
inline std::tuple<Tensor, Tensor> max_pool2d_with_indices(const Tensor& input,
                                                          const MaxPool2dFuncOptions& o) {
  return tandem::max_pool2d_with_indices(input, o.kernel_size(), o.stride(), o.padding(),
                                         o.dilation(), o.ceil_mode());
}
inline std::tuple<Tensor, Tensor> max_pool3d_with_indices(const Tensor& input,
                                                          const MaxPool3dFuncOptions& o) {
  return tandem::max_pool3d_with_indices(input, o.kernel_size(), o.stride(), o.padding(),
                                         o.dilation(), o.ceil_mode());
}

/// libtorch's MaxUnpoolFuncOptions<D>: the pool's window (stride defaults to the kernel size),
/// and the output's spatial size where the default, (in - 1) stride - 2 padding + kernel per
/// dim, is not meant (D numbers, or D + 2 with N and C first; each within stride of the
/// default).
template <size_t D>
struct MaxUnpoolFuncOptions {
  MaxUnpoolFuncOptions(IntN<D> kernel_size)  // NOLINT(google-explicit-constructor)
      : kernel_size_(kernel_size), stride_(kernel_size) {}
  TANDEM_ARG(IntN<D>, kernel_size);
  TANDEM_ARG(IntN<D>, stride);
  TANDEM_ARG(IntN<D>, padding) = 0;
  TANDEM_ARG(std::optional<std::vector<int64_t>>, output_size) = std::nullopt;
};
using MaxUnpool1dFuncOptions = MaxUnpoolFuncOptions<1>;
using MaxUnpool2dFuncOptions = MaxUnpoolFuncOptions<2>;
using MaxUnpool3dFuncOptions = MaxUnpoolFuncOptions<3>;
namespace detail {
/// libtorch's _unpool_output_size: the default size, or output_size checked against it.
std::vector<int64_t> unpool_output_size(const Tensor& input, const std::vector<int64_t>& kernel,
                                        const std::vector<int64_t>& stride,
                                        const std::vector<int64_t>& padding,
                                        const std::optional<std::vector<int64_t>>& output_size,
                                        const char* op);
template <size_t D>
IntN<D> unpool_size(const Tensor& input, const MaxUnpoolFuncOptions<D>& o, const char* op) {
  return int_n<D>(unpool_output_size(input, int_list(o.kernel_size()), int_list(o.stride()),
                                     int_list(o.padding()), o.output_size(), op));
}
template <size_t D>
Tensor max_unpool(const Tensor& input, const Tensor& indices, const MaxUnpoolFuncOptions<D>& o) {
  if constexpr (D == 1) {
    return tandem::max_unpool1d(input, indices, unpool_size(input, o, "max_unpool1d"));
  } else if constexpr (D == 2) {
    return tandem::max_unpool2d(input, indices, unpool_size(input, o, "max_unpool2d"));
  } else {
    return tandem::max_unpool3d(input, indices, unpool_size(input, o, "max_unpool3d"));
  }
}
}  // namespace detail
inline Tensor max_unpool1d(const Tensor& input, const Tensor& indices,
                           const MaxUnpool1dFuncOptions& o) {
  return detail::max_unpool(input, indices, o);
}
inline Tensor max_unpool2d(const Tensor& input, const Tensor& indices,
                           const MaxUnpool2dFuncOptions& o) {
  return detail::max_unpool(input, indices, o);
}
inline Tensor max_unpool3d(const Tensor& input, const Tensor& indices,
                           const MaxUnpool3dFuncOptions& o) {
  return detail::max_unpool(input, indices, o);
}
inline Tensor avg_pool2d(const Tensor& input, const AvgPool2dFuncOptions& o) {
  return tandem::avg_pool2d(input, o.kernel_size(), o.stride(), o.padding(), o.ceil_mode(),
                            o.count_include_pad(), o.divisor_override());
}
inline Tensor avg_pool3d(const Tensor& input, const AvgPool3dFuncOptions& o) {
  return tandem::avg_pool3d(input, o.kernel_size(), o.stride(), o.padding(), o.ceil_mode(),
                            o.count_include_pad(), o.divisor_override());
}

struct BatchNormFuncOptions {
  TANDEM_ARG(Tensor, weight);
  TANDEM_ARG(Tensor, bias);
  TANDEM_ARG(bool, training) = false;
  TANDEM_ARG(double, momentum) = 0.1;
  TANDEM_ARG(double, eps) = 1e-5;
};
inline Tensor batch_norm(const Tensor& input, const Tensor& running_mean,
                         const Tensor& running_var, const BatchNormFuncOptions& o = {}) {
  return tandem::batch_norm(input, running_mean, running_var, o.weight(), o.bias(), o.training(),
                            o.momentum(), o.eps());
}

struct LayerNormFuncOptions {
  LayerNormFuncOptions(Shape normalized_shape)  // NOLINT(google-explicit-constructor)
      : normalized_shape_(std::move(normalized_shape)) {}
  TANDEM_ARG(Shape, normalized_shape);
  TANDEM_ARG(Tensor, weight);
  TANDEM_ARG(Tensor, bias);
  TANDEM_ARG(double, eps) = 1e-5;
};
inline Tensor layer_norm(const Tensor& input, const LayerNormFuncOptions& o) {
  return tandem::layer_norm(input, o.normalized_shape(), o.weight(), o.bias(), o.eps());
}

struct GroupNormFuncOptions {
  GroupNormFuncOptions(int64_t num_groups)  // NOLINT(google-explicit-constructor)
      : num_groups_(num_groups) {}
  TANDEM_ARG(int64_t, num_groups);
  TANDEM_ARG(Tensor, weight);
  TANDEM_ARG(Tensor, bias);
  TANDEM_ARG(double, eps) = 1e-5;
};
inline Tensor group_norm(const Tensor& input, const GroupNormFuncOptions& o) {
  return tandem::group_norm(input, o.num_groups(), o.weight(), o.bias(), o.eps());
}

/// F::interpolate(x, F::InterpolateFuncOptions().scale_factor(std::vector<double>({2, 2}))
///                      .mode(torch::kBilinear)), as libtorch spells it.
struct InterpolateFuncOptions {
  TANDEM_ARG(std::optional<std::vector<int64_t>>, size) = std::nullopt;
  TANDEM_ARG(std::optional<std::vector<double>>, scale_factor) = std::nullopt;
  TANDEM_ARG(std::string, mode) = "nearest";
  TANDEM_ARG(std::optional<bool>, align_corners) = std::nullopt;
  TANDEM_ARG(std::optional<bool>, recompute_scale_factor) = std::nullopt;
  /// Anti-aliased downsampling (bilinear and bicubic), as torch's.
  TANDEM_ARG(bool, antialias) = false;
};
inline Tensor interpolate(const Tensor& input, const InterpolateFuncOptions& o = {}) {
  return tandem::interpolate(input, o.size_, o.scale_factor_, o.mode_, o.align_corners_,
                             o.recompute_scale_factor_, o.antialias_);
}

/// F::grid_sample(x, grid, F::GridSampleFuncOptions().mode(torch::kNearest)
///                                 .padding_mode(torch::kBorder).align_corners(true)).
struct GridSampleFuncOptions {
  /// libtorch's padding names: torch::kZeros (the padding mode's name for zeros), kBorder,
  /// kReflection.
  struct PaddingMode {
    PaddingMode(GridPadding m) : mode(m) {}              // NOLINT(google-explicit-constructor)
    PaddingMode(PadMode m) : mode(GridPadding::zeros) {  // NOLINT(google-explicit-constructor)
      TANDEM_CHECK(m == PadMode::constant,
                   "grid_sample: padding_mode must be kZeros, kBorder or "
                   "kReflection");
    }
    GridPadding mode;
  };
  TANDEM_ARG(std::string, mode) = "bilinear";
  TANDEM_ARG(PaddingMode, padding_mode) = GridPadding::zeros;
  TANDEM_ARG(std::optional<bool>, align_corners) = std::nullopt;
};
inline Tensor grid_sample(const Tensor& input, const Tensor& grid,
                          const GridSampleFuncOptions& o = {}) {
  return tandem::grid_sample(input, grid, o.mode(), o.padding_mode().mode, o.align_corners());
}
using tandem::affine_grid;

struct DropoutFuncOptions {
  TANDEM_ARG(double, p) = 0.5;
  TANDEM_ARG(bool, training) = true;
};
using Dropout2dFuncOptions = DropoutFuncOptions;
using Dropout3dFuncOptions = DropoutFuncOptions;
inline Tensor dropout(const Tensor& input, const DropoutFuncOptions& o) {
  return tandem::dropout(input, o.p(), o.training());
}
inline Tensor dropout2d(const Tensor& input, const Dropout2dFuncOptions& o) {
  return tandem::dropout2d(input, o.p(), o.training());
}
inline Tensor dropout3d(const Tensor& input, const Dropout3dFuncOptions& o) {
  return tandem::dropout3d(input, o.p(), o.training());
}

/// pad holds (left, right) pairs from the last dim; the mode is constant (libtorch's default),
/// torch::kReflect, kReplicate or kCircular.
struct PadFuncOptions {
  PadFuncOptions(std::vector<int64_t> pad) : pad_(std::move(pad)) {}  // NOLINT
  TANDEM_ARG(std::vector<int64_t>, pad);
  TANDEM_ARG(PadMode, mode) = PadMode::constant;
  TANDEM_ARG(double, value) = 0.0;
};
inline Tensor pad(const Tensor& input, const PadFuncOptions& o) {
  return tandem::pad(input, o.pad(), o.mode(), o.value());
}

// --- losses --------------------------------------------------------------------------------

struct CrossEntropyFuncOptions {
  TANDEM_ARG(Reduction, reduction) = Reduction::mean;
  TANDEM_ARG(int64_t, ignore_index) = -100;
  TANDEM_ARG(double, label_smoothing) = 0.0;
  TANDEM_ARG(Tensor, weight);
};
inline Tensor cross_entropy(const Tensor& input, const Tensor& target,
                            const CrossEntropyFuncOptions& o) {
  return tandem::cross_entropy(input, target,
                               {o.reduction(), o.ignore_index(), o.label_smoothing(), o.weight()});
}

struct NLLLossFuncOptions {
  TANDEM_ARG(Tensor, weight);
  TANDEM_ARG(int64_t, ignore_index) = -100;
  TANDEM_ARG(Reduction, reduction) = Reduction::mean;
};
inline Tensor nll_loss(const Tensor& input, const Tensor& target, const NLLLossFuncOptions& o) {
  return tandem::nll_loss(input, target, o.weight(), o.reduction(), o.ignore_index());
}

/// The options of the losses whose only option is the reduction.
struct LossReductionFuncOptions {
  LossReductionFuncOptions(Reduction r = Reduction::mean) : reduction_(r) {}  // NOLINT
  TANDEM_ARG(Reduction, reduction);
};
using MSELossFuncOptions = LossReductionFuncOptions;
using L1LossFuncOptions = LossReductionFuncOptions;
inline Tensor mse_loss(const Tensor& input, const Tensor& target, const MSELossFuncOptions& o) {
  return tandem::mse_loss(input, target, o.reduction());
}
inline Tensor l1_loss(const Tensor& input, const Tensor& target, const L1LossFuncOptions& o) {
  return tandem::l1_loss(input, target, o.reduction());
}

struct SmoothL1LossFuncOptions {
  TANDEM_ARG(Reduction, reduction) = Reduction::mean;
  TANDEM_ARG(double, beta) = 1.0;
};
inline Tensor smooth_l1_loss(const Tensor& input, const Tensor& target,
                             const SmoothL1LossFuncOptions& o) {
  return tandem::smooth_l1_loss(input, target, o.reduction(), o.beta());
}

struct HuberLossFuncOptions {
  TANDEM_ARG(Reduction, reduction) = Reduction::mean;
  TANDEM_ARG(double, delta) = 1.0;
};
inline Tensor huber_loss(const Tensor& input, const Tensor& target, const HuberLossFuncOptions& o) {
  return tandem::huber_loss(input, target, o.reduction(), o.delta());
}

/// `.reduction(torch::kBatchMean)`, the divergence's value, or one of the other reductions.
struct KLDivFuncOptions {
  TANDEM_ARG(KLDivReduction, reduction) = Reduction::mean;
  TANDEM_ARG(bool, log_target) = false;
};
inline Tensor kl_div(const Tensor& input, const Tensor& target, const KLDivFuncOptions& o) {
  return tandem::kl_div(input, target, o.reduction(), o.log_target());
}

using CosineSimilarityFuncOptions = CosineSimilarityOptions;
inline Tensor cosine_similarity(const Tensor& x1, const Tensor& x2,
                                const CosineSimilarityFuncOptions& o) {
  return tandem::cosine_similarity(x1, x2, o.dim(), o.eps());
}
using PairwiseDistanceFuncOptions = PairwiseDistanceOptions;
inline Tensor pairwise_distance(const Tensor& x1, const Tensor& x2,
                                const PairwiseDistanceFuncOptions& o) {
  return tandem::pairwise_distance(x1, x2, o.p(), o.eps(), o.keepdim());
}

// --- embedding: input first, as torch.nn.functional (torch::embedding takes weight first) ----
struct EmbeddingFuncOptions {
  /// A negative index counts from the end, as torch.nn.functional.embedding.
  TANDEM_ARG(std::optional<int64_t>, padding_idx);
  /// As EmbeddingOptions': the rows looked up are renormalized in the weight itself.
  TANDEM_ARG(std::optional<double>, max_norm);
  TANDEM_ARG(double, norm_type) = 2.0;
  TANDEM_ARG(bool, scale_grad_by_freq) = false;
  TANDEM_ARG(bool, sparse) = false;
};
namespace detail {
inline void check_embedding_options(bool sparse) {
  TANDEM_CHECK(!sparse,
               "Embedding: sparse gradients are not supported (tandem has no sparse "
               "tensors); the dense gradient is the same values");
}
/// torch.nn's padding_idx in [-n, n) as tandem::embedding's (-1: none).
inline int64_t embedding_padding_idx(std::optional<int64_t> padding_idx, int64_t n) {
  if (!padding_idx) return -1;
  const int64_t p = *padding_idx;
  TANDEM_CHECK(p >= -n && p < n, "Embedding: padding_idx ", p, " is out of range for ", n,
               " embeddings");
  return p < 0 ? p + n : p;
}
}  // namespace detail

inline Tensor embedding(const Tensor& input, const Tensor& weight,
                        const EmbeddingFuncOptions& o = {}) {
  detail::check_embedding_options(o.sparse());
  if (o.max_norm()) {
    Tensor table = weight;  // a handle: the caller's weight is renormalized, as torch's
    embedding_renorm_(table, input, *o.max_norm(), o.norm_type());
  }
  return tandem::embedding(
      weight, input,
      detail::embedding_padding_idx(o.padding_idx(), weight.dim() > 0 ? weight.size(0) : 0),
      o.scale_grad_by_freq());
}

struct BinaryCrossEntropyFuncOptions {
  TANDEM_ARG(Tensor, weight);
  TANDEM_ARG(Reduction, reduction) = Reduction::mean;
};
inline Tensor binary_cross_entropy(const Tensor& input, const Tensor& target,
                                   const BinaryCrossEntropyFuncOptions& o) {
  return tandem::binary_cross_entropy(input, target, o.weight(), o.reduction());
}

struct BinaryCrossEntropyWithLogitsFuncOptions {
  TANDEM_ARG(Tensor, weight);
  TANDEM_ARG(Reduction, reduction) = Reduction::mean;
  TANDEM_ARG(Tensor, pos_weight);
};
inline Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target,
                                               const BinaryCrossEntropyWithLogitsFuncOptions& o) {
  return tandem::binary_cross_entropy_with_logits(input, target, o.weight(), o.pos_weight(),
                                                  o.reduction());
}

// --- more losses, as torch.nn.functional's (ops/nn_ops.hpp) -----------------------------------

using tandem::cosine_embedding_loss;
using tandem::gaussian_nll_loss;
using tandem::hinge_embedding_loss;
using tandem::local_response_norm;
using tandem::margin_ranking_loss;
using tandem::multi_margin_loss;
using tandem::multilabel_margin_loss;
using tandem::multilabel_soft_margin_loss;
using tandem::poisson_nll_loss;
using tandem::soft_margin_loss;
using tandem::triplet_margin_loss;

struct MarginRankingLossFuncOptions {
  TANDEM_ARG(double, margin) = 0.0;
  TANDEM_ARG(Reduction, reduction) = Reduction::mean;
};
inline Tensor margin_ranking_loss(const Tensor& input1, const Tensor& input2, const Tensor& target,
                                  const MarginRankingLossFuncOptions& o) {
  return tandem::margin_ranking_loss(input1, input2, target, o.margin(), o.reduction());
}

struct TripletMarginLossFuncOptions {
  TANDEM_ARG(double, margin) = 1.0;
  TANDEM_ARG(double, p) = 2.0;
  TANDEM_ARG(double, eps) = 1e-6;
  TANDEM_ARG(bool, swap) = false;
  TANDEM_ARG(Reduction, reduction) = Reduction::mean;
};
inline Tensor triplet_margin_loss(const Tensor& anchor, const Tensor& positive,
                                  const Tensor& negative, const TripletMarginLossFuncOptions& o) {
  return tandem::triplet_margin_loss(anchor, positive, negative, o.margin(), o.p(), o.eps(),
                                     o.swap(), o.reduction());
}

struct CosineEmbeddingLossFuncOptions {
  TANDEM_ARG(double, margin) = 0.0;
  TANDEM_ARG(Reduction, reduction) = Reduction::mean;
};
inline Tensor cosine_embedding_loss(const Tensor& input1, const Tensor& input2,
                                    const Tensor& target, const CosineEmbeddingLossFuncOptions& o) {
  return tandem::cosine_embedding_loss(input1, input2, target, o.margin(), o.reduction());
}

struct HingeEmbeddingLossFuncOptions {
  TANDEM_ARG(double, margin) = 1.0;
  TANDEM_ARG(Reduction, reduction) = Reduction::mean;
};
inline Tensor hinge_embedding_loss(const Tensor& input, const Tensor& target,
                                   const HingeEmbeddingLossFuncOptions& o) {
  return tandem::hinge_embedding_loss(input, target, o.margin(), o.reduction());
}

using SoftMarginLossFuncOptions = LossReductionFuncOptions;
inline Tensor soft_margin_loss(const Tensor& input, const Tensor& target,
                               const SoftMarginLossFuncOptions& o) {
  return tandem::soft_margin_loss(input, target, o.reduction());
}

struct MultilabelSoftMarginLossFuncOptions {
  TANDEM_ARG(Tensor, weight);
  TANDEM_ARG(Reduction, reduction) = Reduction::mean;
};
inline Tensor multilabel_soft_margin_loss(const Tensor& input, const Tensor& target,
                                          const MultilabelSoftMarginLossFuncOptions& o) {
  return tandem::multilabel_soft_margin_loss(input, target, o.weight(), o.reduction());
}

struct MultilabelMarginLossFuncOptions {
  TANDEM_ARG(Reduction, reduction) = Reduction::mean;
};
inline Tensor multilabel_margin_loss(const Tensor& input, const Tensor& target,
                                     const MultilabelMarginLossFuncOptions& o) {
  return tandem::multilabel_margin_loss(input, target, o.reduction());
}

struct CTCLossFuncOptions {
  TANDEM_ARG(int64_t, blank) = 0;
  TANDEM_ARG(Reduction, reduction) = Reduction::mean;
  TANDEM_ARG(bool, zero_infinity) = false;
};
inline Tensor ctc_loss(const Tensor& log_probs, const Tensor& targets, const Tensor& input_lengths,
                       const Tensor& target_lengths, const CTCLossFuncOptions& o = {}) {
  return tandem::ctc_loss(log_probs, targets, input_lengths, target_lengths, o.blank(),
                          o.reduction(), o.zero_infinity());
}

struct GaussianNLLLossFuncOptions {
  TANDEM_ARG(bool, full) = false;
  TANDEM_ARG(double, eps) = 1e-6;
  TANDEM_ARG(Reduction, reduction) = Reduction::mean;
};
inline Tensor gaussian_nll_loss(const Tensor& input, const Tensor& target, const Tensor& var,
                                const GaussianNLLLossFuncOptions& o) {
  return tandem::gaussian_nll_loss(input, target, var, o.full(), o.eps(), o.reduction());
}

struct PoissonNLLLossFuncOptions {
  TANDEM_ARG(bool, log_input) = true;
  TANDEM_ARG(bool, full) = false;
  TANDEM_ARG(double, eps) = 1e-8;
  TANDEM_ARG(Reduction, reduction) = Reduction::mean;
};
inline Tensor poisson_nll_loss(const Tensor& input, const Tensor& target,
                               const PoissonNLLLossFuncOptions& o) {
  return tandem::poisson_nll_loss(input, target, o.log_input(), o.full(), o.eps(), o.reduction());
}

struct MultiMarginLossFuncOptions {
  TANDEM_ARG(int64_t, p) = 1;
  TANDEM_ARG(double, margin) = 1.0;
  TANDEM_ARG(Tensor, weight);
  TANDEM_ARG(Reduction, reduction) = Reduction::mean;
};
inline Tensor multi_margin_loss(const Tensor& input, const Tensor& target,
                                const MultiMarginLossFuncOptions& o) {
  return tandem::multi_margin_loss(input, target, o.p(), o.margin(), o.weight(), o.reduction());
}

using LocalResponseNormFuncOptions = LocalResponseNormOptions;
inline Tensor local_response_norm(const Tensor& input, const LocalResponseNormFuncOptions& o) {
  return tandem::local_response_norm(input, o.size(), o.alpha(), o.beta(), o.k());
}

struct EmbeddingBagFuncOptions {
  TANDEM_ARG(Tensor, offsets);
  TANDEM_ARG(EmbeddingBagModeArg, mode) = EmbeddingBagMode::mean;
  TANDEM_ARG(Tensor, per_sample_weights);
  TANDEM_ARG(bool, include_last_offset) = false;
  TANDEM_ARG(std::optional<int64_t>, padding_idx);
};
/// libtorch's argument order: the indices first, then the table.
inline Tensor embedding_bag(const Tensor& input, const Tensor& weight,
                            const EmbeddingBagFuncOptions& o = {}) {
  return tandem::embedding_bag(weight, input, o.offsets(), o.mode().value, o.per_sample_weights(),
                               o.include_last_offset(), o.padding_idx());
}

// --- glu, pixel shuffle -----------------------------------------------------------------------

using tandem::glu;
using tandem::pixel_shuffle;
using tandem::pixel_unshuffle;

using GLUFuncOptions = GLUOptions;
inline Tensor glu(const Tensor& input, const GLUFuncOptions& o) {
  return tandem::glu(input, o.dim());
}
using PixelShuffleFuncOptions = PixelShuffleOptions;
inline Tensor pixel_shuffle(const Tensor& input, const PixelShuffleFuncOptions& o) {
  return tandem::pixel_shuffle(input, o.upscale_factor());
}
using PixelUnshuffleFuncOptions = PixelUnshuffleOptions;
inline Tensor pixel_unshuffle(const Tensor& input, const PixelUnshuffleFuncOptions& o) {
  return tandem::pixel_unshuffle(input, o.downscale_factor());
}

// --- the shrinking activations, bilinear, unfold and fold ---------------------------------

using tandem::bilinear;
using tandem::celu;
using tandem::channel_shuffle;
using tandem::hardshrink;
using tandem::softmin;
using tandem::softshrink;
using tandem::tanhshrink;
using tandem::threshold;

using CELUFuncOptions = CELUOptions;
inline Tensor celu(const Tensor& input, const CELUFuncOptions& o) {
  return tandem::celu(input, o.alpha());
}
using SoftshrinkFuncOptions = SoftshrinkOptions;
inline Tensor softshrink(const Tensor& input, const SoftshrinkFuncOptions& o) {
  return tandem::softshrink(input, o.lambda());
}
using HardshrinkFuncOptions = HardshrinkOptions;
inline Tensor hardshrink(const Tensor& input, const HardshrinkFuncOptions& o) {
  return tandem::hardshrink(input, o.lambda());
}
using ThresholdFuncOptions = ThresholdOptions;
inline Tensor threshold(const Tensor& input, const ThresholdFuncOptions& o) {
  return tandem::threshold(input, o.threshold(), o.value());
}
using SoftminFuncOptions = SoftminOptions;
inline Tensor softmin(const Tensor& input, const SoftminFuncOptions& o) {
  return tandem::softmin(input, o.dim());
}
using UnfoldFuncOptions = UnfoldOptions;
inline Tensor unfold(const Tensor& input, const UnfoldFuncOptions& o) {
  return im2col(input, o.kernel_size(), o.dilation(), o.padding(), o.stride());
}
using FoldFuncOptions = FoldOptions;
inline Tensor fold(const Tensor& input, const FoldFuncOptions& o) {
  return col2im(input, o.output_size(), o.kernel_size(), o.dilation(), o.padding(), o.stride());
}

}  // namespace tandem::nn::functional
