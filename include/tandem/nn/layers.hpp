// The layers of torch.nn that image models need, with torch's default initializations.
// Options are structs with chainable setters: Conv2dOptions().stride(2).padding(1).bias(false).
#pragma once

#include <initializer_list>
#include <memory>
#include <string>

#include "tandem/nn/module.hpp"
#include "tandem/ops/nn_ops.hpp"

namespace tandem::nn {

/// y = x W^T + b. W (out, in) and b (out) ~ U(-1/sqrt(in), 1/sqrt(in)), as torch.
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  Tensor weight, bias;
};

struct Conv2dOptions {
  Int2 stride_ = 1, padding_ = 0, dilation_ = 1;
  int64_t groups_ = 1;
  bool bias_ = true;
  Conv2dOptions stride(Int2 v) const { auto o = *this; o.stride_ = v; return o; }
  Conv2dOptions padding(Int2 v) const { auto o = *this; o.padding_ = v; return o; }
  Conv2dOptions dilation(Int2 v) const { auto o = *this; o.dilation_ = v; return o; }
  Conv2dOptions groups(int64_t v) const { auto o = *this; o.groups_ = v; return o; }
  Conv2dOptions bias(bool v) const { auto o = *this; o.bias_ = v; return o; }
};

/// 2-D convolution; weight (out, in / groups, kH, kW) ~ kaiming_uniform(a = sqrt(5)), as torch.
class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, Int2 kernel_size, Conv2dOptions options = {});
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  Tensor weight, bias;
  const Conv2dOptions options;
};

struct BatchNormOptions {
  double eps_ = 1e-5, momentum_ = 0.1;
  bool affine_ = true, track_running_stats_ = true;
  BatchNormOptions eps(double v) const { auto o = *this; o.eps_ = v; return o; }
  BatchNormOptions momentum(double v) const { auto o = *this; o.momentum_ = v; return o; }
  BatchNormOptions affine(bool v) const { auto o = *this; o.affine_ = v; return o; }
  BatchNormOptions track_running_stats(bool v) const {
    auto o = *this;
    o.track_running_stats_ = v;
    return o;
  }
};

/// Batch normalization of (N, C, H, W); buffers running_mean, running_var, num_batches_tracked.
class BatchNorm2d : public Module {
 public:
  explicit BatchNorm2d(int64_t num_features, BatchNormOptions options = {});
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  Tensor weight, bias, running_mean, running_var, num_batches_tracked;
  const int64_t num_features;
  const BatchNormOptions options;
};

class ReLU : public Module {
 public:
  ReLU() : Module("ReLU") {}
  Tensor forward(const Tensor& input) override;
};

class GELU : public Module {
 public:
  /// approximate: "none" (erf) or "tanh".
  explicit GELU(std::string approximate = "none");
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  const std::string approximate;
};

/// The window of a pooling layer; stride 0 means stride = kernel_size, as torch's default.
class Pool2d : public Module {
 public:
  Pool2d(const char* type_name, Int2 kernel_size, Int2 stride, Int2 padding);
  std::string extra_repr() const override;
  const Int2 kernel_size, stride, padding;
};

class MaxPool2d : public Pool2d {
 public:
  explicit MaxPool2d(Int2 kernel_size, Int2 stride = 0, Int2 padding = 0)
      : Pool2d("MaxPool2d", kernel_size, stride, padding) {}
  Tensor forward(const Tensor& input) override;
};

/// count_include_pad, as torch's default.
class AvgPool2d : public Pool2d {
 public:
  explicit AvgPool2d(Int2 kernel_size, Int2 stride = 0, Int2 padding = 0)
      : Pool2d("AvgPool2d", kernel_size, stride, padding) {}
  Tensor forward(const Tensor& input) override;
};

class AdaptiveAvgPool2d : public Module {
 public:
  explicit AdaptiveAvgPool2d(Int2 output_size);
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  const Int2 output_size;
};

/// Zeroes elements with probability p in training mode (draws from the default generator).
class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  const double p;
};

class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1);
  Tensor forward(const Tensor& input) override;
  const int64_t start_dim, end_dim;
};

class Identity : public Module {
 public:
  Identity() : Module("Identity") {}
  Tensor forward(const Tensor& input) override { return input; }
};

/// Runs its children in order; they are named "0", "1", ... as in torch.
class Sequential : public Module {
 public:
  Sequential() : Module("Sequential") {}
  Sequential(std::initializer_list<std::shared_ptr<Module>> modules);
  Tensor forward(const Tensor& input) override;
  /// Appends a module named by its position.
  void push_back(std::shared_ptr<Module> module);
  size_t size() const { return named_children().size(); }
  const std::shared_ptr<Module>& operator[](size_t index) const;
};

}  // namespace tandem::nn
