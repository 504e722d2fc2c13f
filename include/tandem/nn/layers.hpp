// The layers of torch.nn that image models need, with torch's default initializations.
// Options are structs with chainable setters, as libtorch's:
// Conv2d(Conv2dOptions(3, 64, 3).stride(2).padding(1).bias(false)).
#pragma once

#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "tandem/core/arg.hpp"
#include "tandem/nn/module.hpp"
#include "tandem/ops/nn_ops.hpp"
#include "tandem/ops/shape_ops.hpp"

namespace tandem::nn {

// clang-format off
/// A convolution's padding, libtorch's variant: numbers (`padding(1)`, `padding({1, 2})`) or a
/// name (`padding(torch::kSame)`, `kValid`), whichever was set last. `padding()` reads the
/// numbers, `padding_kind()` the name when one was given.
#define TANDEM_CONV_PADDING(Size)                                                            \
  auto padding(Size value) & -> decltype(*this) {                                            \
    padding_ = value;                                                                        \
    padding_kind_.reset();                                                                   \
    return *this;                                                                            \
  }                                                                                          \
  auto padding(Size value) && -> std::decay_t<decltype(*this)> {                             \
    padding_ = value;                                                                        \
    padding_kind_.reset();                                                                   \
    return std::move(*this);                                                                 \
  }                                                                                          \
  auto padding(ConvPadding kind) & -> decltype(*this) {                                      \
    padding_kind_ = kind;                                                                    \
    return *this;                                                                            \
  }                                                                                          \
  auto padding(ConvPadding kind) && -> std::decay_t<decltype(*this)> {                       \
    padding_kind_ = kind;                                                                    \
    return std::move(*this);                                                                 \
  }                                                                                          \
  const Size& padding() const noexcept { return padding_; }                                  \
  const std::optional<ConvPadding>& padding_kind() const noexcept { return padding_kind_; }  \
  std::optional<ConvPadding> padding_kind_;                                                  \
  Size padding_
// clang-format on

namespace detail {
/// What a convolution runs on, given its padding (numbers or kSame / kValid) and padding_mode
/// (torch's Conv*d._conv_forward): the input, padded here by the mode (or by zeros where kSame's
/// padding is odd, its extra element after, as torch), and the symmetric padding left for the
/// convolution itself, per spatial dim. `weight` gives the kernel size.
std::pair<Tensor, std::vector<int64_t>> conv_padding(
    const char* op, const Tensor& input, const Tensor& weight, const std::vector<int64_t>& stride,
    const std::vector<int64_t>& dilation, const std::vector<int64_t>& padding,
    std::optional<ConvPadding> kind, PadMode mode = PadMode::constant);
/// ", padding=same" (for a kind) and ", padding_mode=reflect" (for a mode other than zeros), as
/// torch's repr writes them.
std::string conv_padding_repr(std::optional<ConvPadding> kind, PadMode mode);
}  // namespace detail

struct LinearOptions {
  LinearOptions(int64_t in_features, int64_t out_features)
      : in_features_(in_features), out_features_(out_features) {}
  TANDEM_ARG(int64_t, in_features);
  TANDEM_ARG(int64_t, out_features);
  TANDEM_ARG(bool, bias) = true;
};

/// y = x W^T + b. W (out, in) and b (out) ~ U(-1/sqrt(in), 1/sqrt(in)), as torch.
class Linear : public Module {
 public:
  TANDEM_MODULE_CLONE(Linear, options)
  explicit Linear(const LinearOptions& options);
  Linear(int64_t in_features, int64_t out_features, bool bias = true)
      : Linear(LinearOptions(in_features, out_features).bias(bias)) {}
  /// Draws the parameters again as the constructor did (libtorch's reset_parameters).
  void reset_parameters();
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  Tensor weight, bias;
  const LinearOptions options;
};

/// A convolution's options in D spatial dims, as libtorch's ConvOptions<D>: the sizes come first,
/// Conv2dOptions(in, out, kernel_size).stride(2).padding(1).bias(false); the default constructor
/// leaves them to Conv2d(in, out, kernel_size, options).
template <size_t D>
struct ConvOptions {
  static constexpr size_t dims = D;
  ConvOptions() = default;
  ConvOptions(int64_t in_channels, int64_t out_channels, IntN<D> kernel_size)
      : in_channels_(in_channels), out_channels_(out_channels), kernel_size_(kernel_size) {}
  TANDEM_ARG(int64_t, in_channels) = 0;
  TANDEM_ARG(int64_t, out_channels) = 0;
  TANDEM_ARG(IntN<D>, kernel_size) = 0;
  TANDEM_ARG(IntN<D>, stride) = 1;
  TANDEM_CONV_PADDING(IntN<D>) = 0;
  TANDEM_ARG(IntN<D>, dilation) = 1;
  TANDEM_ARG(int64_t, groups) = 1;
  TANDEM_ARG(bool, bias) = true;
  /// How the padding is filled: torch::kZeros, kReflect, kReplicate or kCircular.
  TANDEM_ARG(PadMode, padding_mode) = PadMode::constant;
};
using Conv1dOptions = ConvOptions<1>;
using Conv2dOptions = ConvOptions<2>;
using Conv3dOptions = ConvOptions<3>;

/// A transposed convolution's options, as libtorch's ConvTransposeOptions<D>:
/// ConvTranspose2dOptions(in, out, kernel_size).stride(2).output_padding(1).
template <size_t D>
struct ConvTransposeOptions {
  static constexpr size_t dims = D;
  ConvTransposeOptions() = default;
  ConvTransposeOptions(int64_t in_channels, int64_t out_channels, IntN<D> kernel_size)
      : in_channels_(in_channels), out_channels_(out_channels), kernel_size_(kernel_size) {}
  TANDEM_ARG(int64_t, in_channels) = 0;
  TANDEM_ARG(int64_t, out_channels) = 0;
  TANDEM_ARG(IntN<D>, kernel_size) = 0;
  TANDEM_ARG(IntN<D>, stride) = 1;
  TANDEM_ARG(IntN<D>, padding) = 0;
  TANDEM_ARG(IntN<D>, output_padding) = 0;
  TANDEM_ARG(IntN<D>, dilation) = 1;
  TANDEM_ARG(int64_t, groups) = 1;
  TANDEM_ARG(bool, bias) = true;
};
using ConvTranspose1dOptions = ConvTransposeOptions<1>;
using ConvTranspose2dOptions = ConvTransposeOptions<2>;
using ConvTranspose3dOptions = ConvTransposeOptions<3>;

namespace detail {
/// What the convolution layers share (libtorch's ConvNdImpl): a weight of (out, in / groups,
/// kernel...) for a convolution, (in, out / groups, kernel...) for a transposed one, ~
/// kaiming_uniform(a = sqrt(5)), and a bias of out ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)), as
/// torch's; the input (N, C, spatial...) or unbatched (C, spatial...).
template <typename Options>
class ConvLayer : public Module {
 public:
  ConvLayer(const char* type_name, const Options& options);
  /// Draws the parameters again as the constructor did (libtorch's reset_parameters).
  void reset_parameters();
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  Tensor weight, bias;
  const Options options;
};
extern template class ConvLayer<ConvOptions<1>>;
extern template class ConvLayer<ConvOptions<2>>;
extern template class ConvLayer<ConvOptions<3>>;
extern template class ConvLayer<ConvTransposeOptions<1>>;
extern template class ConvLayer<ConvTransposeOptions<2>>;
extern template class ConvLayer<ConvTransposeOptions<3>>;
}  // namespace detail

// clang-format off
/// One convolution layer per family and dimension, as libtorch's Conv2d(Conv2dOptions(...)) or,
/// sizes first, Conv2d(in, out, kernel_size, options): the sizes given replace those in options.
#define TANDEM_CONV_LAYER(Name, Options)                                                     \
  class Name : public detail::ConvLayer<Options> {                                           \
   public:                                                                                   \
    TANDEM_MODULE_CLONE(Name, options)                                                       \
    explicit Name(const Options& options) : ConvLayer(#Name, options) {}                     \
    Name(int64_t in_channels, int64_t out_channels, IntN<Options::dims> kernel_size,         \
         Options options = {})                                                               \
        : Name(options.in_channels(in_channels).out_channels(out_channels)                  \
                   .kernel_size(kernel_size)) {}                                             \
  }
// clang-format on
TANDEM_CONV_LAYER(Conv1d, Conv1dOptions);
TANDEM_CONV_LAYER(Conv2d, Conv2dOptions);
TANDEM_CONV_LAYER(Conv3d, Conv3dOptions);
TANDEM_CONV_LAYER(ConvTranspose1d, ConvTranspose1dOptions);
TANDEM_CONV_LAYER(ConvTranspose2d, ConvTranspose2dOptions);
TANDEM_CONV_LAYER(ConvTranspose3d, ConvTranspose3dOptions);
#undef TANDEM_CONV_LAYER

/// num_features comes first, as libtorch's BatchNormOptions(num_features); the default
/// constructor leaves it to BatchNorm2d(num_features, options) (or BatchNorm1d's).
struct BatchNormOptions {
  BatchNormOptions() = default;
  explicit BatchNormOptions(int64_t num_features) : num_features_(num_features) {}
  TANDEM_ARG(int64_t, num_features) = 0;
  TANDEM_ARG(double, eps) = 1e-5;
  TANDEM_ARG(double, momentum) = 0.1;
  TANDEM_ARG(bool, affine) = true;
  TANDEM_ARG(bool, track_running_stats) = true;
};
using BatchNorm1dOptions = BatchNormOptions;
using BatchNorm2dOptions = BatchNormOptions;
using BatchNorm3dOptions = BatchNormOptions;

/// Batch normalization per channel (dim 1) over every other dim, what BatchNorm1d and
/// BatchNorm2d share (torch's _BatchNorm); parameters weight, bias; buffers running_mean,
/// running_var, num_batches_tracked.
class BatchNorm : public Module {
 public:
  /// Running statistics back to mean 0, variance 1, no batches (libtorch's names); and with
  /// them the affine parameters back to 1 and 0.
  void reset_running_stats();
  void reset_parameters();
  Tensor forward(const Tensor& input) override;
  /// relu(forward(input) + residual), or relu(forward(input)) without a residual, as one op
  /// (batch_norm_relu): the same values and gradients, in less time and memory.
  Tensor forward_relu(const Tensor& input, const Tensor& residual = Tensor());
  std::string extra_repr() const override;
  /// Makes training-mode statistics span a group of ranks (SyncBatchNorm): `allreduce_sum` sums
  /// a tensor in place over the ranks (see sync_batch_norm). parallel::convert_sync_batchnorm
  /// sets it on every batch norm of a model; an empty function goes back to local statistics.
  void set_stats_allreduce(StatsAllreduce allreduce_sum) { stats_allreduce_ = std::move(allreduce_sum); }
  bool is_synchronized() const { return stats_allreduce_ != nullptr; }
  Tensor weight, bias, running_mean, running_var, num_batches_tracked;
  const int64_t num_features;
  const BatchNormOptions options;

 protected:
  /// The input has min_dim..max_dim dims, which `layout` names for errors ("(N, C, H, W)").
  BatchNorm(const char* type_name, const BatchNormOptions& options, int min_dim, int max_dim,
            const char* layout);

 private:
  Tensor normalize(const Tensor& input, const Tensor& residual, bool relu);
  StatsAllreduce stats_allreduce_;
  const int min_dim_, max_dim_;
  const char* layout_;
};

/// Batch normalization of (N, C) or (N, C, L), as torch.nn.BatchNorm1d.
class BatchNorm1d : public BatchNorm {
 public:
  TANDEM_MODULE_CLONE(BatchNorm1d, options)
  explicit BatchNorm1d(const BatchNormOptions& options);
  /// num_features given here replaces the one in `options`.
  explicit BatchNorm1d(int64_t num_features, BatchNormOptions options = {})
      : BatchNorm1d(options.num_features(num_features)) {}
};

/// Batch normalization of (N, C, H, W).
class BatchNorm2d : public BatchNorm {
 public:
  TANDEM_MODULE_CLONE(BatchNorm2d, options)
  explicit BatchNorm2d(const BatchNormOptions& options);
  /// num_features given here replaces the one in `options`.
  explicit BatchNorm2d(int64_t num_features, BatchNormOptions options = {})
      : BatchNorm2d(options.num_features(num_features)) {}
};

/// Batch normalization of (N, C, D, H, W).
class BatchNorm3d : public BatchNorm {
 public:
  TANDEM_MODULE_CLONE(BatchNorm3d, options)
  explicit BatchNorm3d(const BatchNormOptions& options);
  /// num_features given here replaces the one in `options`.
  explicit BatchNorm3d(int64_t num_features, BatchNormOptions options = {})
      : BatchNorm3d(options.num_features(num_features)) {}
};

/// libtorch's LayerNormOptions({C}) / LayerNormOptions({H, W}).eps(1e-6).
struct LayerNormOptions {
  LayerNormOptions(Shape normalized_shape)  // NOLINT(google-explicit-constructor)
      : normalized_shape_(std::move(normalized_shape)) {}
  TANDEM_ARG(Shape, normalized_shape);
  TANDEM_ARG(double, eps) = 1e-5;
  TANDEM_ARG(bool, elementwise_affine) = true;
};

/// Layer normalization over the trailing normalized_shape dims; weight (ones) and bias (zeros)
/// of that shape when elementwise_affine.
class LayerNorm : public Module {
 public:
  TANDEM_MODULE_CLONE(LayerNorm, options)
  explicit LayerNorm(const LayerNormOptions& options);
  /// Draws the parameters again as the constructor did (libtorch's reset_parameters).
  void reset_parameters();
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  Tensor weight, bias;
  const LayerNormOptions options;
};

/// libtorch's GroupNormOptions(num_groups, num_channels).
struct GroupNormOptions {
  GroupNormOptions(int64_t num_groups, int64_t num_channels)
      : num_groups_(num_groups), num_channels_(num_channels) {}
  TANDEM_ARG(int64_t, num_groups);
  TANDEM_ARG(int64_t, num_channels);
  TANDEM_ARG(double, eps) = 1e-5;
  TANDEM_ARG(bool, affine) = true;
};

/// Group normalization of (N, C, ...); weight (ones) and bias (zeros) of (C) when affine.
class GroupNorm : public Module {
 public:
  TANDEM_MODULE_CLONE(GroupNorm, options)
  explicit GroupNorm(const GroupNormOptions& options);
  /// Draws the parameters again as the constructor did (libtorch's reset_parameters).
  void reset_parameters();
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  Tensor weight, bias;
  const GroupNormOptions options;
};

/// libtorch's InstanceNormOptions(num_features). Running statistics are not kept:
/// track_running_stats(true) is refused (each sample is normalized by its own statistics, in
/// training and evaluation alike, as torch's default).
struct InstanceNormOptions {
  InstanceNormOptions(int64_t num_features)  // NOLINT(google-explicit-constructor)
      : num_features_(num_features) {}
  TANDEM_ARG(int64_t, num_features);
  TANDEM_ARG(double, eps) = 1e-5;
  TANDEM_ARG(double, momentum) = 0.1;
  TANDEM_ARG(bool, affine) = false;
  TANDEM_ARG(bool, track_running_stats) = false;
};

/// Normalizes each sample's channels over their own positions: group norm with one group per
/// channel. InstanceNorm1d takes (N, C, L), InstanceNorm2d (N, C, H, W), InstanceNorm3d
/// (N, C, D, H, W).
class InstanceNorm : public Module {
 public:
  InstanceNorm(const char* type_name, int64_t dims, const InstanceNormOptions& options);
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  Tensor weight, bias;
  /// With track_running_stats: the mean over each batch of its samples' statistics (as
  /// torch's), used in eval mode; num_batches_tracked is kept for torch's state dict and, as
  /// torch's instance norm leaves it, stays 0.
  Tensor running_mean, running_var, num_batches_tracked;
  const InstanceNormOptions options;

 private:
  int64_t dims_;
};

class InstanceNorm1d : public InstanceNorm {
 public:
  TANDEM_MODULE_CLONE(InstanceNorm1d, options)
  explicit InstanceNorm1d(const InstanceNormOptions& options)
      : InstanceNorm("InstanceNorm1d", 3, options) {}
};

class InstanceNorm2d : public InstanceNorm {
 public:
  TANDEM_MODULE_CLONE(InstanceNorm2d, options)
  explicit InstanceNorm2d(const InstanceNormOptions& options)
      : InstanceNorm("InstanceNorm2d", 4, options) {}
};

class InstanceNorm3d : public InstanceNorm {
 public:
  TANDEM_MODULE_CLONE(InstanceNorm3d, options)
  explicit InstanceNorm3d(const InstanceNormOptions& options)
      : InstanceNorm("InstanceNorm3d", 5, options) {}
};

/// libtorch's `inplace` (here, in the other activations' options, in DropoutOptions and in the
/// functional forms) is taken and changes nothing: the result is computed out of place, with
/// the same values. So the input stays valid for any op that saved it for its backward (torch's
/// in-place ReLU after a layer that saved its output fails at backward).
struct ReLUOptions {
  ReLUOptions(bool inplace = false) : inplace_(inplace) {}  // NOLINT(google-explicit-constructor)
  TANDEM_ARG(bool, inplace);
};

class ReLU : public Module {
 public:
  TANDEM_MODULE_CLONE(ReLU, options)
  explicit ReLU(const ReLUOptions& options = {}) : Module("ReLU"), options(options) {}
  Tensor forward(const Tensor& input) override;
  const ReLUOptions options;
};

struct LeakyReLUOptions {
  TANDEM_ARG(double, negative_slope) = 1e-2;
  TANDEM_ARG(bool, inplace) = false;
};

class LeakyReLU : public Module {
 public:
  TANDEM_MODULE_CLONE(LeakyReLU, options)
  explicit LeakyReLU(const LeakyReLUOptions& options = {});
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  const LeakyReLUOptions options;
};

class Sigmoid : public Module {
 public:
  TANDEM_MODULE_CLONE(Sigmoid)
  Sigmoid() : Module("Sigmoid") {}
  Tensor forward(const Tensor& input) override;
};

class Tanh : public Module {
 public:
  TANDEM_MODULE_CLONE(Tanh)
  Tanh() : Module("Tanh") {}
  Tensor forward(const Tensor& input) override;
};

/// The dim comes first, as libtorch's SoftmaxOptions(dim); `Softmax(1)` reads the same.
struct SoftmaxOptions {
  SoftmaxOptions(int64_t dim) : dim_(dim) {}  // NOLINT(google-explicit-constructor)
  TANDEM_ARG(int64_t, dim);
  /// The functional forms' dtype: the input is converted to it first (libtorch's
  /// SoftmaxFuncOptions(dim).dtype(kFloat), softmax in f32 of an f16 input).
  TANDEM_ARG(std::optional<DType>, dtype) = std::nullopt;
};
using LogSoftmaxOptions = SoftmaxOptions;

class Softmax : public Module {
 public:
  TANDEM_MODULE_CLONE(Softmax, options)
  explicit Softmax(const SoftmaxOptions& options) : Module("Softmax"), options(options) {}
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  const SoftmaxOptions options;
};

class LogSoftmax : public Module {
 public:
  TANDEM_MODULE_CLONE(LogSoftmax, options)
  explicit LogSoftmax(const LogSoftmaxOptions& options) : Module("LogSoftmax"), options(options) {}
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  const LogSoftmaxOptions options;
};

class GELU : public Module {
 public:
  TANDEM_MODULE_CLONE(GELU, approximate)
  /// approximate: "none" (erf) or "tanh".
  explicit GELU(std::string approximate = "none");
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  const std::string approximate;
};

/// The other activations of torch.nn (the ops in ops/nn_ops.hpp), with libtorch's options.
struct ELUOptions {
  TANDEM_ARG(double, alpha) = 1.0;
  TANDEM_ARG(bool, inplace) = false;
};

class ELU : public Module {
 public:
  TANDEM_MODULE_CLONE(ELU, options)
  explicit ELU(const ELUOptions& options = {}) : Module("ELU"), options(options) {}
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  const ELUOptions options;
};

struct SELUOptions {
  SELUOptions(bool inplace = false) : inplace_(inplace) {}  // NOLINT(google-explicit-constructor)
  TANDEM_ARG(bool, inplace);
};

class SELU : public Module {
 public:
  TANDEM_MODULE_CLONE(SELU, options)
  explicit SELU(const SELUOptions& options = {}) : Module("SELU"), options(options) {}
  Tensor forward(const Tensor& input) override;
  const SELUOptions options;
};

struct SoftplusOptions {
  TANDEM_ARG(double, beta) = 1.0;
  TANDEM_ARG(double, threshold) = 20.0;
};

class Softplus : public Module {
 public:
  TANDEM_MODULE_CLONE(Softplus, options)
  explicit Softplus(const SoftplusOptions& options = {}) : Module("Softplus"), options(options) {}
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  const SoftplusOptions options;
};

struct HardtanhOptions {
  TANDEM_ARG(double, min_val) = -1.0;
  TANDEM_ARG(double, max_val) = 1.0;
  TANDEM_ARG(bool, inplace) = false;
};

class Hardtanh : public Module {
 public:
  TANDEM_MODULE_CLONE(Hardtanh, options)
  explicit Hardtanh(const HardtanhOptions& options = {});
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  const HardtanhOptions options;
};

struct ReLU6Options {
  ReLU6Options(bool inplace = false) : inplace_(inplace) {}  // NOLINT(google-explicit-constructor)
  TANDEM_ARG(bool, inplace);
};

class ReLU6 : public Module {
 public:
  TANDEM_MODULE_CLONE(ReLU6, options)
  explicit ReLU6(const ReLU6Options& options = {}) : Module("ReLU6"), options(options) {}
  Tensor forward(const Tensor& input) override;
  const ReLU6Options options;
};

class SiLU : public Module {
 public:
  TANDEM_MODULE_CLONE(SiLU)
  SiLU() : Module("SiLU") {}
  Tensor forward(const Tensor& input) override;
};

class Mish : public Module {
 public:
  TANDEM_MODULE_CLONE(Mish)
  Mish() : Module("Mish") {}
  Tensor forward(const Tensor& input) override;
};

class Hardswish : public Module {
 public:
  TANDEM_MODULE_CLONE(Hardswish)
  Hardswish() : Module("Hardswish") {}
  Tensor forward(const Tensor& input) override;
};

class Hardsigmoid : public Module {
 public:
  TANDEM_MODULE_CLONE(Hardsigmoid)
  Hardsigmoid() : Module("Hardsigmoid") {}
  Tensor forward(const Tensor& input) override;
};

class LogSigmoid : public Module {
 public:
  TANDEM_MODULE_CLONE(LogSigmoid)
  LogSigmoid() : Module("LogSigmoid") {}
  Tensor forward(const Tensor& input) override;
};

class Softsign : public Module {
 public:
  TANDEM_MODULE_CLONE(Softsign)
  Softsign() : Module("Softsign") {}
  Tensor forward(const Tensor& input) override;
};

/// num_parameters: 1 (one slope for every channel) or the input's channel count (dim 1).
struct PReLUOptions {
  TANDEM_ARG(int64_t, num_parameters) = 1;
  TANDEM_ARG(double, init) = 0.25;
};

class PReLU : public Module {
 public:
  TANDEM_MODULE_CLONE(PReLU, options)
  explicit PReLU(const PReLUOptions& options = {});
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  Tensor weight;
  const PReLUOptions options;
};

/// A max pooling window, as libtorch's MaxPool2dOptions(3).stride(2).padding(1): stride 0 (the
/// default) means stride = kernel_size, as torch's; libtorch's MaxPoolOptions<D>.
template <size_t D>
struct MaxPoolOptions {
  MaxPoolOptions(IntN<D> kernel_size)
      : kernel_size_(kernel_size) {}  // NOLINT(google-explicit-constructor)
  TANDEM_ARG(IntN<D>, kernel_size);
  TANDEM_ARG(IntN<D>, stride) = 0;
  TANDEM_ARG(IntN<D>, padding) = 0;
  TANDEM_ARG(IntN<D>, dilation) = 1;
  /// Output sizes rounded up: the last window may hang past the input.
  TANDEM_ARG(bool, ceil_mode) = false;
};
using MaxPool1dOptions = MaxPoolOptions<1>;
using MaxPool2dOptions = MaxPoolOptions<2>;
using MaxPool3dOptions = MaxPoolOptions<3>;

/// An average pooling window, as libtorch's AvgPool2dOptions(3).stride(2).count_include_pad(false);
/// see avg_pool2d for the divisor; libtorch's AvgPoolOptions<D>.
template <size_t D>
struct AvgPoolOptions {
  AvgPoolOptions(IntN<D> kernel_size)
      : kernel_size_(kernel_size) {}  // NOLINT(google-explicit-constructor)
  TANDEM_ARG(IntN<D>, kernel_size);
  TANDEM_ARG(IntN<D>, stride) = 0;
  TANDEM_ARG(IntN<D>, padding) = 0;
  TANDEM_ARG(bool, ceil_mode) = false;
  TANDEM_ARG(bool, count_include_pad) = true;
  TANDEM_ARG(std::optional<int64_t>, divisor_override) = std::nullopt;
};
using AvgPool1dOptions = AvgPoolOptions<1>;
using AvgPool2dOptions = AvgPoolOptions<2>;
using AvgPool3dOptions = AvgPoolOptions<3>;

namespace detail {
/// What the pooling layers share: their options, printed as torch prints the window.
template <typename Options>
class PoolLayer : public Module {
 public:
  PoolLayer(const char* type_name, const Options& o) : Module(type_name), options(o) {}
  std::string extra_repr() const override;
  const Options options;
};
extern template class PoolLayer<MaxPoolOptions<1>>;
extern template class PoolLayer<AvgPoolOptions<1>>;
extern template class PoolLayer<MaxPoolOptions<2>>;
extern template class PoolLayer<AvgPoolOptions<2>>;
extern template class PoolLayer<MaxPoolOptions<3>>;
extern template class PoolLayer<AvgPoolOptions<3>>;
}  // namespace detail

class MaxPool1d : public detail::PoolLayer<MaxPool1dOptions> {
 public:
  TANDEM_MODULE_CLONE(MaxPool1d, options)
  explicit MaxPool1d(const MaxPool1dOptions& options) : PoolLayer("MaxPool1d", options) {}
  Tensor forward(const Tensor& input) override;
  /// (values, indices), as max_pool1d_with_indices.
  std::tuple<Tensor, Tensor> forward_with_indices(const Tensor& input);
};

/// (torch's 1-d average pool has no divisor_override: setting it is refused.)
class AvgPool1d : public detail::PoolLayer<AvgPool1dOptions> {
 public:
  TANDEM_MODULE_CLONE(AvgPool1d, options)
  explicit AvgPool1d(const AvgPool1dOptions& options) : PoolLayer("AvgPool1d", options) {}
  Tensor forward(const Tensor& input) override;
};

/// libtorch's AdaptiveAvgPool1dOptions(5): the output length.
using AdaptiveAvgPool1dOptions = int64_t;

class AdaptiveAvgPool1d : public Module {
 public:
  TANDEM_MODULE_CLONE(AdaptiveAvgPool1d, output_size)
  explicit AdaptiveAvgPool1d(int64_t output_size);
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  const int64_t output_size;
};

class MaxPool2d : public detail::PoolLayer<MaxPool2dOptions> {
 public:
  TANDEM_MODULE_CLONE(MaxPool2d, options)
  explicit MaxPool2d(const MaxPool2dOptions& options) : PoolLayer("MaxPool2d", options) {}
  explicit MaxPool2d(Int2 kernel_size, Int2 stride = 0, Int2 padding = 0)
      : MaxPool2d(MaxPool2dOptions(kernel_size).stride(stride).padding(padding)) {}
  Tensor forward(const Tensor& input) override;
  /// (values, indices), as max_pool2d_with_indices.
  std::tuple<Tensor, Tensor> forward_with_indices(const Tensor& input);
};

class AvgPool2d : public detail::PoolLayer<AvgPool2dOptions> {
 public:
  TANDEM_MODULE_CLONE(AvgPool2d, options)
  explicit AvgPool2d(const AvgPool2dOptions& options) : PoolLayer("AvgPool2d", options) {}
  explicit AvgPool2d(Int2 kernel_size, Int2 stride = 0, Int2 padding = 0)
      : AvgPool2d(AvgPool2dOptions(kernel_size).stride(stride).padding(padding)) {}
  Tensor forward(const Tensor& input) override;
};

class MaxPool3d : public detail::PoolLayer<MaxPool3dOptions> {
 public:
  TANDEM_MODULE_CLONE(MaxPool3d, options)
  explicit MaxPool3d(const MaxPool3dOptions& options) : PoolLayer("MaxPool3d", options) {}
  Tensor forward(const Tensor& input) override;
  /// (values, indices), as max_pool3d_with_indices.
  std::tuple<Tensor, Tensor> forward_with_indices(const Tensor& input);
};

class AvgPool3d : public detail::PoolLayer<AvgPool3dOptions> {
 public:
  TANDEM_MODULE_CLONE(AvgPool3d, options)
  explicit AvgPool3d(const AvgPool3dOptions& options) : PoolLayer("AvgPool3d", options) {}
  Tensor forward(const Tensor& input) override;
};

/// libtorch's MaxUnpoolOptions<D>: the pool's window, stride defaulting to the kernel size.
template <size_t D>
struct MaxUnpoolOptions {
  MaxUnpoolOptions(IntN<D> kernel_size)  // NOLINT(google-explicit-constructor)
      : kernel_size_(kernel_size), stride_(kernel_size) {}
  TANDEM_ARG(IntN<D>, kernel_size);
  TANDEM_ARG(IntN<D>, stride);
  TANDEM_ARG(IntN<D>, padding) = 0;
};
using MaxUnpool1dOptions = MaxUnpoolOptions<1>;
using MaxUnpool2dOptions = MaxUnpoolOptions<2>;
using MaxUnpool3dOptions = MaxUnpoolOptions<3>;

namespace detail {
/// MaxUnpool1d/2d/3d: forward(input, indices) with the indices a MaxPool's forward_with_indices
/// gave, and output_size as F::max_unpool's (the default size where not given).
template <size_t D>
class MaxUnpoolLayer : public Module {
 public:
  MaxUnpoolLayer(const char* type_name, const MaxUnpoolOptions<D>& o)
      : Module(type_name), options(o) {}
  using Module::forward;  // one input: refused, as for every module of two
  Tensor forward(const Tensor& input, const Tensor& indices,
                 const std::optional<std::vector<int64_t>>& output_size = std::nullopt);
  Tensor operator()(const Tensor& input, const Tensor& indices,
                    const std::optional<std::vector<int64_t>>& output_size = std::nullopt) {
    return forward(input, indices, output_size);
  }
  std::string extra_repr() const override;
  const MaxUnpoolOptions<D> options;
};
extern template class MaxUnpoolLayer<1>;
extern template class MaxUnpoolLayer<2>;
extern template class MaxUnpoolLayer<3>;
}  // namespace detail

// clang-format off
#define TANDEM_UNPOOL_LAYER(Name, D)                                                          \
  class Name : public detail::MaxUnpoolLayer<D> {                                            \
   public:                                                                                   \
    TANDEM_MODULE_CLONE(Name, options)                                                       \
    explicit Name(const MaxUnpoolOptions<D>& options) : MaxUnpoolLayer(#Name, options) {}    \
    explicit Name(IntN<D> kernel_size) : Name(MaxUnpoolOptions<D>(kernel_size)) {}           \
  }
// clang-format on
TANDEM_UNPOOL_LAYER(MaxUnpool1d, 1);
TANDEM_UNPOOL_LAYER(MaxUnpool2d, 2);
TANDEM_UNPOOL_LAYER(MaxUnpool3d, 3);
#undef TANDEM_UNPOOL_LAYER

/// libtorch's AdaptiveAvgPool2dOptions({1, 1}) or (1): the output size.
using AdaptiveAvgPool2dOptions = Int2;

class AdaptiveAvgPool2d : public Module {
 public:
  TANDEM_MODULE_CLONE(AdaptiveAvgPool2d, output_size)
  explicit AdaptiveAvgPool2d(Int2 output_size);
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  const Int2 output_size;
};

/// libtorch's AdaptiveAvgPool3dOptions({1, 1, 1}) or (1): the output size.
using AdaptiveAvgPool3dOptions = Int3;

class AdaptiveAvgPool3d : public Module {
 public:
  TANDEM_MODULE_CLONE(AdaptiveAvgPool3d, output_size)
  explicit AdaptiveAvgPool3d(Int3 output_size);
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  const Int3 output_size;
};

/// libtorch's AdaptiveMaxPool1dOptions(5) and AdaptiveMaxPool2dOptions({3, 4}) or (3).
using AdaptiveMaxPool1dOptions = int64_t;
using AdaptiveMaxPool2dOptions = Int2;

/// The max of each adaptive window (adaptive_max_pool1d/2d); forward_with_indices also gives
/// where each lies.
class AdaptiveMaxPool1d : public Module {
 public:
  TANDEM_MODULE_CLONE(AdaptiveMaxPool1d, output_size)
  explicit AdaptiveMaxPool1d(int64_t output_size);
  Tensor forward(const Tensor& input) override;
  std::tuple<Tensor, Tensor> forward_with_indices(const Tensor& input);
  std::string extra_repr() const override;
  const int64_t output_size;
};

class AdaptiveMaxPool2d : public Module {
 public:
  TANDEM_MODULE_CLONE(AdaptiveMaxPool2d, output_size)
  explicit AdaptiveMaxPool2d(Int2 output_size);
  Tensor forward(const Tensor& input) override;
  std::tuple<Tensor, Tensor> forward_with_indices(const Tensor& input);
  std::string extra_repr() const override;
  const Int2 output_size;
};

/// The padding of libtorch's ReflectionPad2dOptions(1) or ({left, right, top, bottom}): one
/// number for every side, or a (left, right) pair per dim from the last.
template <size_t D>
struct PadOptions {
  PadOptions(int64_t padding) : padding_(2 * D, padding) {}                  // NOLINT
  PadOptions(std::initializer_list<int64_t> padding) : padding_(padding) {}  // NOLINT
  PadOptions(std::vector<int64_t> padding) : padding_(std::move(padding)) {}  // NOLINT
  TANDEM_ARG(std::vector<int64_t>, padding);
};
/// ConstantPad2dOptions(padding, value).
template <size_t D>
struct ConstantPadOptions {
  ConstantPadOptions(PadOptions<D> padding, double value)
      : padding_(padding.padding()), value_(value) {}
  TANDEM_ARG(std::vector<int64_t>, padding);
  TANDEM_ARG(double, value);
};
using ReflectionPad1dOptions = PadOptions<1>;
using ReflectionPad2dOptions = PadOptions<2>;
using ReplicationPad1dOptions = PadOptions<1>;
using ReplicationPad2dOptions = PadOptions<2>;
using ZeroPad2dOptions = PadOptions<2>;
using ConstantPad1dOptions = ConstantPadOptions<1>;
using ConstantPad2dOptions = ConstantPadOptions<2>;

namespace detail {
/// What the padding layers share: pad(input, padding, mode, value) over the last `dims` dims.
class PadLayer : public Module {
 public:
  PadLayer(const char* type_name, std::vector<int64_t> padding, size_t dims, PadMode mode,
           double value = 0.0);
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  const std::vector<int64_t> padding;
  const PadMode mode;
  const double value;
};
}  // namespace detail

#define TANDEM_PAD_LAYER(Name, Options, dims, mode)                                        \
  class Name : public detail::PadLayer {                                                   \
   public:                                                                                 \
    TANDEM_MODULE_CLONE(Name, Options(padding))                                            \
    explicit Name(const Options& o) : PadLayer(#Name, o.padding(), dims, PadMode::mode) {} \
  }
TANDEM_PAD_LAYER(ReflectionPad1d, ReflectionPad1dOptions, 1, reflect);
TANDEM_PAD_LAYER(ReflectionPad2d, ReflectionPad2dOptions, 2, reflect);
TANDEM_PAD_LAYER(ReplicationPad1d, ReplicationPad1dOptions, 1, replicate);
TANDEM_PAD_LAYER(ReplicationPad2d, ReplicationPad2dOptions, 2, replicate);
TANDEM_PAD_LAYER(ZeroPad2d, ZeroPad2dOptions, 2, constant);
#undef TANDEM_PAD_LAYER
class ConstantPad1d : public detail::PadLayer {
 public:
  TANDEM_MODULE_CLONE(ConstantPad1d, ConstantPad1dOptions(padding, value))
  explicit ConstantPad1d(const ConstantPad1dOptions& o)
      : PadLayer("ConstantPad1d", o.padding(), 1, PadMode::constant, o.value()) {}
};
class ConstantPad2d : public detail::PadLayer {
 public:
  TANDEM_MODULE_CLONE(ConstantPad2d, ConstantPad2dOptions(padding, value))
  explicit ConstantPad2d(const ConstantPad2dOptions& o)
      : PadLayer("ConstantPad2d", o.padding(), 2, PadMode::constant, o.value()) {}
};

/// x1 . x2 / max(||x1|| ||x2||, eps) along dim, as libtorch's CosineSimilarityOptions().dim(1).
struct CosineSimilarityOptions {
  TANDEM_ARG(int64_t, dim) = 1;
  TANDEM_ARG(double, eps) = 1e-8;
};
class CosineSimilarity : public Module {
 public:
  TANDEM_MODULE_CLONE(CosineSimilarity, options)
  explicit CosineSimilarity(const CosineSimilarityOptions& options = {})
      : Module("CosineSimilarity"), options(options) {}
  using Module::forward;  // one input: refused, as for every module of two
  Tensor forward(const Tensor& x1, const Tensor& x2);
  Tensor operator()(const Tensor& x1, const Tensor& x2) { return forward(x1, x2); }
  const CosineSimilarityOptions options;
};

/// ||x1 - x2 + eps||_p along the last dim, as libtorch's PairwiseDistanceOptions().p(1).
struct PairwiseDistanceOptions {
  TANDEM_ARG(double, p) = 2.0;
  TANDEM_ARG(double, eps) = 1e-6;
  TANDEM_ARG(bool, keepdim) = false;
};
class PairwiseDistance : public Module {
 public:
  TANDEM_MODULE_CLONE(PairwiseDistance, options)
  explicit PairwiseDistance(const PairwiseDistanceOptions& options = {})
      : Module("PairwiseDistance"), options(options) {}
  using Module::forward;  // one input: refused, as for every module of two
  Tensor forward(const Tensor& x1, const Tensor& x2);
  Tensor operator()(const Tensor& x1, const Tensor& x2) { return forward(x1, x2); }
  const PairwiseDistanceOptions options;
};

/// The probability comes first, as libtorch's DropoutOptions(p); `Dropout(0.2)` reads the same.
struct DropoutOptions {
  DropoutOptions(double p = 0.5) : p_(p) {}  // NOLINT(google-explicit-constructor)
  TANDEM_ARG(double, p);
  TANDEM_ARG(bool, inplace) = false;
};

/// Zeroes elements with probability p in training mode (draws from the default generator).
class Dropout : public Module {
 public:
  TANDEM_MODULE_CLONE(Dropout, DropoutOptions(p))
  explicit Dropout(const DropoutOptions& options = {});
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  const double p;
};

/// Zeroes whole channels of an (N, C, ...) input with probability p in training mode.
class Dropout2d : public Module {
 public:
  TANDEM_MODULE_CLONE(Dropout2d, DropoutOptions(p))
  explicit Dropout2d(const DropoutOptions& options = {});
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  const double p;
};

/// Zeroes whole channels of an (N, C, D, H, W) or (C, D, H, W) input with probability p in
/// training mode.
class Dropout3d : public Module {
 public:
  TANDEM_MODULE_CLONE(Dropout3d, DropoutOptions(p))
  explicit Dropout3d(const DropoutOptions& options = {});
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  const double p;
};

/// The sizes come first, as libtorch's EmbeddingOptions(num_embeddings, embedding_dim).
struct EmbeddingOptions {
  EmbeddingOptions(int64_t num_embeddings, int64_t embedding_dim)
      : num_embeddings_(num_embeddings), embedding_dim_(embedding_dim) {}
  TANDEM_ARG(int64_t, num_embeddings);
  TANDEM_ARG(int64_t, embedding_dim);
  /// This row starts at zero and gets no gradient; a negative one counts from the end.
  TANDEM_ARG(std::optional<int64_t>, padding_idx);
  /// Each row looked up whose norm_type-norm exceeds max_norm is scaled down to it, in the weight
  /// itself, before the lookup (torch's embedding_renorm_).
  TANDEM_ARG(std::optional<double>, max_norm);
  TANDEM_ARG(double, norm_type) = 2.0;
  /// Each row's gradient divided by how often the batch's indices name it.
  TANDEM_ARG(bool, scale_grad_by_freq) = false;
  /// libtorch's sparse gradients: not built (no sparse tensors); true is refused.
  TANDEM_ARG(bool, sparse) = false;
  /// The weight itself, (num_embeddings, embedding_dim), instead of a new one (libtorch's name).
  TANDEM_ARG(Tensor, _weight);
};

struct EmbeddingFromPretrainedOptions {
  TANDEM_ARG(bool, freeze) = true;  // the weight gets no gradient
  TANDEM_ARG(std::optional<int64_t>, padding_idx);
  TANDEM_ARG(std::optional<double>, max_norm);
  TANDEM_ARG(double, norm_type) = 2.0;
  TANDEM_ARG(bool, scale_grad_by_freq) = false;
  TANDEM_ARG(bool, sparse) = false;
};

/// A lookup table: forward(indices) is the weight's rows those integers name. weight
/// (num_embeddings, embedding_dim) ~ N(0, 1), the padding row zero, as torch.
class Embedding : public Module {
 public:
  TANDEM_MODULE_CLONE(Embedding,
                      EmbeddingOptions(weight.size(0), weight.size(1))
                          .padding_idx(padding_idx >= 0 ? std::optional<int64_t>(padding_idx)
                                                        : std::nullopt)
                          .max_norm(max_norm)
                          .norm_type(norm_type)
                          .scale_grad_by_freq(scale_grad_by_freq))
  explicit Embedding(const EmbeddingOptions& options);
  Embedding(int64_t num_embeddings, int64_t embedding_dim)
      : Embedding(EmbeddingOptions(num_embeddings, embedding_dim)) {}
  /// A table whose weight is `embeddings` itself (not a copy: training it changes them), with
  /// no gradient when frozen, as libtorch's Embedding::from_pretrained.
  static std::shared_ptr<Embedding> from_pretrained(
      const Tensor& embeddings, const EmbeddingFromPretrainedOptions& options = {});
  /// Draws the parameters again as the constructor did (libtorch's reset_parameters).
  void reset_parameters();
  Tensor forward(const Tensor& indices) override;
  std::string extra_repr() const override;
  Tensor weight;
  const int64_t padding_idx;  // -1: none
  const std::optional<double> max_norm;
  const double norm_type;
  const bool scale_grad_by_freq;
};

/// EmbeddingBag's mode as libtorch spells it: torch::kSum or torch::kMean (the reduction names
/// convert) or torch::kMax.
struct EmbeddingBagModeArg {
  EmbeddingBagModeArg(EmbeddingBagMode mode)
      : value(mode) {}                      // NOLINT(google-explicit-constructor)
  EmbeddingBagModeArg(Reduction reduction)  // NOLINT(google-explicit-constructor)
      : value(reduction == Reduction::sum ? EmbeddingBagMode::sum : EmbeddingBagMode::mean) {
    TANDEM_CHECK(reduction != Reduction::none,
                 "EmbeddingBag: mode must be kSum, kMean or kMax, got kNone");
  }
  EmbeddingBagMode value;
};

struct EmbeddingBagOptions {
  EmbeddingBagOptions(int64_t num_embeddings, int64_t embedding_dim)
      : num_embeddings_(num_embeddings), embedding_dim_(embedding_dim) {}
  TANDEM_ARG(int64_t, num_embeddings);
  TANDEM_ARG(int64_t, embedding_dim);
  TANDEM_ARG(EmbeddingBagModeArg, mode) = EmbeddingBagMode::mean;
  TANDEM_ARG(bool, include_last_offset) = false;
  /// Entries equal to it are left out of their bag; its row starts at zero (negative: from the
  /// end).
  TANDEM_ARG(std::optional<int64_t>, padding_idx);
};

/// The sum, mean or max of each bag of a lookup table's rows (ops/nn_ops.hpp embedding_bag):
/// forward(input) with each row of a 2-d input a bag, or forward(input, offsets) for a 1-d list
/// cut at the offsets; per-sample weights in mode sum. weight ~ N(0, 1), the padding row zero.
class EmbeddingBag : public Module {
 public:
  TANDEM_MODULE_CLONE(EmbeddingBag, options)
  explicit EmbeddingBag(const EmbeddingBagOptions& options);
  EmbeddingBag(int64_t num_embeddings, int64_t embedding_dim)
      : EmbeddingBag(EmbeddingBagOptions(num_embeddings, embedding_dim)) {}
  void reset_parameters();
  Tensor forward(const Tensor& input) override { return forward(input, Tensor()); }
  Tensor forward(const Tensor& input, const Tensor& offsets,
                 const Tensor& per_sample_weights = Tensor());
  std::string extra_repr() const override;
  Tensor weight;
  const EmbeddingBagOptions options;
};

/// Each element over its channel neighbourhood's squares (ops/nn_ops.hpp local_response_norm).
struct LocalResponseNormOptions {
  LocalResponseNormOptions(int64_t size) : size_(size) {}  // NOLINT(google-explicit-constructor)
  TANDEM_ARG(int64_t, size);
  TANDEM_ARG(double, alpha) = 1e-4;
  TANDEM_ARG(double, beta) = 0.75;
  TANDEM_ARG(double, k) = 1.0;
};
class LocalResponseNorm : public Module {
 public:
  TANDEM_MODULE_CLONE(LocalResponseNorm, options)
  explicit LocalResponseNorm(const LocalResponseNormOptions& options)
      : Module("LocalResponseNorm"), options(options) {}
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  const LocalResponseNormOptions options;
};

/// The output size or the scale factors, and the mode, as libtorch's UpsampleOptions.
struct UpsampleOptions {
  TANDEM_ARG(std::optional<std::vector<int64_t>>, size) = std::nullopt;
  TANDEM_ARG(std::optional<std::vector<double>>, scale_factor) = std::nullopt;
  /// interpolate's modes (torch::kNearest, torch::kBilinear, torch::kBicubic, ...).
  TANDEM_ARG(std::string, mode) = "nearest";
  TANDEM_ARG(std::optional<bool>, align_corners) = std::nullopt;
};

/// torch.nn.Upsample: interpolate (ops/nn_ops.hpp) with fixed options.
class Upsample : public Module {
 public:
  TANDEM_MODULE_CLONE(Upsample, options)
  explicit Upsample(const UpsampleOptions& options = {});
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  const UpsampleOptions options;
};

class Flatten : public Module {
 public:
  TANDEM_MODULE_CLONE(Flatten, start_dim, end_dim)
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1);
  Tensor forward(const Tensor& input) override;
  const int64_t start_dim, end_dim;
};

/// The dim comes first, as libtorch's GLUOptions(dim).
struct GLUOptions {
  GLUOptions(int64_t dim = -1) : dim_(dim) {}  // NOLINT(google-explicit-constructor)
  TANDEM_ARG(int64_t, dim);
};
/// The gated linear unit (ops/nn_ops.hpp glu).
class GLU : public Module {
 public:
  TANDEM_MODULE_CLONE(GLU, options)
  explicit GLU(const GLUOptions& options = {}) : Module("GLU"), options(options) {}
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  const GLUOptions options;
};

struct PixelShuffleOptions {
  PixelShuffleOptions(int64_t upscale_factor)  // NOLINT(google-explicit-constructor)
      : upscale_factor_(upscale_factor) {}
  TANDEM_ARG(int64_t, upscale_factor);
};
struct PixelUnshuffleOptions {
  PixelUnshuffleOptions(int64_t downscale_factor)  // NOLINT(google-explicit-constructor)
      : downscale_factor_(downscale_factor) {}
  TANDEM_ARG(int64_t, downscale_factor);
};
/// (*, C r^2, H, W) -> (*, C, H r, W r), and back (ops/shape_ops.hpp).
class PixelShuffle : public Module {
 public:
  TANDEM_MODULE_CLONE(PixelShuffle, options)
  explicit PixelShuffle(const PixelShuffleOptions& options)
      : Module("PixelShuffle"), options(options) {}
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  const PixelShuffleOptions options;
};
class PixelUnshuffle : public Module {
 public:
  TANDEM_MODULE_CLONE(PixelUnshuffle, options)
  explicit PixelUnshuffle(const PixelUnshuffleOptions& options)
      : Module("PixelUnshuffle"), options(options) {}
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  const PixelUnshuffleOptions options;
};

/// More activations of torch.nn (ops/nn_ops.hpp), with libtorch's options.
struct CELUOptions {
  TANDEM_ARG(double, alpha) = 1.0;
  TANDEM_ARG(bool, inplace) = false;
};
class CELU : public Module {
 public:
  TANDEM_MODULE_CLONE(CELU, options)
  explicit CELU(const CELUOptions& options = {}) : Module("CELU"), options(options) {}
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  const CELUOptions options;
};
/// lambda first, as libtorch's SoftshrinkOptions(0.5).
struct SoftshrinkOptions {
  SoftshrinkOptions(double lambda = 0.5) : lambda_(lambda) {}  // NOLINT
  TANDEM_ARG(double, lambda);
};
using HardshrinkOptions = SoftshrinkOptions;
class Softshrink : public Module {
 public:
  TANDEM_MODULE_CLONE(Softshrink, options)
  explicit Softshrink(const SoftshrinkOptions& options = {})
      : Module("Softshrink"), options(options) {}
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  const SoftshrinkOptions options;
};
class Hardshrink : public Module {
 public:
  TANDEM_MODULE_CLONE(Hardshrink, options)
  explicit Hardshrink(const HardshrinkOptions& options = {})
      : Module("Hardshrink"), options(options) {}
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  const HardshrinkOptions options;
};
class Tanhshrink : public Module {
 public:
  TANDEM_MODULE_CLONE(Tanhshrink)
  Tanhshrink() : Module("Tanhshrink") {}
  Tensor forward(const Tensor& input) override;
};
struct ThresholdOptions {
  ThresholdOptions(double threshold, double value) : threshold_(threshold), value_(value) {}
  TANDEM_ARG(double, threshold);
  TANDEM_ARG(double, value);
  TANDEM_ARG(bool, inplace) = false;
};
class Threshold : public Module {
 public:
  TANDEM_MODULE_CLONE(Threshold, options)
  explicit Threshold(const ThresholdOptions& options) : Module("Threshold"), options(options) {}
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  const ThresholdOptions options;
};
using SoftminOptions = SoftmaxOptions;
class Softmin : public Module {
 public:
  TANDEM_MODULE_CLONE(Softmin, options)
  explicit Softmin(const SoftminOptions& options) : Module("Softmin"), options(options) {}
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  const SoftminOptions options;
};

struct BilinearOptions {
  BilinearOptions(int64_t in1_features, int64_t in2_features, int64_t out_features)
      : in1_features_(in1_features), in2_features_(in2_features), out_features_(out_features) {}
  TANDEM_ARG(int64_t, in1_features);
  TANDEM_ARG(int64_t, in2_features);
  TANDEM_ARG(int64_t, out_features);
  TANDEM_ARG(bool, bias) = true;
};
/// y = x1^T A x2 + b: weight (out, in1, in2) and bias (out) ~ U(-1/sqrt(in1), 1/sqrt(in1)), as
/// torch.
class Bilinear : public Module {
 public:
  TANDEM_MODULE_CLONE(Bilinear, options)
  explicit Bilinear(const BilinearOptions& options);
  Bilinear(int64_t in1_features, int64_t in2_features, int64_t out_features)
      : Bilinear(BilinearOptions(in1_features, in2_features, out_features)) {}
  void reset_parameters();
  using Module::forward;  // one input: refused, as for every module of two
  Tensor forward(const Tensor& input1, const Tensor& input2);
  std::string extra_repr() const override;
  Tensor weight, bias;
  const BilinearOptions options;
};

/// dim split into `sizes` (one may be -1), as torch.nn.Unflatten.
struct UnflattenOptions {
  UnflattenOptions(int64_t dim, Shape sizes) : dim_(dim), sizes_(std::move(sizes)) {}
  TANDEM_ARG(int64_t, dim);
  TANDEM_ARG(Shape, sizes);
};
class Unflatten : public Module {
 public:
  TANDEM_MODULE_CLONE(Unflatten, options)
  explicit Unflatten(const UnflattenOptions& options) : Module("Unflatten"), options(options) {}
  Unflatten(int64_t dim, Shape sizes) : Unflatten(UnflattenOptions(dim, std::move(sizes))) {}
  Tensor forward(const Tensor& input) override;
  const UnflattenOptions options;
};

struct ChannelShuffleOptions {
  ChannelShuffleOptions(int64_t groups) : groups_(groups) {}  // NOLINT
  TANDEM_ARG(int64_t, groups);
};
class ChannelShuffle : public Module {
 public:
  TANDEM_MODULE_CLONE(ChannelShuffle, options)
  explicit ChannelShuffle(const ChannelShuffleOptions& options)
      : Module("ChannelShuffle"), options(options) {}
  Tensor forward(const Tensor& input) override;
  const ChannelShuffleOptions options;
};

/// Sliding windows as columns and back (ops/nn_ops.hpp im2col, col2im), as torch.nn.Unfold
/// and Fold; the kernel size (and Fold's output size) first, as libtorch's options.
struct UnfoldOptions {
  UnfoldOptions(Int2 kernel_size) : kernel_size_(kernel_size) {}  // NOLINT
  TANDEM_ARG(Int2, kernel_size);
  TANDEM_ARG(Int2, dilation) = 1;
  TANDEM_ARG(Int2, padding) = 0;
  TANDEM_ARG(Int2, stride) = 1;
};
struct FoldOptions {
  FoldOptions(Int2 output_size, Int2 kernel_size)
      : output_size_(output_size), kernel_size_(kernel_size) {}
  TANDEM_ARG(Int2, output_size);
  TANDEM_ARG(Int2, kernel_size);
  TANDEM_ARG(Int2, dilation) = 1;
  TANDEM_ARG(Int2, padding) = 0;
  TANDEM_ARG(Int2, stride) = 1;
};
class Unfold : public Module {
 public:
  TANDEM_MODULE_CLONE(Unfold, options)
  explicit Unfold(const UnfoldOptions& options) : Module("Unfold"), options(options) {}
  Tensor forward(const Tensor& input) override;
  const UnfoldOptions options;
};
class Fold : public Module {
 public:
  TANDEM_MODULE_CLONE(Fold, options)
  explicit Fold(const FoldOptions& options) : Module("Fold"), options(options) {}
  Tensor forward(const Tensor& input) override;
  const FoldOptions options;
};

class Identity : public Module {
 public:
  TANDEM_MODULE_CLONE(Identity)
  Identity() : Module("Identity") {}
  Tensor forward(const Tensor& input) override { return input; }
};

namespace detail {
/// Whether M's own forward (found through M, not Module) takes one tensor and gives a tensor.
template <typename M, typename = void>
struct has_tensor_forward : std::false_type {};
template <typename M>
struct has_tensor_forward<
    M, std::void_t<decltype(std::declval<M&>().forward(std::declval<const Tensor&>()))>>
    : std::is_convertible<decltype(std::declval<M&>().forward(std::declval<const Tensor&>())),
                          Tensor> {};
}  // namespace detail

/// Runs its children in order; they are named "0", "1", ... as in torch.
namespace detail {
// The module at `index` of a container as a T; throws when it is not one.
template <typename T>
std::shared_ptr<T> module_as(const std::shared_ptr<Module>& module, size_t index,
                             const char* container) {
  auto typed = std::dynamic_pointer_cast<T>(module);
  TANDEM_CHECK(typed != nullptr, container, ": module ", index, " (", module->type_name(),
               ") is not of the type asked for");
  return typed;
}
}  // namespace detail

class Sequential : public Module {
 public:
  Sequential() : Module("Sequential") {}
  Sequential(std::initializer_list<std::shared_ptr<Module>> modules);
  /// Modules under names of one's own: `Sequential({{"conv", conv}, {"relu", relu}})`.
  Sequential(std::initializer_list<std::pair<std::string, std::shared_ptr<Module>>> modules);
  /// `Sequential(conv, bn, relu)` or `std::make_shared<Sequential>(conv, bn, relu)`, with modules
  /// held by shared_ptrs of any module type.
  template <typename... Modules,
            typename = std::enable_if_t<
                (sizeof...(Modules) > 0) &&
                (std::is_convertible_v<Modules&&, std::shared_ptr<Module>> && ...)>>
  explicit Sequential(Modules&&... modules) : Module("Sequential") {
    (push_back(std::forward<Modules>(modules)), ...);
  }
  Tensor forward(const Tensor& input) override;
  /// Each module's clone, in order, under the same names.
  std::shared_ptr<Module> clone(const std::optional<Device>& device = std::nullopt) const override;
  /// Appends a module named by its position (or by `name`). Its forward is called through its
  /// own type, so a module of yours whose `forward(Tensor x)` takes its argument by value, as
  /// libtorch's examples write it, runs too (Module's virtual forward would not find it).
  template <typename M>
  void push_back(std::shared_ptr<M> module) {
    push_back(std::to_string(size()), std::move(module));
  }
  template <typename M>
  void push_back(std::string name, std::shared_ptr<M> module) {
    Call call;
    if constexpr (detail::has_tensor_forward<M>::value) {
      call = [](Module& m, const Tensor& x) -> Tensor {
        if (auto* typed = dynamic_cast<M*>(&m)) return typed->forward(x);
        return m.forward(x);  // replaced since by a module of another type
      };
    }
    append(std::move(name), std::move(module), std::move(call));
  }
  size_t size() const { return named_children().size(); }
  /// The module at `index` (a handle of its own: it stays valid after push_back).
  std::shared_ptr<Module> operator[](size_t index) const;
  std::shared_ptr<Module> ptr(size_t index) const { return (*this)[index]; }
  /// The same as a T (`seq->ptr<nn::Linear>(0)`); throws when it is not one.
  template <typename T>
  std::shared_ptr<T> ptr(size_t index) const {
    return detail::module_as<T>(ptr(index), index, "Sequential");
  }

 private:
  /// Calls a module through the forward of the type it was added as.
  using Call = std::function<Tensor(Module&, const Tensor&)>;
  void append(std::string name, std::shared_ptr<Module> module, Call call);
  // The modules forward runs, in order: by name, so a module replaced under it runs instead.
  std::vector<std::pair<std::string, Call>> calls_;
};

/// Modules held in a list, registered by position ("0", "1", ...) so their parameters are the
/// list's, as libtorch's ModuleList; no forward of its own (a loop over it is the caller's).
class ModuleList : public Module {
 public:
  ModuleList() : Module("ModuleList") {}
  template <typename... Modules,
            typename = std::enable_if_t<
                (sizeof...(Modules) > 0) &&
                (std::is_convertible_v<Modules&&, std::shared_ptr<Module>> && ...)>>
  explicit ModuleList(Modules&&... modules) : Module("ModuleList") {
    (push_back(std::forward<Modules>(modules)), ...);
  }
  void push_back(std::shared_ptr<Module> module);
  std::shared_ptr<Module> clone(const std::optional<Device>& device = std::nullopt) const override;
  /// Appends every module of `other`.
  void extend(const ModuleList& other);
  size_t size() const { return modules_.size(); }
  bool is_empty() const { return modules_.empty(); }
  std::shared_ptr<Module> operator[](size_t index) const { return ptr(index); }
  std::shared_ptr<Module> ptr(size_t index) const;
  /// The module at `index` as a T (libtorch's list->ptr<Linear>(i)); throws if it is not one.
  template <typename T>
  std::shared_ptr<T> ptr(size_t index) const {
    return detail::module_as<T>(ptr(index), index, "ModuleList");
  }
  std::vector<std::shared_ptr<Module>>::const_iterator begin() const { return modules_.begin(); }
  std::vector<std::shared_ptr<Module>>::const_iterator end() const { return modules_.end(); }

 protected:
  /// replace_module("2", m) puts m in the list's place 2 too (ptr, iteration).
  void replace_child(const std::string& name, std::shared_ptr<Module> module) override;

 private:
  std::vector<std::shared_ptr<Module>> modules_;
};

/// Modules by name, registered under their keys in insertion order, as libtorch's ModuleDict.
class ModuleDict : public Module {
 public:
  ModuleDict() : Module("ModuleDict") {}
  explicit ModuleDict(const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& modules);
  explicit ModuleDict(const OrderedDict<std::string, std::shared_ptr<Module>>& modules);
  std::shared_ptr<Module> clone(const std::optional<Device>& device = std::nullopt) const override;
  /// Adds `module` under `key`, or replaces the one there (which keeps its position).
  void insert(const std::string& key, std::shared_ptr<Module> module);
  void update(const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& modules);
  void update(const OrderedDict<std::string, std::shared_ptr<Module>>& modules);
  /// Removes the module under `key` and returns it.
  std::shared_ptr<Module> pop(const std::string& key);
  void clear();
  /// The module under `key`; a missing key throws an IndexError.
  std::shared_ptr<Module> operator[](const std::string& key) const;
  /// The module under `key` as a T; throws if it is not one.
  template <typename T>
  std::shared_ptr<T> at(const std::string& key) const {
    auto typed = std::dynamic_pointer_cast<T>((*this)[key]);
    TANDEM_CHECK(typed != nullptr, "ModuleDict: module '", key, "' (", (*this)[key]->type_name(),
                 ") is not of the type asked for");
    return typed;
  }
  bool contains(const std::string& key) const { return named_children().contains(key); }
  size_t size() const { return named_children().size(); }
  bool empty() const { return named_children().empty(); }
  std::vector<std::string> keys() const { return named_children().keys(); }
  std::vector<std::shared_ptr<Module>> values() const { return named_children().values(); }
  const OrderedDict<std::string, std::shared_ptr<Module>>& items() const {
    return named_children();
  }
  auto begin() const { return named_children().begin(); }
  auto end() const { return named_children().end(); }
};

/// A function as a module, to put it in a Sequential: `Functional([](const Tensor& x) {
/// return relu(x); })` or `Functional(tandem::relu)`, as libtorch's nn::Functional.
class Functional : public Module {
 public:
  TANDEM_MODULE_CLONE(Functional, function_)
  explicit Functional(std::function<Tensor(const Tensor&)> function)
      : Module("Functional"), function_(std::move(function)) {}
  Tensor forward(const Tensor& input) override { return function_(input); }

 private:
  std::function<Tensor(const Tensor&)> function_;
};

/// Any module behind one handle, as libtorch's AnyModule: `AnyModule(std::make_shared<
/// Linear>(3, 4))`, `any.forward(x)` through the module's own type (as Sequential calls it, so
/// a `forward(Tensor x)` taking its argument by value runs too), `any.ptr()` or `ptr<T>()`,
/// `get<T>()`. It converts to `std::shared_ptr<Module>`, so it goes where a module is taken
/// (`TransformerEncoderOptions(layer, 6).norm(AnyModule(...))`).
class AnyModule {
 public:
  AnyModule() = default;
  template <typename M, typename = std::enable_if_t<std::is_base_of_v<Module, M>>>
  explicit AnyModule(std::shared_ptr<M> module) : module_(std::move(module)) {
    M* raw = static_cast<M*>(module_.get());
    if constexpr (detail::has_tensor_forward<M>::value) {
      if (raw) call_ = [raw](const Tensor& x) -> Tensor { return raw->forward(x); };
    }
  }
  /// The module's one-tensor forward (Module's, if its own takes other arguments).
  Tensor forward(const Tensor& input) const {
    TANDEM_CHECK(module_ != nullptr, "AnyModule: forward on an empty AnyModule");
    return call_ ? call_(input) : module_->forward(input);
  }
  bool is_empty() const { return module_ == nullptr; }
  const std::shared_ptr<Module>& ptr() const { return module_; }
  /// The module as a T; throws if it is not one.
  template <typename T>
  std::shared_ptr<T> ptr() const {
    auto typed = std::dynamic_pointer_cast<T>(module_);
    TANDEM_CHECK(typed != nullptr, "AnyModule: the module (",
                 module_ ? module_->type_name() : std::string("none"),
                 ") is not of the type asked for");
    return typed;
  }
  template <typename T>
  T& get() const {
    return *ptr<T>();
  }
  operator std::shared_ptr<Module>() const { return module_; }  // NOLINT

 private:
  std::shared_ptr<Module> module_;
  std::function<Tensor(const Tensor&)> call_;
};

}  // namespace tandem::nn
