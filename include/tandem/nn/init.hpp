// Parameter initialization, as torch.nn.init. Every function fills `tensor` (a handle: the
// caller's tensor changes) in place without recording history and draws from `gen` (the default
// generator when null).
#pragma once

#include <string>

#include "tandem/core/generator.hpp"
#include "tandem/core/tensor.hpp"
#include "tandem/ops/nn_ops.hpp"

namespace tandem::nn::init {

enum class FanMode { fan_in, fan_out };

/// (fan_in, fan_out) of a weight: dim 1 × receptive field, dim 0 × receptive field.
std::pair<int64_t, int64_t> fan_in_and_fan_out(const Tensor& tensor);
/// torch.nn.init.calculate_gain for "linear", "conv2d", "sigmoid", "tanh", "relu", "leaky_relu"
/// (param = negative slope), "selu".
double calculate_gain(const std::string& nonlinearity, double param = 0.01);

void uniform_(Tensor tensor, double low = 0.0, double high = 1.0, Generator* gen = nullptr);
void normal_(Tensor tensor, double mean = 0.0, double std = 1.0, Generator* gen = nullptr);
void constant_(Tensor tensor, double value);
void zeros_(Tensor tensor);
void ones_(Tensor tensor);
/// He et al. 2015: U(-b, b) with b = gain * sqrt(3 / fan).
void kaiming_uniform_(Tensor tensor, double a = 0.0, FanMode mode = FanMode::fan_in,
                      const std::string& nonlinearity = "leaky_relu", Generator* gen = nullptr);
/// He et al. 2015: N(0, std) with std = gain / sqrt(fan).
void kaiming_normal_(Tensor tensor, double a = 0.0, FanMode mode = FanMode::fan_in,
                     const std::string& nonlinearity = "leaky_relu", Generator* gen = nullptr);
/// Glorot & Bengio 2010: U(-b, b) with b = gain * sqrt(6 / (fan_in + fan_out)).
void xavier_uniform_(Tensor tensor, double gain = 1.0, Generator* gen = nullptr);
void xavier_normal_(Tensor tensor, double gain = 1.0, Generator* gen = nullptr);
/// Saxe et al. 2013: a (semi-)orthogonal matrix times gain, from the QR decomposition of
/// normal draws (signs fixed by R's diagonal, as torch's), the tensor seen as (size(0), rest).
void orthogonal_(Tensor tensor, double gain = 1.0, Generator* gen = nullptr);

}  // namespace tandem::nn::init

namespace tandem {
/// libtorch's names for the fan modes and nonlinearities of the initializers:
/// `nn::init::kaiming_normal_(w, 0.0, kFanOut, kReLU)`. kLinear is in ops/nn_ops.hpp (also
/// interpolate's mode).
inline constexpr nn::init::FanMode kFanIn = nn::init::FanMode::fan_in;
inline constexpr nn::init::FanMode kFanOut = nn::init::FanMode::fan_out;
inline constexpr const char* kConv2D = "conv2d";
inline constexpr const char* kSigmoid = "sigmoid";
inline constexpr const char* kTanh = "tanh";
inline constexpr const char* kReLU = "relu";
inline constexpr const char* kLeakyReLU = "leaky_relu";
inline constexpr const char* kSELU = "selu";
}  // namespace tandem
