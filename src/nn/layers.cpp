#include "tandem/nn/layers.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "../ops/batch_norm.hpp"
#include "tandem/autograd/grad_mode.hpp"
#include "tandem/core/error.hpp"
#include "tandem/nn/functional.hpp"
#include "tandem/nn/init.hpp"
#include "tandem/ops/creation.hpp"
#include "tandem/ops/elementwise.hpp"
#include "tandem/ops/linalg.hpp"
#include "tandem/ops/shape_ops.hpp"

namespace tandem::nn {

namespace {

bool all_equal(const std::vector<int64_t>& v, int64_t value) {
  return std::all_of(v.begin(), v.end(), [&](int64_t x) { return x == value; });
}
// A pooling window's size as torch prints it: one number as it is, Int2 and Int3 as tuples.
std::string size_str(int64_t v) { return std::to_string(v); }
template <typename Size>
std::string size_str(const Size& v) {
  return shape_str(int_list(v));
}
template <typename Size>
bool is_zero(const Size& v) {
  return all_equal(int_list(v), 0);
}
template <typename Size>
bool is_one(const Size& v) {
  return all_equal(int_list(v), 1);
}

// A pooling window as torch prints it: the stride the layer uses (the kernel size where it was
// left 0), then the options that differ from their defaults.
template <typename Size>
std::string window_repr(const Size& k, const Size& stride, const Size& padding) {
  return "kernel_size=" + size_str(k) + ", stride=" + size_str(is_zero(stride) ? k : stride) +
         ", padding=" + size_str(padding);
}
template <size_t D>
std::string pool_repr(const MaxPoolOptions<D>& o) {
  return window_repr(o.kernel_size_, o.stride_, o.padding_) +
         (is_one(o.dilation_) ? "" : ", dilation=" + size_str(o.dilation_)) +
         (o.ceil_mode_ ? ", ceil_mode=True" : "");
}
template <size_t D>
std::string pool_repr(const AvgPoolOptions<D>& o) {
  return window_repr(o.kernel_size_, o.stride_, o.padding_) +
         (o.ceil_mode_ ? ", ceil_mode=True" : "") +
         (o.count_include_pad_ ? "" : ", count_include_pad=False") +
         (o.divisor_override_ ? ", divisor_override=" + std::to_string(*o.divisor_override_) : "");
}

// torch's reset_parameters for Linear and Conv: kaiming_uniform(a = sqrt(5)) on the weight, which
// is U(-1/sqrt(fan_in), 1/sqrt(fan_in)), and the same bound for the bias.
void torch_default_init(Tensor& weight, Tensor& bias) {
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    int64_t fan_in = init::fan_in_and_fan_out(weight).first;
    double bound = fan_in > 0 ? 1.0 / std::sqrt(static_cast<double>(fan_in)) : 0.0;
    init::uniform_(bias, -bound, bound);
  }
}

}  // namespace

Linear::Linear(const LinearOptions& opts) : Module("Linear"), options(opts) {
  const int64_t in_features = opts.in_features_, out_features = opts.out_features_;
  TANDEM_CHECK(in_features > 0 && out_features > 0, "Linear: features must be positive, got in ",
               in_features, ", out ", out_features);
  weight = register_parameter("weight", empty({out_features, in_features}));
  if (opts.bias_) bias = register_parameter("bias", empty({out_features}));
  torch_default_init(weight, bias);
}

void Linear::reset_parameters() { torch_default_init(weight, bias); }

Tensor Linear::forward(const Tensor& input) { return linear(input, weight, bias); }

std::string Linear::extra_repr() const {
  std::ostringstream os;
  os << "in_features=" << weight.size(1) << ", out_features=" << weight.size(0)
     << ", bias=" << (bias.defined() ? "true" : "false");
  return os.str();
}

namespace {
// kSame keeps the input's size only at stride 1; torch refuses it otherwise.
void check_same_stride(const char* op, std::optional<ConvPadding> kind,
                       const std::vector<int64_t>& stride) {
  if (kind != ConvPadding::same) return;
  for (size_t i = 0; i < stride.size(); ++i)
    TANDEM_CHECK(stride[i] == 1, op,
                 ": padding kSame is not supported for strided "
                 "convolutions (stride ",
                 stride[i], " in spatial dim ", i, "), as torch");
}
}  // namespace

namespace detail {
std::pair<Tensor, std::vector<int64_t>> conv_padding(
    const char* op, const Tensor& input, const Tensor& weight, const std::vector<int64_t>& stride,
    const std::vector<int64_t>& dilation, const std::vector<int64_t>& padding,
    std::optional<ConvPadding> kind, PadMode mode) {
  if (!kind && mode == PadMode::constant) return {input, padding};
  const size_t dims = padding.size();
  std::vector<int64_t> left = padding, right = padding;
  if (kind == ConvPadding::valid) left = right = std::vector<int64_t>(dims, 0);
  if (kind == ConvPadding::same) {
    TANDEM_CHECK(weight.defined() && weight.dim() == static_cast<int64_t>(dims) + 2, op,
                 ": padding kSame needs a weight of ", dims + 2, " dims");
    check_same_stride(op, kind, stride);
    for (size_t i = 0; i < dims; ++i) {
      const int64_t total = dilation[i] * (weight.size(static_cast<int64_t>(i) + 2) - 1);
      left[i] = total / 2;
      right[i] = total - left[i];
    }
  }
  if (mode == PadMode::constant && left == right) return {input, left};
  std::vector<int64_t> pads;  // pad's order: (left, right) pairs from the last dim
  for (size_t i = dims; i-- > 0;) {
    pads.push_back(left[i]);
    pads.push_back(right[i]);
  }
  return {pad(input, pads, mode), std::vector<int64_t>(dims, 0)};
}

std::string conv_padding_repr(std::optional<ConvPadding> kind, PadMode mode) {
  std::string out;
  if (kind) out += kind == ConvPadding::same ? ", padding=same" : ", padding=valid";
  static const char* const modes[] = {"zeros", "reflect", "replicate", "circular"};
  if (mode != PadMode::constant) out += std::string(", padding_mode=") + modes[int(mode)];
  return out;
}
}  // namespace detail

namespace {
template <typename Options>
constexpr bool is_transposed = false;
template <size_t D>
constexpr bool is_transposed<ConvTransposeOptions<D>> = true;
}  // namespace

template <typename Options>
detail::ConvLayer<Options>::ConvLayer(const char* type_name, const Options& o)
    : Module(type_name), options(o) {
  const std::vector<int64_t> kernel = int_list(o.kernel_size_), stride = int_list(o.stride_),
                             padding = int_list(o.padding_), dilation = int_list(o.dilation_);
  if constexpr (!is_transposed<Options>) check_same_stride(type_name, o.padding_kind_, stride);
  TANDEM_CHECK(o.in_channels_ > 0 && o.out_channels_ > 0 && o.groups_ > 0 &&
                   o.in_channels_ % o.groups_ == 0 && o.out_channels_ % o.groups_ == 0,
               type_name, ": channels (", o.in_channels_, " in, ", o.out_channels_,
               " out) must be positive and divisible by groups ", o.groups_);
  auto positive = [](int64_t x) { return x > 0; };
  TANDEM_CHECK(std::all_of(kernel.begin(), kernel.end(), positive), type_name,
               ": kernel size must be positive, got ", shape_str(kernel));
  TANDEM_CHECK(std::all_of(stride.begin(), stride.end(), positive) &&
                   std::all_of(dilation.begin(), dilation.end(), positive) &&
                   std::none_of(padding.begin(), padding.end(), [](int64_t x) { return x < 0; }),
               type_name, ": need stride > 0, dilation > 0 and padding >= 0, got ",
               shape_str(stride), ", ", shape_str(dilation), ", ", shape_str(padding));
  // (out, in / groups, kernel...); transposed (in, out / groups, kernel...), fan_in from dim 1
  // either way, as torch's.
  std::vector<int64_t> shape = {o.out_channels_, o.in_channels_ / o.groups_};
  if constexpr (is_transposed<Options>) shape = {o.in_channels_, o.out_channels_ / o.groups_};
  shape.insert(shape.end(), kernel.begin(), kernel.end());
  weight = register_parameter("weight", empty(shape));
  if (o.bias_) bias = register_parameter("bias", empty({o.out_channels_}));
  torch_default_init(weight, bias);
}

template <typename Options>
void detail::ConvLayer<Options>::reset_parameters() {
  torch_default_init(weight, bias);
}

template <typename Options>
Tensor detail::ConvLayer<Options>::forward(const Tensor& input) {
  constexpr size_t D = Options::dims;
  const Options& o = options;
  if constexpr (is_transposed<Options>)
    return functional::detail::conv_transpose<D>(input, weight, bias, o.stride_, o.padding_,
                                                 o.output_padding_, o.groups_, o.dilation_);
  else
    return functional::detail::conv<D>(name().c_str(), input, weight, bias, o.stride_, o.padding_,
                                       o.padding_kind_, o.padding_mode_, o.dilation_, o.groups_);
}

// torch's _ConvNd.extra_repr: the options that differ from their defaults.
template <typename Options>
std::string detail::ConvLayer<Options>::extra_repr() const {
  const Options& o = options;
  const std::vector<int64_t> padding = int_list(o.padding_), dilation = int_list(o.dilation_);
  std::ostringstream os;
  os << o.in_channels_ << ", " << o.out_channels_
     << ", kernel_size=" << shape_str(int_list(o.kernel_size_))
     << ", stride=" << shape_str(int_list(o.stride_));
  std::optional<ConvPadding> padding_kind;
  if constexpr (!is_transposed<Options>) padding_kind = o.padding_kind_;
  if (padding_kind)
    os << detail::conv_padding_repr(padding_kind, PadMode::constant);
  else if (!all_equal(padding, 0))
    os << ", padding=" << shape_str(padding);
  if (!all_equal(dilation, 1)) os << ", dilation=" << shape_str(dilation);
  if constexpr (is_transposed<Options>) {
    const std::vector<int64_t> output_padding = int_list(o.output_padding_);
    if (!all_equal(output_padding, 0)) os << ", output_padding=" << shape_str(output_padding);
  }
  if (o.groups_ != 1) os << ", groups=" << o.groups_;
  if (!bias.defined()) os << ", bias=false";
  if constexpr (!is_transposed<Options>)
    os << detail::conv_padding_repr(std::nullopt, o.padding_mode_);
  return os.str();
}

template class detail::ConvLayer<ConvOptions<1>>;
template class detail::ConvLayer<ConvOptions<2>>;
template class detail::ConvLayer<ConvOptions<3>>;
template class detail::ConvLayer<ConvTransposeOptions<1>>;
template class detail::ConvLayer<ConvTransposeOptions<2>>;
template class detail::ConvLayer<ConvTransposeOptions<3>>;

BatchNorm::BatchNorm(const char* type_name, const BatchNormOptions& opts, int min_dim, int max_dim,
                     const char* layout)
    : Module(type_name),
      num_features(opts.num_features_),
      options(opts),
      min_dim_(min_dim),
      max_dim_(max_dim),
      layout_(layout) {
  const int64_t features = opts.num_features_;
  TANDEM_CHECK(features > 0, type_name, ": num_features must be positive, got ", features);
  TANDEM_CHECK(opts.eps_ > 0 && opts.momentum_ >= 0 && opts.momentum_ <= 1, type_name,
               ": need eps > 0 and momentum in [0, 1], got eps ", opts.eps_, ", momentum ",
               opts.momentum_);
  if (opts.affine_) {
    weight = register_parameter("weight", ones({features}));
    bias = register_parameter("bias", zeros({features}));
  }
  if (opts.track_running_stats_) {
    running_mean = register_buffer("running_mean", zeros({features}));
    running_var = register_buffer("running_var", ones({features}));
    num_batches_tracked = register_buffer("num_batches_tracked", zeros({}, DType::i64));
  }
}

void BatchNorm::reset_running_stats() {
  if (!running_mean.defined()) return;
  NoGradGuard no_grad;
  running_mean.zero_();
  running_var.fill_(1.0);
  num_batches_tracked.zero_();
}

void BatchNorm::reset_parameters() {
  reset_running_stats();
  if (!weight.defined()) return;
  NoGradGuard no_grad;
  weight.fill_(1.0);
  if (bias.defined()) bias.zero_();
}

BatchNorm1d::BatchNorm1d(const BatchNormOptions& opts)
    : BatchNorm("BatchNorm1d", opts, 2, 3, "(N, C) or (N, C, L)") {}
BatchNorm2d::BatchNorm2d(const BatchNormOptions& opts)
    : BatchNorm("BatchNorm2d", opts, 4, 4, "(N, C, H, W)") {}
BatchNorm3d::BatchNorm3d(const BatchNormOptions& opts)
    : BatchNorm("BatchNorm3d", opts, 5, 5, "(N, C, D, H, W)") {}

Tensor BatchNorm::forward(const Tensor& input) { return normalize(input, Tensor(), false); }

Tensor BatchNorm::forward_relu(const Tensor& input, const Tensor& residual) {
  return normalize(input, residual, true);
}

Tensor BatchNorm::normalize(const Tensor& input, const Tensor& residual, bool relu) {
  TANDEM_CHECK(input.dim() >= min_dim_ && input.dim() <= max_dim_ && input.size(1) == num_features,
               type_name(), "(", num_features, "): expected input ", layout_,
               " with C = ", num_features, ", got ", shape_str(input.shape()));
  // Without running statistics, evaluation also normalizes with the batch statistics. Training
  // counts the batch in num_batches_tracked, in the op's update of the running statistics.
  const bool use_batch_stats = is_training() || !running_mean.defined();
  const bool synced = is_training() && stats_allreduce_;
  return tandem::detail::batch_norm_module(input, running_mean, running_var,
                                           is_training() ? num_batches_tracked : Tensor(), weight,
                                           bias, use_batch_stats, options.momentum_, options.eps_,
                                           residual, relu, synced ? &stats_allreduce_ : nullptr);
}

std::string BatchNorm::extra_repr() const {
  std::ostringstream os;
  if (stats_allreduce_) os << "synchronized, ";
  os << num_features << ", eps=" << options.eps_ << ", momentum=" << options.momentum_
     << ", affine=" << (options.affine_ ? "true" : "false")
     << ", track_running_stats=" << (options.track_running_stats_ ? "true" : "false");
  return os.str();
}

Tensor ReLU::forward(const Tensor& input) { return relu(input); }

LeakyReLU::LeakyReLU(const LeakyReLUOptions& o) : Module("LeakyReLU"), options(o) {}
Tensor LeakyReLU::forward(const Tensor& input) {
  return leaky_relu(input, options.negative_slope());
}
std::string LeakyReLU::extra_repr() const {
  std::ostringstream os;
  os << "negative_slope=" << options.negative_slope();
  return os.str();
}

Tensor Sigmoid::forward(const Tensor& input) { return sigmoid(input); }
Tensor Tanh::forward(const Tensor& input) { return tanh(input); }

Tensor Softmax::forward(const Tensor& input) { return softmax(input, options.dim()); }
std::string Softmax::extra_repr() const { return "dim=" + std::to_string(options.dim()); }
Tensor LogSoftmax::forward(const Tensor& input) { return log_softmax(input, options.dim()); }
std::string LogSoftmax::extra_repr() const { return "dim=" + std::to_string(options.dim()); }

GELU::GELU(std::string approx) : Module("GELU"), approximate(std::move(approx)) {
  TANDEM_CHECK(approximate == "none" || approximate == "tanh",
               "GELU: approximate must be 'none' or 'tanh', got '", approximate, "'");
}
Tensor GELU::forward(const Tensor& input) { return gelu(input, approximate); }
std::string GELU::extra_repr() const { return "approximate='" + approximate + "'"; }

Tensor ELU::forward(const Tensor& input) { return elu(input, options.alpha()); }
std::string ELU::extra_repr() const {
  std::ostringstream os;
  os << "alpha=" << options.alpha();
  return os.str();
}
Tensor SELU::forward(const Tensor& input) { return selu(input); }
Tensor Softplus::forward(const Tensor& input) {
  return softplus(input, options.beta(), options.threshold());
}
std::string Softplus::extra_repr() const {
  std::ostringstream os;
  os << "beta=" << options.beta() << ", threshold=" << options.threshold();
  return os.str();
}
Hardtanh::Hardtanh(const HardtanhOptions& o) : Module("Hardtanh"), options(o) {
  TANDEM_CHECK(o.max_val() > o.min_val(), "Hardtanh: max_val (", o.max_val(),
               ") must be greater than min_val (", o.min_val(), ")");
}
Tensor Hardtanh::forward(const Tensor& input) {
  return hardtanh(input, options.min_val(), options.max_val());
}
std::string Hardtanh::extra_repr() const {
  std::ostringstream os;
  os << "min_val=" << options.min_val() << ", max_val=" << options.max_val();
  return os.str();
}
Tensor ReLU6::forward(const Tensor& input) { return relu6(input); }
Tensor SiLU::forward(const Tensor& input) { return silu(input); }
Tensor Mish::forward(const Tensor& input) { return mish(input); }
Tensor Hardswish::forward(const Tensor& input) { return hardswish(input); }
Tensor Hardsigmoid::forward(const Tensor& input) { return hardsigmoid(input); }
Tensor LogSigmoid::forward(const Tensor& input) { return log_sigmoid(input); }
Tensor Softsign::forward(const Tensor& input) { return softsign(input); }

PReLU::PReLU(const PReLUOptions& o) : Module("PReLU"), options(o) {
  TANDEM_CHECK(o.num_parameters() >= 1, "PReLU: num_parameters must be positive, got ",
               o.num_parameters());
  weight = register_parameter("weight", full({o.num_parameters()}, o.init()));
}
Tensor PReLU::forward(const Tensor& input) { return prelu(input, weight); }
std::string PReLU::extra_repr() const {
  return "num_parameters=" + std::to_string(options.num_parameters());
}

template <typename Options>
std::string detail::PoolLayer<Options>::extra_repr() const {
  return pool_repr(options);
}
template class detail::PoolLayer<MaxPool1dOptions>;
template class detail::PoolLayer<AvgPool1dOptions>;
template class detail::PoolLayer<MaxPool2dOptions>;
template class detail::PoolLayer<AvgPool2dOptions>;
template class detail::PoolLayer<MaxPool3dOptions>;
template class detail::PoolLayer<AvgPool3dOptions>;

Tensor MaxPool1d::forward(const Tensor& input) { return functional::max_pool1d(input, options); }
std::tuple<Tensor, Tensor> MaxPool1d::forward_with_indices(const Tensor& input) {
  return functional::max_pool1d_with_indices(input, options);
}
Tensor AvgPool1d::forward(const Tensor& input) { return functional::avg_pool1d(input, options); }
AdaptiveAvgPool1d::AdaptiveAvgPool1d(int64_t size)
    : Module("AdaptiveAvgPool1d"), output_size(size) {}
Tensor AdaptiveAvgPool1d::forward(const Tensor& input) {
  return adaptive_avg_pool1d(input, output_size);
}
std::string AdaptiveAvgPool1d::extra_repr() const {
  return "output_size=" + std::to_string(output_size);
}
detail::PadLayer::PadLayer(const char* type_name, std::vector<int64_t> pads, size_t dims, PadMode m,
                           double v)
    : Module(type_name), padding(std::move(pads)), mode(m), value(v) {
  TANDEM_CHECK(padding.size() == 2 * dims, type_name, ": expected one padding for every side or ",
               2 * dims, " numbers, got ", padding.size());
}
Tensor detail::PadLayer::forward(const Tensor& input) { return pad(input, padding, mode, value); }
std::string detail::PadLayer::extra_repr() const {
  std::ostringstream os;
  os << "(";
  for (size_t i = 0; i < padding.size(); ++i) os << (i ? ", " : "") << padding[i];
  os << ")";
  if (mode == PadMode::constant && value != 0.0) os << ", value=" << value;
  return os.str();
}

Tensor CosineSimilarity::forward(const Tensor& x1, const Tensor& x2) {
  return cosine_similarity(x1, x2, options.dim(), options.eps());
}
Tensor PairwiseDistance::forward(const Tensor& x1, const Tensor& x2) {
  return pairwise_distance(x1, x2, options.p(), options.eps(), options.keepdim());
}

Tensor MaxPool2d::forward(const Tensor& input) {
  return max_pool2d(input, options.kernel_size_, options.stride_, options.padding_,
                    options.dilation_, options.ceil_mode_);
}
Tensor AvgPool2d::forward(const Tensor& input) {
  return avg_pool2d(input, options.kernel_size_, options.stride_, options.padding_,
                    options.ceil_mode_, options.count_include_pad_, options.divisor_override_);
}
Tensor MaxPool3d::forward(const Tensor& input) {
  return max_pool3d(input, options.kernel_size_, options.stride_, options.padding_,
                    options.dilation_, options.ceil_mode_);
}
std::tuple<Tensor, Tensor> MaxPool2d::forward_with_indices(const Tensor& input) {
  return functional::max_pool2d_with_indices(input, options);
}
std::tuple<Tensor, Tensor> MaxPool3d::forward_with_indices(const Tensor& input) {
  return functional::max_pool3d_with_indices(input, options);
}

std::vector<int64_t> functional::detail::unpool_output_size(
    const Tensor& input, const std::vector<int64_t>& kernel, const std::vector<int64_t>& stride,
    const std::vector<int64_t>& padding, const std::optional<std::vector<int64_t>>& output_size,
    const char* op) {
  const size_t dims = kernel.size();
  TANDEM_CHECK(input.defined() && input.dim() >= static_cast<int64_t>(dims) + 1, op,
               ": expected an input with ", dims, " spatial dims, got ",
               input.defined() ? shape_str(input.shape()) : std::string("an undefined tensor"));
  std::vector<int64_t> size;
  for (size_t d = 0; d < dims; ++d) {
    TANDEM_CHECK(kernel[d] > 0 && stride[d] > 0 && padding[d] >= 0, op, ": kernel_size ",
                 shape_str(kernel), " and stride ", shape_str(stride),
                 " must be positive and padding ", shape_str(padding), " non-negative");
    size.push_back((input.size(input.dim() - static_cast<int64_t>(dims - d)) - 1) * stride[d] +
                   kernel[d] - 2 * padding[d]);
  }
  if (!output_size) return size;
  std::vector<int64_t> given = *output_size;
  if (given.size() == dims + 2) given.erase(given.begin(), given.begin() + 2);  // N and C first
  TANDEM_CHECK(given.size() == dims, op, ": output_size should have ", dims, " or ", dims + 2,
               " elements, but it has ", output_size->size());
  for (size_t d = 0; d < dims; ++d)  // libtorch's bounds, both included
    TANDEM_CHECK(given[d] >= size[d] - stride[d] && given[d] <= size[d] + stride[d], op,
                 ": invalid output_size ", shape_str(given), " (dim ", d, " must be between ",
                 size[d] - stride[d], " and ", size[d] + stride[d], ")");
  return given;
}

template <size_t D>
Tensor detail::MaxUnpoolLayer<D>::forward(const Tensor& input, const Tensor& indices,
                                          const std::optional<std::vector<int64_t>>& output_size) {
  return functional::detail::max_unpool(input, indices,
                                        functional::MaxUnpoolFuncOptions<D>(options.kernel_size_)
                                            .stride(options.stride_)
                                            .padding(options.padding_)
                                            .output_size(output_size));
}
template <size_t D>
std::string detail::MaxUnpoolLayer<D>::extra_repr() const {
  return "kernel_size=" + shape_str(int_list(options.kernel_size_)) +
         ", stride=" + shape_str(int_list(options.stride_)) +
         ", padding=" + shape_str(int_list(options.padding_));
}
template class detail::MaxUnpoolLayer<1>;
template class detail::MaxUnpoolLayer<2>;
template class detail::MaxUnpoolLayer<3>;
Tensor AvgPool3d::forward(const Tensor& input) {
  return avg_pool3d(input, options.kernel_size_, options.stride_, options.padding_,
                    options.ceil_mode_, options.count_include_pad_, options.divisor_override_);
}

AdaptiveAvgPool3d::AdaptiveAvgPool3d(Int3 size) : Module("AdaptiveAvgPool3d"), output_size(size) {}
Tensor AdaptiveAvgPool3d::forward(const Tensor& input) {
  return adaptive_avg_pool3d(input, output_size);
}
std::string AdaptiveAvgPool3d::extra_repr() const { return "output_size=" + size_str(output_size); }

AdaptiveAvgPool2d::AdaptiveAvgPool2d(Int2 size) : Module("AdaptiveAvgPool2d"), output_size(size) {}
Tensor AdaptiveAvgPool2d::forward(const Tensor& input) {
  return adaptive_avg_pool2d(input, output_size);
}
std::string AdaptiveAvgPool2d::extra_repr() const { return "output_size=" + size_str(output_size); }

AdaptiveMaxPool1d::AdaptiveMaxPool1d(int64_t size)
    : Module("AdaptiveMaxPool1d"), output_size(size) {}
Tensor AdaptiveMaxPool1d::forward(const Tensor& input) {
  return std::get<0>(forward_with_indices(input));
}
std::tuple<Tensor, Tensor> AdaptiveMaxPool1d::forward_with_indices(const Tensor& input) {
  return adaptive_max_pool1d(input, output_size);
}
std::string AdaptiveMaxPool1d::extra_repr() const {
  return "output_size=" + std::to_string(output_size);
}

AdaptiveMaxPool2d::AdaptiveMaxPool2d(Int2 size) : Module("AdaptiveMaxPool2d"), output_size(size) {}
Tensor AdaptiveMaxPool2d::forward(const Tensor& input) {
  return std::get<0>(forward_with_indices(input));
}
std::tuple<Tensor, Tensor> AdaptiveMaxPool2d::forward_with_indices(const Tensor& input) {
  return adaptive_max_pool2d(input, output_size);
}
std::string AdaptiveMaxPool2d::extra_repr() const { return "output_size=" + size_str(output_size); }

Embedding::Embedding(const EmbeddingOptions& opts)
    : Module("Embedding"),
      padding_idx(
          functional::detail::embedding_padding_idx(opts.padding_idx(), opts.num_embeddings())),
      max_norm(opts.max_norm()),
      norm_type(opts.norm_type()),
      scale_grad_by_freq(opts.scale_grad_by_freq()) {
  functional::detail::check_embedding_options(opts.sparse());
  TANDEM_CHECK(opts.num_embeddings() > 0 && opts.embedding_dim() > 0,
               "Embedding: sizes must be positive, got num_embeddings ", opts.num_embeddings(),
               ", embedding_dim ", opts.embedding_dim());
  const Shape shape{opts.num_embeddings(), opts.embedding_dim()};
  if (opts._weight().defined()) {
    TANDEM_CHECK(opts._weight().shape() == shape, "Embedding: _weight must be ", shape_str(shape),
                 ", got ", shape_str(opts._weight().shape()));
    weight = register_parameter("weight", opts._weight(), opts._weight().is_floating_point());
    return;
  }
  weight = register_parameter("weight", empty(shape));
  reset_parameters();
}

void Embedding::reset_parameters() {
  NoGradGuard no_grad;
  weight.normal_();
  if (padding_idx >= 0) weight.narrow(0, padding_idx, 1).zero_();
}

std::shared_ptr<Embedding> Embedding::from_pretrained(const Tensor& embeddings,
                                                      const EmbeddingFromPretrainedOptions& o) {
  TANDEM_CHECK(embeddings.defined() && embeddings.dim() == 2,
               "Embedding::from_pretrained: embeddings must be a 2-d tensor, got ",
               embeddings.defined() ? shape_str(embeddings.shape()) : std::string("undefined"));
  auto table = std::make_shared<Embedding>(EmbeddingOptions(embeddings.size(0), embeddings.size(1))
                                               .padding_idx(o.padding_idx())
                                               .max_norm(o.max_norm())
                                               .norm_type(o.norm_type())
                                               .scale_grad_by_freq(o.scale_grad_by_freq())
                                               .sparse(o.sparse())
                                               ._weight(embeddings));
  table->weight.set_requires_grad(!o.freeze());
  return table;
}

Tensor Embedding::forward(const Tensor& indices) {
  if (max_norm) embedding_renorm_(weight, indices, *max_norm, norm_type);
  return embedding(weight, indices, padding_idx, scale_grad_by_freq);
}

std::string Embedding::extra_repr() const {
  std::ostringstream os;
  os << weight.size(0) << ", " << weight.size(1);
  if (padding_idx >= 0) os << ", padding_idx=" << padding_idx;
  return os.str();
}

EmbeddingBag::EmbeddingBag(const EmbeddingBagOptions& opts)
    : Module("EmbeddingBag"), options(opts) {
  TANDEM_CHECK(opts.num_embeddings() > 0 && opts.embedding_dim() > 0,
               "EmbeddingBag: sizes must be positive, got num_embeddings ", opts.num_embeddings(),
               ", embedding_dim ", opts.embedding_dim());
  functional::detail::embedding_padding_idx(opts.padding_idx(), opts.num_embeddings());  // checks
  weight = register_parameter("weight", empty({opts.num_embeddings(), opts.embedding_dim()}));
  reset_parameters();
}

void EmbeddingBag::reset_parameters() {
  NoGradGuard no_grad;
  weight.normal_();
  const int64_t pad =
      functional::detail::embedding_padding_idx(options.padding_idx(), weight.size(0));
  if (pad >= 0) weight.narrow(0, pad, 1).zero_();
}

Tensor EmbeddingBag::forward(const Tensor& input, const Tensor& offsets,
                             const Tensor& per_sample_weights) {
  return embedding_bag(weight, input, offsets, options.mode().value, per_sample_weights,
                       options.include_last_offset(), options.padding_idx());
}

std::string EmbeddingBag::extra_repr() const {
  static const char* const modes[] = {"sum", "mean", "max"};
  std::ostringstream os;
  os << weight.size(0) << ", " << weight.size(1)
     << ", mode=" << modes[static_cast<int>(options.mode().value)];
  if (options.padding_idx()) os << ", padding_idx=" << *options.padding_idx();
  return os.str();
}

Tensor LocalResponseNorm::forward(const Tensor& input) {
  return local_response_norm(input, options.size(), options.alpha(), options.beta(), options.k());
}
std::string LocalResponseNorm::extra_repr() const {
  std::ostringstream os;
  os << options.size() << ", alpha=" << options.alpha() << ", beta=" << options.beta()
     << ", k=" << options.k();
  return os.str();
}

Dropout::Dropout(const DropoutOptions& options) : Module("Dropout"), p(options.p()) {
  TANDEM_CHECK(p >= 0 && p <= 1, "Dropout: p must be in [0, 1], got ", p);
}
LayerNorm::LayerNorm(const LayerNormOptions& opts) : Module("LayerNorm"), options(opts) {
  const Shape& shape = opts.normalized_shape_;
  TANDEM_CHECK(!shape.empty() && std::all_of(shape.begin(), shape.end(),
                                             [](int64_t d) { return d > 0; }),
               "LayerNorm: normalized_shape must be positive sizes, got ", shape_str(shape));
  TANDEM_CHECK(opts.eps_ > 0, "LayerNorm: eps must be positive, got ", opts.eps_);
  if (opts.elementwise_affine_) {
    weight = register_parameter("weight", ones(shape));
    bias = register_parameter("bias", zeros(shape));
  }
}
void LayerNorm::reset_parameters() {
  if (!weight.defined()) return;
  NoGradGuard no_grad;
  weight.fill_(1.0);
  if (bias.defined()) bias.zero_();
}

Tensor LayerNorm::forward(const Tensor& input) {
  return layer_norm(input, options.normalized_shape_, weight, bias, options.eps_);
}
std::string LayerNorm::extra_repr() const {
  std::ostringstream os;
  os << shape_str(options.normalized_shape_) << ", eps=" << options.eps_
     << ", elementwise_affine=" << (options.elementwise_affine_ ? "true" : "false");
  return os.str();
}

GroupNorm::GroupNorm(const GroupNormOptions& opts) : Module("GroupNorm"), options(opts) {
  TANDEM_CHECK(opts.num_groups_ > 0 && opts.num_channels_ > 0 &&
                   opts.num_channels_ % opts.num_groups_ == 0,
               "GroupNorm: num_channels (", opts.num_channels_, ") must split into num_groups (",
               opts.num_groups_, ") equal groups");
  TANDEM_CHECK(opts.eps_ > 0, "GroupNorm: eps must be positive, got ", opts.eps_);
  if (opts.affine_) {
    weight = register_parameter("weight", ones({opts.num_channels_}));
    bias = register_parameter("bias", zeros({opts.num_channels_}));
  }
}
void GroupNorm::reset_parameters() {
  if (!weight.defined()) return;
  NoGradGuard no_grad;
  weight.fill_(1.0);
  if (bias.defined()) bias.zero_();
}

Tensor GroupNorm::forward(const Tensor& input) {
  TANDEM_CHECK(input.dim() >= 2 && input.size(1) == options.num_channels_, "GroupNorm: expected "
               "input (N, ", options.num_channels_, ", ...), got ", shape_str(input.shape()));
  return group_norm(input, options.num_groups_, weight, bias, options.eps_);
}
std::string GroupNorm::extra_repr() const {
  std::ostringstream os;
  os << options.num_groups_ << ", " << options.num_channels_ << ", eps=" << options.eps_
     << ", affine=" << (options.affine_ ? "true" : "false");
  return os.str();
}

Tensor Dropout::forward(const Tensor& input) { return dropout(input, p, is_training()); }
std::string Dropout::extra_repr() const { return "p=" + std::to_string(p); }

Dropout2d::Dropout2d(const DropoutOptions& options) : Module("Dropout2d"), p(options.p()) {
  TANDEM_CHECK(p >= 0 && p <= 1, "Dropout2d: p must be in [0, 1], got ", p);
}
Tensor Dropout2d::forward(const Tensor& input) { return dropout2d(input, p, is_training()); }
std::string Dropout2d::extra_repr() const { return "p=" + std::to_string(p); }

Dropout3d::Dropout3d(const DropoutOptions& options) : Module("Dropout3d"), p(options.p()) {
  TANDEM_CHECK(p >= 0 && p <= 1, "Dropout3d: p must be in [0, 1], got ", p);
}
Tensor Dropout3d::forward(const Tensor& input) { return dropout3d(input, p, is_training()); }
std::string Dropout3d::extra_repr() const { return "p=" + std::to_string(p); }

Upsample::Upsample(const UpsampleOptions& o) : Module("Upsample"), options(o) {
  TANDEM_CHECK(o.size_.has_value() != o.scale_factor_.has_value(),
               "Upsample: give exactly one of size and scale_factor");
}
Tensor Upsample::forward(const Tensor& input) {
  return interpolate(input, options.size_, options.scale_factor_, options.mode_,
                     options.align_corners_);
}
std::string Upsample::extra_repr() const {
  std::ostringstream os;
  if (options.size_) os << "size=" << shape_str(*options.size_);
  if (options.scale_factor_) {
    os << "scale_factor=(";
    for (size_t i = 0; i < options.scale_factor_->size(); ++i)
      os << (i ? ", " : "") << (*options.scale_factor_)[i];
    os << ")";
  }
  os << ", mode=" << options.mode_;
  return os.str();
}

Flatten::Flatten(int64_t start, int64_t end) : Module("Flatten"), start_dim(start), end_dim(end) {}
Tensor Flatten::forward(const Tensor& input) { return flatten(input, start_dim, end_dim); }

Tensor CELU::forward(const Tensor& input) { return celu(input, options.alpha()); }
std::string CELU::extra_repr() const { return "alpha=" + std::to_string(options.alpha()); }
Tensor Softshrink::forward(const Tensor& input) { return softshrink(input, options.lambda()); }
std::string Softshrink::extra_repr() const { return std::to_string(options.lambda()); }
Tensor Hardshrink::forward(const Tensor& input) { return hardshrink(input, options.lambda()); }
std::string Hardshrink::extra_repr() const { return std::to_string(options.lambda()); }
Tensor Tanhshrink::forward(const Tensor& input) { return tanhshrink(input); }
Tensor Threshold::forward(const Tensor& input) {
  return threshold(input, options.threshold(), options.value());
}
std::string Threshold::extra_repr() const {
  return "threshold=" + std::to_string(options.threshold()) +
         ", value=" + std::to_string(options.value());
}
Tensor Softmin::forward(const Tensor& input) { return softmin(input, options.dim()); }
std::string Softmin::extra_repr() const { return "dim=" + std::to_string(options.dim()); }

Bilinear::Bilinear(const BilinearOptions& o) : Module("Bilinear"), options(o) {
  TANDEM_CHECK(o.in1_features() > 0 && o.in2_features() > 0 && o.out_features() > 0,
               "Bilinear: the feature sizes must be positive, got (", o.in1_features(), ", ",
               o.in2_features(), ", ", o.out_features(), ")");
  weight =
      register_parameter("weight", empty({o.out_features(), o.in1_features(), o.in2_features()}));
  if (o.bias()) bias = register_parameter("bias", empty({o.out_features()}));
  reset_parameters();
}
void Bilinear::reset_parameters() {
  const double bound = 1.0 / std::sqrt(static_cast<double>(options.in1_features()));
  init::uniform_(weight, -bound, bound);
  if (bias.defined()) init::uniform_(bias, -bound, bound);
}
Tensor Bilinear::forward(const Tensor& input1, const Tensor& input2) {
  return bilinear(input1, input2, weight, bias);
}
std::string Bilinear::extra_repr() const {
  return "in1_features=" + std::to_string(options.in1_features()) +
         ", in2_features=" + std::to_string(options.in2_features()) +
         ", out_features=" + std::to_string(options.out_features()) +
         ", bias=" + (options.bias() ? "true" : "false");
}

Tensor Unflatten::forward(const Tensor& input) {
  return input.unflatten(options.dim(), options.sizes());
}
Tensor ChannelShuffle::forward(const Tensor& input) {
  return channel_shuffle(input, options.groups());
}
Tensor Unfold::forward(const Tensor& input) {
  return im2col(input, options.kernel_size(), options.dilation(), options.padding(),
                options.stride());
}
Tensor Fold::forward(const Tensor& input) {
  return col2im(input, options.output_size(), options.kernel_size(), options.dilation(),
                options.padding(), options.stride());
}

Tensor GLU::forward(const Tensor& input) { return glu(input, options.dim()); }
std::string GLU::extra_repr() const { return "dim=" + std::to_string(options.dim()); }
Tensor PixelShuffle::forward(const Tensor& input) {
  return pixel_shuffle(input, options.upscale_factor());
}
std::string PixelShuffle::extra_repr() const {
  return "upscale_factor=" + std::to_string(options.upscale_factor());
}
Tensor PixelUnshuffle::forward(const Tensor& input) {
  return pixel_unshuffle(input, options.downscale_factor());
}
std::string PixelUnshuffle::extra_repr() const {
  return "downscale_factor=" + std::to_string(options.downscale_factor());
}

Sequential::Sequential(std::initializer_list<std::shared_ptr<Module>> modules)
    : Module("Sequential") {
  for (const auto& m : modules) push_back(m);
}

Sequential::Sequential(
    std::initializer_list<std::pair<std::string, std::shared_ptr<Module>>> modules)
    : Module("Sequential") {
  for (const auto& [name, m] : modules) push_back(name, m);
}

void Sequential::append(std::string name, std::shared_ptr<Module> module, Call call) {
  add_child(name, std::move(module));  // checks the module and its name
  // No forward of the module's own type (one that takes other arguments): Module's.
  if (!call) call = [](Module& m, const Tensor& x) { return m.forward(x); };
  calls_.emplace_back(std::move(name), std::move(call));
}

std::shared_ptr<Module> Sequential::clone(const std::optional<Device>& device) const {
  auto copy = std::make_shared<Sequential>();
  copy->train(is_training());
  for (const auto& entry : named_children()) {
    const std::string& name = entry.first;
    const auto& child = entry.second;
    auto it = std::find_if(calls_.begin(), calls_.end(),
                           [&](const auto& call) { return call.first == name; });
    if (it != calls_.end())
      copy->append(name, child->clone(device), it->second);
    else  // registered with register_module: a child, not a step of forward
      copy->register_module(name, child->clone(device));
  }
  return copy;
}

std::shared_ptr<Module> ModuleList::clone(const std::optional<Device>& device) const {
  auto copy = std::make_shared<ModuleList>();
  copy->train(is_training());
  for (const auto& m : modules_) copy->push_back(m->clone(device));
  return copy;
}

std::shared_ptr<Module> ModuleDict::clone(const std::optional<Device>& device) const {
  auto copy = std::make_shared<ModuleDict>();
  copy->train(is_training());
  for (const auto& [key, m] : named_children()) copy->insert(key, m->clone(device));
  return copy;
}

std::shared_ptr<Module> Sequential::operator[](size_t index) const {
  TANDEM_CHECK_INDEX(index < size(), "Sequential: index ", index, " out of range for ", size(),
                     " modules");
  return named_children()[index].second;  // positional
}

ModuleDict::ModuleDict(const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& modules)
    : Module("ModuleDict") {
  update(modules);
}
ModuleDict::ModuleDict(const OrderedDict<std::string, std::shared_ptr<Module>>& modules)
    : Module("ModuleDict") {
  update(modules);
}
void ModuleDict::insert(const std::string& key, std::shared_ptr<Module> module) {
  if (contains(key)) {
    replace_child(key, std::move(module));
  } else {
    add_child(key, std::move(module));
  }
}
void ModuleDict::update(
    const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& modules) {
  for (const auto& [key, module] : modules) insert(key, module);
}
void ModuleDict::update(const OrderedDict<std::string, std::shared_ptr<Module>>& modules) {
  for (const auto& entry : modules) insert(entry.first, entry.second);
}
std::shared_ptr<Module> ModuleDict::pop(const std::string& key) {
  std::shared_ptr<Module> module = (*this)[key];
  remove_child(key);
  return module;
}
void ModuleDict::clear() {
  for (const std::string& key : keys()) remove_child(key);
}
std::shared_ptr<Module> ModuleDict::operator[](const std::string& key) const {
  TANDEM_CHECK_INDEX(contains(key), "ModuleDict: no module '", key, "'");
  return named_children().at(key);
}

InstanceNorm::InstanceNorm(const char* type_name, int64_t dims, const InstanceNormOptions& o)
    : Module(type_name), options(o), dims_(dims) {
  TANDEM_CHECK(o.num_features() > 0, type_name, ": num_features must be positive, got ",
               o.num_features());
  TANDEM_CHECK(o.eps() > 0, type_name, ": eps must be positive, got ", o.eps());
  TANDEM_CHECK(o.momentum() >= 0 && o.momentum() <= 1, type_name,
               ": momentum must be in [0, 1], got ", o.momentum());
  if (o.affine()) {
    weight = register_parameter("weight", ones({o.num_features()}));
    bias = register_parameter("bias", zeros({o.num_features()}));
  }
  if (o.track_running_stats()) {
    running_mean = register_buffer("running_mean", zeros({o.num_features()}));
    running_var = register_buffer("running_var", ones({o.num_features()}));
    num_batches_tracked = register_buffer("num_batches_tracked", zeros({}, DType::i64));
  }
}
Tensor InstanceNorm::forward(const Tensor& input) {
  TANDEM_CHECK(input.dim() == dims_ && input.size(1) == options.num_features(), type_name(),
               ": expected input (N, ", options.num_features(),
               dims_ == 3   ? ", L)"
               : dims_ == 4 ? ", H, W)"
                            : ", D, H, W)",
               ", got ", shape_str(input.shape()));
  if (running_mean.defined() && !is_training())  // every sample by the running statistics
    return batch_norm(input, running_mean, running_var, weight, bias, /*training=*/false,
                      options.momentum(), options.eps());
  if (running_mean.defined()) {
    // The running statistics move toward the batch's mean of each sample's mean and unbiased
    // variance over its positions, as torch's instance norm updates them.
    NoGradGuard no_grad;
    Shape positions;
    for (int64_t d = 2; d < input.dim(); ++d) positions.push_back(d);
    const Tensor x = input.detach().to(running_mean.dtype());
    const double m = options.momentum();
    running_mean.mul_(1.0 - m).add_(mean(mean(x, positions), {0}), m);
    running_var.mul_(1.0 - m).add_(mean(var(x, positions), {0}), m);
  }
  return group_norm(input, options.num_features(), weight, bias, options.eps());
}
std::string InstanceNorm::extra_repr() const {
  std::ostringstream os;
  os << options.num_features() << ", eps=" << options.eps() << ", momentum=" << options.momentum()
     << ", affine=" << (options.affine() ? "true" : "false")
     << ", track_running_stats=" << (options.track_running_stats() ? "true" : "false");
  return os.str();
}

void ModuleList::push_back(std::shared_ptr<Module> module) {
  TANDEM_CHECK(module != nullptr, "ModuleList: push_back of a null module");
  add_child(std::to_string(modules_.size()), module);
  modules_.push_back(std::move(module));
}

void ModuleList::replace_child(const std::string& name, std::shared_ptr<Module> module) {
  Module::replace_child(name, module);  // checks the name is a child's: its position
  modules_[std::stoul(name)] = std::move(module);
}

void ModuleList::extend(const ModuleList& other) {
  const std::vector<std::shared_ptr<Module>> modules = other.modules_;  // other may be *this
  for (const auto& m : modules) push_back(m);
}

std::shared_ptr<Module> ModuleList::ptr(size_t index) const {
  TANDEM_CHECK_INDEX(index < modules_.size(), "ModuleList: index ", index, " out of range for ",
                     modules_.size(), " modules");
  return modules_[index];
}

Tensor Sequential::forward(const Tensor& input) {
  Tensor x = input;
  const auto& children = named_children();
  for (const auto& [name, call] : calls_) x = call(*children.at(name), x);
  return x;
}

}  // namespace tandem::nn
