#include "tandem/nn/init.hpp"

#include <Eigen/Dense>
#include <cmath>
#include <vector>

#include "tandem/autograd/grad_mode.hpp"
#include "tandem/core/error.hpp"
#include "tandem/ops/creation.hpp"
#include "tandem/ops/elementwise.hpp"

namespace tandem::nn::init {

std::pair<int64_t, int64_t> fan_in_and_fan_out(const Tensor& tensor) {
  TANDEM_CHECK(tensor.dim() >= 2, "init: fan in and fan out need a tensor of at least 2 dims, got ",
               shape_str(tensor.shape()));
  int64_t receptive = 1;
  for (int64_t d = 2; d < tensor.dim(); ++d) receptive *= tensor.size(d);
  return {tensor.size(1) * receptive, tensor.size(0) * receptive};
}

double calculate_gain(const std::string& nonlinearity, double param) {
  // torch's linear functions: linear, identity, sigmoid and every convolution (transposed too).
  for (const char* name : {"linear", "identity", "sigmoid", "conv1d", "conv2d", "conv3d",
                           "conv_transpose1d", "conv_transpose2d", "conv_transpose3d"})
    if (nonlinearity == name) return 1.0;
  if (nonlinearity == "tanh") return 5.0 / 3.0;
  if (nonlinearity == "relu") return std::sqrt(2.0);
  if (nonlinearity == "leaky_relu") return std::sqrt(2.0 / (1.0 + param * param));
  if (nonlinearity == "selu") return 3.0 / 4.0;
  TANDEM_THROW(ValueError, "init.calculate_gain: unknown nonlinearity '", nonlinearity, "'");
}

void uniform_(Tensor tensor, double low, double high, Generator* gen) {
  NoGradGuard no_grad;
  tensor.copy_(add(mul(rand(tensor.shape(), tensor.dtype(), gen), high - low), low));
}

void normal_(Tensor tensor, double mean, double std, Generator* gen) {
  NoGradGuard no_grad;
  tensor.copy_(add(mul(randn(tensor.shape(), tensor.dtype(), gen), std), mean));
}

void constant_(Tensor tensor, double value) {
  NoGradGuard no_grad;
  tensor.fill_(value);
}
void zeros_(Tensor tensor) { constant_(tensor, 0.0); }
void ones_(Tensor tensor) { constant_(tensor, 1.0); }

namespace {
double kaiming_std(const Tensor& tensor, double a, FanMode mode, const std::string& nonlinearity) {
  auto [fan_in, fan_out] = fan_in_and_fan_out(tensor);
  int64_t fan = mode == FanMode::fan_in ? fan_in : fan_out;
  TANDEM_CHECK(fan > 0, "init.kaiming: zero fan for shape ", shape_str(tensor.shape()));
  return calculate_gain(nonlinearity, a) / std::sqrt(static_cast<double>(fan));
}
double xavier_std(const Tensor& tensor, double gain) {
  auto [fan_in, fan_out] = fan_in_and_fan_out(tensor);
  TANDEM_CHECK(fan_in + fan_out > 0, "init.xavier: zero fan for shape ", shape_str(tensor.shape()));
  return gain * std::sqrt(2.0 / static_cast<double>(fan_in + fan_out));
}
}  // namespace

void kaiming_uniform_(Tensor tensor, double a, FanMode mode, const std::string& nonlinearity,
                      Generator* gen) {
  double bound = std::sqrt(3.0) * kaiming_std(tensor, a, mode, nonlinearity);
  uniform_(tensor, -bound, bound, gen);
}

void kaiming_normal_(Tensor tensor, double a, FanMode mode, const std::string& nonlinearity,
                     Generator* gen) {
  normal_(tensor, 0.0, kaiming_std(tensor, a, mode, nonlinearity), gen);
}

void xavier_uniform_(Tensor tensor, double gain, Generator* gen) {
  double bound = std::sqrt(3.0) * xavier_std(tensor, gain);
  uniform_(tensor, -bound, bound, gen);
}

void xavier_normal_(Tensor tensor, double gain, Generator* gen) {
  normal_(tensor, 0.0, xavier_std(tensor, gain), gen);
}

void orthogonal_(Tensor tensor, double gain, Generator* gen) {
  TANDEM_CHECK(tensor.defined() && tensor.dim() >= 2,
               "init.orthogonal_: only tensors with 2 or more dimensions are supported");
  if (tensor.numel() == 0) return;
  const int64_t rows = tensor.size(0), cols = tensor.numel() / rows;
  // The QR decomposition of the taller way round, in f64 on the host (a parameter's init).
  const std::vector<double> draws = randn({rows, cols}, DType::f64, gen).to_vector<double>();
  using Matrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  Matrix a = Eigen::Map<const Matrix>(draws.data(), rows, cols);
  if (rows < cols) a.transposeInPlace();
  const Eigen::HouseholderQR<Matrix> qr(a);
  Matrix q = qr.householderQ() * Matrix::Identity(a.rows(), a.cols());
  for (Eigen::Index j = 0; j < q.cols(); ++j)  // R's diagonal positive: a unique Q
    if (qr.matrixQR()(j, j) < 0) q.col(j) *= -1.0;
  if (rows < cols) q.transposeInPlace();
  q *= gain;
  NoGradGuard no_grad;
  tensor.copy_(from_vector(std::vector<double>(q.data(), q.data() + q.size()), tensor.shape())
                   .to(tensor.dtype()));
}

}  // namespace tandem::nn::init
