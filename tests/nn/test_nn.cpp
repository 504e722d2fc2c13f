// Modules and layers: registration and traversal, state dicts, modes, placement, default
// initializations (statistics against their closed forms) and the ResNets against PyTorch.
#include <cmath>
#include <sstream>

#include "../util.hpp"

using namespace tandem;
using namespace tandem::nn;
using tandem::testing::error_of;
using tandem::testing::require_close;

namespace {

int64_t count_params(const Module& m) {
  int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}

// A module with a parameter, a buffer and a child, registered by hand.
class Net : public Module {
 public:
  Net() : Module("Net") {
    scale = register_parameter("scale", ones({3}));
    steps = register_buffer("steps", zeros({}, DType::i64));
    fc = register_module("fc", std::make_shared<Linear>(3, 2));
  }
  Tensor forward(const Tensor& x) override { return fc->forward(mul(x, scale)); }
  Tensor scale, steps;
  std::shared_ptr<Linear> fc;
};

}  // namespace

TEST_CASE("modules register, traverse and name their state like torch", "[nn]") {
  auto net = std::make_shared<Net>();
  auto named = net->named_parameters();
  REQUIRE(named.size() == 3);
  CHECK(named[0].first == "scale");
  CHECK(named[1].first == "fc.weight");
  CHECK(named[2].first == "fc.bias");
  CHECK(net->named_buffers()[0].first == "steps");
  CHECK(net->parameters(false).size() == 1);
  CHECK(net->children().size() == 1);
  CHECK(net->modules().size() == 2);
  for (auto& p : net->parameters()) CHECK(p.requires_grad());
  auto sd = net->state_dict();
  CHECK(sd.size() == 4);
  CHECK(sd.count("fc.weight") == 1);

  CHECK_THAT(error_of([&] { net->register_parameter("scale", ones({1})); }),
             Catch::Contains("name 'scale' is already registered"));
  CHECK_THAT(error_of([&] { net->register_buffer("a.b", ones({1})); }),
             Catch::Contains("invalid name 'a.b'"));
  std::ostringstream os;
  os << *net;
  CHECK(os.str() == "Net(\n  (fc): Linear(in_features=3, out_features=2, bias=true)\n)");
}

TEST_CASE("load_state_dict copies values and lists every mismatch", "[nn][errors]") {
  auto a = std::make_shared<Net>(), b = std::make_shared<Net>();
  b->load_state_dict(a->state_dict());
  CHECK(equal(a->fc->weight, b->fc->weight));
  CHECK_FALSE(a->fc->weight.is_same(b->fc->weight));  // copied, not aliased

  StateDict bad = a->state_dict();
  bad.erase("fc.bias");
  bad.erase("steps");
  bad["fc.extra"] = zeros({1});
  bad["fc.weight"] = zeros({4, 3});
  Tensor before = b->fc->weight.clone();
  std::string msg = error_of([&] { b->load_state_dict(bad); });
  CHECK_THAT(msg, Catch::Contains("missing keys: steps, fc.bias"));
  CHECK_THAT(msg, Catch::Contains("unexpected keys: fc.extra"));
  CHECK_THAT(msg, Catch::Contains("wrong shapes: fc.weight: expected (2, 3), got (4, 3)"));
  CHECK(equal(b->fc->weight, before));  // nothing copied

  // Not strict: key mismatches are allowed, the matching keys load.
  StateDict partial{{"scale", full({3}, 2.0)}, {"other", zeros({1})}};
  b->load_state_dict(partial, false);
  CHECK(b->scale.to_vector<float>() == std::vector<float>{2, 2, 2});
}

TEST_CASE("train/eval, zero_grad and to(dtype) reach every descendant", "[nn]") {
  auto net = std::make_shared<Net>();
  net->eval();
  CHECK_FALSE(net->fc->is_training());
  net->train();
  CHECK(net->fc->is_training());

  Tensor w = net->fc->weight;  // a handle taken before the conversion
  sum(net->forward(ones({2, 3}))).backward();
  CHECK(w.grad().defined());
  net->zero_grad(false);
  CHECK(w.grad().defined());
  CHECK(sum(abs(w.grad())).item<double>() == 0.0);
  net->zero_grad();
  CHECK_FALSE(w.grad().defined());

  net->to(DType::f64);
  CHECK(w.dtype() == DType::f64);  // the handle sees the converted data
  CHECK(w.requires_grad());
  CHECK(net->steps.dtype() == DType::i64);  // integer buffers keep their dtype
  CHECK(net->forward(ones({1, 3}, DType::f64)).dtype() == DType::f64);
}

TEST_CASE("layers compute what their functional ops compute", "[nn]") {
  Tensor x = randn({2, 3, 8, 8});
  Conv2d conv(3, 4, 3, Conv2dOptions().stride(2).padding(1));
  require_close(conv.forward(x), conv2d(x, conv.weight, conv.bias, 2, 1), 0, 0);
  Sequential seq{std::make_shared<Conv2d>(3, 4, 3), std::make_shared<BatchNorm2d>(4),
                 std::make_shared<ReLU>(), std::make_shared<MaxPool2d>(2),
                 std::make_shared<Dropout>(0.5), std::make_shared<AdaptiveAvgPool2d>(1),
                 std::make_shared<Flatten>(), std::make_shared<Linear>(4, 2),
                 std::make_shared<GELU>(), std::make_shared<Identity>()};
  seq.eval();  // dropout off, running statistics
  auto& c = static_cast<Conv2d&>(*seq[0]);
  auto& fc = static_cast<Linear&>(*seq[7]);
  Tensor h = relu(batch_norm(conv2d(x, c.weight, c.bias), zeros({4}), ones({4}),
                             ones({4}), zeros({4}), false));
  h = flatten(adaptive_avg_pool2d(max_pool2d(h, 2), 1), 1);
  require_close(seq.forward(x), gelu(linear(h, fc.weight, fc.bias)), 1e-6, 1e-6);
  CHECK(seq.size() == 10);
  CHECK_THAT(error_of([&] { seq[10]; }), Catch::Contains("index 10 out of range for 10"));

  AvgPool2d avg(2);
  require_close(avg.forward(x), avg_pool2d(x, 2), 0, 0);

  BatchNorm2d bn(3);
  bn.forward(x);
  bn.forward(x);
  CHECK(bn.num_batches_tracked.item<int64_t>() == 2);
  bn.eval();
  bn.forward(x);
  CHECK(bn.num_batches_tracked.item<int64_t>() == 2);
  bn.train();
  // Counted where the running statistics are updated (an i64 scalar); one of another dtype, set
  // by hand, by an op of its own.
  bn.num_batches_tracked = zeros({}, DType::i32);
  bn.forward(x);
  CHECK(bn.num_batches_tracked.dtype() == DType::i32);
  CHECK(bn.num_batches_tracked.item<int64_t>() == 1);
  CHECK_THAT(
      error_of([&] {
        bn.forward(randn({2, 4, 3, 3}));
      }),
      Catch::Contains("BatchNorm2d(3): expected input (N, C, H, W) with C = 3, got (2, 4, 3, 3)"));
}

TEST_CASE("orthogonal_: orthonormal rows or columns, times the gain, any shape", "[nn][init]") {
  auto gram_is = [](const Tensor& m, double scale) {
    // m m^T for the wide ones, m^T m for the tall ones: scale^2 I
    const Tensor g = m.size(0) <= m.size(1) ? matmul(m, m.t()) : matmul(m.t(), m);
    require_close(g.to(DType::f64), mul(eye(g.size(0), TensorOptions(DType::f64)), scale * scale),
                  1e-5, 1e-5, "gram matrix");
  };
  Tensor tall = empty({6, 4}), wide = empty({3, 8}), conv = empty({4, 2, 3, 3});
  init::orthogonal_(tall);
  init::orthogonal_(wide, 2.0);
  init::orthogonal_(conv);
  gram_is(tall, 1.0);
  gram_is(wide, 2.0);
  gram_is(conv.reshape({4, 18}), 1.0);
  // the same generator state, the same matrix; a square one is a rotation or a reflection
  Generator a(5), b(5);
  Tensor sq1 = empty({5, 5}, TensorOptions(DType::f64)),
         sq2 = empty({5, 5}, TensorOptions(DType::f64));
  init::orthogonal_(sq1, 1.0, &a);
  init::orthogonal_(sq2, 1.0, &b);
  require_close(sq1, sq2, 0, 0, "same draws");
  gram_is(sq1, 1.0);
  CHECK_THROWS_WITH(init::orthogonal_(empty({4})),
                    Catch::Contains("only tensors with 2 or more dimensions"));
}

TEST_CASE("initializations have their closed-form spread", "[nn][init]") {
  // Large tensors: the sample std / bound is within 2% of the formula.
  auto sample_std = [](const Tensor& t) { return std::sqrt(var(t.to(DType::f64)).item<double>()); };
  Tensor w = empty({256, 128, 3, 3});
  const double fan_in = 128 * 9, fan_out = 256 * 9;
  init::kaiming_normal_(w, 0.0, init::FanMode::fan_out, "relu");
  CHECK(sample_std(w) == Approx(std::sqrt(2.0 / fan_out)).epsilon(0.02));
  init::kaiming_uniform_(w, std::sqrt(5.0));
  CHECK(max(abs(w)).item<double>() <= 1.0 / std::sqrt(fan_in) + 1e-7);
  CHECK(sample_std(w) == Approx(1.0 / std::sqrt(3 * fan_in)).epsilon(0.02));
  init::xavier_uniform_(w);
  CHECK(sample_std(w) == Approx(std::sqrt(2.0 / (fan_in + fan_out))).epsilon(0.02));
  init::xavier_normal_(w, 2.0);
  CHECK(sample_std(w) == Approx(2.0 * std::sqrt(2.0 / (fan_in + fan_out))).epsilon(0.02));
  init::ones_(w);
  CHECK(sum(w).item<double>() == w.numel());
  CHECK(init::calculate_gain("tanh") == Approx(5.0 / 3));
  for (const char* linear : {"conv1d", "conv3d", "conv_transpose2d", "identity"})
    CHECK(init::calculate_gain(linear) == 1.0);  // torch's linear functions
  CHECK_THAT(error_of([&] { init::calculate_gain("swish"); }),
             Catch::Contains("unknown nonlinearity 'swish'"));
  Tensor v = empty({3});
  CHECK_THAT(error_of([&] { init::kaiming_normal_(v); }), Catch::Contains("at least 2 dims"));
  // torch's Linear default: U(-1/sqrt(in), 1/sqrt(in)) for weight and bias.
  Linear lin(400, 300);
  CHECK(max(abs(lin.weight)).item<double>() <= 0.05 + 1e-7);
  CHECK(max(abs(lin.bias)).item<double>() <= 0.05 + 1e-7);
  CHECK(sample_std(lin.weight) == Approx(0.05 / std::sqrt(3.0)).epsilon(0.03));
}

TEST_CASE("ResNets have torchvision's parameter counts and key names", "[nn][resnet]") {
  // torchvision.models.resnetXX(): 11,689,512 / 21,797,672 / 25,557,032 / 44,549,160.
  CHECK(count_params(*resnet18()) == 11689512);
  CHECK(count_params(*resnet34()) == 21797672);
  CHECK(count_params(*resnet50()) == 25557032);
  CHECK(count_params(*resnet101()) == 44549160);
  // He et al. 2016 Table 6: 0.27M, 0.46M, 0.66M, 0.85M (option A shortcuts, 3 channels).
  CHECK(count_params(*resnet20()) == 269722);
  CHECK(count_params(*resnet32()) == 464154);
  CHECK(count_params(*resnet44()) == 658586);
  CHECK(count_params(*resnet56()) == 853018);
  auto sd = resnet50()->state_dict();
  for (const char* key : {"conv1.weight", "bn1.num_batches_tracked", "layer1.0.downsample.0.weight",
                          "layer1.0.downsample.1.running_var", "layer4.2.conv3.weight", "fc.bias"})
    CHECK(sd.count(key) == 1);

  // Small inputs and other channel counts work; zero_init_residual zeroes the last BN gammas.
  auto r18 = resnet18(ResNetOptions().in_channels(1).num_classes(7).zero_init_residual(true));
  CHECK(r18->forward(randn({2, 1, 28, 28})).shape() == Shape{2, 7});
  CHECK(sum(abs(r18->layer2->named_children().at("1")->state_dict().at("bn2.weight")))
            .item<double>() == 0.0);
  auto r56 = resnet56(ResNetOptions().in_channels(1));
  CHECK(r56->forward(randn({2, 1, 28, 28})).shape() == Shape{2, 10});
  CHECK(resnet_by_name("resnet32")->state_dict().size() == resnet32()->state_dict().size());
  CHECK_THAT(error_of([] { resnet_by_name("resnet21"); }),
             Catch::Contains("unknown model 'resnet21' (valid: resnet18, resnet34"));
  CHECK_THAT(error_of([] { CifarResNet(21); }), Catch::Contains("depth must be 6n + 2"));
}

TEST_CASE("a CIFAR ResNet matches PyTorch: logits, gradients, running statistics", "[nn][golden]") {
  // tests/golden/make_model_golden.py: the same architecture in PyTorch 1.13, its weights and
  // results, written by an independent safetensors writer.
  io::Metadata meta;
  StateDict g = io::load_safetensors(std::string(TANDEM_GOLDEN_DIR) + "/resnet8.safetensors", &meta);
  CHECK(meta["source"] == "make_model_golden.py");
  auto model = std::make_shared<CifarResNet>(8, ResNetOptions().in_channels(1));
  StateDict weights;
  for (const auto& [k, v] : g)
    if (k.rfind("model.", 0) == 0) weights[k.substr(6)] = v;
  model->load_state_dict(weights);

  Tensor logits = model->forward(g.at("input"));
  require_close(logits, g.at("logits_train"), 1e-4, 1e-5, "train-mode logits");
  cross_entropy(logits, g.at("labels")).backward();
  for (const auto& [name, p] : model->named_parameters())
    require_close(p.grad(), g.at("grad." + name), 1e-3, 1e-5, "grad of " + name);
  for (const auto& [name, b] : model->named_buffers())
    require_close(b, g.at("after." + name), 1e-5, 1e-6, "buffer " + name);
  model->eval();
  NoGradGuard no_grad;
  require_close(model->forward(g.at("input")), g.at("logits_eval"), 1e-4, 1e-5, "eval logits");
}

TEST_CASE("a Transformer and a GELU encoder layer match PyTorch: outputs and every gradient",
          "[nn][golden]") {
  // tests/golden/make_transformer_golden.py: nn.Transformer (2 + 2 layers, masks of each kind)
  // and nn.TransformerEncoderLayer(activation="gelu") in PyTorch 1.13, training mode, no dropout.
  io::Metadata meta;
  StateDict g =
      io::load_safetensors(std::string(TANDEM_GOLDEN_DIR) + "/transformer.safetensors", &meta);
  CHECK(meta["source"] == "make_transformer_golden.py");
  auto with_prefix = [&](const std::string& prefix) {
    StateDict weights;
    for (const auto& [k, v] : g)
      if (k.rfind(prefix, 0) == 0) weights[k.substr(prefix.size())] = v;
    return weights;
  };
  auto model = std::make_shared<nn::Transformer>(
      nn::TransformerOptions(8, 2, 2, 2).dim_feedforward(16).dropout(0.0));
  model->load_state_dict(with_prefix("model."));  // strict: torch's names, all of them
  const Tensor src_padding = g.at("src_padding").to(DType::boolean);
  Tensor y = model->forward(g.at("src"), g.at("tgt"), {}, g.at("tgt_mask"), {}, src_padding,
                            g.at("tgt_padding").to(DType::boolean), src_padding);
  require_close(y, g.at("output"), 1e-4, 1e-5, "transformer output");
  CHECK(
      eq(nn::Transformer::generate_square_subsequent_mask(4), g.at("tgt_mask")).all().item<bool>());
  y.backward(g.at("grad_output"));
  for (const auto& [name, p] : model->named_parameters())
    require_close(p.grad(), g.at("grad.model." + name), 1e-3, 1e-5, "grad of " + name);

  auto layer = std::make_shared<nn::TransformerEncoderLayer>(
      nn::TransformerEncoderLayerOptions(8, 2).dim_feedforward(12).dropout(0.0).activation(kGELU));
  layer->load_state_dict(with_prefix("gelu_layer."));
  Tensor z = layer->forward(g.at("src"), g.at("gelu_src_mask"));
  require_close(z, g.at("gelu_output"), 1e-4, 1e-5, "gelu layer output");
  z.backward(g.at("gelu_grad_output"));
  for (const auto& [name, p] : layer->named_parameters())
    require_close(p.grad(), g.at("grad.gelu_layer." + name), 1e-3, 1e-5, "grad of " + name);
}

TEST_CASE("transformer stacks: torch's names, layers that start equal and stay apart, errors",
          "[nn]") {
  auto layer = std::make_shared<nn::TransformerEncoderLayer>(
      nn::TransformerEncoderLayerOptions(16, 4).dim_feedforward(32));
  auto encoder = std::make_shared<nn::TransformerEncoder>(nn::TransformerEncoderOptions(layer, 3));
  const StateDict sd = encoder->state_dict();
  CHECK(sd.size() == 3 * 12);
  CHECK(sd.begin()->first == "layers.0.self_attn.in_proj_weight");
  // the copies start from the layer's weights but share no tensor with it or each other
  require_close(sd.at("layers.2.linear1.weight"), layer->linear1->weight, 0, 0, "clone");
  {
    NoGradGuard no_grad;
    layer->linear1->weight.add_(1.0);
  }
  CHECK(sub(layer->linear1->weight, sd.at("layers.0.linear1.weight")).min().item<double>() ==
        Approx(1.0));
  require_close(sd.at("layers.0.linear1.weight"), sd.at("layers.1.linear1.weight"), 0, 0,
                "copies apart from the layer");
  {
    NoGradGuard no_grad;
    Tensor first = sd.at("layers.0.linear1.weight");
    first.mul_(2.0);
  }
  CHECK_FALSE(
      eq(sd.at("layers.0.linear1.weight"), sd.at("layers.1.linear1.weight")).all().item<bool>());
  // a function as the activation; the layer and the stack run forward, eval and train
  auto custom = std::make_shared<nn::TransformerEncoderLayer>(
      nn::TransformerEncoderLayerOptions(16, 4).dim_feedforward(32).dropout(0.0).activation(
          [](const Tensor& x) { return tanh(x); }));
  Tensor x = randn({6, 2, 16});
  CHECK(custom->forward(x).shape() == Shape{6, 2, 16});
  encoder->eval();
  Tensor e1 = encoder->forward(x), e2 = encoder->forward(x);
  require_close(e1, e2, 0, 0, "eval: no dropout");
  // Sequential takes a layer as any single-input module
  nn::Sequential seq(custom, std::make_shared<nn::TransformerEncoderLayer>(16, 4));
  CHECK(seq.forward(x).shape() == Shape{6, 2, 16});
  // a decoder stack on its own
  auto decoder = std::make_shared<nn::TransformerDecoder>(
      nn::TransformerDecoderOptions(nn::TransformerDecoderLayerOptions(16, 4), 2));
  CHECK(decoder->forward(randn({3, 2, 16}), x).shape() == Shape{3, 2, 16});
  CHECK(decoder->named_parameters().size() == 2 * 18);

  // libtorch's spelling of the final norm: an AnyModule
  auto normed = std::make_shared<nn::TransformerEncoder>(
      nn::TransformerEncoderOptions(nn::TransformerEncoderLayerOptions(16, 4).dropout(0.0), 1)
          .norm(nn::AnyModule(std::make_shared<nn::LayerNorm>(nn::LayerNormOptions({16})))));
  CHECK(normed->norm->type_name() == "LayerNorm");
  CHECK(normed->state_dict().contains("norm.weight"));
  Tensor normed_out = normed->forward(x);
  require_close(mean(normed_out, {2}), zeros({6, 2}), 0, 1e-5, "normed rows");

  CHECK_THROWS_WITH(nn::TransformerEncoderLayer(10, 3),
                    Catch::Contains("d_model (10) must split into nhead (3)"));
  CHECK_THROWS_WITH(nn::TransformerEncoderLayerOptions(8, 2).activation("tanh"),
                    Catch::Contains("\"tanh\" is not one"));
  nn::Transformer small(nn::TransformerOptions(8, 2, 1, 1).dim_feedforward(8));
  CHECK_THROWS_WITH(small.forward(randn({5, 3, 8}), randn({4, 2, 8})),
                    Catch::Contains("same batch size, got 3 and 2"));
  CHECK_THROWS_WITH(small.forward(randn({5, 3, 6}), randn({4, 3, 6})),
                    Catch::Contains("must be d_model (8), got 6 and 6"));
}

TEST_CASE("libtorch's option forms build the layers the positional forms build", "[nn]") {
  // Output sizes against the closed form floor((H + 2 pad - k) / stride) + 1.
  auto out_size = [](int64_t h, int64_t k, int64_t stride, int64_t pad) {
    return (h + 2 * pad - k) / stride + 1;
  };
  Tensor x = randn({2, 3, 17, 17});
  nn::Conv2d strided(nn::Conv2dOptions(3, 8, 3).stride(2));
  CHECK(strided.forward(x).shape() == Shape{2, 8, out_size(17, 3, 2, 0), out_size(17, 3, 2, 0)});
  CHECK(strided.bias.defined());
  auto same =
      std::make_shared<nn::Conv2d>(nn::Conv2dOptions(3, 64, 3).stride(1).padding(1).bias(false));
  CHECK(same->forward(x).shape() == Shape{2, 64, 17, 17});
  CHECK(same->weight.shape() == Shape{64, 3, 3, 3});
  CHECK_FALSE(same->bias.defined());
  CHECK(same->parameters().size() == 1);
  nn::Conv2d positional(3, 8, 5, nn::Conv2dOptions().stride(2).padding(2));
  CHECK(positional.forward(x).shape() == Shape{2, 8, out_size(17, 5, 2, 2), out_size(17, 5, 2, 2)});
  CHECK(positional.options.kernel_size().h == 5);

  nn::Linear lin(nn::LinearOptions(4, 2).bias(false));
  CHECK(lin.weight.shape() == Shape{2, 4});
  CHECK_FALSE(lin.bias.defined());
  CHECK(lin.parameters().size() == 1);

  // One training step from zero running statistics: running = momentum * batch statistic.
  nn::BatchNorm2d bn(nn::BatchNormOptions(4).momentum(0.5));
  CHECK(bn.num_features == 4);
  bn.forward(full({2, 4, 3, 3}, 2.0));
  CHECK(bn.running_mean.to_vector<float>() == std::vector<float>(4, 1.0f));
  nn::BatchNorm2d kept(6, nn::BatchNormOptions().eps(1e-3));
  CHECK(kept.num_features == 6);
  CHECK(kept.options.eps() == 1e-3);
  CHECK(kept.running_mean.shape() == Shape{6});

  // Sequential of shared_ptrs, directly and through make_shared; forward chains them.
  auto conv = std::make_shared<nn::Conv2d>(nn::Conv2dOptions(3, 4, 3).padding(1));
  auto norm = std::make_shared<nn::BatchNorm2d>(4);
  auto act = std::make_shared<nn::ReLU>();
  nn::Sequential seq(conv, norm, act);
  REQUIRE(seq.size() == 3);
  CHECK(seq[0] == conv);
  CHECK(seq[2] == act);
  require_close(seq.forward(x), act->forward(norm->forward(conv->forward(x))), 0, 0);
  auto pair = std::make_shared<nn::Sequential>(conv, norm);
  CHECK(pair->size() == 2);
  CHECK(pair->named_children()[1].first == "1");

  // Setters change a named options object in place and read back through getters.
  nn::Conv2dOptions o(3, 8, 3);
  o.stride(2).groups(1);
  CHECK(o.stride().h == 2);
  CHECK(o.in_channels() == 3);
  // TensorOptions stays a value: its setters return a changed copy.
  TensorOptions base(DType::f64);
  TensorOptions grad = base.requires_grad(true);
  CHECK_FALSE(base.requires_grad());
  CHECK(grad.requires_grad());
  Tensor z = zeros({2}, TensorOptions(DType::f64).device(kCPU).requires_grad(true));
  CHECK(z.dtype() == DType::f64);
  CHECK(z.requires_grad());
}

TEST_CASE("state dicts and traversals list entries in torch's order", "[nn][resnet]") {
  auto keys = [](const StateDict& sd) { return sd.keys(); };
  auto slice = [](const std::vector<std::string>& v, size_t begin, size_t end) {
    return std::vector<std::string>(v.begin() + begin, v.begin() + end);
  };
  // torchvision.models.resnet18().state_dict() (torch 1.13, torchvision 0.14): per module its
  // parameters, then its buffers, then its children, in registration order.
  auto r18 = keys(resnet18()->state_dict());
  REQUIRE(r18.size() == 122);
  CHECK(slice(r18, 0, 12) ==
        std::vector<std::string>{"conv1.weight", "bn1.weight", "bn1.bias", "bn1.running_mean",
                                 "bn1.running_var", "bn1.num_batches_tracked",
                                 "layer1.0.conv1.weight", "layer1.0.bn1.weight",
                                 "layer1.0.bn1.bias", "layer1.0.bn1.running_mean",
                                 "layer1.0.bn1.running_var", "layer1.0.bn1.num_batches_tracked"});
  const std::vector<std::string> torch_30_to_50 = {"layer2.0.conv1.weight",
                                                   "layer2.0.bn1.weight",
                                                   "layer2.0.bn1.bias",
                                                   "layer2.0.bn1.running_mean",
                                                   "layer2.0.bn1.running_var",
                                                   "layer2.0.bn1.num_batches_tracked",
                                                   "layer2.0.conv2.weight",
                                                   "layer2.0.bn2.weight",
                                                   "layer2.0.bn2.bias",
                                                   "layer2.0.bn2.running_mean",
                                                   "layer2.0.bn2.running_var",
                                                   "layer2.0.bn2.num_batches_tracked",
                                                   "layer2.0.downsample.0.weight",
                                                   "layer2.0.downsample.1.weight",
                                                   "layer2.0.downsample.1.bias",
                                                   "layer2.0.downsample.1.running_mean",
                                                   "layer2.0.downsample.1.running_var",
                                                   "layer2.0.downsample.1.num_batches_tracked",
                                                   "layer2.1.conv1.weight",
                                                   "layer2.1.bn1.weight"};
  CHECK(slice(r18, 30, 50) == torch_30_to_50);
  CHECK(slice(r18, 116, 122) ==
        std::vector<std::string>{"layer4.1.bn2.bias", "layer4.1.bn2.running_mean",
                                 "layer4.1.bn2.running_var", "layer4.1.bn2.num_batches_tracked",
                                 "fc.weight", "fc.bias"});

  // tests/golden/make_model_golden.py's CifarResNet(20): state dict and named_modules().
  auto model = resnet20();
  auto r20 = keys(model->state_dict());
  REQUIRE(r20.size() == 116);
  CHECK(slice(r20, 0, 7) == std::vector<std::string>{"conv1.weight", "bn1.weight", "bn1.bias",
                                                     "bn1.running_mean", "bn1.running_var",
                                                     "bn1.num_batches_tracked",
                                                     "layer1.0.conv1.weight"});
  CHECK(slice(r20, 114, 116) == std::vector<std::string>{"fc.weight", "fc.bias"});
  std::vector<std::string> modules;
  for (const auto& entry : model->named_modules()) modules.push_back(entry.first);
  REQUIRE(modules.size() == 54);
  CHECK(slice(modules, 0, 10) ==
        std::vector<std::string>{"", "conv1", "bn1", "layer1", "layer1.0", "layer1.0.conv1",
                                 "layer1.0.bn1", "layer1.0.conv2", "layer1.0.bn2", "layer1.1"});
  const std::vector<std::string> torch_19_to_27 = {
      "layer2",         "layer2.0",     "layer2.0.conv1",      "layer2.0.bn1",
      "layer2.0.conv2", "layer2.0.bn2", "layer2.0.downsample", "layer2.1"};
  CHECK(slice(modules, 19, 27) == torch_19_to_27);
  CHECK(model->modules().size() == 54);
  CHECK(model->modules()[1] == model->conv1);

  // named_parameters / named_buffers are the state dict's keys of each kind, in its order.
  std::vector<std::string> params, buffers, state_params, state_buffers;
  for (const auto& entry : model->named_parameters()) params.push_back(entry.first);
  for (const auto& entry : model->named_buffers()) buffers.push_back(entry.first);
  for (const auto& key : r20) {
    bool is_buffer = key.find("running_") != std::string::npos ||
                     key.find("num_batches_tracked") != std::string::npos;
    (is_buffer ? state_buffers : state_params).push_back(key);
  }
  CHECK(params == state_params);
  CHECK(buffers == state_buffers);
  CHECK(slice(params, 0, 4) == std::vector<std::string>{"conv1.weight", "bn1.weight", "bn1.bias",
                                                        "layer1.0.conv1.weight"});

  // A safetensors round trip keeps the order.
  CHECK(keys(io::from_safetensors(io::to_safetensors(model->state_dict()))) == r20);
}

TEST_CASE("OrderedDict keeps insertion order through lookups, updates and erasure", "[nn]") {
  StateDict d{{"b", ones({1})}, {"a", zeros({2})}};
  d["c"] = ones({3});
  d["b"] = zeros({4});  // an update keeps the position
  CHECK(d.keys() == std::vector<std::string>{"b", "a", "c"});
  CHECK(d.at("b").shape() == Shape{4});
  CHECK(d.find("a")->second.shape() == Shape{2});
  CHECK(d.find("z") == d.end());
  CHECK_FALSE(d.emplace("a", ones({9})).second);  // as std::map: present keys are kept
  CHECK(d.count("a") == 1);
  CHECK(d.erase("b") == 1);
  CHECK(d.erase("b") == 0);
  CHECK(d.keys() == std::vector<std::string>{"a", "c"});
  CHECK(d.at("c").shape() == Shape{3});
  StateDict copy = d;
  copy.erase("a");
  CHECK(d.size() == 2);
  CHECK(copy.keys() == std::vector<std::string>{"c"});
  CHECK_THAT(error_of([&] { d.at("missing"); }), Catch::Contains("OrderedDict: no key 'missing'"));
  CHECK_THAT(error_of([] {
               StateDict{{"x", ones({1})}, {"x", ones({1})}};
             }),
             Catch::Contains("key 'x' given twice"));
}

TEST_CASE("an empty batch through ResNet-20: empty logits and zero gradients in evaluation, the "
          "batch-statistics error in training", "[nn]") {
  auto model = resnet20(ResNetOptions().in_channels(1));
  Tensor x = zeros({0, 1, 28, 28});
  model->eval();
  Tensor logits = model->forward(x);
  REQUIRE(logits.shape() == Shape{0, 10});
  sum(logits).backward();
  for (const auto& [name, p] : model->named_parameters()) {
    INFO(name);
    REQUIRE(p.grad().defined());
    require_close(p.grad(), zeros(p.shape()), 0, 0, name);
  }
  model->train();
  CHECK(error_of([&] { model->forward(x); }) ==
        "batch_norm_relu: expected more than 1 value per channel when training, got input of "
        "shape (0, 16, 28, 28)");
}

TEST_CASE("what a fifth probe found: tied weights, integer conversion, ModuleList replacement",
          "[nn][errors]") {
  // A tensor registered under two names (tied weights) is one parameter, as torch's: listed
  // once, clipped once, stepped once; state_dict keeps both names.
  auto m = std::make_shared<Module>();
  Tensor t = zeros({2});
  m->register_parameter("a", t);
  m->register_parameter("b", t);
  CHECK(m->parameters().size() == 1);
  CHECK(m->named_parameters().keys() == std::vector<std::string>{"a"});
  CHECK(m->state_dict().size() == 2);
  t.set_grad(full({2}, 3.0));
  // The norm of one (3, 3) gradient, sqrt(18), and each entry scaled to 3 / sqrt(18).
  CHECK(optim::clip_grad_norm(m->parameters(), 1.0) == Approx(std::sqrt(18.0)));
  require_close(t.grad(), full({2}, 3.0 / std::sqrt(18.0)), 1e-6, 0, "clipped once");
  optim::SGD sgd(m->parameters(), optim::SGDOptions(0.5));
  sgd.step();
  require_close(t.detach(), full({2}, -0.5 * 3.0 / std::sqrt(18.0)), 1e-6, 0, "stepped once");
  CHECK_THAT(error_of([&] {
               optim::SGD({t, t}, optim::SGDOptions(0.1));
             }),
             Catch::Contains("SGD: parameter 1 of a group appears in it twice"));
  // A submodule registered twice: its parameters and the module itself listed once.
  auto shared = std::make_shared<Linear>(2, 2);
  auto holder = std::make_shared<Module>();
  holder->register_module("first", shared);
  holder->register_module("second", shared);
  CHECK(holder->parameters().size() == 2);
  CHECK(holder->named_modules().keys() == std::vector<std::string>{"", "first"});
  CHECK(holder->state_dict().size() == 4);

  // A module converts to floating dtypes only (its parameters would stay requiring grad).
  auto lin = std::make_shared<Linear>(2, 2);
  CHECK(error_of([&] { lin->to(DType::i64); }) ==
        "Linear.to: a module converts to floating dtypes only (f32, f64, f16, bf16), got i64; "
        "its parameters must stay trainable");
  CHECK(lin->weight.dtype() == DType::f32);

  // replace_module on a ModuleList replaces what ptr() and iteration give too.
  auto list = std::make_shared<ModuleList>(std::make_shared<Linear>(2, 2));
  auto wide = std::make_shared<Linear>(5, 5);
  list->replace_module("0", wide);
  CHECK(list->ptr<Linear>(0) == wide);
  CHECK(*list->begin() == wide);
  CHECK(list->parameters()[0].shape() == Shape{5, 5});

  // SequentialLR's schedules must set its own optimizer's rates.
  Tensor w = zeros({1}).set_requires_grad();
  optim::SGD own({w}, optim::SGDOptions(1.0)), other({w}, optim::SGDOptions(5.0));
  CHECK_THAT(error_of([&] {
               optim::SequentialLR(own, std::make_shared<optim::LinearWarmup>(other, 2),
                                   std::make_shared<optim::CosineAnnealing>(own, 5), 2);
             }),
             Catch::Contains("SequentialLR: every schedule must belong to its optimizer"));

  // libtorch's OrderedDict::insert(key, value); a key already there throws.
  StateDict dict;
  dict.insert("weight", ones({2}));
  CHECK(dict.size() == 1);
  CHECK_THAT(error_of([&] { dict.insert("weight", zeros({2})); }),
             Catch::Contains("OrderedDict::insert: key 'weight' already defined"));
  CHECK(equal(dict.at("weight"), ones({2})));
}
