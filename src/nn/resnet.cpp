#include "tandem/nn/models/resnet.hpp"

#include "tandem/core/error.hpp"
#include "tandem/nn/init.hpp"
#include "tandem/ops/elementwise.hpp"
#include "tandem/ops/shape_ops.hpp"

namespace tandem::nn {

namespace {

std::shared_ptr<Conv2d> conv3x3(int64_t in, int64_t out, int64_t stride = 1) {
  return std::make_shared<Conv2d>(Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(false));
}
std::shared_ptr<Conv2d> conv1x1(int64_t in, int64_t out, int64_t stride = 1) {
  return std::make_shared<Conv2d>(Conv2dOptions(in, out, 1).stride(stride).bias(false));
}

// torchvision's ResNet init: kaiming normal (fan_out, relu) on every convolution, BN gamma 1 and
// beta 0 (their defaults), and optionally gamma 0 on the last BN of each residual branch.
void init_resnet(Module& model, bool zero_init_residual) {
  model.apply([&](Module& m) {
    if (auto* conv = dynamic_cast<Conv2d*>(&m))
      init::kaiming_normal_(conv->weight, 0.0, init::FanMode::fan_out, "relu");
    if (!zero_init_residual) return;
    if (auto* block = dynamic_cast<BasicBlock*>(&m)) init::zeros_(block->bn2->weight);
    if (auto* block = dynamic_cast<Bottleneck*>(&m)) init::zeros_(block->bn3->weight);
  });
}

int64_t classes_or(const ResNetOptions& o, int64_t fallback) {
  TANDEM_CHECK(o.num_classes_ >= 0 && o.in_channels_ > 0,
               "ResNet: need in_channels > 0 and num_classes >= 0, got in_channels ",
               o.in_channels_, ", num_classes ", o.num_classes_);
  return o.num_classes_ > 0 ? o.num_classes_ : fallback;
}

}  // namespace

BasicBlock::BasicBlock(int64_t in_planes, int64_t planes, int64_t stride,
                       std::shared_ptr<Module> down)
    : Module("BasicBlock") {
  conv1 = register_module("conv1", conv3x3(in_planes, planes, stride));
  bn1 = register_module("bn1", std::make_shared<BatchNorm2d>(planes));
  conv2 = register_module("conv2", conv3x3(planes, planes));
  bn2 = register_module("bn2", std::make_shared<BatchNorm2d>(planes));
  if (down) downsample = register_module("downsample", std::move(down));
}

Tensor BasicBlock::forward(const Tensor& x) {
  // relu(bn(conv(x))) and relu(bn(conv(h)) + shortcut) each as one op (batch_norm_relu).
  Tensor out = bn1->forward_relu(conv1->forward(x));
  return bn2->forward_relu(conv2->forward(out), downsample ? downsample->forward(x) : x);
}

Bottleneck::Bottleneck(int64_t in_planes, int64_t planes, int64_t stride,
                       std::shared_ptr<Module> down)
    : Module("Bottleneck") {
  conv1 = register_module("conv1", conv1x1(in_planes, planes));
  bn1 = register_module("bn1", std::make_shared<BatchNorm2d>(planes));
  conv2 = register_module("conv2", conv3x3(planes, planes, stride));
  bn2 = register_module("bn2", std::make_shared<BatchNorm2d>(planes));
  conv3 = register_module("conv3", conv1x1(planes, planes * kExpansion));
  bn3 = register_module("bn3", std::make_shared<BatchNorm2d>(planes * kExpansion));
  if (down) downsample = register_module("downsample", std::move(down));
}

Tensor Bottleneck::forward(const Tensor& x) {
  Tensor out = bn1->forward_relu(conv1->forward(x));
  out = bn2->forward_relu(conv2->forward(out));
  return bn3->forward_relu(conv3->forward(out), downsample ? downsample->forward(x) : x);
}

PadShortcut::PadShortcut(int64_t s, int64_t p) : Module("PadShortcut"), stride(s), pad(p) {}

Tensor PadShortcut::forward(const Tensor& x) {
  Tensor sub = x;
  if (stride != 1) sub = x.slice(2, 0, x.size(2), stride).slice(3, 0, x.size(3), stride);
  return tandem::pad(sub, {0, 0, 0, 0, pad, pad});
}

ResNet::ResNet(const std::vector<int64_t>& layers, bool bottleneck, ResNetOptions o)
    : Module(bottleneck ? "ResNet(Bottleneck)" : "ResNet(BasicBlock)"),
      layers_(layers),
      bottleneck_(bottleneck),
      options_(o) {
  TANDEM_CHECK(layers.size() == 4, "ResNet: expected blocks for 4 stages, got ", layers.size());
  const int64_t expansion = bottleneck ? Bottleneck::kExpansion : BasicBlock::kExpansion;
  const int64_t classes = classes_or(o, 1000);
  conv1 = register_module(
      "conv1", std::make_shared<Conv2d>(
                   Conv2dOptions(o.in_channels_, 64, 7).stride(2).padding(3).bias(false)));
  bn1 = register_module("bn1", std::make_shared<BatchNorm2d>(64));
  int64_t in_planes = 64;
  auto make_stage = [&](int64_t planes, int64_t blocks, int64_t stride) {
    auto stage = std::make_shared<Sequential>();
    for (int64_t b = 0; b < blocks; ++b) {
      int64_t s = b == 0 ? stride : 1;
      std::shared_ptr<Module> down;
      if (s != 1 || in_planes != planes * expansion)
        down = std::make_shared<Sequential>(conv1x1(in_planes, planes * expansion, s),
                                            std::make_shared<BatchNorm2d>(planes * expansion));
      if (bottleneck)
        stage->push_back(std::make_shared<Bottleneck>(in_planes, planes, s, down));
      else
        stage->push_back(std::make_shared<BasicBlock>(in_planes, planes, s, down));
      in_planes = planes * expansion;
    }
    return stage;
  };
  layer1 = register_module("layer1", make_stage(64, layers[0], 1));
  layer2 = register_module("layer2", make_stage(128, layers[1], 2));
  layer3 = register_module("layer3", make_stage(256, layers[2], 2));
  layer4 = register_module("layer4", make_stage(512, layers[3], 2));
  fc = register_module("fc", std::make_shared<Linear>(512 * expansion, classes));
  init_resnet(*this, o.zero_init_residual_);
}

Tensor ResNet::forward(const Tensor& x) {
  Tensor h = max_pool2d(bn1->forward_relu(conv1->forward(x)), 3, 2, 1);
  h = layer4->forward(layer3->forward(layer2->forward(layer1->forward(h))));
  return fc->forward(flatten(adaptive_avg_pool2d(h, 1), 1));
}

CifarResNet::CifarResNet(int64_t depth, ResNetOptions o)
    : Module("CifarResNet"), depth_(depth), options_(o) {
  TANDEM_CHECK(depth >= 8 && (depth - 2) % 6 == 0, "CifarResNet: depth must be 6n + 2 (20, 32, 44, "
               "56, ...), got ", depth);
  const int64_t n = (depth - 2) / 6, classes = classes_or(o, 10);
  conv1 = register_module("conv1", conv3x3(o.in_channels_, 16));
  bn1 = register_module("bn1", std::make_shared<BatchNorm2d>(16));
  int64_t in_planes = 16;
  auto make_stage = [&](int64_t planes, int64_t stride) {
    auto stage = std::make_shared<Sequential>();
    for (int64_t b = 0; b < n; ++b) {
      int64_t s = b == 0 ? stride : 1;
      std::shared_ptr<Module> down;
      if (s != 1 || in_planes != planes)
        down = std::make_shared<PadShortcut>(s, (planes - in_planes) / 2);
      stage->push_back(std::make_shared<BasicBlock>(in_planes, planes, s, down));
      in_planes = planes;
    }
    return stage;
  };
  layer1 = register_module("layer1", make_stage(16, 1));
  layer2 = register_module("layer2", make_stage(32, 2));
  layer3 = register_module("layer3", make_stage(64, 2));
  fc = register_module("fc", std::make_shared<Linear>(64, classes));
  init_resnet(*this, o.zero_init_residual_);
}

Tensor CifarResNet::forward(const Tensor& x) {
  Tensor h = bn1->forward_relu(conv1->forward(x));
  h = layer3->forward(layer2->forward(layer1->forward(h)));
  return fc->forward(flatten(adaptive_avg_pool2d(h, 1), 1));
}

std::shared_ptr<ResNet> resnet18(ResNetOptions o) {
  return std::make_shared<ResNet>(std::vector<int64_t>{2, 2, 2, 2}, false, o);
}
std::shared_ptr<ResNet> resnet34(ResNetOptions o) {
  return std::make_shared<ResNet>(std::vector<int64_t>{3, 4, 6, 3}, false, o);
}
std::shared_ptr<ResNet> resnet50(ResNetOptions o) {
  return std::make_shared<ResNet>(std::vector<int64_t>{3, 4, 6, 3}, true, o);
}
std::shared_ptr<ResNet> resnet101(ResNetOptions o) {
  return std::make_shared<ResNet>(std::vector<int64_t>{3, 4, 23, 3}, true, o);
}
std::shared_ptr<CifarResNet> resnet20(ResNetOptions o) { return std::make_shared<CifarResNet>(20, o); }
std::shared_ptr<CifarResNet> resnet32(ResNetOptions o) { return std::make_shared<CifarResNet>(32, o); }
std::shared_ptr<CifarResNet> resnet44(ResNetOptions o) { return std::make_shared<CifarResNet>(44, o); }
std::shared_ptr<CifarResNet> resnet56(ResNetOptions o) { return std::make_shared<CifarResNet>(56, o); }

const std::vector<std::string>& resnet_names() {
  static const std::vector<std::string> names{"resnet18", "resnet34", "resnet50", "resnet101",
                                              "resnet20", "resnet32", "resnet44", "resnet56"};
  return names;
}

std::shared_ptr<Module> resnet_by_name(const std::string& name, ResNetOptions o) {
  if (name == "resnet18") return resnet18(o);
  if (name == "resnet34") return resnet34(o);
  if (name == "resnet50") return resnet50(o);
  if (name == "resnet101") return resnet101(o);
  if (name == "resnet20") return resnet20(o);
  if (name == "resnet32") return resnet32(o);
  if (name == "resnet44") return resnet44(o);
  if (name == "resnet56") return resnet56(o);
  std::string valid;
  for (const auto& n : resnet_names()) valid += (valid.empty() ? "" : ", ") + n;
  TANDEM_THROW(ValueError, "unknown model '", name, "' (valid: ", valid, ")");
}

}  // namespace tandem::nn
