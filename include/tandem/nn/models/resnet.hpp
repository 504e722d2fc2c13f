// Residual networks (He et al. 2015/2016):
// - ImageNet-style ResNet-18/34 (BasicBlock) and ResNet-50/101 (Bottleneck with the stride on the
//   3x3 convolution, "v1.5"), state_dict keys as torchvision's;
// - CIFAR-style ResNet-20/32/44/56: a 3x3 stem, three stages of 16, 32 and 64 channels with n =
//   (depth - 2) / 6 basic blocks each, and parameter-free "option A" shortcuts (subsample and
//   zero-pad channels), as in the paper's CIFAR-10 experiments.
// Both take `in_channels` and `num_classes`, so 1x28x28 Fashion-MNIST and 3x32x32 CIFAR both work.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tandem/core/arg.hpp"
#include "tandem/nn/layers.hpp"

namespace tandem::nn {

struct ResNetOptions {
  TANDEM_ARG(int64_t, in_channels) = 3;
  // 0: 1000 for ImageNet-style models, 10 for CIFAR-style ones.
  TANDEM_ARG(int64_t, num_classes) = 0;
  TANDEM_ARG(bool, zero_init_residual) = false;  // zero gamma of each block's last batch norm
};

/// Two 3x3 convolutions; `downsample` (may be null: identity) maps the input to the output shape.
class BasicBlock : public Module {
 public:
  static constexpr int64_t kExpansion = 1;
  TANDEM_MODULE_CLONE(BasicBlock, conv1->options.in_channels_, conv1->options.out_channels_,
                      conv1->options.stride_.h, downsample ? downsample->clone(device) : nullptr)
  BasicBlock(int64_t in_planes, int64_t planes, int64_t stride, std::shared_ptr<Module> downsample);
  Tensor forward(const Tensor& input) override;
  std::shared_ptr<Conv2d> conv1, conv2;
  std::shared_ptr<BatchNorm2d> bn1, bn2;
  std::shared_ptr<Module> downsample;
};

/// 1x1 reduce, 3x3 (carrying the stride), 1x1 expand by 4.
class Bottleneck : public Module {
 public:
  static constexpr int64_t kExpansion = 4;
  TANDEM_MODULE_CLONE(Bottleneck, conv1->options.in_channels_, conv1->options.out_channels_,
                      conv2->options.stride_.h, downsample ? downsample->clone(device) : nullptr)
  Bottleneck(int64_t in_planes, int64_t planes, int64_t stride, std::shared_ptr<Module> downsample);
  Tensor forward(const Tensor& input) override;
  std::shared_ptr<Conv2d> conv1, conv2, conv3;
  std::shared_ptr<BatchNorm2d> bn1, bn2, bn3;
  std::shared_ptr<Module> downsample;
};

/// The parameter-free shortcut of CIFAR ResNets: x[:, :, ::s, ::s] with `pad` zero channels added
/// on each side.
class PadShortcut : public Module {
 public:
  TANDEM_MODULE_CLONE(PadShortcut, stride, pad)
  PadShortcut(int64_t stride, int64_t pad);
  Tensor forward(const Tensor& input) override;
  const int64_t stride, pad;
};

/// ImageNet-style ResNet: 7x7 stem, max pool, four stages, global average pool, fc.
class ResNet : public Module {
 public:
  /// `layers`: blocks per stage; `bottleneck` picks the block type.
  ResNet(const std::vector<int64_t>& layers, bool bottleneck, ResNetOptions options = {});
  TANDEM_MODULE_CLONE(ResNet, layers_, bottleneck_, options_)
  Tensor forward(const Tensor& input) override;
  std::shared_ptr<Conv2d> conv1;
  std::shared_ptr<BatchNorm2d> bn1;
  std::shared_ptr<Sequential> layer1, layer2, layer3, layer4;
  std::shared_ptr<Linear> fc;

 private:
  const std::vector<int64_t> layers_;  // what it was made from, for clone()
  const bool bottleneck_;
  const ResNetOptions options_;
};

/// CIFAR-style ResNet of depth 6n + 2.
class CifarResNet : public Module {
 public:
  explicit CifarResNet(int64_t depth, ResNetOptions options = {});
  TANDEM_MODULE_CLONE(CifarResNet, depth_, options_)
  Tensor forward(const Tensor& input) override;
  std::shared_ptr<Conv2d> conv1;
  std::shared_ptr<BatchNorm2d> bn1;
  std::shared_ptr<Sequential> layer1, layer2, layer3;
  std::shared_ptr<Linear> fc;

 private:
  const int64_t depth_;  // what it was made from, for clone()
  const ResNetOptions options_;
};

std::shared_ptr<ResNet> resnet18(ResNetOptions options = {});
std::shared_ptr<ResNet> resnet34(ResNetOptions options = {});
std::shared_ptr<ResNet> resnet50(ResNetOptions options = {});
std::shared_ptr<ResNet> resnet101(ResNetOptions options = {});
std::shared_ptr<CifarResNet> resnet20(ResNetOptions options = {});
std::shared_ptr<CifarResNet> resnet32(ResNetOptions options = {});
std::shared_ptr<CifarResNet> resnet44(ResNetOptions options = {});
std::shared_ptr<CifarResNet> resnet56(ResNetOptions options = {});

/// The names resnet_by_name accepts: resnet18 ... resnet101, resnet20 ... resnet56.
const std::vector<std::string>& resnet_names();
/// One of the models above by name; an unknown name throws a ValueError listing the valid ones.
std::shared_ptr<Module> resnet_by_name(const std::string& name, ResNetOptions options = {});

}  // namespace tandem::nn
